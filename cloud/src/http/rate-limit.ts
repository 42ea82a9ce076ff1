import fastifyRateLimit from '@fastify/rate-limit';
import type { FastifyInstance, FastifyRequest, preParsingAsyncHookHandler } from 'fastify';
import { MINUTE, type Clock } from '@fleet/protocol';
import { entitlementsOfRow } from '../entitlements.js';
import { ApiError } from '../errors.js';
import { prependHook } from './route-hooks.js';
import type { SharedCounterStore } from '../store/index.js';

export interface RateLimitOptions {
  /** Counters shared by every replica (PostgreSQL); without it each process counts in memory. */
  shared?: SharedCounterStore;
  /** The shared counters' windows are on this clock (the cloud's). */
  clock: Clock;
  /** Requests per minute per client address on /v1 routes that take no API key (enrollment). */
  unauthenticatedPerMinutePerIp: number;
  /** How many counters (keys, organizations, addresses) are kept; the least recent go first. */
  cacheSize?: number;
}

/** The entitlement limits read here; tiers name them in entitlements.ts. */
export const KEY_LIMIT = 'requests_per_minute_per_key';
export const ORG_LIMIT = 'requests_per_minute_per_org';

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * A bucket of the route's own per organization, besides the key's and the organization's:
     * for a route whose calls cost more than a request (read links ask a grant provider each).
     */
    orgRateLimit?: { limit: string; max: number };
  }
}

type Check = (req: FastifyRequest) => Promise<{ isAllowed: boolean; isExceeded?: boolean; max?: number; ttlInSeconds?: number }>;

function limitOf(req: FastifyRequest, name: string): number {
  const value = req.principal ? entitlementsOfRow(req.principal.org).limits[name] : undefined;
  // An organization row from before these limits existed has them from its tier; a limit
  // nobody set (an unknown tier) does not limit.
  return value === undefined ? Number.MAX_SAFE_INTEGER : value;
}

type RateStoreCallback = (err: Error | null, res?: { current: number; ttl: number }) => void;

/**
 * A @fastify/rate-limit store on the shared counters: every replica counts into the same fixed
 * window (one upsert per check). The plugin constructs it and asks each route for a child; they
 * all share one table, the keys carry their kind (`key:`, `org:`, `ip:`).
 */
function sharedRateStore(counters: SharedCounterStore, clock: Clock) {
  return class SharedRateStore {
    incr(key: string, cb: RateStoreCallback, timeWindow: number): void {
      const now = clock.now();
      counters.hit(key, now, timeWindow).then(
        (r) => cb(null, { current: r.count, ttl: Math.max(0, r.windowStart + timeWindow - now) }),
        (err: unknown) => cb(err instanceof Error ? err : new Error(String(err))),
      );
    }

    child(): this {
      return this;
    }
  };
}

/**
 * Request rate limits in fixed one-minute windows, counted in this process's memory
 * (@fastify/rate-limit's LRU store) or, with several replicas on PostgreSQL, in the shared
 * counters so that the limits hold across replicas:
 *
 * - per API key and per organization on every /v1 route that takes a key, with the limits from
 *   the organization's entitlements (`requests_per_minute_per_key`, `…_per_org`, overridable
 *   with `fleet-cloud orgs set-limit`), checked after authentication;
 * - per client address on the /v1 routes that take no key (enrollment).
 *
 * The check runs in preParsing, after every onRequest hook (authentication sets
 * request.principal there) and before the body is read. Over the limit: 429 `rate_limited` with
 * Retry-After, in the API's error body.
 */
export async function installRateLimits(app: FastifyInstance, opts: RateLimitOptions): Promise<void> {
  await app.register(fastifyRateLimit, {
    global: false,
    timeWindow: MINUTE,
    cache: opts.cacheSize ?? 10_000,
    // A shared counter that cannot be reached does not turn every request into a 500: the request
    // goes on (and meets the same database, which answers for itself).
    ...(opts.shared ? { store: sharedRateStore(opts.shared, opts.clock), skipOnError: true } : {}),
  });
  const perKey: Check = app.createRateLimit({ keyGenerator: (req) => `key:${req.principal!.key.id}`, max: (req) => limitOf(req, KEY_LIMIT) });
  const perOrg: Check = app.createRateLimit({ keyGenerator: (req) => `org:${req.principal!.org.id}`, max: (req) => limitOf(req, ORG_LIMIT) });
  const perIp: Check = app.createRateLimit({ keyGenerator: (req) => `ip:${req.ip}`, max: opts.unauthenticatedPerMinutePerIp });

  const enforce = async (check: Check, req: FastifyRequest, limit: string): Promise<void> => {
    const r = await check(req);
    if (r.isAllowed || !r.isExceeded) return;
    const retryAfter = Math.max(1, r.ttlInSeconds ?? 60);
    throw new ApiError(
      'rate_limited',
      `too many requests: the ${limit.replaceAll('_', ' ')} is ${r.max}; retry in ${retryAfter} s`,
      { limit, max: r.max, retry_after_s: retryAfter },
      { 'retry-after': String(retryAfter) },
    );
  };

  const limit: preParsingAsyncHookHandler = async (request, _reply, payload) => {
    const policy = request.routeOptions.config.policy;
    if (!policy) return payload;
    if (request.principal) {
      // The key's window first: a key over its own limit does not spend its organization's.
      await enforce(perKey, request, KEY_LIMIT);
      await enforce(perOrg, request, ORG_LIMIT);
    } else if (policy.auth === 'none') {
      await enforce(perIp, request, 'requests_per_minute_per_ip');
    }
    return payload;
  };
  // A route's own bucket, checked after the key's and the organization's windows.
  const ownLimit = (own: { limit: string; max: number }): preParsingAsyncHookHandler => {
    const check: Check = app.createRateLimit({ keyGenerator: (req) => `${own.limit}:${req.principal!.org.id}`, max: own.max });
    return async (request, _reply, payload) => {
      if (request.principal) await enforce(check, request, own.limit);
      return payload;
    };
  };
  // On the routes with a policy only (every /v1 route): the others pay nothing.
  app.addHook('onRoute', (route) => {
    const own = route.config?.orgRateLimit;
    if (own) prependHook(route, 'preParsing', ownLimit(own));
    if (route.config?.policy) prependHook(route, 'preParsing', limit);
  });
}
