import { describe, expect, it } from 'vitest';
import { readNdjson } from './ndjson.js';

function stream(chunks: (string | Uint8Array)[]): ReadableStream<Uint8Array> {
  return new ReadableStream({
    start(c) {
      for (const ch of chunks) c.enqueue(typeof ch === 'string' ? new TextEncoder().encode(ch) : ch);
      c.close();
    },
  });
}

async function all<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const v of it) out.push(v);
  return out;
}

describe('readNdjson', () => {
  it('parses lines split anywhere across chunks, also inside a multi-byte character', async () => {
    const bytes = new TextEncoder().encode('{"a":"é"}\n\n{"b":2}\r\n{"c":3}');
    const chunks = [bytes.slice(0, 7), bytes.slice(7, 8), bytes.slice(8, 13), bytes.slice(13)];
    expect(await all(readNdjson(stream(chunks)))).toEqual([{ a: 'é' }, { b: 2 }, { c: 3 }]);
  });

  it('refuses a line longer than the bound before it has all of it', async () => {
    await expect(all(readNdjson(stream(['{"a":1}\n', 'x'.repeat(50), 'y'.repeat(50)]), 64))).rejects.toMatchObject({ name: 'FleetStreamError', reason: 'line_too_long' });
  });

  it('says which line is not JSON without quoting it', async () => {
    await expect(all(readNdjson(stream(['{"a":1}\nsecret-not-json\n'])))).rejects.toMatchObject({ reason: 'invalid_json', message: expect.not.stringContaining('secret') as unknown });
  });

  it('cancels the body when the reader stops early', async () => {
    let cancelled = false;
    const body = new ReadableStream<Uint8Array>({
      pull(c) {
        c.enqueue(new TextEncoder().encode('{"a":1}\n'));
      },
      cancel() {
        cancelled = true;
      },
    });
    for await (const _ of readNdjson(body)) break;
    expect(cancelled).toBe(true);
  });
});
