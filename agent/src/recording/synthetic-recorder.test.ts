import { mkdir, open, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { McapIndexedReader, type IReadable } from '@mcap/core';
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '@fleet/protocol';
import { makeTempDir, removeTempDirs } from '../test-support.js';
import { ManualScheduler } from '../time.js';
import { CAMERA_TOPIC, JOINT_STATES_TOPIC, planRates, SYNTHETIC_FILE, SyntheticRecorder } from './synthetic-recorder.js';
import { JOINT_NAMES } from './synthetic-signals.js';

afterEach(removeTempDirs);

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
async function recordEpisode(bytesPerSecond: number, ms: number): Promise<{ path: string; messageCount: number | null }> {
  const dir = join(await makeTempDir(), 'episodes', 'ep_test');
  await mkdir(dir, { recursive: true });
  const clock = new ManualClock();
  const scheduler = new ManualScheduler(clock);
  const recorder = new SyntheticRecorder({ clock, scheduler, bytesPerSecond, chunkIntervalMs: 100, mcapChunkBytes: 64 * 1024 });
  const handle = await recorder.start(dir, { robotId: 'rb_test', episodeId: 'ep_test', startedAt: clock.now() });
  for (let done = 0; done < ms; done += 100) {
    scheduler.advance(100);
    await recorder.settled();
  }
  const recorded = await handle.stop();
  expect(recorded.files).toEqual([SYNTHETIC_FILE]);
  return { path: join(dir, SYNTHETIC_FILE), messageCount: recorded.messageCount };
}

describe('SyntheticRecorder: an MCAP file Foxglove can open', () => {
  it('has joint states and camera frames with JSON schemas, chunks, indexes and a summary, and its messages decode', async () => {
    const { path, messageCount } = await recordEpisode(64 * 1024, 3000);
    const file = await fileReadable(path);
    try {
      const reader = await McapIndexedReader.Initialize({ readable: file });
      expect(reader.chunkIndexes.length).toBeGreaterThan(1);
      expect(reader.statistics).toBeDefined();
      expect(reader.summaryOffsetsByOpcode.size).toBeGreaterThan(0);

      const channels = [...reader.channelsById.values()];
      expect(channels.map((c) => c.topic).sort()).toEqual([CAMERA_TOPIC, JOINT_STATES_TOPIC]);
      for (const c of channels) {
        expect(c.messageEncoding).toBe('json');
        expect(c.metadata.get('episode_id')).toBe('ep_test');
        const schema = reader.schemasById.get(c.schemaId)!;
        expect(schema.encoding).toBe('jsonschema');
        expect(schema.name).toBe(c.topic === CAMERA_TOPIC ? 'foxglove.RawImage' : 'fleet.JointState');
        expect(JSON.parse(new TextDecoder().decode(schema.data))).toMatchObject({ title: schema.name, type: 'object' });
      }
      const byTopic = (topic: string) => channels.find((c) => c.topic === topic)!.id;

      // 3 s at 64 KiB/s: joint states at 50 Hz (t = 0 … 3 s), frames at 5 Hz.
      const plan = planRates(64 * 1024, 512 * 1024);
      expect(plan).toMatchObject({ jointHz: 50, frameHz: 5 });
      const counts = reader.statistics!.channelMessageCounts;
      expect(counts.get(byTopic(JOINT_STATES_TOPIC))).toBe(151n);
      expect(counts.get(byTopic(CAMERA_TOPIC))).toBe(15n);
      expect(reader.statistics!.messageCount).toBe(BigInt(messageCount!));

      let joints = 0;
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
        } else {
          frames += 1;
          const f = body as { width: number; height: number; step: number; encoding: string; data: string };
          expect(f.encoding).toBe('rgb8');
          expect(f.step).toBe(f.width * 3);
          expect(Buffer.from(f.data, 'base64').length).toBe(f.step * f.height);
        }
      }
      expect(joints).toBe(151);
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
