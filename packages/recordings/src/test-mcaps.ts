/**
 * MCAP files for this package's tests (not built: tsconfig excludes src/test-*.ts), written by
 * @mcap/core's McapWriter: chunked (zstd by Foxglove's wasm-zstd, lz4, or none) or not, with
 * JSON messages of a known size on a few topics at 10 ms steps.
 */
import lz4 from '@foxglove/wasm-lz4';
import zstd from '@foxglove/wasm-zstd';
import { McapIndexedReader, McapWriter } from '@mcap/core';
import { loadDecompressHandlers } from '@mcap/support';

export type Compression = 'zstd' | 'lz4' | '';

export interface WrittenMessage {
  topic: string;
  logTime: bigint;
  text: string;
}

export interface WrittenMcap {
  bytes: Uint8Array;
  messages: WrittenMessage[];
}

export const T0 = 1_700_000_000_000_000_000n;
export const STEP = 10_000_000n;

/**
 * An LZ4 frame (the format MCAP's `lz4` means) of stored blocks: valid for any LZ4 frame
 * decoder, which checks its header checksum; no LZ4 compressor is needed to write one.
 */
export function lz4StoredFrame(data: Uint8Array): Uint8Array {
  // Magic, FLG 0x60 (version 1, independent blocks, no checksums), BD 0x40 (64 KiB blocks), header checksum.
  const parts: Uint8Array[] = [Uint8Array.of(0x04, 0x22, 0x4d, 0x18, 0x60, 0x40, 0x82)];
  for (let o = 0; o < data.byteLength; o += 65536) {
    const piece = data.subarray(o, o + 65536);
    const size = new Uint8Array(4);
    // The high bit: a stored (uncompressed) block.
    new DataView(size.buffer).setUint32(0, (piece.byteLength | 0x80000000) >>> 0, true);
    parts.push(size, piece);
  }
  parts.push(new Uint8Array(4));
  return Buffer.concat(parts);
}

/** Deterministic filler that zstd cannot squeeze to nothing (so chunks have real sizes). */
function filler(seed: number, n: number): string {
  let x = seed * 2654435761 + 1;
  let s = '';
  for (let i = 0; i < n; i++) {
    x = (x * 1103515245 + 12345) >>> 0;
    s += String.fromCharCode(97 + (x >>> 16) % 26);
  }
  return s;
}

/** An MCAP writer's `writable` that keeps what is written in memory; `bytes()` is all of it so far. */
export function memoryWritable(): { writable: { write(b: Uint8Array): Promise<void>; position(): bigint }; bytes(): Buffer } {
  const parts: Uint8Array[] = [];
  let position = 0n;
  return {
    writable: {
      write: async (b) => {
        parts.push(b.slice());
        position += BigInt(b.byteLength);
      },
      position: () => position,
    },
    bytes: () => Buffer.concat(parts),
  };
}

export async function writeMcap(opts: { count: number; topics?: string[]; compression?: Compression; chunked?: boolean; chunkSize?: number; padBytes?: number }): Promise<WrittenMcap> {
  const topics = opts.topics ?? ['/a', '/b', '/c'];
  const compression = opts.compression ?? '';
  await zstd.isLoaded;
  await lz4.isLoaded;
  const out = memoryWritable();
  const w = new McapWriter({
    writable: out.writable,
    useChunks: opts.chunked ?? true,
    chunkSize: opts.chunkSize ?? 64 * 1024,
    ...(compression === 'zstd'
      ? { compressChunk: (data: Uint8Array) => ({ compression: 'zstd', compressedData: zstd.compress(data, 3) }) }
      : compression === 'lz4'
        ? { compressChunk: (data: Uint8Array) => ({ compression: 'lz4', compressedData: lz4StoredFrame(data) }) }
        : {}),
  });
  await w.start({ profile: '', library: 'fleet recordings tests' });
  const ids: number[] = [];
  for (const topic of topics) {
    const schemaId = await w.registerSchema({ name: `test${topic.replace(/\//g, '.')}`, encoding: 'jsonschema', data: new TextEncoder().encode('{"type":"object"}') });
    ids.push(await w.registerChannel({ topic, messageEncoding: 'json', schemaId, metadata: new Map() }));
  }
  const messages: WrittenMessage[] = [];
  for (let i = 0; i < opts.count; i++) {
    const k = i % topics.length;
    const logTime = T0 + BigInt(i) * STEP;
    const text = JSON.stringify({ i, pad: filler(i, opts.padBytes ?? 200) });
    await w.addMessage({ channelId: ids[k]!, sequence: i, logTime, publishTime: logTime, data: new TextEncoder().encode(text) });
    messages.push({ topic: topics[k]!, logTime, text });
  }
  await w.end();
  return { bytes: out.bytes(), messages };
}

/** The summary of a whole file, by Foxglove's indexed reader: its chunk indexes (where each chunk is, its time span) and where its data section ends (`dataEndOffset`). */
export async function summaryOf(bytes: Uint8Array): Promise<McapIndexedReader> {
  const reader = await McapIndexedReader.Initialize({
    readable: { size: async () => BigInt(bytes.byteLength), read: async (o, n) => bytes.subarray(Number(o), Number(o + n)) },
    decompressHandlers: await loadDecompressHandlers(),
  });
  return reader;
}

export async function chunkIndexes(bytes: Uint8Array) {
  return (await summaryOf(bytes)).chunkIndexes;
}
