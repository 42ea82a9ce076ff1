import { createHash, randomBytes } from 'node:crypto';
import { z } from 'zod';
import { DestinationCheckSchema, type DestinationCheck, type GrantRequestEnvelope } from '@fleet/protocol';
import { ApiError, notFound } from '../../errors.js';
import { errorResponses } from '../../http/error-responses.js';
import { principalOf } from '../../http/policy.js';
import { failureOf, grantReused } from '../../sync/grant-relay.js';
import { v1Plugin } from './types.js';

const NoBody = z.strictObject({}).nullish();

/**
 * POST /v1/destinations/{id}/check: a synthetic signed grant request through the real forwarding
 * path (the relay's own `forward`), so a customer sees what a robot would get. A deferral passes;
 * nothing is persisted (no forward counted, no grant id claimed, no replica).
 */
export const destinationCheckRoutes = v1Plugin<'store' | 'relay'>('destination-check', async (app, { store, relay }) => {
  app.route({
    method: 'POST',
    url: '/destinations/:id/check',
    config: { policy: { auth: 'key', scope: 'admin', feature: 'data.metadata', meter: null } },
    schema: {
      operationId: 'checkDestination',
      summary: "Send a synthetic grant request to a destination's provider",
      description:
        'Signed like every grant request, with `request.check: true` and a one-file manifest. `pass` for a valid grant or a deferral; ' +
        '`fail` with `failure` one of unreachable, timeout, http_error, invalid_json, schema_invalid, destination_mismatch. Nothing is persisted.',
      params: z.strictObject({ id: z.string().min(1).max(128) }),
      body: NoBody,
      response: { 200: DestinationCheckSchema, ...errorResponses('not_found', 'conflict') },
    },
    handler: async (request): Promise<DestinationCheck> => {
      const { org } = principalOf(request);
      const destination = await store.sync.getDestination(org.id, request.params.id);
      if (!destination) throw notFound('destination');
      if (destination.revokedAt !== null) throw new ApiError('conflict', 'the destination is revoked');
      const tag = randomBytes(6).toString('hex');
      const content = `check ${tag}`;
      const envelope: GrantRequestEnvelope = {
        episode_id: `ep_check${tag}`,
        org_id: org.id,
        request: {
          destination_id: destination.id,
          episode: { robot_id: 'rbt_check', recording_session_id: `rs_check${tag}`, episode_seq: 1 },
          manifest: {
            files: [{ path: 'check/episode.mcap', size_bytes: content.length, sha256: createHash('sha256').update(content).digest('hex') }],
            total_bytes: content.length,
          },
          check: true,
        },
      };
      let r = await relay.forward(destination, envelope);
      // A grant_id this destination used before fails the check as it would defer a robot; only
      // read here, never claimed (the check persists nothing).
      if (r.answer.kind === 'grant' && (await store.sync.grantIdUsed(destination.id, r.answer.grantId))) {
        const answer = grantReused();
        r = { ...r, answer, failure: failureOf(answer) };
      }
      const base = { http_status: r.httpStatus, latency_ms: r.latencyMs };
      if (r.answer.kind === 'grant') return { result: 'pass', mode: 'granted', ...base };
      if (r.failure === null) return { result: 'pass', mode: 'deferred', ...base, message: r.answer.message };
      return { result: 'fail', mode: 'deferred', ...base, failure: r.failure, message: r.answer.message };
    },
  });
});
