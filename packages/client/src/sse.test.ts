import { describe, expect, it } from 'vitest';
import { FleetStreamError } from './errors.js';
import { readSse, type SseMessage } from './sse.js';

/** A body that delivers `chunks` one read at a time (strings as UTF-8, or raw bytes). */
function body(chunks: readonly (string | Uint8Array)[]): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  let i = 0;
  return new ReadableStream({
    pull(controller) {
      if (i === chunks.length) return controller.close();
      const c = chunks[i++]!;
      controller.enqueue(typeof c === 'string' ? encoder.encode(c) : c);
    },
  });
}

async function all(chunks: readonly (string | Uint8Array)[], seen: { retry: number[]; comments: string[] } = { retry: [], comments: [] }): Promise<SseMessage[]> {
  const out: SseMessage[] = [];
  for await (const m of readSse(body(chunks), { onRetry: (ms) => seen.retry.push(ms), onComment: (c) => seen.comments.push(c) })) out.push(m);
  return out;
}

describe('readSse', () => {
  it('reads frames: id, event, data; the id carries over; a frame without event is a message', async () => {
    expect(await all(['retry: 2000\n\nid: evt_1\nevent: robot.status\ndata: {"a":1}\n\ndata: plain\n\n'])).toEqual([
      { id: 'evt_1', event: 'robot.status', data: '{"a":1}' },
      { id: 'evt_1', event: 'message', data: 'plain' },
    ]);
  });

  it('joins data lines with LF, keeps a value without the space, and drops only one leading space', async () => {
    expect(await all(['data: one\ndata:two\ndata:   three\ndata\n\n'])).toEqual([{ id: undefined, event: 'message', data: 'one\ntwo\n  three\n' }]);
  });

  it('takes CRLF, CR and LF line ends, also when a CRLF or a frame is split across chunks', async () => {
    const text = 'id: evt_1\r\nevent: a\r\ndata: x\r\n\r\nid: evt_2\revent: b\rdata: y\r\rid: evt_3\nevent: c\ndata: z\n\n';
    const whole = await all([text]);
    expect(whole).toEqual([
      { id: 'evt_1', event: 'a', data: 'x' },
      { id: 'evt_2', event: 'b', data: 'y' },
      { id: 'evt_3', event: 'c', data: 'z' },
    ]);
    // Every split point, including between CR and LF.
    for (let cut = 1; cut < text.length; cut++) expect(await all([text.slice(0, cut), text.slice(cut)]), `cut at ${cut}`).toEqual(whole);
    // One byte at a time, a multi-byte character split between chunks included.
    const bytes = new TextEncoder().encode('data: é€😀\n\n');
    expect(await all([...bytes].map((b) => new Uint8Array([b])))).toEqual([{ id: undefined, event: 'message', data: 'é€😀' }]);
  });

  it('passes comments (heartbeats) and retry on, dispatches nothing for them, ignores unknown fields and bad retry', async () => {
    const seen = { retry: [] as number[], comments: [] as string[] };
    expect(await all([': heartbeat\n\nretry: 2000\nretry: 5s\nfoo: bar\n\n:\n\ndata: d\n\n'], seen)).toEqual([{ id: undefined, event: 'message', data: 'd' }]);
    expect(seen).toEqual({ retry: [2000], comments: ['heartbeat', ''] });
  });

  it('tells of an id set by a block without data (a position), not of ids that came with data', async () => {
    const ids: string[] = [];
    const got: SseMessage[] = [];
    for await (const m of readSse(body(['retry: 1\nid: evt_7\n\nid: evt_8\ndata: x\n\n: heartbeat\n\n']), { onId: (id) => ids.push(id) })) got.push(m);
    expect(ids).toEqual(['evt_7']);
    expect(got).toEqual([{ id: 'evt_8', event: 'message', data: 'x' }]);
  });

  it('drops an event type without data, and an unfinished event at the end of the stream', async () => {
    expect(await all(['event: a\n\ndata: b\n\nid: evt_9\ndata: unfinished'])).toEqual([{ id: undefined, event: 'message', data: 'b' }]);
  });

  it('skips a byte order mark at the start, keeps an id without NUL and an empty id', async () => {
    expect(await all(['\ufeffid: evt_1\ndata: a\n\nid: bad\0id\ndata: b\n\nid\ndata: c\n\n'])).toEqual([
      { id: 'evt_1', event: 'message', data: 'a' },
      { id: 'evt_1', event: 'message', data: 'b' },
      { id: '', event: 'message', data: 'c' },
    ]);
  });

  it('refuses a line or an event data past the bound', async () => {
    const long = async (chunks: string[]) => {
      for await (const _ of readSse(body(chunks), { maxLength: 16 })) void _;
    };
    await expect(long(['data: ', 'x'.repeat(40)])).rejects.toBeInstanceOf(FleetStreamError);
    await expect(long(['data: 0123456789\ndata: 0123456789\n\n'])).rejects.toMatchObject({ reason: 'line_too_long' });
  });
});
