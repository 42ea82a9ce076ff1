import { STREAM_EVENT_TYPES, nextRetryDelay, type WebhookEvent } from '@fleet/protocol/browser';
import { apiErrorOf, FleetConnectionError, FleetStreamError } from './errors.js';
import { readSse } from './sse.js';
import type { components } from './schema.js';

/** The episode events: the webhook events, with the webhook's payload. */
export type EpisodeEventType = WebhookEvent;
/** Every event type of `GET /v1/events/stream`. */
export type FleetEventType = EpisodeEventType | 'robot.status';
export type EpisodeEventData = components['schemas']['WebhookPayload'];
export type RobotStatusEventData = components['schemas']['RobotStatusEvent'];

/** One event of the stream: `id` is the event's opaque id, `evt_…` (the id webhooks send as `X-Service-Event-Id`). */
export type FleetEvent = { id: string; type: EpisodeEventType; data: EpisodeEventData } | { id: string; type: 'robot.status'; data: RobotStatusEventData };

export interface EventStreamOptions {
  /** Only these types (default: every type the key may read). */
  types?: readonly FleetEventType[];
  /** Only this robot's events. */
  robotId?: string;
  /** Resume after this event (its `evt_…` id): every later event is sent first. Default: from the present. */
  lastEventId?: string;
  /** Aborting ends the iteration (no error). */
  signal?: AbortSignal;
  /** After a dropped connection, connect again with the last id yielded (default true). */
  reconnect?: boolean;
  /** Told each time a connection is established (the first and every reconnection). */
  onOpen?: () => void;
  /**
   * A connection that delivers nothing (no event, no heartbeat) for this long is taken as dropped
   * and replaced (default 45 s: the server sends a heartbeat every 15 s). A half-open connection
   * (a NAT or proxy that forgot it, a peer gone without a FIN) would otherwise wait forever.
   */
  idleTimeoutMs?: number;
  /** Told before each wait for a reconnection. */
  onReconnect?: (info: { attempt: number; waitMs: number; lastEventId: string | undefined; error: unknown }) => void;
}

/** What the stream needs of the client: where, with which headers, through which fetch. */
export interface StreamTarget {
  baseUrl: string;
  headers: Record<string, string>;
  fetch: ((input: string, init: RequestInit) => Promise<Response>) | undefined;
}

/** Waits between reconnections: the server's `retry:` (2 s) first, doubling while they fail, up to 30 s. */
const RECONNECT_FACTORS = [1, 2, 4, 8, 15];
const DEFAULT_RETRY_MS = 2000;
const MAX_WAIT_MS = 30_000;
const DEFAULT_IDLE_TIMEOUT_MS = 45_000;
const KNOWN_TYPES: ReadonlySet<string> = new Set(STREAM_EVENT_TYPES);

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const onAbort = () => {
      clearTimeout(timer);
      resolve();
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * `GET /v1/events/stream` as an async iterator of `{id, type, data}`. The key goes in the
 * Authorization header (never the URL). After a dropped connection (a network error, the server
 * ending the stream, a 5xx or 429 answer) it connects again with `Last-Event-ID` set to the last
 * id it yielded, waiting the server's `retry:` delay and longer while attempts fail, and never
 * yields an id twice. A 4xx answer throws `FleetApiError` (a 401 or 403 is never retried); a
 * failure of the very first connection throws too, so a wrong URL or key shows at once. Uses
 * only the global fetch, WHATWG streams and timers: it runs in browsers as in Node.
 */
export async function* streamEvents(target: StreamTarget, o: EventStreamOptions = {}): AsyncGenerator<FleetEvent> {
  const reconnect = o.reconnect ?? true;
  const send = target.fetch ?? ((input: string, init: RequestInit) => globalThis.fetch(input, init));
  const query = new URLSearchParams();
  if (o.types !== undefined) query.set('types', o.types.join(','));
  if (o.robotId !== undefined) query.set('robot_id', o.robotId);
  const qs = query.toString();
  const url = `${target.baseUrl}/v1/events/stream${qs === '' ? '' : `?${qs}`}`;

  let lastId = o.lastEventId;
  // Ids are opaque, not ordered by their text: the ones seen lately are remembered, so that an
  // event a server sends again after a reconnection is neither yielded twice nor taken as the
  // position to resume from.
  const seen = new RecentIds(RECENT_IDS);
  if (lastId !== undefined) seen.add(lastId);
  let retryMs = DEFAULT_RETRY_MS;
  let opened = false;
  let failures = 0;
  const idleTimeoutMs = o.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS;

  for (;;) {
    if (o.signal?.aborted) return;
    let failure: unknown;
    let retryAfterMs: number | undefined;
    let response: Response | undefined;
    // This connection's own abort: the caller's signal, or nothing received for idleTimeoutMs.
    const conn = new AbortController();
    const onAbort = () => conn.abort(o.signal?.reason);
    o.signal?.addEventListener('abort', onAbort, { once: true });
    let idle = false;
    let idleTimer: ReturnType<typeof setTimeout> | undefined;
    const touch = () => {
      clearTimeout(idleTimer);
      idleTimer = setTimeout(() => {
        idle = true;
        conn.abort(new Error('idle'));
      }, idleTimeoutMs);
    };
    const idleFailure = () =>
      new FleetConnectionError(`GET /v1/events/stream: nothing received for ${idleTimeoutMs / 1000} s (the server sends a heartbeat every 15 s)`, 'GET', url);
    try {
      touch();
      response = await send(url, {
        method: 'GET',
        headers: { ...target.headers, accept: 'text/event-stream', ...(lastId !== undefined ? { 'last-event-id': lastId } : {}) },
        redirect: 'error',
        signal: conn.signal,
      });
      touch();
    } catch (err) {
      clearTimeout(idleTimer);
      o.signal?.removeEventListener('abort', onAbort);
      if (o.signal?.aborted) return;
      failure = idle ? idleFailure() : new FleetConnectionError(`GET /v1/events/stream: ${err instanceof Error ? err.message : String(err)}`, 'GET', url, { cause: err });
    }

    if (response && !response.ok) {
      clearTimeout(idleTimer);
      o.signal?.removeEventListener('abort', onAbort);
      const text = await response.text().catch(() => '');
      let body: unknown;
      try {
        body = JSON.parse(text);
      } catch {
        body = undefined;
      }
      const err = apiErrorOf(response, body);
      const transient = response.status >= 500 || response.status === 429;
      if (!transient || !opened || !reconnect) throw err;
      failure = err;
      retryAfterMs = err.retryAfterMs;
    } else if (response) {
      opened = true;
      failures = 0;
      o.onOpen?.();
      try {
        if (!response.body) throw new Error('the answer has no body');
        // An id line alone is where the server started this stream (or a passed-over position).
        const position = (id: string) => {
          touch();
          if (!seen.has(id)) lastId = id;
        };
        const sse = readSse(response.body, {
          onRetry: (ms) => {
            touch();
            retryMs = ms;
          },
          onId: position,
          onComment: touch,
          signal: conn.signal,
        });
        for await (const m of sse) {
          touch();
          if (m.id === undefined) continue;
          if (seen.has(m.id)) continue;
          seen.add(m.id);
          lastId = m.id;
          // A type this client does not know (a newer server's) is passed over, its id noted.
          if (!KNOWN_TYPES.has(m.event)) continue;
          let data: unknown;
          try {
            data = JSON.parse(m.data);
          } catch {
            throw new FleetStreamError('invalid_json', `the data of event ${m.id} is not valid JSON`);
          }
          yield { id: m.id, type: m.event, data } as FleetEvent;
        }
        // Without reconnecting, the end of the answer is the end of the iteration.
        if (o.signal?.aborted || (!reconnect && !idle)) return;
        failure = idle ? idleFailure() : new FleetConnectionError('GET /v1/events/stream: the server ended the stream', 'GET', url);
      } catch (err) {
        if (o.signal?.aborted) return;
        if (err instanceof FleetStreamError) throw err;
        if (idle) failure = idleFailure();
        else failure = err instanceof FleetConnectionError ? err : new FleetConnectionError(`GET /v1/events/stream: ${err instanceof Error ? err.message : String(err)}`, 'GET', url, { cause: err });
      } finally {
        clearTimeout(idleTimer);
        o.signal?.removeEventListener('abort', onAbort);
        // An idle or abandoned connection is closed, not left to the garbage collector.
        conn.abort();
      }
    }

    if (!reconnect || !opened) throw failure;
    failures++;
    const factor = RECONNECT_FACTORS[Math.min(failures, RECONNECT_FACTORS.length) - 1]!;
    const base = Math.min(MAX_WAIT_MS, retryMs * factor);
    const waitMs = nextRetryDelay({ schedule: [base], jitter: 0.2 }, 1, retryAfterMs !== undefined ? { retryAfterMs } : {})!;
    o.onReconnect?.({ attempt: failures, waitMs, lastEventId: lastId, error: failure });
    await sleep(waitMs, o.signal);
  }
}

/** Event ids remembered against a server's repeats: far more than one reconnection can replay. */
const RECENT_IDS = 10_000;

/** A set that keeps only its newest `bound` entries. */
class RecentIds {
  private readonly ids = new Set<string>();

  constructor(private readonly bound: number) {}

  has(id: string): boolean {
    return this.ids.has(id);
  }

  add(id: string): void {
    this.ids.add(id);
    // A Set iterates in insertion order: the first key is the oldest.
    if (this.ids.size > this.bound) this.ids.delete(this.ids.values().next().value!);
  }
}
