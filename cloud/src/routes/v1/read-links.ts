import { z } from 'zod';
import { READ_LINK_MAX_TTL_S, READ_LINK_TTL_S, READ_LINKS_MAX_FILES, ReadLinksRequestSchema, ReadLinksSchema, type ReadLinks } from '@fleet/protocol';
import { errorResponses } from '../../http/error-responses.js';
import { principalOf } from '../../http/policy.js';
import { v1Plugin } from './types.js';

/** The `details.limit` of a 429 from the route's own bucket. */
export const READ_LINKS_LIMIT = 'read_links_per_minute_per_org';

/**
 * POST /v1/episodes/{id}/read-links: short-lived GET URLs for an episode's files, issued by the
 * grant provider of a destination that holds a verified replica (sync/read-links.ts). Every call
 * asks the provider again: the answer is never stored, for an Idempotency-Key replay or
 * anywhere else, so a retry or a renewal always gets fresh links.
 */
export const readLinkRoutes = v1Plugin<'readLinks' | 'cloudConfig'>('read-links', async (app, { readLinks, cloudConfig }) => {
  app.route({
    method: 'POST',
    url: '/episodes/:id/read-links',
    config: {
      policy: { auth: 'key', scope: 'data:read', feature: 'data.metadata', meter: 'episodes.read_links' },
      replayable: false,
      orgRateLimit: { limit: READ_LINKS_LIMIT, max: cloudConfig.readLinksPerMinutePerOrg },
    },
    schema: {
      operationId: 'createEpisodeReadLinks',
      summary: "Short-lived read links for an episode's files, from its destination's provider",
      description:
        `The cloud asks the grant provider of the destination holding a verified replica (the named \`destination_id\`, else the first ` +
        `verified replica at a live destination) for GET URLs of the named files (every manifest file by default, at most ` +
        `${READ_LINKS_MAX_FILES}), in the order asked. Links live ${READ_LINK_TTL_S} s as asked (a provider may answer shorter, never ` +
        `more than ${READ_LINK_MAX_TTL_S} s), and point only at the installation's read origins. The cloud never fetches them and ` +
        'keeps none: an Idempotency-Key is accepted but the answer is not stored for replay, so a retry gets fresh links.',
      params: z.strictObject({ id: z.string().min(1).max(128) }),
      body: ReadLinksRequestSchema.nullish(),
      headers: z.looseObject({
        'idempotency-key': z
          .string()
          .regex(/^[\x21-\x7e]{1,255}$/)
          .optional()
          .describe('1 to 255 printable ASCII characters; a concurrent twin is refused, but the answer is never stored for replay'),
      }),
      response: {
        200: ReadLinksSchema,
        ...errorResponses(
          'read_links_refused',
          'not_found',
          'replica_not_verified',
          'conflict',
          'read_links_unsupported',
          'provider_failed',
          'read_origin_not_allowed',
          'provider_timeout',
        ),
      },
    },
    handler: async (request): Promise<ReadLinks> => {
      const { org } = principalOf(request);
      return readLinks.issue(org.id, request.params.id, request.body ?? {});
    },
  });
});
