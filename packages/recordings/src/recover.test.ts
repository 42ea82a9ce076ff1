import { McapStreamReader } from '@mcap/core';
import { loadDecompressHandlers } from '@mcap/support';
import { describe, expect, it } from 'vitest';
import { bytesSource, isRecordingError, openMcap, type ByteSource, type McapRecording } from './index.js';
import { chunkIndexes, summaryOf, writeMcap, type Compression, type WrittenMessage } from './test-mcaps.js';

/** A source over bytes that counts what is read (each read's length). */
function countingSource(bytes: Uint8Array): ByteSource & { reads: number[] } {
  const inner = bytesSource(bytes);
  const reads: number[] = [];
  return {
    size: inner.size,
    reads,
    read: (offset, length) => {
      reads.push(Number(length));
      return inner.read(offset, length);
    },
  };
}

const TOPICS = ['/a', '/b', '/c'];
const seen = (m: { topic: string; logTimeNs: bigint; data: unknown }) => `${m.topic} ${m.logTimeNs} ${JSON.stringify(m.data)}`;
const wanted = (m: WrittenMessage) => `${m.topic} ${m.logTime} ${JSON.stringify(JSON.parse(m.text))}`;

async function all(r: McapRecording, opts: { startNs?: bigint; endNs?: bigint; reverse?: boolean } = {}): Promise<string[]> {
  const out: string[] = [];
  for await (const m of r.messages(TOPICS, opts)) out.push(seen(m));
  return out;
}

/** The messages McapStreamReader (Foxglove's own streaming reader) gets out of `bytes`: whole records only. */
async function streamed(bytes: Uint8Array): Promise<string[]> {
  const reader = new McapStreamReader({ decompressHandlers: await loadDecompressHandlers() });
  reader.append(bytes);
  const topics = new Map<number, string>();
  const out: string[] = [];
  for (let r; (r = reader.nextRecord()) !== undefined; ) {
    if (r.type === 'Channel') topics.set(r.id, r.topic);
    if (r.type === 'Message') out.push(`${topics.get(r.channelId)} ${r.logTime} ${JSON.stringify(JSON.parse(new TextDecoder().decode(r.data)))}`);
  }
  return out;
}

describe('openMcap({recover: true}): a chunked recording cut short', () => {
  for (const compression of ['zstd', 'lz4', ''] as Compression[]) {
    it(`${compression || 'uncompressed'} chunks: cut inside a chunk, right after one, between two, in the summary: exactly the whole chunks' messages`, async () => {
      const w = await writeMcap({ count: 1500, compression, padBytes: 300 });
      const { chunkIndexes: chunks, dataEndOffset } = await summaryOf(w.bytes);
      expect(chunks.length).toBeGreaterThanOrEqual(6);
      const end = (i: number) => Number(chunks[i]!.chunkStartOffset + chunks[i]!.chunkLength);
      const lastChunkEnd = end(chunks.length - 1);
      const cuts = [
        Number(chunks[2]!.chunkStartOffset) + Math.floor(Number(chunks[2]!.chunkLength) / 2),
        end(2),
        end(2) + 1,
        Number(chunks[3]!.chunkStartOffset),
        Number(chunks[3]!.chunkStartOffset) + 5,
        lastChunkEnd + 3,
        Math.floor((Number(dataEndOffset) + w.bytes.byteLength) / 2),
      ];
      for (const cut of cuts) {
        const bytes = w.bytes.subarray(0, cut);
        await expect(openMcap(bytesSource(bytes))).rejects.toSatisfy((e) => isRecordingError(e, 'unreadable'));
        const whole = chunks.filter((c) => Number(c.chunkStartOffset + c.chunkLength) <= cut);
        const upTo = whole.reduce((t, c) => (c.messageEndTime > t ? c.messageEndTime : t), 0n);
        const expected = w.messages.filter((m) => m.logTime <= upTo);
        expect(expected.length, `cut at ${cut}`).toBeGreaterThan(0);

        await using r = await openMcap(bytesSource(bytes), { recover: true, name: `cut at ${cut}` });
        // Cut in the summary, the data section is whole: scanned, but nothing is missing.
        const inData = cut <= Number(dataEndOffset);
        expect([r.truncated, r.recovery!.complete]).toEqual([inData, !inData]);
        expect(await all(r), `cut at ${cut}`).toEqual(expected.map(wanted));
        expect(await all(r, { reverse: true })).toEqual(expected.map(wanted).reverse());
        expect([r.startNs, r.endNs]).toEqual([expected[0]!.logTime, expected.at(-1)!.logTime]);
        for (const topic of TOPICS) expect(r.channel(topic)?.messageCount).toBe(BigInt(expected.filter((m) => m.topic === topic).length));
        // Time bounds (inclusive), across a chunk boundary.
        const lo = expected[Math.floor(expected.length / 3)]!.logTime;
        const hi = expected[Math.floor((2 * expected.length) / 3)]!.logTime;
        const inWindow = expected.filter((m) => m.logTime >= lo && m.logTime <= hi).map(wanted);
        expect(await all(r, { startNs: lo, endNs: hi })).toEqual(inWindow);
        expect(await all(r, { startNs: lo, endNs: hi, reverse: true })).toEqual([...inWindow].reverse());
        expect(seen((await r.first('/b', true))!)).toBe(wanted(expected.filter((m) => m.topic === '/b').at(-1)!));
      }
    });
  }

  it('reads only the chunk a seek lands in: one read of that chunk record, nothing else', async () => {
    const w = await writeMcap({ count: 1500, compression: 'zstd', padBytes: 300 });
    const chunks = await chunkIndexes(w.bytes);
    const cut = Number(chunks[5]!.chunkStartOffset) + 10;
    const source = countingSource(w.bytes.subarray(0, cut));
    await using r = await openMcap(source, { recover: true });
    const target = chunks[3]!;
    const at = w.messages.find((m) => m.logTime > target.messageStartTime && m.topic === '/a')!;
    source.reads.length = 0;
    const m = await r.messages(['/a'], { startNs: at.logTime }).next();
    expect(seen(m.value as { topic: string; logTimeNs: bigint; data: unknown })).toBe(wanted(at));
    expect(source.reads).toEqual([Number(target.chunkLength)]);
  });

  it('the scan reads each byte once, in bounded pieces, never the whole file at once', async () => {
    // About 10 MB, uncompressed, so pieces (4 MiB) are fewer than the file.
    const w = await writeMcap({ count: 30_000, padBytes: 300, chunkSize: 256 * 1024 });
    const cut = w.bytes.byteLength - 5000;
    const source = countingSource(w.bytes.subarray(0, cut));
    await using r = await openMcap(source, { recover: true });
    expect(r.truncated).toBe(true);
    const scanReads = source.reads.slice();
    // The indexed open's own reads come first (header, then the footer it does not find).
    expect(Math.max(...scanReads)).toBeLessThanOrEqual(4 * 1024 * 1024);
    expect(scanReads.reduce((a, b) => a + b, 0)).toBeLessThanOrEqual(cut + 1000);
    expect((await all(r)).length).toBe(w.messages.length);
  });

  it('a chunk that fails its CRC ends the scan there: the chunks before it play', async () => {
    const w = await writeMcap({ count: 1500, padBytes: 300 });
    const chunks = await chunkIndexes(w.bytes);
    const bytes = w.bytes.slice(0, Number(chunks[5]!.chunkStartOffset));
    // A byte of a message inside the third chunk (uncompressed: the CRC covers it).
    const at = Number(chunks[2]!.chunkStartOffset) + Math.floor(Number(chunks[2]!.chunkLength) / 2);
    bytes[at] = bytes[at]! ^ 0xff;
    await using r = await openMcap(bytesSource(bytes), { recover: true });
    expect(r.recovery!.reason).toMatch(new RegExp(`chunk record at offset ${chunks[2]!.chunkStartOffset} cannot be read: .*CRC`));
    expect(r.recovery!.stoppedAt).toBe(chunks[2]!.chunkStartOffset);
    expect(await all(r)).toEqual(w.messages.filter((m) => m.logTime <= chunks[1]!.messageEndTime).map(wanted));
  });

  it('zeros after the cut (what a file system leaves after a crash) end the scan like the cut', async () => {
    const w = await writeMcap({ count: 600, compression: 'zstd', padBytes: 300 });
    const chunks = await chunkIndexes(w.bytes);
    const cut = Number(chunks[2]!.chunkStartOffset) + 100;
    const bytes = new Uint8Array(cut + 65536);
    bytes.set(w.bytes.subarray(0, cut));
    await using r = await openMcap(bytesSource(bytes), { recover: true });
    // The cut chunk's length now fits the file: it is read whole, and does not decompress.
    expect(r.recovery!.reason).toMatch(new RegExp(`chunk record at offset ${chunks[2]!.chunkStartOffset} cannot be read`));
    expect(await all(r)).toEqual(w.messages.filter((m) => m.logTime <= chunks[1]!.messageEndTime).map(wanted));
  });

  it('a cut inside the header: unreadable even with recover; inside the first chunk: no channels, no messages', async () => {
    const w = await writeMcap({ count: 600, padBytes: 300 });
    const chunks = await chunkIndexes(w.bytes);
    for (const cut of [4, 12, 20]) {
      await expect(openMcap(bytesSource(w.bytes.subarray(0, cut)), { recover: true, name: 'x.mcap' })).rejects.toSatisfy(
        (e) => isRecordingError(e, 'unreadable') && /x\.mcap: .*scanning it: .*(magic|header)/.test((e as Error).message),
      );
    }
    await using r = await openMcap(bytesSource(w.bytes.subarray(0, Number(chunks[0]!.chunkStartOffset) + 50)), { recover: true });
    expect([r.truncated, r.channels.length, r.startNs, r.endNs]).toEqual([true, 0, undefined, undefined]);
    expect(await all(r)).toEqual([]);
  });

  it('a whole file opens by its index as before (truncated false, no scan)', async () => {
    const w = await writeMcap({ count: 300, compression: 'zstd' });
    await using r = await openMcap(bytesSource(w.bytes), { recover: true });
    expect([r.truncated, r.recovery]).toEqual([false, undefined]);
    expect(await all(r)).toEqual(w.messages.map(wanted));
  });
});

describe('openMcap({recover: true}): an unchunked recording', () => {
  it('cut short: the messages whose records are whole, as Foxglove’s stream reader reads them', async () => {
    const w = await writeMcap({ count: 2000, chunked: false, padBytes: 100 });
    const dataEnd = Number((await summaryOf(w.bytes)).dataEndOffset);
    for (const cut of [Math.floor(dataEnd / 3), Math.floor(dataEnd / 2) + 7, dataEnd - 50, dataEnd]) {
      const bytes = w.bytes.subarray(0, cut);
      const expected = await streamed(bytes);
      expect(expected.length).toBeGreaterThan(100);
      await using r = await openMcap(bytesSource(bytes), { recover: true });
      expect(r.truncated).toBe(true);
      expect(await all(r)).toEqual(expected);
      expect(await all(r, { reverse: true })).toEqual([...expected].reverse());
      expect(expected).toEqual(w.messages.slice(0, expected.length).map(wanted));
      const lo = w.messages[50]!.logTime;
      const hi = w.messages[90]!.logTime;
      expect(await all(r, { startNs: lo, endNs: hi })).toEqual(w.messages.slice(50, 91).map(wanted));
    }
  });

  it('whole, but its summary indexes no chunk: scanned to the footer (truncated false)', async () => {
    const w = await writeMcap({ count: 500, chunked: false });
    await using r = await openMcap(bytesSource(w.bytes), { recover: true });
    expect(r.truncated).toBe(false);
    expect(r.recovery!.complete).toBe(true);
    expect(await all(r)).toEqual(w.messages.map(wanted));
  });
});
