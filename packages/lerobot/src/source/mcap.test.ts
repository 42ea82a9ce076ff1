import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { JOINT_STATE_JSON_SCHEMA, jointState, mcapBytes, ms, RAW_IMAGE_JSON_SCHEMA, rawImage, type FixtureChannel } from './fixtures.js';
import { parseRawImage, Recording } from './mcap.js';
import { decodeRawImage } from './resample.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'lerobot-mcap-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const channels: FixtureChannel[] = [
  {
    topic: '/joint_states',
    schemaName: 'fleet.JointState',
    schema: JOINT_STATE_JSON_SCHEMA,
    messages: [0, 20, 40, 60].map((t) => ({ logTimeNs: ms(t), data: jointState(['j'], [t]) })),
  },
  { topic: '/camera/image', schemaName: 'foxglove.RawImage', schema: RAW_IMAGE_JSON_SCHEMA, messages: [10, 50].map((t) => ({ logTimeNs: ms(t), data: rawImage(4, 4, t) })) },
];

describe('Recording', () => {
  it('lists channels and reads topics in log-time order', async () => {
    const path = join(dir, 'r.mcap');
    await writeFile(path, await mcapBytes(channels, { chunkSize: 256 }));
    await using rec = await Recording.open(path);
    expect(rec.channels.map((c) => [c.topic, c.schemaName, c.schemaEncoding, c.messageEncoding, c.messageCount])).toEqual([
      ['/joint_states', 'fleet.JointState', 'jsonschema', 'json', 4n],
      ['/camera/image', 'foxglove.RawImage', 'jsonschema', 'json', 2n],
    ]);
    const seen: [string, bigint][] = [];
    for await (const m of rec.messages(['/joint_states', '/camera/image'])) seen.push([m.topic, m.logTimeNs]);
    expect(seen).toEqual([
      ['/joint_states', ms(0)],
      ['/camera/image', ms(10)],
      ['/joint_states', ms(20)],
      ['/joint_states', ms(40)],
      ['/camera/image', ms(50)],
      ['/joint_states', ms(60)],
    ]);
    expect((await rec.first('/joint_states', true))?.data).toMatchObject({ position: [60] });
  });

  it('a recording cut short by a crash (no summary) is corrupt_recording with the reader message', async () => {
    const whole = await mcapBytes(channels, { chunkSize: 256 });
    const path = join(dir, 'cut.mcap');
    await writeFile(path, whole.subarray(0, Math.floor(whole.length * 0.6)));
    const err = await Recording.open(path).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'corrupt_recording' });
    expect((err as Error).message).toMatch(/cut\.mcap: .+/);
  });

  it('a file that is not MCAP is corrupt_recording; a missing one is io', async () => {
    const path = join(dir, 'junk.mcap');
    await writeFile(path, Buffer.alloc(4096, 7));
    await expect(Recording.open(path)).rejects.toMatchObject({ code: 'corrupt_recording' });
    await expect(Recording.open(join(dir, 'none.mcap'))).rejects.toMatchObject({ code: 'io' });
  });

  it('a message that is not JSON is corrupt_recording naming the topic', async () => {
    const path = join(dir, 'bad.mcap');
    await writeFile(path, await mcapBytes([{ topic: '/joint_states', schemaName: 'x', messages: [{ logTimeNs: 0n, data: '{not json' }] }]));
    await using rec = await Recording.open(path);
    const read = async () => {
      for await (const _ of rec.messages(['/joint_states'])) void _;
    };
    await expect(read()).rejects.toThrow(/corrupt_recording: .*\/joint_states/);
  });
});

describe('parseRawImage', () => {
  const decoder = new TextDecoder();
  const bytes = (v: unknown) => new TextEncoder().encode(JSON.stringify(v));
  it('cuts the base64 data out as bytes and parses the rest; the decoded image is the same as from the whole JSON', () => {
    const msg = { timestamp: { sec: 1, nsec: 2 }, frame_id: 'camera', width: 2, height: 1, encoding: 'rgb8', step: 6, data: Buffer.from([1, 2, 3, 4, 5, 6]).toString('base64') };
    const fast = parseRawImage(bytes(msg), decoder) as Record<string, unknown>;
    expect({ ...fast, data: undefined }).toEqual({ ...msg, data: undefined });
    expect(decodeRawImage(fast, 'x').pixels).toEqual(decodeRawImage(msg, 'x').pixels);
  });
  it('parses the whole message when data is not a plain string (an escape, no data key, data not last)', () => {
    for (const msg of [{ width: 1, data: 'a\\/b' }, { width: 1 }, { data: 'QUJD', width: 1, note: 'x' }]) {
      const parsed = parseRawImage(bytes(msg), decoder);
      expect(typeof (parsed as { data?: unknown }).data === 'object' ? { ...(parsed as object), data: msg.data } : parsed).toEqual(msg);
    }
  });
});
