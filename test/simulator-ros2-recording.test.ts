/**
 * The simulator's ROS 2 recordings judged by readers that are not ours: an episode recorded by
 * the synthetic recorder in the `ros2` format, then read in Python (test/python/read_rosbag2.py)
 * by rosbags' AnyReader (metadata.yaml, then the MCAP, its own CDR decoder) and by
 * mcap-ros2-support's read_ros2_messages (the MCAP alone), with Pillow decoding the JPEG frames.
 */
import { execFileSync } from 'node:child_process';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { ManualClock } from '@fleet/protocol';
import { ManualScheduler } from '../agent/src/time.js';
import {
  ROS2_FRONT_COMPRESSED_TOPIC,
  ROS2_FRONT_RAW_TOPIC,
  ROS2_JOINT_COMMANDS_TOPIC,
  ROS2_JOINT_STATES_TOPIC,
  ROS2_WRIST_COMPRESSED_TOPIC,
  SyntheticRecorder,
} from '../simulator/src/recording/synthetic-recorder.js';
import { JOINT_NAMES } from '../simulator/src/recording/synthetic-signals.js';
import { ROS2_TYPE_HASHES } from '../simulator/src/recording/ros2-signals.js';
import { ensurePythonEnv } from './support/python.js';

const READER = join(dirname(fileURLToPath(import.meta.url)), 'python', 'read_rosbag2.py');

interface TopicSeen {
  type: string;
  metadata_count: number;
  read: number;
  frame_ids: string[];
  digest: string;
  qos: string[];
  names?: string[];
  lengths?: number[];
  images?: { width: number; height: number; step: number; encoding: string; bytes: number }[];
  jpegs?: { format: string; pil_format: string; width: number; height: number; mode: string }[];
}

interface Seen {
  rosbags: { topics: Record<string, TopicSeen>; message_count: number; messages: number; stamp_mismatches: number; start_time: number; end_time: number };
  mcap_ros2: { counts: Record<string, number>; types: Record<string, string>; stamp_mismatches: number };
  jazzy_hashes: Record<string, string>;
}

const roots: string[] = [];
afterAll(async () => {
  for (const r of roots) await rm(r, { recursive: true, force: true });
});

describe('fleet-sim ROS 2 recordings, read by rosbags and mcap-ros2-support', () => {
  it('has the topics, types, counts, stamps, joint names and pictures that metadata.yaml and the frames say', async () => {
    const python = ensurePythonEnv();
    const root = await mkdtemp(join(tmpdir(), 'fs-ros2-py-'));
    roots.push(root);
    const dir = join(root, 'ep_python');
    await mkdir(dir);
    const startedAt = Date.UTC(2026, 4, 2, 9, 30, 0, 125);
    const clock = new ManualClock(startedAt);
    const scheduler = new ManualScheduler(clock);
    const recorder = new SyntheticRecorder({ clock, scheduler, format: 'ros2', bytesPerSecond: 64 * 1024, chunkIntervalMs: 100, cameras: 2, cameraWidth: 96, cameraHeight: 72, cameraHz: 10, stateHz: 30 });
    const handle = await recorder.start(dir, { robotId: 'rb_py', episodeId: 'ep_python', startedAt });
    for (let t = 0; t < 2000; t += 100) {
      scheduler.advance(100);
      await recorder.settled();
    }
    const recorded = await handle.stop();
    expect(recorded.files).toEqual(['bag/bag_0.mcap', 'bag/metadata.yaml']);

    const seen = JSON.parse(execFileSync(python, [READER, join(dir, 'bag')], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 })) as Seen;
    const topics = seen.rosbags.topics;
    // 2 s: joints at 30 Hz (t = 0 … 2 s), frames at 10 Hz (0.1 … 2 s).
    const expected: Record<string, [string, number]> = {
      [ROS2_JOINT_STATES_TOPIC]: ['sensor_msgs/msg/JointState', 61],
      [ROS2_JOINT_COMMANDS_TOPIC]: ['sensor_msgs/msg/JointState', 61],
      [ROS2_FRONT_COMPRESSED_TOPIC]: ['sensor_msgs/msg/CompressedImage', 20],
      [ROS2_FRONT_RAW_TOPIC]: ['sensor_msgs/msg/Image', 20],
      [ROS2_WRIST_COMPRESSED_TOPIC]: ['sensor_msgs/msg/CompressedImage', 20],
    };
    expect(Object.keys(topics).sort()).toEqual(Object.keys(expected).sort());
    for (const [topic, [type, count]] of Object.entries(expected)) {
      const t = topics[topic]!;
      expect(t.type, topic).toBe(type);
      // metadata.yaml's count per topic, the messages rosbags read, and what mcap-ros2-support decoded agree.
      expect(t.metadata_count, topic).toBe(count);
      expect(t.read, topic).toBe(count);
      expect(seen.mcap_ros2.counts[topic], topic).toBe(count);
      expect(seen.mcap_ros2.types[topic], topic).toBe(type);
      expect(t.frame_ids.length, topic).toBe(1);
      expect(t.frame_ids[0], topic).not.toBe('');
      expect(t.qos, topic).toEqual(['reliable']);
      // The type hash the bag carries is the one ROS 2 Jazzy computes for the type.
      expect(t.digest, topic).toBe(seen.jazzy_hashes[type]);
      expect(ROS2_TYPE_HASHES[type], topic).toBe(seen.jazzy_hashes[type]);
    }
    expect(seen.rosbags.message_count).toBe(recorded.messageCount);
    expect(seen.rosbags.messages).toBe(recorded.messageCount);
    // Header stamps equal log times, in both readers.
    expect(seen.rosbags.stamp_mismatches).toBe(0);
    expect(seen.mcap_ros2.stamp_mismatches).toBe(0);
    expect(seen.rosbags.start_time).toBe(startedAt * 1_000_000);

    for (const topic of [ROS2_JOINT_STATES_TOPIC, ROS2_JOINT_COMMANDS_TOPIC]) expect(topics[topic]!.names).toEqual([...JOINT_NAMES]);
    expect(topics[ROS2_JOINT_STATES_TOPIC]!.lengths).toEqual([JOINT_NAMES.length]);
    // Commands carry positions only (a position controller's targets).
    expect(topics[ROS2_JOINT_COMMANDS_TOPIC]!.lengths).toEqual([0, JOINT_NAMES.length]);

    for (const topic of [ROS2_FRONT_COMPRESSED_TOPIC, ROS2_WRIST_COMPRESSED_TOPIC]) {
      const jpegs = topics[topic]!.jpegs!;
      expect(jpegs).toHaveLength(20);
      for (const j of jpegs) expect(j).toEqual({ format: 'jpeg', pil_format: 'JPEG', width: 96, height: 72, mode: 'RGB' });
    }
    const images = topics[ROS2_FRONT_RAW_TOPIC]!.images!;
    expect(images).toHaveLength(20);
    for (const image of images) expect(image).toEqual({ width: 96, height: 72, step: 96 * 3, encoding: 'rgb8', bytes: 72 * 96 * 3 });
  });
});
