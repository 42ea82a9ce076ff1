import { z } from 'zod';
import { CreatedDestinationSchema, CreateDestinationBodySchema, DestinationSchema } from '@fleet/protocol';
import { notFound } from '../../errors.js';
import { errorResponses } from '../../http/error-responses.js';
import { principalOf } from '../../http/policy.js';
import { createDestination, toDestination } from '../../sync/manage.js';
import { v1Plugin } from './types.js';
import { fromBody, linksTo } from '../../http/openapi-links.js';

const IdParams = z.strictObject({ id: z.string().min(1).max(128) });

/** /v1/destinations: a customer's grant providers (admin). The check lives with the grant relay. */
export const destinationRoutes = v1Plugin<'store' | 'clock' | 'secrets' | 'egressAllowLoopback' | 'sync'>('destinations', async (app, { store, clock, secrets, egressAllowLoopback, sync }) => {
  const admin = { auth: 'key', scope: 'admin', feature: 'data.metadata', meter: null } as const;

  app.route({
    method: 'POST',
    url: '/destinations',
    config: { policy: admin },
    links: {
      201: {
        ...linksTo(['checkDestination', 'revokeDestination'], { id: fromBody('/id') }, 'The destination just created'),
        ...linksTo(['createRoutingRule'], {}, 'Route episodes to the destination just created', { destination_id: fromBody('/id') }),
      },
    },
    schema: {
      operationId: 'createDestination',
      summary: 'Register a grant provider as a destination',
      description:
        'The `dsec_` secret, which signs every grant request sent to the provider, is in this response only. With no routing rules and this as the only live destination, every episode routes to it.',
      body: CreateDestinationBodySchema,
      response: { 201: CreatedDestinationSchema },
    },
    handler: async (request, reply) => {
      const { org } = principalOf(request);
      const created = await createDestination({ store, clock, secrets, allowLoopback: egressAllowLoopback }, org.id, request.body);
      sync.schedule(org.id, 'all');
      return reply.code(201).send(created);
    },
  });

  app.route({
    method: 'GET',
    url: '/destinations',
    config: { policy: admin },
    links: { 200: linksTo(['checkDestination', 'revokeDestination'], { id: fromBody('/destinations/0/id') }, 'The first destination listed') },
    schema: {
      operationId: 'listDestinations',
      summary: 'List destinations with their forwarding health',
      description: 'Revoked destinations are listed too, with `revoked_at`. Health counts cover the last 24 hours.',
      response: { 200: z.object({ destinations: z.array(DestinationSchema) }) },
    },
    handler: async (request) => ({
      destinations: (await store.sync.listDestinations(principalOf(request).org.id, clock.now())).map(toDestination),
    }),
  });

  app.route({
    method: 'DELETE',
    url: '/destinations/:id',
    config: { policy: admin },
    schema: {
      operationId: 'revokeDestination',
      summary: 'Revoke a destination',
      description:
        'No new grants; synced and verified data is untouched; routing rules pointing at it stop matching, and episodes routed to it that had not synced route again. Revoking twice answers 204 and keeps the first time.',
      params: IdParams,
      response: { 204: z.null().describe('Revoked'), ...errorResponses('not_found') },
    },
    handler: async (request, reply) => {
      const { org } = principalOf(request);
      const { id } = request.params;
      if (!(await store.sync.getDestination(org.id, id))) throw notFound('destination');
      await store.sync.revokeDestination(org.id, id, clock.now());
      sync.schedule(org.id, { revoked: id });
      return reply.code(204).send(null);
    },
  });
});
