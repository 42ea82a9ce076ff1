import { nextRetryDelay, parseRetryAfter, type RetryPolicy } from '@fleet/protocol/browser';
import { FleetConnectionError } from './errors.js';
import { isRobotCommandPath } from './robot-commands.js';

/**
 * The waits between attempts (ms) and their spread: 3 retries after 0.5 s, 1 s and 2 s, ±20 %.
 * A `Retry-After` longer than the schedule's wait is honoured up to `maxRetryAfterMs`.
 */
export const DEFAULT_RETRY_POLICY: RetryPolicy = Object.freeze({ schedule: Object.freeze([500, 1_000, 2_000]), jitter: 0.2 });
export const DEFAULT_MAX_RETRY_AFTER_MS = 60_000;

/**
 * Robot commands (`POST /v1/robots/{id}/go-home`, `…/episodes/start`, …) wait for the robot, up
 * to the cloud's command timeout (10 s by default), so they have a retry rule of their own (see
 * {@link isRetryable}): at most 2 retries, after 0.25 s and 0.75 s (±20 %), and none that would
 * start more than {@link DEFAULT_COMMAND_RETRY_WINDOW_MS} after the first attempt. A command call
 * therefore returns within about 2 s plus one command timeout.
 */
export const DEFAULT_COMMAND_RETRY_POLICY: RetryPolicy = Object.freeze({ schedule: Object.freeze([250, 750]), jitter: 0.2 });
export const DEFAULT_COMMAND_RETRY_WINDOW_MS = 2_000;

export interface TransportOptions {
  /** The fetch to send with (default: the global one); the retries wrap it. */
  fetch?: typeof fetch;
  /** `false` turns retries off. */
  retry?: RetryPolicy | false;
  /** A `Retry-After` longer than this is not waited for: the 429 is thrown. */
  maxRetryAfterMs?: number;
  /** The schedule of robot commands (default {@link DEFAULT_COMMAND_RETRY_POLICY}); `false` turns their retries off. */
  commandRetry?: RetryPolicy | false;
  /** No robot command is sent again once this long has passed since its first attempt (default 2 s). */
  commandRetryWindowMs?: number;
  /** Injected for tests: the clock the command retry window is measured with (default Date.now). */
  now?: () => number;
  /** Injected for tests: waits `ms` (rejects when `signal` aborts). */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  random?: () => number;
  /** Makes the automatic Idempotency-Key of a POST (default: a random UUID). */
  idempotencyKey?: () => string;
  /** Told before each wait (for logs and progress). */
  onRetry?: (info: { method: string; url: string; attempt: number; waitMs: number; status: number | null; error?: unknown }) => void;
}

/** Paths the server does not deduplicate by Idempotency-Key (no API key, so no organization). */
const UNKEYED_POSTS = new Set(['/v1/robots/enroll']);

/** `POST /v1/episodes/{id}/read-links`: its 501, 502 and 504 are the grant provider's verdict. */
const isReadLinksPath = (path: string): boolean => /^\/v1\/episodes\/[^/]+\/read-links$/.test(path);

/**
 * Whether a failed attempt may be sent again. The rule:
 * - Robot commands (POST, always with an Idempotency-Key, which is the command id the robot
 *   remembers): only after a network error, a 502 or a 503 (`robot_offline` included: a robot
 *   that reconnects within a moment). Never after a 4xx (429 included: the caller sees it at
 *   once), a 500 (the robot refused the verb in its current state, and would again) or a 504
 *   `command_timeout` (the cloud already waited its whole command timeout; send the command
 *   again with the same key to get the robot's answer without it acting twice).
 * - 429: every other request (the server refused before doing anything).
 * - other 5xx and network errors: GET, HEAD, PUT, DELETE (idempotent: a full replacement or a
 *   removal that answers 204 again) and POST (its Idempotency-Key, the same on every attempt,
 *   makes the server replay the first answer instead of acting twice), except POSTs the server
 *   does not deduplicate (robot enrollment).
 * - PATCH never on those: an outcome change writes an audit row per request.
 * - Read links (POST …/read-links) not after a 501, 502 or 504: the cloud already asked the
 *   grant provider and relays what it answered (no read support, a bad answer, no answer within
 *   10 s); asking again at once would mostly repeat it, a 504 after another 10 s.
 */
export function isRetryable(method: string, path: string, status: number | null): boolean {
  if (method === 'POST' && isRobotCommandPath(path)) return status === null || status === 502 || status === 503;
  if (method === 'POST' && isReadLinksPath(path) && (status === 501 || status === 502 || status === 504)) return false;
  if (status === 429) return true;
  if (status !== null && status < 500) return false;
  switch (method) {
    case 'GET':
    case 'HEAD':
    case 'PUT':
    case 'DELETE':
      return true;
    case 'POST':
      return !UNKEYED_POSTS.has(path);
    default:
      return false;
  }
}

const defaultSleep = (ms: number, signal?: AbortSignal): Promise<void> =>
  new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason as Error);
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason as Error);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });

/**
 * A fetch for openapi-fetch that adds an Idempotency-Key to every POST that has none and retries
 * by {@link isRetryable} with backoff, jitter and `Retry-After`. The request body is read once, so
 * every attempt sends the same bytes under the same key.
 */
export function retryingFetch(opts: TransportOptions = {}): (input: Request) => Promise<Response> {
  const send = opts.fetch ?? globalThis.fetch;
  const none: RetryPolicy = { schedule: [] };
  const policy = opts.retry === false ? none : (opts.retry ?? DEFAULT_RETRY_POLICY);
  const commandPolicy = opts.retry === false || opts.commandRetry === false ? none : (opts.commandRetry ?? DEFAULT_COMMAND_RETRY_POLICY);
  const commandWindowMs = opts.commandRetryWindowMs ?? DEFAULT_COMMAND_RETRY_WINDOW_MS;
  const now = opts.now ?? Date.now;
  const sleep = opts.sleep ?? defaultSleep;
  const maxRetryAfterMs = opts.maxRetryAfterMs ?? DEFAULT_MAX_RETRY_AFTER_MS;
  // The global Web Crypto (Node 20 and browsers alike): the client also runs in the console.
  const makeKey = opts.idempotencyKey ?? (() => globalThis.crypto.randomUUID());

  return async (request: Request): Promise<Response> => {
    const method = request.method.toUpperCase();
    const headers = new Headers(request.headers);
    if (method === 'POST' && !headers.has('idempotency-key')) headers.set('idempotency-key', makeKey());
    const body = request.body === null ? undefined : new Uint8Array(await request.arrayBuffer());
    const path = new URL(request.url).pathname;
    const signal = request.signal;
    const command = method === 'POST' && isRobotCommandPath(path);
    const started = now();

    for (let attempt = 1; ; attempt++) {
      let response: Response | undefined;
      let failure: unknown;
      try {
        response = await send(request.url, { method, headers, body, signal, redirect: 'error' });
      } catch (err) {
        if (signal.aborted) throw err;
        failure = err;
      }
      const status = response?.status ?? null;
      if (response && status! < 500 && status !== 429) return response;
      const retryAfterMs = response ? parseRetryAfter(response.headers.get('retry-after') ?? undefined, Date.now()) : undefined;
      const wait = isRetryable(method, path, status)
        ? nextRetryDelay(command ? commandPolicy : policy, attempt, { ...(retryAfterMs !== undefined ? { retryAfterMs } : {}), ...(opts.random ? { random: opts.random } : {}) })
        : null;
      if (wait === null || wait > maxRetryAfterMs || (command && now() - started + wait > commandWindowMs)) {
        if (response) return response;
        throw new FleetConnectionError(`${method} ${path}: ${failure instanceof Error ? failure.message : String(failure)}`, method, request.url, { cause: failure });
      }
      // The body of an answer we will not use is dropped so its connection can be reused.
      await response?.body?.cancel().catch(() => undefined);
      opts.onRetry?.({ method, url: request.url, attempt, waitMs: wait, status, ...(failure !== undefined ? { error: failure } : {}) });
      await sleep(wait, signal);
    }
  };
}
