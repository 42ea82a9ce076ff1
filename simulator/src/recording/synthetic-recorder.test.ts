import { mkdir, open, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { McapIndexedReader, type IReadable } from '@mcap/core';
import { afterEach, describe, expect, it } from 'vitest';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { ManualScheduler } from '@fleet/agent';
import { ManualClock } from '@fleet/protocol';
import {
  CAMERA_TOPIC,
  JOINT_COMMANDS_TOPIC,
  JOINT_STATES_TOPIC,
  planRates,
  SYNTHETIC_FILE,
  SyntheticRecorder,
  WRIST_CAMERA_TOPIC,
  type SyntheticRecorderOptions,
} from './synthetic-recorder.js';
import { JOINT_NAMES } from './synthetic-signals.js';

const tempDirs: string[] = [];
async function makeTempDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'fs-rec-'));
  tempDirs.push(dir);
  return dir;
}
afterEach(async () => {
  for (const dir of tempDirs.splice(0)) await rm(dir, { recursive: true, force: true });
});

/** Random access to a file, as the indexed reader wants it. */
async function fileReadable(path: string): Promise<IReadable & { close(): Promise<void> }> {
  const fh = await open(path, 'r');
  const size = BigInt((await fh.stat()).size);
  return {
    size: async () => size,
    read: async (offset, length) => {
      const buf = Buffer.alloc(Number(length));
      await fh.read(buf, 0, buf.length, Number(offset));
      return buf;
    },
    close: () => fh.close(),
  };
}

/** Records `ms` of manual time at `bytesPerSecond` and stops; returns the episode file's path. */
async function recordEpisode(
  bytesPerSecond: number,
  ms: number,
  extra: Partial<SyntheticRecorderOptions> = {},
  episodeId = 'ep_test',
): Promise<{ path: string; messageCount: number | null }> {
  const dir = join(await makeTempDir(), 'episodes', episodeId);
  await mkdir(dir, { recursive: true });
  const clock = new ManualClock();
  const scheduler = new ManualScheduler(clock);
  const recorder = new SyntheticRecorder({ clock, scheduler, format: 'json', bytesPerSecond, chunkIntervalMs: 100, mcapChunkBytes: 64 * 1024, ...extra });
  const handle = await recorder.start(dir, { robotId: 'rb_test', episodeId, startedAt: clock.now() });
  for (let done = 0; done < ms; done += 100) {
    scheduler.advance(100);
    await recorder.settled();
  }
  const recorded = await handle.stop();
  expect(recorded.files).toEqual([SYNTHETIC_FILE]);
  return { path: join(dir, SYNTHETIC_FILE), messageCount: recorded.messageCount };
}

describe('SyntheticRecorder, json format: an MCAP file Foxglove can open', () => {
  it('has joint states, joint commands and camera frames with JSON schemas, chunks, indexes and a summary, and its messages decode', async () => {
    const { path, messageCount } = await recordEpisode(64 * 1024, 3000);
    const file = await fileReadable(path);
    try {
      const reader = await McapIndexedReader.Initialize({ readable: file });
      expect(reader.chunkIndexes.length).toBeGreaterThan(1);
      expect(reader.statistics).toBeDefined();
      expect(reader.summaryOffsetsByOpcode.size).toBeGreaterThan(0);

      const channels = [...reader.channelsById.values()];
      expect(channels.map((c) => c.topic).sort()).toEqual([CAMERA_TOPIC, JOINT_COMMANDS_TOPIC, JOINT_STATES_TOPIC]);
      for (const c of channels) {
        expect(c.messageEncoding).toBe('json');
        expect(c.metadata.get('episode_id')).toBe('ep_test');
        const schema = reader.schemasById.get(c.schemaId)!;
        expect(schema.encoding).toBe('jsonschema');
        expect(schema.name).toBe({ [CAMERA_TOPIC]: 'foxglove.RawImage', [JOINT_STATES_TOPIC]: 'fleet.JointState', [JOINT_COMMANDS_TOPIC]: 'fleet.JointCommand' }[c.topic]);
        expect(JSON.parse(new TextDecoder().decode(schema.data))).toMatchObject({ title: schema.name, type: 'object' });
      }
      const byTopic = (topic: string) => channels.find((c) => c.topic === topic)!.id;

      // 3 s at 64 KiB/s: joint states and commands at 50 Hz (t = 0 … 3 s), frames at 5 Hz.
      const plan = planRates(64 * 1024, 512 * 1024);
      expect(plan).toMatchObject({ jointHz: 50, frameHz: 5 });
      const counts = reader.statistics!.channelMessageCounts;
      expect(counts.get(byTopic(JOINT_STATES_TOPIC))).toBe(151n);
      expect(counts.get(byTopic(JOINT_COMMANDS_TOPIC))).toBe(151n);
      expect(counts.get(byTopic(CAMERA_TOPIC))).toBe(15n);
      expect(reader.statistics!.messageCount).toBe(BigInt(messageCount!));

      let joints = 0;
      let commands = 0;
      let frames = 0;
      let lastTime = 0n;
      for await (const m of reader.readMessages({ validateCrcs: true })) {
        expect(m.logTime).toBeGreaterThanOrEqual(lastTime);
        lastTime = m.logTime;
        const body = JSON.parse(new TextDecoder().decode(m.data)) as Record<string, unknown>;
        expect(BigInt((body.timestamp as { sec: number }).sec) * 1_000_000_000n + BigInt((body.timestamp as { nsec: number }).nsec)).toBe(m.logTime);
        if (m.channelId === byTopic(JOINT_STATES_TOPIC)) {
          joints += 1;
          expect(body.name).toEqual(JOINT_NAMES);
          for (const k of ['position', 'velocity', 'effort']) {
            expect(body[k]).toHaveLength(JOINT_NAMES.length);
            expect((body[k] as unknown[]).every((v) => typeof v === 'number' && Number.isFinite(v))).toBe(true);
          }
        } else if (m.channelId === byTopic(JOINT_COMMANDS_TOPIC)) {
          commands += 1;
          expect(body.name).toEqual(JOINT_NAMES);
          expect((body.position as unknown[]).every((v) => typeof v === 'number' && Number.isFinite(v))).toBe(true);
        } else {
          frames += 1;
          const f = body as { width: number; height: number; step: number; encoding: string; data: string };
          expect(f.encoding).toBe('rgb8');
          expect(f.step).toBe(f.width * 3);
          expect(Buffer.from(f.data, 'base64').length).toBe(f.step * f.height);
        }
      }
      expect(joints).toBe(151);
      expect(commands).toBe(151);
      expect(frames).toBe(15);
    } finally {
      await file.close();
    }
  });

  for (const bytesPerSecond of [4096, 64 * 1024, 2 * 1024 * 1024]) {
    it(`keeps the file close to ${bytesPerSecond} bytes a second`, async () => {
      const { path } = await recordEpisode(bytesPerSecond, 2000);
      const size = (await stat(path)).size;
      // Payload is within a frame's rounding of the rate; MCAP framing (indexes, summary) adds a little.
      expect(size).toBeGreaterThan(bytesPerSecond * 2 * 0.97);
      expect(size).toBeLessThan(bytesPerSecond * 2 * 1.1 + 8 * 1024);
    });
  }
});

interface Decoded {
  topic: string;
  schema: string;
  logTime: bigint;
  body: Record<string, unknown>;
}

/** Every message of an episode file, decoded, in log-time order. */
async function readAll(path: string): Promise<Decoded[]> {
  const file = await fileReadable(path);
  try {
    const reader = await McapIndexedReader.Initialize({ readable: file });
    const out: Decoded[] = [];
    for await (const m of reader.readMessages({ validateCrcs: true })) {
      const channel = reader.channelsById.get(m.channelId)!;
      out.push({ topic: channel.topic, schema: reader.schemasById.get(channel.schemaId)!.name, logTime: m.logTime, body: JSON.parse(new TextDecoder().decode(m.data)) as Record<string, unknown> });
    }
    return out;
  } finally {
    await file.close();
  }
}

type Frame = { width: number; height: number; step: number; encoding: string; frame_id: string; data: string };
const on = (all: Decoded[], topic: string) => all.filter((m) => m.topic === topic);
const positions = (all: Decoded[], topic: string) => on(all, topic).map((m) => m.body.position as number[]);

describe('SyntheticRecorder: commands, cameras and rates for training data', () => {
  it('writes two cameras of exactly the asked size and rate, and as many commands as joint states', async () => {
    const { path, messageCount } = await recordEpisode(64 * 1024, 2000, { cameras: 2, cameraWidth: 160, cameraHeight: 120, cameraHz: 10, stateHz: 30 });
    const all = await readAll(path);
    expect(all.length).toBe(messageCount);
    expect(new Map(all.map((m) => [m.topic, m.schema]))).toEqual(
      new Map([
        [JOINT_STATES_TOPIC, 'fleet.JointState'],
        [JOINT_COMMANDS_TOPIC, 'fleet.JointCommand'],
        [CAMERA_TOPIC, 'foxglove.RawImage'],
        [WRIST_CAMERA_TOPIC, 'foxglove.RawImage'],
      ]),
    );
    // 2 s: samples at t = 0 … 2 s at 30 Hz, frames at 0.1 … 2 s at 10 Hz.
    expect(on(all, JOINT_STATES_TOPIC)).toHaveLength(61);
    expect(on(all, JOINT_COMMANDS_TOPIC)).toHaveLength(61);
    for (const m of on(all, JOINT_COMMANDS_TOPIC)) {
      expect(m.body.name).toEqual(JOINT_NAMES);
      expect(m.body.position).toHaveLength(JOINT_NAMES.length);
    }
    expect(on(all, JOINT_STATES_TOPIC).map((m) => m.logTime)).toEqual(on(all, JOINT_COMMANDS_TOPIC).map((m) => m.logTime));
    for (const topic of [CAMERA_TOPIC, WRIST_CAMERA_TOPIC]) {
      const frames = on(all, topic);
      expect(frames).toHaveLength(20);
      frames.forEach((m, i) => {
        expect(m.logTime - frames[0]!.logTime).toBe(BigInt(i) * 100_000_000n);
        const f = m.body as Frame;
        expect(f).toMatchObject({ width: 160, height: 120, step: 480, encoding: 'rgb8' });
        expect(Buffer.from(f.data, 'base64').length).toBe(160 * 120 * 3);
      });
    }
    // The two cameras see different pictures at the same instant.
    const front = on(all, CAMERA_TOPIC).map((m) => (m.body as Frame).data);
    const wrist = on(all, WRIST_CAMERA_TOPIC).map((m) => (m.body as Frame).data);
    expect(front.filter((f, i) => f !== wrist[i])).toHaveLength(front.length);
    expect((on(all, CAMERA_TOPIC)[0]!.body as Frame).frame_id).not.toBe((on(all, WRIST_CAMERA_TOPIC)[0]!.body as Frame).frame_id);
  });

  it('moves the picture from frame to frame: the scene, not noise, changes', async () => {
    const { path } = await recordEpisode(64 * 1024, 3000, { cameraWidth: 64, cameraHz: 5 });
    const frames = on(await readAll(path), CAMERA_TOPIC).map((m) => Buffer.from((m.body as Frame).data, 'base64'));
    expect(frames).toHaveLength(15);
    expect(frames[0]!.length).toBe(64 * 48 * 3);
    // Every pair of consecutive frames differs, but only in part of the picture (the arm and the cube).
    for (let i = 1; i < frames.length; i++) {
      let changed = 0;
      for (let p = 0; p < frames[i]!.length; p += 3) if (frames[i]!.compare(frames[i - 1]!, p, p + 3, p, p + 3) !== 0) changed += 1;
      expect(changed).toBeGreaterThan(0);
      expect(changed).toBeLessThan(64 * 48 * 0.5);
    }
  });

  it('has the measured joints follow the commanded ones with a small lag', async () => {
    const { path } = await recordEpisode(64 * 1024, 6000, { stateHz: 50 });
    const all = await readAll(path);
    const command = positions(all, JOINT_COMMANDS_TOPIC);
    const state = positions(all, JOINT_STATES_TOPIC);
    expect(command).toHaveLength(301);
    expect(state).toHaveLength(301);
    const error = (lag: number) => {
      let sum = 0;
      for (let i = 10; i < state.length; i++) for (let j = 0; j < JOINT_NAMES.length; j++) sum += Math.abs(state[i]![j]! - command[i - lag]![j]!);
      return sum / ((state.length - 10) * JOINT_NAMES.length);
    };
    // Close to the command (bounded, never far off) and closer still to the command of ~60 ms ago.
    const worst = Math.max(...state.map((s, i) => Math.max(...s.map((p, j) => Math.abs(p - command[i]![j]!)))));
    expect(worst).toBeLessThan(0.15);
    expect(error(0)).toBeGreaterThan(0);
    expect(error(3)).toBeLessThan(error(0) / 2);
    // The arm moves: the commands span a real reach, not a standstill.
    const lift = command.map((c) => c[1]!);
    expect(Math.max(...lift) - Math.min(...lift)).toBeGreaterThan(0.2);
  });

  it('makes the motion depend on the episode, and repeats it exactly for the same episode', async () => {
    const opts = { stateHz: 20, cameraWidth: 32, cameraHz: 2 };
    const a = await readAll((await recordEpisode(64 * 1024, 3000, opts, 'ep_one')).path);
    const again = await readAll((await recordEpisode(64 * 1024, 3000, opts, 'ep_one')).path);
    const b = await readAll((await recordEpisode(64 * 1024, 3000, opts, 'ep_two')).path);
    expect(positions(again, JOINT_STATES_TOPIC)).toEqual(positions(a, JOINT_STATES_TOPIC));
    expect(on(again, CAMERA_TOPIC).map((m) => (m.body as Frame).data)).toEqual(on(a, CAMERA_TOPIC).map((m) => (m.body as Frame).data));
    expect(positions(b, JOINT_STATES_TOPIC)).not.toEqual(positions(a, JOINT_STATES_TOPIC));
  });

  it('ends a stop between two frames with a shorter last frame only when the byte rate sizes the frames', async () => {
    const sized = on(await readAll((await recordEpisode(64 * 1024, 300)).path), CAMERA_TOPIC).map((m) => m.body as Frame);
    expect(sized).toHaveLength(2);
    expect(sized[1]!.width).toBe(sized[0]!.width);
    expect(sized[1]!.height).toBeLessThan(sized[0]!.height);
    expect(Buffer.from(sized[1]!.data, 'base64').length).toBe(sized[1]!.width * sized[1]!.height * 3);
    const fixed = on(await readAll((await recordEpisode(64 * 1024, 300, { cameraWidth: 64, cameraHz: 5 })).path), CAMERA_TOPIC).map((m) => m.body as Frame);
    expect(fixed.map((f) => [f.width, f.height])).toEqual([[64, 48]]);
  });

  it('keeps the byte rate with two cameras sized by it, and refuses options out of bounds', async () => {
    const { path } = await recordEpisode(64 * 1024, 2000, { cameras: 2 });
    const size = (await stat(path)).size;
    expect(size).toBeGreaterThan(64 * 1024 * 2 * 0.97);
    expect(size).toBeLessThan(64 * 1024 * 2 * 1.1 + 8 * 1024);
    const clock = new ManualClock();
    const base = { clock, scheduler: new ManualScheduler(clock), format: 'json' as const, bytesPerSecond: 4096, chunkIntervalMs: 100 };
    for (const bad of [{ cameras: 3 }, { cameraWidth: 8 }, { cameraHeight: 2000 }, { cameraHz: 0 }, { cameraHz: 121 }, { stateHz: 501 }, { stateHz: 1.5 }]) {
      expect(() => new SyntheticRecorder({ ...base, ...(bad as Partial<SyntheticRecorderOptions>) })).toThrow(RangeError);
    }
    expect(new SyntheticRecorder({ ...base, cameraHeight: 240 }).plan).toMatchObject({ cameraHz: 10, cameras: [{ width: 320, height: 240 }] });
  });
});
