import type {
  FastifyError,
  FastifyInstance,
  FastifyReply,
  FastifyRequest,
  onRequestAsyncHookHandler,
  onResponseAsyncHookHandler,
} from 'fastify';
import { z } from 'zod';
import { iso, scopeSatisfies, type Clock, type Scheduler } from '@fleet/protocol';
import type { Authenticator } from '../auth.js';
import { hasFeature } from '../entitlements.js';
import { ApiError, quote, validationError } from '../errors.js';
import { installJsonBodyParser } from './body.js';
import { prependHook } from './route-hooks.js';
import { sendError, toApiError } from './error-edge.js';
import type { SecretBox } from '../secret-box.js';
import type { Store } from '../store/index.js';
import type { CatalogEntry, RoutePolicy } from './policy.js';
import { installIdempotency } from './idempotency.js';

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

/** Methods a route can have; a path that has some of them answers the others with 405. */
const ROUTABLE_METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'] as const;

const NoQuery = z.strictObject({});

/**
 * Installs what every route inherits: request ids, authentication, scope and entitlement checks,
 * Idempotency-Key, metering, the JSON body parser and the one error handler. Returns the route
 * catalog (every route with its policy) that tests and the OpenAPI generator walk.
 */
export function installPipeline(app: FastifyInstance, deps: PipelineDeps): CatalogEntry[] {
  const { store, clock, authenticator, secrets } = deps;
  const catalog: CatalogEntry[] = [];
  const idempotency = installIdempotency(app, {
    store,
    clock,
    scheduler: deps.scheduler,
    secrets,
    leaseMs: deps.idempotencyLeaseMs,
  });

  app.decorateRequest('principal', null);
  app.decorateRequest('replayed', false);

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
      prependHook(route, 'preValidation', idempotency.begin);
      prependHook(route, 'onSend', idempotency.complete);
      prependHook(route, 'onRequestAbort', idempotency.releaseOnAbort);
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

export type { RoutePolicy };
