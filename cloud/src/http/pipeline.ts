import { createHash, randomUUID } from 'node:crypto';
import type {
  FastifyError,
  FastifyInstance,
  FastifyReply,
  FastifyRequest,
  onRequestAbortAsyncHookHandler,
  onRequestAsyncHookHandler,
  onResponseAsyncHookHandler,
  onSendAsyncHookHandler,
  preValidationAsyncHookHandler,
} from 'fastify';
import canonicalize from 'canonicalize';
import { z } from 'zod';
import { DAY, iso, scopeSatisfies, type Clock, type Scheduler } from '@fleet/protocol';
import type { Authenticator } from '../auth.js';
import { hasFeature } from '../entitlements.js';
import { ApiError, quote, validationError } from '../errors.js';
import { installJsonBodyParser } from './body.js';
import { prependHook } from './route-hooks.js';
import { sendError, toApiError } from './error-edge.js';
import type { SecretBox } from '../secret-box.js';
import type { Store } from '../store/index.js';
import type { CatalogEntry, RoutePolicy } from './policy.js';
import { IdempotencyClaims } from './idempotency-claims.js';

export interface PipelineDeps {
  store: Store;
  clock: Clock;
  /** Paces the renewal of in-flight Idempotency-Key claims. */
  scheduler: Scheduler;
  authenticator: Authenticator;
  /** Stored responses are sealed: a created key's plaintext must not sit in the database. */
  secrets: SecretBox;
  /**
   * The lease of an in-flight Idempotency-Key claim: renewed while its request runs, it is how
   * long a retry is refused (409) after the process holding the claim died.
   */
  idempotencyLeaseMs: number;
}

/** Idempotency-Key: printable ASCII, as Stripe and the IETF draft allow. */
const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,255}$/;
const IDEMPOTENCY_TTL_MS = DAY;

/** Methods a route can have; a path that has some of them answers the others with 405. */
const ROUTABLE_METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'] as const;

const NoQuery = z.strictObject({});

/** Answers that a retry with the same key must run again instead of replaying (decisions.md). */
const TRANSIENT_CODES = new Set(['robot_offline', 'command_timeout', 'rate_limited', 'not_ready']);

/**
 * Installs what every route inherits: request ids, authentication, scope and entitlement checks,
 * Idempotency-Key, metering, the JSON body parser and the one error handler. Returns the route
 * catalog (every route with its policy) that tests and the OpenAPI generator walk.
 */
export function installPipeline(app: FastifyInstance, deps: PipelineDeps): CatalogEntry[] {
  const { store, clock, authenticator, secrets } = deps;
  const catalog: CatalogEntry[] = [];
  const claims = new IdempotencyClaims({
    store: store.idempotency,
    clock,
    scheduler: deps.scheduler,
    leaseMs: deps.idempotencyLeaseMs,
    onError: (err) => app.log.error({ err }, 'renewing idempotency claims failed'),
  });
  app.addHook('onClose', async () => claims.close());

  app.decorateRequest('principal', null);
  app.decorateRequest('idempotency', null);
  app.decorateRequest('replayed', false);

  const beginIdempotency: preValidationAsyncHookHandler = async (request, reply) => {
    if (request.method !== 'POST' || !request.principal) return;
    const raw = request.headers['idempotency-key'];
    if (raw === undefined) return;
    const key = Array.isArray(raw) ? raw[0] : raw;
    if (Array.isArray(raw) || !key || !IDEMPOTENCY_KEY.test(key)) {
      throw validationError('headers', '/idempotency-key', 'Idempotency-Key must be 1 to 255 printable ASCII characters, given once');
    }
    const orgId = request.principal.org.id;
    const fingerprint = requestFingerprint(request.method, request.url, request.body);
    const token = randomUUID();
    const begun = await store.idempotency.begin({ orgId, key, token, fingerprint, now: clock.now(), leaseMs: deps.idempotencyLeaseMs });
    switch (begun.kind) {
      case 'started': {
        const claim = { orgId, key, token };
        request.idempotency = claim;
        claims.hold(claim);
        return;
      }
      case 'mismatch':
        throw new ApiError('idempotency_key_reused', 'this Idempotency-Key was used with a different request');
      case 'in_flight':
        throw new ApiError('idempotency_key_in_use', 'a request with this Idempotency-Key is still running; retry later');
      case 'replay': {
        request.replayed = true;
        const { status, contentType, body } = begun.response;
        void reply.code(status).header('Idempotent-Replayed', 'true');
        if (contentType) void reply.type(contentType);
        return reply.send(body === '' ? undefined : secrets.open(body));
      }
    }
  };

  const completeIdempotency: onSendAsyncHookHandler = async (request, reply, payload) => {
    const claim = request.idempotency;
    if (!claim) return payload;
    request.idempotency = null;
    claims.drop(claim);
    const body = typeof payload === 'string' ? payload : Buffer.isBuffer(payload) ? payload.toString('utf8') : payload == null ? '' : null;
    const code = errorCodeOf(body);
    if (body === null || (code !== null && TRANSIENT_CODES.has(code)) || request.routeOptions.config.replayable === false) {
      await store.idempotency.release(claim);
    } else {
      const ct = reply.getHeader('content-type');
      const stored = await store.idempotency.complete({
        ...claim,
        response: { status: reply.statusCode, contentType: typeof ct === 'string' ? ct : null, body: body === '' ? '' : secrets.seal(body) },
        now: clock.now(),
        ttlMs: IDEMPOTENCY_TTL_MS,
      });
      // The lease ran out (renewals failed, or the process stalled) and a retry took the key:
      // its response is the one a replay gives; this one still goes to its client.
      if (!stored) request.log.warn({ idempotency_key: claim.key }, 'idempotency claim lost before completion; response not stored');
    }
    return payload;
  };

  const meter: onResponseAsyncHookHandler = async (request, reply) => {
    const policy = request.routeOptions.config.policy;
    if (!policy?.meter || !request.principal || request.replayed) return;
    if (reply.statusCode < 200 || reply.statusCode >= 300) return;
    try {
      await store.meters.increment(request.principal.org.id, policy.meter, iso(clock.now()).slice(0, 10));
    } catch (err) {
      request.log.error({ err, meter: policy.meter }, 'meter increment failed');
    }
  };

  // A request that ends without a response (client gone mid-handler) must not hold its key.
  const releaseOnAbort: onRequestAbortAsyncHookHandler = async (request) => {
    const claim = request.idempotency;
    if (claim) {
      request.idempotency = null;
      claims.drop(claim);
      await store.idempotency.release(claim);
    }
  };

  /**
   * Authentication, scope and entitlement of a route that takes a key: a route onRequest hook
   * (from onRoute, with the route's policy): after the global onRequest hook, before any other.
   */
  const authenticate = (policy: Extract<RoutePolicy, { auth: 'key' }>): onRequestAsyncHookHandler => {
    const required = policy.scope === null ? [] : typeof policy.scope === 'string' ? [policy.scope] : policy.scope;
    return async (request) => {
      const principal = await authenticator.authenticate(request.headers.authorization, request.ip);
      if (required.length > 0 && !required.some((s) => scopeSatisfies(principal.key.scopes, s))) {
        throw new ApiError('insufficient_scope', `this endpoint needs the scope ${required.join(' or ')}`, {
          required_scope: required.length === 1 ? required[0] : required,
          key_scopes: principal.key.scopes,
        });
      }
      if (policy.feature && !hasFeature(principal.org, policy.feature)) {
        throw new ApiError('entitlement_required', `the organization's plan does not include ${policy.feature}`, {
          feature: policy.feature,
          tier: principal.org.tier,
        });
      }
      request.principal = principal;
    };
  };

  app.addHook('onRoute', (route) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    // Any route that declares it takes a key is authenticated, wherever it is.
    if (route.config?.policy?.auth === 'key') prependHook(route, 'onRequest', authenticate(route.config.policy));
    if (!route.url.startsWith('/v1/') && route.url !== '/v1') return;
    const policy = route.config?.policy;
    if (!policy) throw new Error(`route ${methods.join(',')} ${route.url} declares no policy`);
    // A route that declares no query parameters refuses any, as the others refuse unknown ones.
    const schema = (route.schema ??= {});
    schema.querystring ??= NoQuery;
    for (const method of methods) {
      if (method === 'HEAD') continue;
      catalog.push({ method, url: route.url, policy, hasBody: Boolean(route.schema?.body) });
    }
    // Hooks only the routes that need them carry: every global async hook costs every request
    // its promise round, also where it returns at once. Idempotency-Key is honoured on POST
    // with an API key; the meter counts routes that declare one. Ahead of any hook the route
    // declares itself, where global hooks ran.
    if (policy.auth === 'key' && methods.includes('POST')) {
      prependHook(route, 'preValidation', beginIdempotency);
      prependHook(route, 'onSend', completeIdempotency);
      prependHook(route, 'onRequestAbort', releaseOnAbort);
    }
    if (policy.meter) prependHook(route, 'onResponse', meter);
  });

  installJsonBodyParser(app);

  // Every request: its id in the answer, and no NUL in its URL. Synchronous (a throw is the
  // hook's error), so it costs no promise.
  app.addHook('onRequest', (request, reply, done) => {
    void reply.header('X-Request-Id', request.id);
    // No stored text holds a NUL character (PostgreSQL text cannot), so no id or filter value
    // with one can name anything: refused before any lookup, the same on every engine.
    const nul = request.url.indexOf('%00');
    if (nul >= 0) {
      const q = request.url.indexOf('?');
      throw validationError(q >= 0 && nul > q ? 'querystring' : 'params', '', 'NUL characters (%00) are not allowed in the URL', 'nul_character');
    }
    // No route for this method here: answered now (405 or 404), before Fastify reads a body it
    // would only refuse (a QUERY without Content-Type was 400, a method with a body 415). The
    // console's scope has a not-found handler of its own (its single-page fallback).
    if (request.is404 && !isConsolePath(request.url)) {
      answerWithoutRoute(request, reply);
      return;
    }
    done();
  });

  /**
   * 405 with `Allow` when the path names a resource under other methods, else 404. A path can
   * match routes of different resources: `/v1/robots/enroll` is POST's own route, and also
   * `/v1/robots/:id` for GET and DELETE; the router takes the static route, so only the methods
   * of the most specific routes that match (fewest parameters) are this resource's.
   */
  const answerWithoutRoute = (request: FastifyRequest, reply: FastifyReply): FastifyReply => {
    const path = request.url.split('?')[0]!;
    // The router would match an empty segment (`/v1/api-keys/`) as an empty parameter: no route has one.
    const hasEmptySegment = path.endsWith('/') || path.includes('//');
    const matches = hasEmptySegment
      ? []
      : ROUTABLE_METHODS.flatMap((method) => {
          const found = method === request.method ? null : app.findRoute({ method, url: path });
          return found ? [{ method, params: Object.keys(found.params).length }] : [];
        });
    const fewest = Math.min(...matches.map((m) => m.params));
    const allowed = matches.filter((m) => m.params === fewest).map((m) => m.method);
    if (allowed.length > 0) {
      const allow = allowed.includes('GET') ? [...allowed, 'HEAD'] : allowed;
      return sendError(reply, new ApiError('method_not_allowed', `${request.method} is not allowed here; use ${allow.join(', ')}`, undefined, { Allow: allow.join(', ') }));
    }
    return sendError(reply, new ApiError('not_found', `no route ${request.method} ${quote(path)}`));
  };

  app.setNotFoundHandler((request, reply) => answerWithoutRoute(request, reply));

  app.setErrorHandler((err: FastifyError, request, reply) => sendError(reply, toApiError(err, request)));

  return catalog;
}

function isConsolePath(url: string): boolean {
  return url === '/console' || url.startsWith('/console/') || url.startsWith('/console?');
}

/**
 * What makes two requests "the same" for an Idempotency-Key: method, path with query, and the
 * body with object keys sorted, so a client that re-serializes its body in another key order is
 * still recognized.
 */
export function requestFingerprint(method: string, url: string, body: unknown): string {
  return createHash('sha256')
    .update(`${method}\n${url}\n${body === undefined || body === null ? '' : canonicalJson(body)}`)
    .digest('hex');
}

/**
 * RFC 8785 (JCS) for every body that is I-JSON, byte-identical to what the fingerprint hashed
 * before it used `canonicalize`. JSON.parse also yields what I-JSON forbids and `canonicalize`
 * refuses: a lone surrogate (`"\\ud800"`) and a number beyond double range (`1e400`, Infinity).
 * Those bodies keep their former form (sorted keys, JSON.stringify leaves: Infinity is `null`), so
 * a retry of such a request still matches the key it was begun under.
 */
function canonicalJson(value: unknown): string {
  try {
    return canonicalize(value) ?? 'null';
  } catch {
    return sortedJson(value);
  }
}

function sortedJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(sortedJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.keys(value)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${sortedJson((value as Record<string, unknown>)[k])}`);
    return `{${entries.join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

function errorCodeOf(body: string | null): string | null {
  if (!body || !body.startsWith('{"error"')) return null;
  try {
    const parsed = JSON.parse(body) as { error?: { code?: unknown } };
    return typeof parsed.error?.code === 'string' ? parsed.error.code : null;
  } catch {
    return null;
  }
}

export type { RoutePolicy };
