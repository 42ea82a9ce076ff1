import { z } from 'zod';
import { ApiKeySchema, CreateApiKeyBodySchema, CreatedApiKeySchema } from '@fleet/protocol';
import { createApiKey, toApiKey } from '../../api-keys.js';
import { notFound } from '../../errors.js';
import { errorResponses } from '../../http/error-responses.js';
import { principalOf } from '../../http/policy.js';
import { v1Plugin } from './types.js';
import { fromBody, linksTo } from '../../http/openapi-links.js';

const IdParams = z.strictObject({ id: z.string().min(1).max(128) });

/** /v1/api-keys: scope admin, entitlement api.access (spec: API keys). */
export const apiKeyRoutes = v1Plugin<'store' | 'clock' | 'lastUsed'>('api-keys', async (app, { store, clock, lastUsed }) => {
  app.route({
    method: 'POST',
    url: '/api-keys',
    config: { policy: { auth: 'key', scope: 'admin', feature: 'api.access', meter: 'api_keys.created' } },
    links: { 201: linksTo(['revokeApiKey'], { id: fromBody('/id') }, 'The key just created') },
    schema: {
      operationId: 'createApiKey',
      summary: 'Create an API key',
      description: 'The plaintext `key` is in this response only; it is stored as a hash.',
      body: CreateApiKeyBodySchema,
      response: { 201: CreatedApiKeySchema, ...errorResponses('conflict') },
    },
    handler: async (request, reply) => {
      const { org, key } = principalOf(request);
      const body = request.body;
      const created = await createApiKey(store, clock, {
        org,
        name: body.name,
        scopes: body.scopes,
        expiresAt: body.expires_at === undefined ? null : Date.parse(body.expires_at),
        createdBy: key.id,
      });
      return reply.code(201).send(created);
    },
  });

  app.route({
    method: 'GET',
    url: '/api-keys',
    config: { policy: { auth: 'key', scope: 'admin', feature: 'api.access', meter: null } },
    links: { 200: linksTo(['revokeApiKey'], { id: fromBody('/api_keys/0/id') }, 'The first key listed') },
    schema: {
      operationId: 'listApiKeys',
      summary: 'List API keys',
      description: 'Every key of the organization, revoked and expired ones included; never the plaintext.',
      response: { 200: z.object({ api_keys: z.array(ApiKeySchema) }) },
    },
    handler: async (request) => {
      const { org } = principalOf(request);
      const rows = await store.apiKeys.list(org.id);
      return { api_keys: rows.map((k) => toApiKey({ ...k, lastUsedAt: lastUsed.latest(k.id, k.lastUsedAt) })) };
    },
  });

  app.route({
    method: 'DELETE',
    url: '/api-keys/:id',
    config: { policy: { auth: 'key', scope: 'admin', feature: 'api.access', meter: 'api_keys.revoked' } },
    schema: {
      operationId: 'revokeApiKey',
      summary: 'Revoke an API key',
      description: 'Immediate and permanent. Revoking a revoked key is a no-op that keeps the first revocation time.',
      params: IdParams,
      response: { 204: z.null().describe('Revoked'), ...errorResponses('not_found') },
    },
    handler: async (request, reply) => {
      const { org } = principalOf(request);
      const ok = await store.apiKeys.revoke(org.id, request.params.id, clock.now());
      if (!ok) throw notFound('API key');
      return reply.code(204).send(null);
    },
  });
});
