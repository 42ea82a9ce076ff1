/**
 * inspectRecording on recordings written by code that is not ours: a rosbag2 directory from
 * Python's rosbags (cdr, ros2msg; JointState, TwistStamped, JPEG and raw cameras, a 16-bit depth
 * camera), a protobuf MCAP from Foxglove's mcap-protobuf-support, and the simulator's ROS 2
 * recording; the proposed mapping is parsed by parseMapping and exported by exportLeRobot. Bad
 * input: a missing path, a file that is not MCAP, a truncated MCAP, a schema that does not parse
 * (written with Foxglove's McapWriter), a bag whose second file is cut short.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFile, mkdir, mkdtemp, readFile, readdir, rm, stat, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { McapWriter } from '@mcap/core';
import { fileSource } from '@fleet/recordings/node';
import { ManualClock } from '@fleet/protocol';
import { ManualScheduler } from '@fleet/agent';
import { createSyntheticRecorder } from '@fleet/simulator/synthetic-recorder';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { ensurePythonEnv } from '../../../test/support/python.js';
import { exportLeRobot } from './export.js';
import { InspectError, inspectRecording, type InspectedTopic, type RecordingInspection } from './inspect.js';
import { cameraOf } from './inspect-mapping.js';
import { parseMapping } from './source/mapping.js';
import { validateLeRobotDataset } from './validate/index.js';

const FIXTURES = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', 'recordings', 'test-fixtures');

interface BagExpected {
  stamp_offset_ns: number;
  topics: Record<string, { type: string; count: number }>;
}

let root: string;
let python: string;
let bagDir: string;
let bag: BagExpected;
let pbPath: string;

beforeAll(async () => {
  python = ensurePythonEnv();
  root = await mkdtemp(join(tmpdir(), 'lerobot-inspect-'));
  bagDir = join(root, 'bag');
  execFileSync(python, [join(FIXTURES, 'write_rosbag2.py'), bagDir, join(root, 'bag.json')]);
  bag = JSON.parse(await readFile(join(root, 'bag.json'), 'utf8')) as BagExpected;
  pbPath = join(root, 'pb.mcap');
  execFileSync(python, [join(FIXTURES, 'write_protobuf_mcap.py'), pbPath, join(root, 'pb.json')]);
}, 600_000);

afterAll(async () => {
  if (root) await rm(root, { recursive: true, force: true });
});

const topic = (r: RecordingInspection, name: string): InspectedTopic => {
  const t = r.topics.find((x) => x.topic === name);
  if (t === undefined) throw new Error(`no topic ${name} in ${r.topics.map((x) => x.topic).join(', ')}`);
  return t;
};

const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/** Exports one recording directory as a one-episode dataset with `mapping`, and validates it. */
async function exportWith(name: string, recordingDir: string, mapping: unknown) {
  const bucket = join(root, `bucket-${name}`);
  const key = `org/rbt/${name}/`;
  const files = [];
  for (const e of await readdir(recordingDir, { withFileTypes: true, recursive: true })) {
    if (!e.isFile()) continue;
    const path = relative(recordingDir, join(e.parentPath, e.name));
    const bytes = await readFile(join(recordingDir, path));
    await mkdir(dirname(join(bucket, key, path)), { recursive: true });
    await writeFile(join(bucket, key, path), bytes);
    files.push({ path, size_bytes: bytes.length, sha256: sha256(bytes) });
  }
  const line = {
    id: `ep_${name}`,
    robot_id: 'rbt',
    started_at: '2026-11-26T00:00:00.000Z',
    ended_at: '2026-11-26T00:00:02.000Z',
    outcome: 'success',
    task_id: 'pick',
    metadata: {},
    files,
    locations: [{ destination_id: 'dst_t', state: 'verified', object_key: key, grant_id: 'gr_1' }],
  };
  const out = join(root, `out-${name}`);
  const res = await exportLeRobot({
    manifest: (async function* () {
      yield { dataset_id: 'ds_t', name, filter: {}, snapshot_at: '2026-11-26T00:00:00.000Z', episode_count: 1 };
      yield line;
    })(),
    outDir: out,
    sources: { dst_t: `file://${bucket}` },
    mapping,
    codec: 'h264',
    strict: true,
  });
  const v = await validateLeRobotDataset(out);
  const info = JSON.parse(await readFile(join(out, 'meta', 'info.json'), 'utf8')) as { fps: number; features: Record<string, { shape: number[]; names: unknown }> };
  return { res, valid: v.ok, info };
}

describe('a rosbag2 directory written by rosbags', () => {
  let r: RecordingInspection;
  beforeAll(async () => {
    r = await inspectRecording(bagDir);
  });

  test('the recording: its file from metadata.yaml, size, span, message count, compression', async () => {
    const size = (await stat(join(bagDir, 'bag.mcap'))).size;
    const total = Object.values(bag.topics).reduce((s, t) => s + t.count, 0);
    expect(r.recording).toMatchObject({
      format: 'rosbag2',
      files: [{ path: 'bag.mcap', size_bytes: size, profile: 'ros2', message_count: total }],
      size_bytes: size,
      start_ns: '1700000000000000000',
      end_ns: '1700000002000000000',
      start: '2023-11-14T22:13:20.000Z',
      end: '2023-11-14T22:13:22.000Z',
      duration_s: 2,
      message_count: total,
      notes: [],
    });
    expect(r.recording.compression).toHaveLength(1);
  });

  test('every topic with the type, encodings and count the writer wrote, and its rate', () => {
    expect(Object.fromEntries(r.topics.map((t) => [t.topic, { type: t.type, count: t.message_count }]))).toEqual(bag.topics);
    for (const t of r.topics) expect([t.message_encoding, t.schema_encoding, t.error]).toEqual(['cdr', 'ros2msg', null]);
    const rates = Object.fromEntries(r.topics.map((t) => [t.topic, t.rate_hz]));
    expect(rates).toEqual({
      '/joint_states': 50,
      '/joint_commands': 25,
      '/cmd_vel': 20,
      '/camera/front/image_raw/compressed': 10,
      '/camera/front/image_raw': 7,
      '/camera/bgr/image_raw': 5,
      '/camera/mono/image_raw': 5,
      '/camera/depth/image_raw': 5,
    });
  });

  test('header stamps and their offset from the log time (the writer stamps 3 ms early)', () => {
    for (const t of r.topics) expect([t.topic, t.stamp, t.stamp_offset_ms]).toEqual([t.topic, 'header.stamp', -bag.stamp_offset_ns / 1e6]);
  });

  test('numeric fields with their lengths, joint names as recorded, nested fields by path', () => {
    expect(topic(r, '/joint_states').fields).toEqual([
      { path: 'name', type: 'string[]', length: 3, values: ['j3', 'j1', 'j2'] },
      { path: 'position', type: 'float64[]', length: 3 },
      { path: 'velocity', type: 'float64[]', length: 3 },
      { path: 'effort', type: 'float64[]', length: 3 },
    ]);
    expect(topic(r, '/joint_commands').fields.map((f) => `${f.path}[${f.length}]`)).toEqual(['name[3]', 'position[3]', 'velocity[0]', 'effort[0]']);
    expect(topic(r, '/cmd_vel').fields.map((f) => f.path)).toEqual(['twist.linear.x', 'twist.linear.y', 'twist.linear.z', 'twist.angular.x', 'twist.angular.y', 'twist.angular.z']);
  });

  test('images: size and encoding from the first frame (a JPEG by its own header), 16-bit depth named as not read', () => {
    expect(topic(r, '/camera/front/image_raw/compressed').image).toEqual({ kind: 'compressed', encoding: 'jpeg', format: 'jpeg', width: 57, height: 43, supported: true });
    expect(topic(r, '/camera/front/image_raw').image).toEqual({ kind: 'raw', encoding: 'rgb8', width: 57, height: 43, supported: true });
    expect(topic(r, '/camera/mono/image_raw').image).toMatchObject({ encoding: 'mono8', width: 8, height: 6, supported: true });
    expect(topic(r, '/camera/depth/image_raw').image).toMatchObject({ encoding: '16UC1', supported: false });
    expect(topic(r, '/camera/depth/image_raw').note).toMatch(/16UC1/);
    expect(topic(r, '/camera/front/image_raw').fields).toEqual([]);
  });

  test('the proposed mapping: JointState state, the command topic as action, each camera once (compressed first), fps of the slowest camera', () => {
    expect(r.mapping).toEqual({
      fps: 5,
      task: { from: 'task_id' },
      features: {
        'observation.state': { topic: '/joint_states', fields: ['position'], names_from: 'name' },
        action: { topic: '/joint_commands', fields: ['position'], names_from: 'name' },
        'observation.images.bgr': { topic: '/camera/bgr/image_raw' },
        'observation.images.front': { topic: '/camera/front/image_raw/compressed' },
        'observation.images.mono': { topic: '/camera/mono/image_raw' },
      },
    });
    expect(() => parseMapping(r.mapping)).not.toThrow();
    expect(topic(r, '/joint_states').mapped_as).toBe('observation.state');
    expect(topic(r, '/camera/front/image_raw').mapped_as).toBeNull();
    expect(topic(r, '/cmd_vel').mapped_as).toBeNull();
  });

  test('the export takes the proposed mapping on the recording', async () => {
    const { res, valid, info } = await exportWith('rosbags', bagDir, r.mapping);
    expect(res).toMatchObject({ episodes: 1, skipped: [] });
    expect(valid).toBe(true);
    expect(info.fps).toBe(5);
    expect(info.features['observation.state']!.names).toEqual(['j3', 'j1', 'j2']);
    expect(Object.keys(info.features).filter((k) => k.startsWith('observation.images.')).sort()).toEqual(['observation.images.bgr', 'observation.images.front', 'observation.images.mono']);
  }, 120_000);

  test('an .mcap file alone reads the same', async () => {
    const alone = await inspectRecording(join(bagDir, 'bag.mcap'));
    expect(alone.recording.format).toBe('mcap');
    expect(alone.topics).toEqual(r.topics);
    expect(alone.mapping).toEqual(r.mapping);
  });
});

describe('a protobuf MCAP written by mcap-protobuf-support', () => {
  test('lz4 chunks, foxglove schemas, `timestamp` stamps, nested pose fields, both cameras', async () => {
    const r = await inspectRecording(pbPath);
    expect(r.recording).toMatchObject({ format: 'mcap', compression: ['lz4'], message_count: 73, duration_s: 2 });
    expect(r.topics.map((t) => [t.topic, t.type, t.message_encoding, t.schema_encoding, t.message_count, t.rate_hz, t.stamp, t.stamp_offset_ms])).toEqual([
      ['/camera/jpeg', 'foxglove.CompressedImage', 'protobuf', 'protobuf', 21, 10, 'timestamp', -3],
      ['/camera/raw', 'foxglove.RawImage', 'protobuf', 'protobuf', 11, 5, 'timestamp', -3],
      ['/pose', 'foxglove.PoseInFrame', 'protobuf', 'protobuf', 41, 20, 'timestamp', -3],
    ]);
    expect(topic(r, '/pose').fields.map((f) => f.path)).toEqual(['pose.position.x', 'pose.position.y', 'pose.position.z', 'pose.orientation.x', 'pose.orientation.y', 'pose.orientation.z', 'pose.orientation.w']);
    expect(topic(r, '/camera/jpeg').image).toMatchObject({ kind: 'compressed', format: 'jpeg', width: 16, height: 10 });
    expect(topic(r, '/camera/raw').image).toMatchObject({ kind: 'raw', encoding: 'rgb8', width: 16, height: 10 });
    // No joints: cameras only, at the slower one's rate.
    expect(r.mapping).toEqual({ fps: 5, task: { from: 'task_id' }, features: { 'observation.images.jpeg': { topic: '/camera/jpeg' }, 'observation.images.raw': { topic: '/camera/raw' } } });
    expect(() => parseMapping(r.mapping)).not.toThrow();
  });
});

describe("the simulator's ROS 2 recording", () => {
  test('proposes what the default mapping reads, and the export takes it', async () => {
    const dir = join(root, 'sim');
    await mkdir(dir, { recursive: true });
    const clock = new ManualClock();
    const scheduler = new ManualScheduler(clock);
    const recorder = createSyntheticRecorder({ clock, scheduler });
    const handle = await recorder.start(dir, { robotId: 'rbt_test', episodeId: 'ep_sim', startedAt: clock.now() });
    for (let t = 0; t < 2000; t += 100) {
      scheduler.advance(100);
      await recorder.settled();
    }
    await handle.stop();

    const r = await inspectRecording(join(dir, 'bag'));
    expect(r.recording.format).toBe('rosbag2');
    expect(r.recording.files.map((f) => f.path)).toEqual(['bag_0.mcap']);
    expect(r.recording.compression).toEqual(['zstd']);
    expect(topic(r, '/joint_states').fields.find((f) => f.path === 'position')?.length).toBe(7);
    expect(topic(r, '/joint_states').fields.find((f) => f.path === 'name')?.values).toHaveLength(7);
    expect(r.mapping?.features).toMatchObject({
      'observation.state': { topic: '/joint_states', fields: ['position'], names_from: 'name' },
      action: { topic: '/joint_commands', fields: ['position'], names_from: 'name' },
      'observation.images.front': { topic: '/camera/front/image_raw/compressed' },
    });
    const { res, valid, info } = await exportWith('sim', dir, r.mapping);
    expect(res).toMatchObject({ episodes: 1, skipped: [] });
    expect(valid).toBe(true);
    expect(info.fps).toBe(r.mapping?.fps);
  }, 120_000);
});

describe('bounded work', () => {
  test('a bag of many chunks is inspected from its summary and a few chunks, not read whole', async () => {
    const dir = join(root, 'large');
    // 640x480 rgb8 at 30 Hz and joint states at 300 Hz for 4 s, through rosbags: about 110 MB in chunks of a few MB.
    execFileSync(python, ['-c', LARGE_BAG, dir]);
    const size = (await stat(join(dir, 'large.mcap'))).size;
    let read = 0;
    const r = await inspectRecording(dir, {
      openFile: async (path) => {
        const s = await fileSource(path);
        return { ...s, read: async (o, l) => ((read += Number(l)), s.read(o, l)) };
      },
    });
    expect(r.topics.map((t) => [t.topic, t.message_count, t.rate_hz])).toEqual([
      ['/joint_states', 1200, 300],
      ['/wrist_camera/image_raw', 120, 30],
    ]);
    expect(r.mapping?.features['observation.images.wrist_camera']).toEqual({ topic: '/wrist_camera/image_raw' });
    expect(r.mapping?.fps).toBe(30);
    // The summary, the first chunk of each topic and its last one: a few chunks' worth of bytes.
    const chunks = r.recording.files[0]!.chunks!;
    expect(chunks).toBeGreaterThan(30);
    expect(read).toBeLessThan((size / chunks) * 8);
  }, 300_000);
});

const LARGE_BAG = `
import sys, math, numpy as np
from pathlib import Path
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys import Stores, get_typestore
ts = get_typestore(Stores.ROS2_JAZZY)
JS, Image = ts.types["sensor_msgs/msg/JointState"], ts.types["sensor_msgs/msg/Image"]
Header, Time = ts.types["std_msgs/msg/Header"], ts.types["builtin_interfaces/msg/Time"]
T0 = 1_700_000_000 * 10**9
hdr = lambda t: Header(stamp=Time(sec=t // 10**9, nanosec=t % 10**9), frame_id="x")
img = np.random.default_rng(1).integers(0, 255, 640 * 480 * 3, dtype=np.uint8)
with Writer(Path(sys.argv[1]), version=9, storage_plugin=StoragePlugin.MCAP) as w:
    cj = w.add_connection("/joint_states", "sensor_msgs/msg/JointState", typestore=ts)
    ci = w.add_connection("/wrist_camera/image_raw", "sensor_msgs/msg/Image", typestore=ts)
    for i in range(1200):
        t = T0 + i * 10**9 // 300
        w.write(cj, t, ts.serialize_cdr(JS(header=hdr(t), name=["a", "b"], position=np.array([math.sin(i / 10), 0.0]), velocity=np.zeros(2), effort=np.zeros(0)), JS.__msgtype__))
        if i % 10 == 0:
            w.write(ci, t, ts.serialize_cdr(Image(header=hdr(t), height=480, width=640, encoding="rgb8", is_bigendian=0, step=1920, data=img), Image.__msgtype__))
`;

describe('bad input', () => {
  test('a path that does not exist', async () => {
    await expect(inspectRecording(join(root, 'nope.mcap'))).rejects.toMatchObject({ code: 'not_found' });
  });

  test('a file that is not MCAP', async () => {
    await expect(inspectRecording(join(bagDir, 'metadata.yaml'))).rejects.toMatchObject({ code: 'not_mcap' });
  });

  test('a directory without a recording', async () => {
    const dir = join(root, 'empty');
    await mkdir(dir, { recursive: true });
    await expect(inspectRecording(dir)).rejects.toMatchObject({ code: 'no_recording' });
  });

  test('a truncated MCAP (its writer killed): no summary, said so, with the way to recover it', async () => {
    const cut = join(root, 'cut.mcap');
    await copyFile(join(bagDir, 'bag.mcap'), cut);
    await truncate(cut, Math.floor((await stat(cut)).size / 2));
    const err = await inspectRecording(cut).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InspectError);
    expect(err).toMatchObject({ code: 'no_summary' });
    expect((err as Error).message).toMatch(/mcap recover/);
  });

  test('a bag whose second file was cut short: the first is inspected, the second named with its reason', async () => {
    const dir = join(root, 'split');
    await mkdir(dir, { recursive: true });
    await copyFile(join(bagDir, 'bag.mcap'), join(dir, 'split_1.mcap'));
    await copyFile(join(bagDir, 'bag.mcap'), join(dir, 'split_0.mcap'));
    await truncate(join(dir, 'split_0.mcap'), 1000);
    // Listed out of name order: metadata.yaml's order is the one read.
    await writeFile(join(dir, 'metadata.yaml'), 'rosbag2_bagfile_information:\n  version: 9\n  storage_identifier: mcap\n  relative_file_paths:\n    - split_1.mcap\n    - split_0.mcap\n');
    const r = await inspectRecording(dir);
    expect(r.recording.files.map((f) => [f.path, f.error?.code])).toEqual([
      ['split_1.mcap', undefined],
      ['split_0.mcap', 'no_summary'],
    ]);
    expect(r.recording.notes.join('\n')).toMatch(/split_0\.mcap/);
    expect(topic(r, '/joint_states').message_count).toBe(bag.topics['/joint_states']!.count);
  });

  test('a bag directory without metadata.yaml: its .mcap files in name order, said so', async () => {
    const dir = join(root, 'unclosed');
    await mkdir(dir, { recursive: true });
    await copyFile(join(bagDir, 'bag.mcap'), join(dir, 'b_10.mcap'));
    await copyFile(pbPath, join(dir, 'b_2.mcap'));
    const r = await inspectRecording(dir);
    expect(r.recording.files.map((f) => f.path)).toEqual(['b_2.mcap', 'b_10.mcap']);
    expect(r.recording.notes.join('\n')).toMatch(/no metadata\.yaml/);
    expect(r.topics.map((t) => t.topic)).toEqual(expect.arrayContaining(['/pose', '/joint_states']));
  });

  test('a schema that does not parse: that topic listed with its error, the others inspected', async () => {
    const path = join(root, 'bad-schema.mcap');
    await writeMcap(path, [
      { topic: '/broken', schemaName: 'my_msgs/msg/Broken', schemaEncoding: 'ros2msg', schema: 'float64[ position\nthis is not a field', encoding: 'cdr', data: new Uint8Array([0, 1, 0, 0]) },
      { topic: '/ok', schemaName: 'Joints', schemaEncoding: 'jsonschema', schema: '{"type":"object"}', encoding: 'json', data: new TextEncoder().encode('{"name":["a"],"position":[0.5]}') },
    ]);
    const r = await inspectRecording(path);
    expect(topic(r, '/broken')).toMatchObject({ message_count: 3, error: { code: 'schema_invalid' }, mapped_as: null });
    expect(topic(r, '/broken').error?.message).toMatch(/\/broken/);
    expect(topic(r, '/ok')).toMatchObject({ error: null, message_count: 3, rate_hz: 10, stamp: null });
    expect(topic(r, '/ok').fields.map((f) => `${f.path}[${f.length}]`)).toEqual(['name[1]', 'position[1]']);
  });
});

describe('camera names', () => {
  test.each([
    ['/camera/front/image_raw/compressed', 'front'],
    ['/wrist_camera/image_raw', 'wrist_camera'],
    ['/front/camera/image_raw', 'front'],
    ['/camera/image', 'camera'],
    ['/cam-left/image_rect_color', 'cam_left'],
  ])('%s is %s', (t, name) => {
    expect(cameraOf(t).name).toBe(name);
  });

  test('two cameras of one name are told apart', async () => {
    const path = join(root, 'two-cams.mcap');
    const raw = (w: number) => new TextEncoder().encode(JSON.stringify({ width: w, height: 2, encoding: 'rgb8', step: w * 3, data: Buffer.alloc(w * 6).toString('base64') }));
    await writeMcap(path, [
      { topic: '/left/camera/image_raw', schemaName: 'foxglove.RawImage', schemaEncoding: 'jsonschema', schema: '{}', encoding: 'json', data: raw(4) },
      { topic: '/right/left/image_raw', schemaName: 'foxglove.RawImage', schemaEncoding: 'jsonschema', schema: '{}', encoding: 'json', data: raw(6) },
    ]);
    const r = await inspectRecording(path);
    expect(Object.keys(r.mapping?.features ?? {}).sort()).toEqual(['observation.images.left', 'observation.images.right_left']);
    expect(() => parseMapping(r.mapping)).not.toThrow();
  });
});

/** An MCAP of a few channels, each with three messages 100 ms apart, by Foxglove's writer. */
async function writeMcap(path: string, channels: { topic: string; schemaName: string; schemaEncoding: string; schema: string; encoding: string; data: Uint8Array }[]) {
  const chunks: Uint8Array[] = [];
  const w = new McapWriter({ writable: { position: () => BigInt(chunks.reduce((s, c) => s + c.byteLength, 0)), write: async (b) => void chunks.push(b.slice()) } });
  await w.start({ profile: '', library: 'test' });
  const ids: number[] = [];
  for (const c of channels) {
    const schemaId = await w.registerSchema({ name: c.schemaName, encoding: c.schemaEncoding, data: new TextEncoder().encode(c.schema) });
    ids.push(await w.registerChannel({ topic: c.topic, schemaId, messageEncoding: c.encoding, metadata: new Map() }));
  }
  for (let i = 0; i < 3; i++) {
    for (const [k, c] of channels.entries()) {
      const t = 1_700_000_000_000_000_000n + BigInt(i) * 100_000_000n;
      await w.addMessage({ channelId: ids[k]!, sequence: i, logTime: t, publishTime: t, data: c.data });
    }
  }
  await w.end();
  await writeFile(path, Buffer.concat(chunks));
}
