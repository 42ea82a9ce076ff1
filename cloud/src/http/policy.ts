import type { Feature, Scope } from '@fleet/protocol';
import type { Principal } from '../auth.js';

/**
 * What a route demands, declared once next to the route. The pipeline enforces it in this order:
 * API key (401), scope (403 insufficient_scope), feature (403 entitlement_required); then the
 * Idempotency-Key, then validation; the meter counts each successful call.
 */
export type RoutePolicy =
  | {
      auth: 'key';
      /** The scope the key must hold (one of them, for a list; `admin` holds all); `null`: any valid key. */
      scope: Scope | readonly Scope[] | null;
      /** The organization's feature that gates the route. */
      feature: Feature | null;
      /** Counter incremented per organization and day for each 2xx answer. */
      meter: string | null;
    }
  | {
      /** No API key: health probes, the OpenAPI document, robot enrollment (own credential). */
      auth: 'none';
      meter?: null;
    };

declare module 'fastify' {
  interface FastifyContextConfig {
    policy?: RoutePolicy;
    /**
     * `false`: an Idempotency-Key is claimed while the request runs (a concurrent twin is 409)
     * but no answer is stored for replay, as for the transient codes: a retry runs again (read
     * links, whose answer is fresh bearer URLs the cloud must not keep).
     */
    replayable?: false;
  }
  interface FastifyRequest {
    principal: Principal | null;
    /** The Idempotency-Key claim this request holds (its token), until it completes or releases it. */
    idempotency: { orgId: string; key: string; token: string } | null;
    replayed: boolean;
  }
}

/** The authenticated caller; only valid inside routes whose policy has `auth: 'key'`. */
export function principalOf(request: { principal: Principal | null }): Principal {
  if (!request.principal) throw new Error('route without auth policy asked for a principal');
  return request.principal;
}

export interface CatalogEntry {
  method: string;
  url: string;
  policy: RoutePolicy;
  hasBody: boolean;
}
