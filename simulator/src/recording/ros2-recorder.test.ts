/**
 * The synthetic recorder's `ros2` format, read back with Foxglove's libraries (the MCAP reader,
 * the ros2msg parser and the CDR reader) and the YAML parser: a rosbag2 directory whose
 * metadata.yaml agrees with its MCAP. test/simulator-ros2-recording.test.ts reads the same bags
 * with Python's rosbags and mcap-ros2-support.
 */
import { mkdir, mkdtemp, open, readdir, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { McapIndexedReader, type IReadable } from '@mcap/core';
import { parse as parseMessageDefinition } from '@foxglove/rosmsg';
import { MessageReader } from '@foxglove/rosmsg2-serialization';
import zstd from '@foxglove/wasm-zstd';
import sharp from 'sharp';
import { parse as parseYaml } from 'yaml';
import { afterEach, describe, expect, it } from 'vitest';
import { ManualScheduler } from '@fleet/agent';
import { ManualClock } from '@fleet/protocol';
import { JOINT_NAMES } from './synthetic-signals.js';
import {
  createSyntheticRecorder,
  ROS2_BAG_FILES,
  ROS2_FRONT_COMPRESSED_TOPIC,
  ROS2_FRONT_RAW_TOPIC,
  ROS2_JOINT_COMMANDS_TOPIC,
  ROS2_JOINT_STATES_TOPIC,
  ROS2_WRIST_COMPRESSED_TOPIC,
  SyntheticRecorder,
  type SyntheticRecorderOptions,
} from './synthetic-recorder.js';

const tempDirs: string[] = [];
afterEach(async () => {
  for (const dir of tempDirs.splice(0)) await rm(dir, { recursive: true, force: true });
});

/** Records `ms` of manual time into a fresh episode directory; returns it and what stop said. */
async function recordBag(ms: number, extra: Partial<SyntheticRecorderOptions> = {}, episodeId = 'ep_ros2') {
  const root = await mkdtemp(join(tmpdir(), 'fs-ros2-'));
  tempDirs.push(root);
  const dir = join(root, episodeId);
  await mkdir(dir);
  const clock = new ManualClock(Date.UTC(2026, 2, 1, 8, 0, 0, 250));
  const scheduler = new ManualScheduler(clock);
  const recorder = new SyntheticRecorder({ clock, scheduler, bytesPerSecond: 64 * 1024, chunkIntervalMs: 100, mcapChunkBytes: 32 * 1024, ...extra });
  const handle = await recorder.start(dir, { robotId: 'rb_test', episodeId, startedAt: clock.now() });
  for (let done = 0; done < ms; done += 100) {
    scheduler.advance(100);
    await recorder.settled();
  }
  return { dir, recorder, recorded: await handle.stop(), startedAt: Date.UTC(2026, 2, 1, 8, 0, 0, 250) };
}

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

interface Decoded {
  topic: string;
  type: string;
  logTime: bigint;
  publishTime: bigint;
  body: Record<string, unknown>;
}

/** The bag's MCAP, decoded by each channel's schema: the reader a ROS 2 tool in JavaScript would use. */
async function readBag(dir: string) {
  await zstd.isLoaded;
  const file = await fileReadable(join(dir, 'bag', 'bag_0.mcap'));
  try {
    const reader = await McapIndexedReader.Initialize({ readable: file, decompressHandlers: { zstd: (data, size) => zstd.decompress(data, Number(size)) } });
    const readers = new Map<number, MessageReader>();
    for (const channel of reader.channelsById.values()) {
      const schema = reader.schemasById.get(channel.schemaId)!;
      readers.set(channel.id, new MessageReader(parseMessageDefinition(new TextDecoder().decode(schema.data), { ros2: true })));
    }
    const messages: Decoded[] = [];
    for await (const m of reader.readMessages({ validateCrcs: true })) {
      const channel = reader.channelsById.get(m.channelId)!;
      messages.push({
        topic: channel.topic,
        type: reader.schemasById.get(channel.schemaId)!.name,
        logTime: m.logTime,
        publishTime: m.publishTime,
        body: readers.get(m.channelId)!.readMessage(m.data),
      });
    }
    return { reader, messages };
  } finally {
    await file.close();
  }
}

const on = (all: Decoded[], topic: string) => all.filter((m) => m.topic === topic);
type Stamp = { sec: number; nanosec: number };
const stampNs = (body: Record<string, unknown>) => {
  const stamp = (body.header as { stamp: Stamp }).stamp;
  return BigInt(stamp.sec) * 1_000_000_000n + BigInt(stamp.nanosec);
};

describe('SyntheticRecorder, ros2 format: a rosbag2 directory as ros2 bag record --storage mcap writes it', () => {
  it('writes bag/bag_0.mcap (ros2 profile, ros2msg schemas, cdr channels with QoS, zstd chunks) and bag/metadata.yaml', async () => {
    const { dir, recorded, startedAt } = await recordBag(3000);
    expect(recorded.files).toEqual([...ROS2_BAG_FILES]);
    expect(recorded.files).toEqual(['bag/bag_0.mcap', 'bag/metadata.yaml']);
    expect((await readdir(join(dir, 'bag'))).sort()).toEqual(['bag_0.mcap', 'metadata.yaml']);

    const { reader, messages } = await readBag(dir);
    expect(reader.header.profile).toBe('ros2');
    expect(reader.chunkIndexes.length).toBeGreaterThan(1);
    expect(new Set(reader.chunkIndexes.map((c) => c.compression))).toEqual(new Set(['zstd']));
    const channels = [...reader.channelsById.values()];
    expect(new Map(channels.map((c) => [c.topic, reader.schemasById.get(c.schemaId)!.name]))).toEqual(
      new Map([
        [ROS2_JOINT_STATES_TOPIC, 'sensor_msgs/msg/JointState'],
        [ROS2_JOINT_COMMANDS_TOPIC, 'sensor_msgs/msg/JointState'],
        [ROS2_FRONT_COMPRESSED_TOPIC, 'sensor_msgs/msg/CompressedImage'],
        [ROS2_FRONT_RAW_TOPIC, 'sensor_msgs/msg/Image'],
      ]),
    );
    for (const c of channels) {
      expect(c.messageEncoding).toBe('cdr');
      const schema = reader.schemasById.get(c.schemaId)!;
      expect(schema.encoding).toBe('ros2msg');
      // The full definition: the type's fields, then its dependencies' MSG: blocks.
      const text = new TextDecoder().decode(schema.data);
      expect(text).toContain('================================================================================\nMSG: std_msgs/Header\nbuiltin_interfaces/Time stamp\nstring frame_id\n');
      expect(text).toContain('MSG: builtin_interfaces/Time\nint32 sec\nuint32 nanosec');
      const qos = parseYaml(c.metadata.get('offered_qos_profiles')!) as Record<string, unknown>[];
      expect(qos).toEqual([expect.objectContaining({ reliability: 'reliable', durability: 'volatile' })]);
      expect(c.metadata.get('topic_type_hash')).toMatch(/^RIHS01_[0-9a-f]{64}$/);
    }
    // One schema per type, shared by the two JointState topics.
    expect(reader.schemasById.size).toBe(3);

    // 3 s at 64 KiB/s: joints at 50 Hz (t = 0 … 3 s), frames at 5 Hz.
    expect(on(messages, ROS2_JOINT_STATES_TOPIC)).toHaveLength(151);
    expect(on(messages, ROS2_JOINT_COMMANDS_TOPIC)).toHaveLength(151);
    expect(on(messages, ROS2_FRONT_COMPRESSED_TOPIC)).toHaveLength(15);
    expect(on(messages, ROS2_FRONT_RAW_TOPIC)).toHaveLength(15);
    expect(messages.length).toBe(recorded.messageCount);
    for (const m of messages) {
      // Header stamps are the log time (and the publish time), as a driver stamping at capture records them.
      expect(stampNs(m.body)).toBe(m.logTime);
      expect(m.publishTime).toBe(m.logTime);
      expect((m.body.header as { frame_id: string }).frame_id).not.toBe('');
    }
    expect(on(messages, ROS2_JOINT_STATES_TOPIC)[0]!.logTime).toBe(BigInt(startedAt) * 1_000_000n);
    for (const m of on(messages, ROS2_JOINT_STATES_TOPIC)) {
      expect(m.body.name).toEqual(JOINT_NAMES);
      for (const k of ['position', 'velocity', 'effort']) expect(Array.from(m.body[k] as Float64Array)).toHaveLength(JOINT_NAMES.length);
    }
    for (const m of on(messages, ROS2_JOINT_COMMANDS_TOPIC)) {
      expect(m.body.name).toEqual(JOINT_NAMES);
      expect(Array.from(m.body.position as Float64Array)).toHaveLength(JOINT_NAMES.length);
    }
    const raw = on(messages, ROS2_FRONT_RAW_TOPIC).map((m) => m.body as { width: number; height: number; step: number; encoding: string; is_bigendian: number; data: Uint8Array });
    const compressed = on(messages, ROS2_FRONT_COMPRESSED_TOPIC).map((m) => m.body as { format: string; data: Uint8Array });
    for (const [i, f] of raw.entries()) {
      expect(f).toMatchObject({ encoding: 'rgb8', is_bigendian: 0, step: f.width * 3 });
      expect(f.data.byteLength).toBe(f.height * f.step);
      // The JPEG is the same picture: same size, and close to the raw pixels (a lossy copy).
      expect(compressed[i]!.format).toBe('jpeg');
      const decoded = await sharp(compressed[i]!.data).raw().toBuffer({ resolveWithObject: true });
      expect([decoded.info.width, decoded.info.height, decoded.info.channels]).toEqual([f.width, f.height, 3]);
      let diff = 0;
      for (let p = 0; p < f.data.byteLength; p++) diff += Math.abs(decoded.data[p]! - f.data[p]!);
      expect(diff / f.data.byteLength).toBeLessThan(12);
    }

    // metadata.yaml: rosbag2's format 9, agreeing with the MCAP.
    const metadata = parseYaml(await readFile(join(dir, 'bag', 'metadata.yaml'), 'utf8'), { intAsBigInt: true }) as {
      rosbag2_bagfile_information: Record<string, unknown> & {
        topics_with_message_count: { topic_metadata: Record<string, unknown>; message_count: bigint }[];
        files: Record<string, unknown>[];
      };
    };
    const info = metadata.rosbag2_bagfile_information;
    const first = messages[0]!.logTime;
    const last = messages[messages.length - 1]!.logTime;
    expect(info).toMatchObject({
      version: 9n,
      storage_identifier: 'mcap',
      relative_file_paths: ['bag_0.mcap'],
      message_count: BigInt(messages.length),
      starting_time: { nanoseconds_since_epoch: first },
      duration: { nanoseconds: last - first },
      compression_format: '',
      compression_mode: '',
    });
    expect(info.files).toEqual([{ path: 'bag_0.mcap', starting_time: { nanoseconds_since_epoch: first }, duration: { nanoseconds: last - first }, message_count: BigInt(messages.length) }]);
    const counts = new Map(info.topics_with_message_count.map((t) => [t.topic_metadata.name, t.message_count]));
    for (const topic of [ROS2_JOINT_STATES_TOPIC, ROS2_JOINT_COMMANDS_TOPIC, ROS2_FRONT_COMPRESSED_TOPIC, ROS2_FRONT_RAW_TOPIC]) {
      expect(counts.get(topic)).toBe(BigInt(on(messages, topic).length));
    }
    for (const t of info.topics_with_message_count) {
      expect(t.topic_metadata).toMatchObject({ serialization_format: 'cdr', offered_qos_profiles: [expect.objectContaining({ reliability: 'reliable' })] });
      expect(t.topic_metadata.type_description_hash).toBe(channels.find((c) => c.topic === t.topic_metadata.name)!.metadata.get('topic_type_hash'));
    }
    // rosbag2_storage_mcap's own copy of the metadata, in the MCAP's `rosbag2` metadata record.
    const file = await fileReadable(join(dir, 'bag', 'bag_0.mcap'));
    try {
      const indexed = await McapIndexedReader.Initialize({ readable: file, decompressHandlers: { zstd: (data, size) => zstd.decompress(data, Number(size)) } });
      const records = [];
      for await (const m of indexed.readMetadata({ name: 'rosbag2' })) records.push(m);
      expect(records).toHaveLength(1);
      expect(parseYaml(records[0]!.metadata.get('serialized_metadata')!, { intAsBigInt: true })).toEqual(info);
    } finally {
      await file.close();
    }
  });

  it('adds the wrist camera as a JPEG stream, and roughly keeps the byte rate', async () => {
    const { dir } = await recordBag(2000, { cameras: 2 });
    const { messages } = await readBag(dir);
    expect(on(messages, ROS2_WRIST_COMPRESSED_TOPIC)).toHaveLength(10);
    expect(on(messages, ROS2_FRONT_COMPRESSED_TOPIC)).toHaveLength(10);
    // The byte rate is approximate in ros2 (JPEG sizes follow the picture), and zstd shrinks the file further.
    const payload = messages.reduce((n, m) => n + (m.body.data instanceof Uint8Array ? m.body.data.byteLength : 0), 0);
    expect(payload).toBeGreaterThan(64 * 1024 * 2 * 0.5);
    expect(payload).toBeLessThan(64 * 1024 * 2 * 1.2);
    expect((await stat(join(dir, 'bag', 'bag_0.mcap'))).size).toBeLessThan(64 * 1024 * 2 * 1.2);
  });

  it('after a crash, counts what the MCAP holds and lists the bag; abort deletes the bag', async () => {
    const root = await mkdtemp(join(tmpdir(), 'fs-ros2-'));
    tempDirs.push(root);
    const clock = new ManualClock();
    const scheduler = new ManualScheduler(clock);
    const recorder = createSyntheticRecorder({ clock, scheduler, mcapChunkBytes: 16 * 1024 });
    expect(recorder.plan.format).toBe('ros2');
    const crashed = join(root, 'ep_crash');
    await mkdir(crashed);
    await recorder.start(crashed, { robotId: 'rb', episodeId: 'ep_crash', startedAt: clock.now() });
    for (let i = 0; i < 30; i++) {
      scheduler.advance(100);
      await recorder.settled();
    }
    // Abandoned without stop (kill -9): no metadata.yaml, an MCAP without its summary.
    const recovered = await createSyntheticRecorder({ clock, scheduler }).recover(crashed);
    expect(recovered.files).toEqual(['bag/bag_0.mcap']);
    expect(recovered.messageCount).toBeGreaterThan(0);

    const discarded = join(root, 'ep_discard');
    await mkdir(discarded);
    const handle = await recorder.start(discarded, { robotId: 'rb', episodeId: 'ep_discard', startedAt: clock.now() });
    scheduler.advance(500);
    await recorder.settled();
    await handle.abort();
    expect(await readdir(discarded)).toEqual([]);
    expect(() => createSyntheticRecorder({ clock, scheduler, format: 'rosbag' as 'ros2' })).toThrow(RangeError);
  });
});
