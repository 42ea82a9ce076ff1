import { EntitlementsSchema } from '@fleet/protocol';
import { entitlementsOf } from '../../entitlements.js';
import { principalOf } from '../../http/policy.js';
import { v1Plugin } from './types.js';

/** GET /v1/entitlements: any valid key, no feature gate, so a caller can see what it lacks. */
export const entitlementRoutes = v1Plugin('entitlements', async (app) => {
  app.route({
    method: 'GET',
    url: '/entitlements',
    config: { policy: { auth: 'key', scope: null, feature: null, meter: null } },
    schema: {
      operationId: 'getEntitlements',
      summary: "The organization's tier, feature flags and limits, and the calling key's scopes",
      response: { 200: EntitlementsSchema },
    },
    handler: async (request) => {
      const { org, key } = principalOf(request);
      return {
        ...entitlementsOf(org),
        key: { id: key.id, name: key.name, scopes: [...key.scopes], expires_at: key.expiresAt === null ? null : new Date(key.expiresAt).toISOString() },
      };
    },
  });
});
