import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { JOINT_STATE_JSON_SCHEMA, jointState, mcapBytes, ms, RAW_IMAGE_JSON_SCHEMA, rawImage, type FixtureChannel } from './fixtures.js';
import { messageTimeNs, Recording } from './mcap.js';

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

describe('messageTimeNs (the stamp rule)', () => {
  const ros = { header: { stamp: { sec: 2, nanosec: 5 }, frame_id: 'f' } };
  const foxglove = { timestamp: { seconds: 3, nanos: 7 } };
  it('header stamps by default when there is a header; log time otherwise or with stamp: log', () => {
    expect(messageTimeNs(ros, 99n, undefined, 'x')).toBe(2_000_000_005n);
    expect(messageTimeNs(foxglove, 99n, undefined, 'x')).toBe(99n);
    expect(messageTimeNs(ros, 99n, 'log', 'x')).toBe(99n);
    expect(messageTimeNs(foxglove, 99n, 'header', 'x')).toBe(3_000_000_007n);
    expect(() => messageTimeNs({ a: 1 }, 99n, 'header', '/t at 99 ns')).toThrow(/corrupt_recording: \/t at 99 ns: the message has no header.stamp/);
  });
});
