import { createHash, randomUUID } from 'node:crypto';
import canonicalize from 'canonicalize';
import type { FastifyInstance, onRequestAbortAsyncHookHandler, onSendAsyncHookHandler, preValidationAsyncHookHandler } from 'fastify';
import { DAY, every, type Clock, type Scheduler } from '@fleet/protocol';
import { ApiError, validationError } from '../errors.js';
import type { SecretBox } from '../secret-box.js';
import type { IdempotencyClaim, IdempotencyStore, Store } from '../store/index.js';

/**
 * Idempotency-Key, in one place (decisions.md, Idempotency-Key): the key's syntax, what makes two
 * requests the same (the fingerprint), which answers are stored and for how long, the claim a
 * request holds while it runs (renewed, released on abort), and the hooks the pipeline gives
 * every POST route that takes an API key. The verdict on a key that already has a row is a rule
 * (rules/idempotency.ts), applied by each engine inside its transaction
 * (store/sqlite/idempotency.ts, store/postgres/idempotency.ts).
 */

/** Idempotency-Key: printable ASCII, as Stripe and the IETF draft allow. */
export const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,255}$/;
/** How long a completed response is replayed. */
export const IDEMPOTENCY_TTL_MS = DAY;

/** Answers that a retry with the same key must run again instead of replaying (decisions.md). */
const TRANSIENT_CODES = new Set(['robot_offline', 'command_timeout', 'rate_limited', 'not_ready']);

export interface IdempotencyDeps {
  store: Store;
  clock: Clock;
  /** Paces the renewal of in-flight claims. */
  scheduler: Scheduler;
  /** Stored responses are sealed: a created key's plaintext must not sit in the database. */
  secrets: SecretBox;
  /**
   * The lease of an in-flight claim: renewed while its request runs, it is how long a retry is
   * refused (409) after the process holding the claim died.
   */
  leaseMs: number;
}

export interface IdempotencyHooks {
  /** preValidation: claims the key, or answers with the stored response, 409 or 422. */
  begin: preValidationAsyncHookHandler;
  /** onSend: stores the response for the key (sealed), or releases it after a transient answer. */
  complete: onSendAsyncHookHandler;
  /** onRequestAbort: a request that ends without a response (client gone mid-handler) must not hold its key. */
  releaseOnAbort: onRequestAbortAsyncHookHandler;
}

/** The Idempotency-Key hooks of one app, and the renewal of the claims its requests hold (stopped when the app closes). */
export function installIdempotency(app: FastifyInstance, deps: IdempotencyDeps): IdempotencyHooks {
  const { store, clock, secrets } = deps;
  const claims = new IdempotencyClaims({
    store: store.idempotency,
    clock,
    scheduler: deps.scheduler,
    leaseMs: deps.leaseMs,
    onError: (err) => app.log.error({ err }, 'renewing idempotency claims failed'),
  });
  app.addHook('onClose', async () => claims.close());
  app.decorateRequest('idempotency', null);

  const begin: preValidationAsyncHookHandler = async (request, reply) => {
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
    const begun = await store.idempotency.begin({ orgId, key, token, fingerprint, now: clock.now(), leaseMs: deps.leaseMs });
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

  const complete: onSendAsyncHookHandler = async (request, reply, payload) => {
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

  const releaseOnAbort: onRequestAbortAsyncHookHandler = async (request) => {
    const claim = request.idempotency;
    if (claim) {
      request.idempotency = null;
      claims.drop(claim);
      await store.idempotency.release(claim);
    }
  };

  return { begin, complete, releaseOnAbort };
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

/**
 * The in-flight Idempotency-Key claims of this process, kept alive while their requests run.
 * A claim is stored with a short lease (`leaseMs`): if the process dies, a retry through any
 * other replica takes the key over once the lease is out. While the process lives, one timer
 * renews every claim it holds, all in one statement, a third of a lease apart; the timer runs
 * only while there is a claim to renew.
 */
export class IdempotencyClaims {
  private readonly live = new Set<IdempotencyClaim>();
  private stopTimer: (() => void) | null = null;
  private renewing = false;

  constructor(
    private readonly opts: {
      store: IdempotencyStore;
      clock: Clock;
      scheduler: Scheduler;
      leaseMs: number;
      onError: (err: unknown) => void;
    },
  ) {}

  get leaseMs(): number {
    return this.opts.leaseMs;
  }

  /** How often held claims are renewed: three renewals fit in a lease, so one late or failed renewal loses nothing. */
  get renewEveryMs(): number {
    return Math.max(100, Math.floor(this.opts.leaseMs / 3));
  }

  /** How many claims this process holds. */
  get size(): number {
    return this.live.size;
  }

  hold(claim: IdempotencyClaim): void {
    this.live.add(claim);
    this.stopTimer ??= every(this.opts.scheduler, this.renewEveryMs, () => this.renew());
  }

  drop(claim: IdempotencyClaim): void {
    this.live.delete(claim);
    if (this.live.size === 0) this.stopRenewing();
  }

  close(): void {
    this.live.clear();
    this.stopRenewing();
  }

  private stopRenewing(): void {
    this.stopTimer?.();
    this.stopTimer = null;
  }

  private renew(): void {
    // A renewal still under way (a slow database) is not doubled; the next tick comes soon.
    if (this.renewing || this.live.size === 0) return;
    this.renewing = true;
    this.opts.store
      .renew([...this.live], this.opts.clock.now(), this.opts.leaseMs)
      .catch(this.opts.onError)
      .finally(() => {
        this.renewing = false;
      });
  }
}
