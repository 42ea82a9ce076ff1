import { describe, expect, it } from 'vitest';
import { FleetClient } from './client.js';
import { FleetApiError, FleetConnectionError } from './errors.js';
import type { FleetEvent } from './events.js';

/**
 * `client.events.stream` against a scripted fetch: each connection is answered by the next
 * script entry (a status with an error body, a network failure, or SSE text that ends or breaks),
 * and every request is recorded.
 */
type Answer = { status: number; body?: unknown; headers?: Record<string, string> } | { sse: string[]; breakWith?: Error; stall?: boolean } | { fail: Error };

interface Seen {
  url: string;
  headers: Record<string, string>;
}

function scripted(answers: Answer[]): { fetch: typeof fetch; seen: Seen[] } {
  const seen: Seen[] = [];
  const encoder = new TextEncoder();
  const fetchImpl = (async (input: string | URL | Request, init?: RequestInit) => {
    seen.push({ url: input instanceof Request ? input.url : String(input), headers: Object.fromEntries(new Headers(init?.headers).entries()) });
    const a = answers.shift();
    if (!a) {
      // Nothing more scripted: a stream that stays open until the caller aborts.
      return new Response(
        new ReadableStream({
          start(controller) {
            init?.signal?.addEventListener('abort', () => controller.error(new DOMException('aborted', 'AbortError')));
          },
        }),
        { status: 200, headers: { 'content-type': 'text/event-stream' } },
      );
    }
    if ('fail' in a) throw a.fail;
    if ('status' in a) return new Response(a.body === undefined ? '' : JSON.stringify(a.body), { status: a.status, headers: { 'content-type': 'application/json', ...a.headers } });
    const chunks = [...a.sse];
    return new Response(
      new ReadableStream<Uint8Array>({
        start(controller) {
          init?.signal?.addEventListener('abort', () => controller.error(new DOMException('aborted', 'AbortError')));
        },
        pull(controller) {
          const c = chunks.shift();
          if (c !== undefined) controller.enqueue(encoder.encode(c));
          // A half-open connection: nothing more, no end, until the client gives up on it.
          else if (a.stall) return new Promise<void>(() => undefined);
          else if (a.breakWith) controller.error(a.breakWith);
          else controller.close();
          return undefined;
        },
      }),
      { status: 200, headers: { 'content-type': 'text/event-stream' } },
    );
  }) as typeof fetch;
  return { fetch: fetchImpl, seen };
}

const frame = (n: number, type = 'episode.finalized', data: unknown = { schema_version: 1, episode_id: `ep_${n}`, robot_id: 'rbt_1', recording_session_id: 'rs', episode_seq: n, state: 'reported' }) =>
  `id: evt_${n}\nevent: ${type}\ndata: ${JSON.stringify(data)}\n\n`;
const error = (code: string) => ({ error: { code, message: code, request_id: 'req_test' } });

async function take(it: AsyncGenerator<FleetEvent>, n: number): Promise<FleetEvent[]> {
  const out: FleetEvent[] = [];
  for await (const e of it) {
    out.push(e);
    if (out.length === n) break;
  }
  return out;
}

function client(f: typeof fetch): FleetClient {
  return new FleetClient({ baseUrl: 'https://fleet.example/', apiKey: 'ak_0123456789abcdef', fetch: f });
}

describe('client.events.stream', () => {
  it('sends the key in the Authorization header only, the filters in the query, and yields typed events', async () => {
    const { fetch, seen } = scripted([{ sse: ['retry: 1\n\n', frame(1), frame(2, 'robot.status', { schema_version: 1, robot_id: 'rbt_1', online: true, recording_state: 'idle', last_seen_at: null })] }]);
    const events = await take(client(fetch).events.stream({ types: ['episode.finalized', 'robot.status'], robotId: 'rbt_1' }), 2);
    expect(events.map((e) => [e.id, e.type])).toEqual([
      ['evt_1', 'episode.finalized'],
      ['evt_2', 'robot.status'],
    ]);
    const e = events[1]!;
    if (e.type === 'robot.status') expect(e.data.online).toBe(true);
    expect(seen[0]!.url).toBe('https://fleet.example/v1/events/stream?types=episode.finalized%2Crobot.status&robot_id=rbt_1');
    expect(seen[0]!.url).not.toContain('ak_');
    expect(seen[0]!.headers).toMatchObject({ authorization: 'Bearer ak_0123456789abcdef', accept: 'text/event-stream' });
    expect(seen[0]!.headers['last-event-id']).toBeUndefined();
  });

  it('reconnects after a drop with the last id it yielded and never yields an id twice', async () => {
    const { fetch, seen } = scripted([
      { sse: ['retry: 1\n\n', frame(1), frame(2)] },
      // The server ends the stream; then a network error mid-stream.
      { sse: [frame(2), frame(3)], breakWith: new TypeError('terminated') },
      { fail: new TypeError('fetch failed') },
      { status: 503, body: error('not_ready') },
      { sse: [frame(1), frame(3), frame(4)] },
    ]);
    const opened: number[] = [];
    const reconnects: (string | undefined)[] = [];
    const events = await take(
      client(fetch).events.stream({ lastEventId: 'evt_0', onOpen: () => opened.push(seen.length), onReconnect: (r) => reconnects.push(r.lastEventId) }),
      4,
    );
    expect(events.map((e) => e.id)).toEqual(['evt_1', 'evt_2', 'evt_3', 'evt_4']);
    expect(seen.map((s) => s.headers['last-event-id'])).toEqual(['evt_0', 'evt_2', 'evt_3', 'evt_3', 'evt_3']);
    expect(opened).toEqual([1, 2, 5]);
    expect(reconnects).toEqual(['evt_2', 'evt_3', 'evt_3', 'evt_3']);
  });

  it('takes ids as opaque: their text has no order, and a replayed one is neither yielded again nor the resume position', async () => {
    const [z, a, m] = ['evt_' + 'z'.repeat(26), 'evt_' + 'a'.repeat(26), 'evt_' + 'm'.repeat(26)];
    const opaque = (id: string) => `id: ${id}\nevent: episode.finalized\ndata: {}\n\n`;
    const { fetch, seen } = scripted([{ sse: ['retry: 1\n\n', opaque(z), opaque(a)] }, { sse: [opaque(z), opaque(a), opaque(m)] }]);
    const events = await take(client(fetch).events.stream(), 3);
    expect(events.map((e) => e.id)).toEqual([z, a, m]);
    expect(seen.map((s) => s.headers['last-event-id'])).toEqual([undefined, a]);
  });

  it('replaces a connection that delivers nothing, not even a heartbeat, for idleTimeoutMs', async () => {
    // Heartbeats keep a connection alive; after the last one, silence.
    const { fetch, seen } = scripted([{ sse: ['retry: 1\n\n', frame(1), ': heartbeat\n\n'], stall: true }, { sse: [frame(2)] }]);
    const reconnects: string[] = [];
    const events = await take(client(fetch).events.stream({ idleTimeoutMs: 50, onReconnect: (r) => reconnects.push(String(r.error)) }), 2);
    expect(events.map((e) => e.id)).toEqual(['evt_1', 'evt_2']);
    expect(seen.map((s) => s.headers['last-event-id'])).toEqual([undefined, 'evt_1']);
    expect(reconnects).toEqual(['FleetConnectionError: GET /v1/events/stream: nothing received for 0.05 s (the server sends a heartbeat every 15 s)']);
  });

  it('resumes from the position the server gave when the connection dropped before any event', async () => {
    const { fetch, seen } = scripted([{ sse: ['retry: 1\nid: evt_41\n\n'] }, { sse: ['id: evt_41\n\n', frame(42)] }]);
    expect((await take(client(fetch).events.stream(), 1)).map((e) => e.id)).toEqual(['evt_42']);
    expect(seen.map((s) => s.headers['last-event-id'])).toEqual([undefined, 'evt_41']);
  });

  it('retries 429 after a connection was open, honouring Retry-After', async () => {
    const { fetch, seen } = scripted([{ sse: ['retry: 1\n\n', frame(1)] }, { status: 429, body: error('rate_limited'), headers: { 'retry-after': '0' } }, { sse: [frame(2)] }]);
    expect((await take(client(fetch).events.stream(), 2)).map((e) => e.id)).toEqual(['evt_1', 'evt_2']);
    expect(seen).toHaveLength(3);
  });

  it('throws FleetApiError for a 4xx and does not reconnect after 401 or 403', async () => {
    for (const [status, code] of [
      [401, 'unauthenticated'],
      [403, 'insufficient_scope'],
      [400, 'validation_failed'],
    ] as const) {
      const { fetch, seen } = scripted([{ sse: ['retry: 1\n\n', frame(1)] }, { status, body: error(code) }, { sse: [frame(2)] }]);
      const got: string[] = [];
      const err = await (async () => {
        for await (const e of client(fetch).events.stream()) got.push(e.id);
      })().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(FleetApiError);
      expect(err).toMatchObject({ status, code, requestId: 'req_test' });
      expect(got).toEqual(['evt_1']);
      expect(seen).toHaveLength(2);
    }
  });

  it('throws when the very first connection fails, whatever the failure', async () => {
    const refused = scripted([{ fail: new TypeError('fetch failed') }]);
    await expect(take(client(refused.fetch).events.stream(), 1)).rejects.toBeInstanceOf(FleetConnectionError);
    const limited = scripted([{ status: 429, body: error('rate_limited'), headers: { 'retry-after': '5' } }]);
    await expect(take(client(limited.fetch).events.stream(), 1)).rejects.toMatchObject({ code: 'rate_limited', retryAfterMs: 5000 });
    expect(limited.seen).toHaveLength(1);
  });

  it('with reconnect false ends when the answer ends', async () => {
    const { fetch, seen } = scripted([{ sse: [frame(1)] }, { sse: [frame(2)] }]);
    const got: string[] = [];
    for await (const e of client(fetch).events.stream({ reconnect: false })) got.push(e.id);
    expect(got).toEqual(['evt_1']);
    expect(seen).toHaveLength(1);
  });

  it('passes over types it does not know, noting their ids for the next reconnection', async () => {
    const { fetch, seen } = scripted([{ sse: ['retry: 1\n\n', frame(1), frame(2, 'robot.battery', {}), ': heartbeat\n\n'] }, { sse: [frame(3)] }]);
    expect((await take(client(fetch).events.stream(), 2)).map((e) => e.id)).toEqual(['evt_1', 'evt_3']);
    expect(seen[1]!.headers['last-event-id']).toBe('evt_2');
  });

  it('ends without an error when its signal aborts, also while waiting to reconnect', async () => {
    const open = scripted([{ sse: [frame(1)] }]);
    const ac = new AbortController();
    const got: string[] = [];
    for await (const e of client(open.fetch).events.stream({ signal: ac.signal })) {
      got.push(e.id);
      ac.abort();
    }
    expect(got).toEqual(['evt_1']);

    const waiting = scripted([{ sse: ['retry: 60000\n\n', frame(1)] }]);
    const ac2 = new AbortController();
    const it = client(waiting.fetch).events.stream({ signal: ac2.signal, onReconnect: () => ac2.abort() });
    expect((await it.next()).value).toMatchObject({ id: 'evt_1' });
    expect(await it.next()).toEqual({ done: true, value: undefined });
  });
});
