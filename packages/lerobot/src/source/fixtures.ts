import { writeFile } from 'node:fs/promises';
import { McapWriter } from '@mcap/core';

/**
 * Small MCAP recordings for the source side's tests, written the way the agent's synthetic
 * recorder writes them (JSON messages with JSON Schemas, chunked and indexed). Test-only.
 */

export interface FixtureChannel {
  topic: string;
  schemaName: string;
  /** A JSON Schema (written with encoding `jsonschema`); omitted: a schemaless channel. */
  schema?: object;
  messageEncoding?: string;
  messages: { logTimeNs: bigint; data: unknown }[];
}

export const JOINT_STATE_JSON_SCHEMA = {
  type: 'object',
  properties: {
    timestamp: { type: 'object' },
    name: { type: 'array', items: { type: 'string' } },
    position: { type: 'array', items: { type: 'number' } },
    velocity: { type: 'array', items: { type: 'number' } },
    effort: { type: 'array', items: { type: 'number' } },
  },
};

export const RAW_IMAGE_JSON_SCHEMA = {
  type: 'object',
  properties: {
    timestamp: { type: 'object' },
    frame_id: { type: 'string' },
    width: { type: 'integer' },
    height: { type: 'integer' },
    encoding: { type: 'string' },
    step: { type: 'integer' },
    data: { type: 'string' },
  },
};

/** The bytes of an MCAP file with these channels; messages interleaved by log time. */
export async function mcapBytes(channels: readonly FixtureChannel[], opts: { chunkSize?: number } = {}): Promise<Buffer> {
  const parts: Uint8Array[] = [];
  let position = 0n;
  const writer = new McapWriter({
    writable: {
      write: async (buf: Uint8Array) => {
        parts.push(buf.slice());
        position += BigInt(buf.byteLength);
      },
      position: () => position,
    },
    chunkSize: opts.chunkSize ?? 4096,
  });
  await writer.start({ profile: '', library: 'lerobot source fixtures' });
  const all: { channelId: number; logTimeNs: bigint; data: unknown }[] = [];
  for (const c of channels) {
    const schemaId =
      c.schema === undefined ? 0 : await writer.registerSchema({ name: c.schemaName, encoding: 'jsonschema', data: new TextEncoder().encode(JSON.stringify(c.schema)) });
    const channelId = await writer.registerChannel({ topic: c.topic, messageEncoding: c.messageEncoding ?? 'json', schemaId, metadata: new Map() });
    for (const m of c.messages) all.push({ channelId, ...m });
  }
  all.sort((a, b) => (a.logTimeNs < b.logTimeNs ? -1 : a.logTimeNs > b.logTimeNs ? 1 : 0));
  const seq = new Map<number, number>();
  for (const m of all) {
    const sequence = seq.get(m.channelId) ?? 0;
    seq.set(m.channelId, sequence + 1);
    const data = typeof m.data === 'string' ? new TextEncoder().encode(m.data) : new TextEncoder().encode(JSON.stringify(m.data));
    await writer.addMessage({ channelId: m.channelId, sequence, logTime: m.logTimeNs, publishTime: m.logTimeNs, data });
  }
  await writer.end();
  return Buffer.concat(parts);
}

export async function writeMcap(path: string, channels: readonly FixtureChannel[], opts: { chunkSize?: number } = {}): Promise<void> {
  await writeFile(path, await mcapBytes(channels, opts));
}

/** `ms` as ns. */
export const ms = (n: number): bigint => BigInt(Math.round(n * 1_000_000));

export function jointState(names: readonly string[], position: readonly number[], velocity: readonly number[] = position.map(() => 0)) {
  return { timestamp: { sec: 0, nsec: 0 }, name: names, position, velocity, effort: position.map(() => 0) };
}

/** A `foxglove.RawImage` of `width x height` whose every pixel is `[v, v, v]`, rows padded to `step`. */
export function rawImage(width: number, height: number, v: number, opts: { step?: number; encoding?: string; pixels?: Uint8Array } = {}) {
  const step = opts.step ?? width * 3;
  const buf = Buffer.alloc(step * height, 0xee);
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width * 3; x++) buf[y * step + x] = opts.pixels !== undefined ? opts.pixels[y * width * 3 + x]! : v;
  }
  return { timestamp: { sec: 0, nsec: 0 }, frame_id: 'cam', width, height, encoding: opts.encoding ?? 'rgb8', step, data: buf.toString('base64') };
}
