import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { McapIndexedReader, McapWriter } from '@mcap/core';
import { loadDecompressHandlers } from '@mcap/support';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensurePythonEnv } from '../../../test/support/python.js';
import { bytesSource, cameraImage, headerStampNs, isRecordingError, openMcap, timestampNs, type CameraImage, type McapRecording } from './index.js';
import { fileSource } from './node.js';

// Inputs written by code that is not ours: Python's rosbags (a rosbag2 directory, cdr + ros2msg)
// and Foxglove's mcap-protobuf-support with foxglove-schemas-protobuf (protobuf, lz4 chunks).
const FIXTURES = resolve(dirname(fileURLToPath(import.meta.url)), '..', 'test-fixtures');

interface BagExpected {
  topics: Record<string, { type: string; count: number }>;
  stamp_offset_ns: number;
  joint_states: { t: string; name: string[]; position: number[]; velocity: number[] }[];
  cmd_vel: { t: string; linear: number[]; angular_z: number }[];
  images: Record<string, { t: string; sha256: string; width?: number; height?: number; encoding?: string }[]>;
}
interface PbExpected {
  stamp_offset_ns: number;
  pose: { t: string; position: number[] }[];
  images: Record<string, { t: string; sha256: string }[]>;
}

const sha256 = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');
const pixelsOf = (im: CameraImage) => (im.kind === 'raw' ? im.rgb : im.data);

let dir: string;
let bagPath: string;
let bag: BagExpected;
let pbPath: string;
let pb: PbExpected;

beforeAll(async () => {
  const python = ensurePythonEnv();
  dir = await mkdtemp(join(tmpdir(), 'recordings-'));
  execFileSync(python, [join(FIXTURES, 'write_rosbag2.py'), join(dir, 'bag'), join(dir, 'bag.json')]);
  execFileSync(python, [join(FIXTURES, 'write_protobuf_mcap.py'), join(dir, 'pb.mcap'), join(dir, 'pb.json')]);
  bagPath = join(dir, 'bag', 'bag.mcap');
  bag = JSON.parse(await readFile(join(dir, 'bag.json'), 'utf8')) as BagExpected;
  pbPath = join(dir, 'pb.mcap');
  pb = JSON.parse(await readFile(join(dir, 'pb.json'), 'utf8')) as PbExpected;
}, 600_000);

afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

async function all(r: McapRecording, topic: string) {
  const out = [];
  for await (const m of r.messages([topic])) out.push(m);
  return out;
}

describe('a rosbag2 MCAP written by rosbags (cdr, ros2msg)', () => {
  it('lists its channels with types and encodings as rosbag2 writes them', async () => {
    await using r = await openMcap(await fileSource(bagPath), { name: bagPath });
    expect(r.profile).toBe('ros2');
    const listed = Object.fromEntries(r.channels.map((c) => [c.topic, { type: c.schemaName, count: Number(c.messageCount) }]));
    expect(listed).toEqual(bag.topics);
    for (const c of r.channels) expect([c.messageEncoding, c.schemaEncoding]).toEqual(['cdr', 'ros2msg']);
  });

  it('decodes JointState with float64[] as typed arrays, header stamps as {sec, nanosec}', async () => {
    await using r = await openMcap(await fileSource(bagPath));
    const msgs = await all(r, '/joint_states');
    expect(msgs).toHaveLength(bag.joint_states.length);
    msgs.forEach((m, i) => {
      const want = bag.joint_states[i]!;
      const d = m.data as { name: string[]; position: Float64Array; velocity: Float64Array };
      expect(m.logTimeNs).toBe(BigInt(want.t));
      expect(headerStampNs(d)).toBe(BigInt(want.t) - BigInt(bag.stamp_offset_ns));
      expect(d.position).toBeInstanceOf(Float64Array);
      expect(d.name).toEqual(want.name);
      expect([...d.position]).toEqual(want.position);
      expect([...d.velocity]).toEqual(want.velocity);
    });
  });

  it('decodes nested messages (geometry_msgs/msg/TwistStamped)', async () => {
    await using r = await openMcap(await fileSource(bagPath));
    const msgs = await all(r, '/cmd_vel');
    expect(msgs.map((m) => (m.data as { twist: { linear: { x: number; y: number; z: number } } }).twist.linear)).toEqual(bag.cmd_vel.map((c) => ({ x: c.linear[0], y: c.linear[1], z: c.linear[2] })));
  });

  it('reads CompressedImage as its JPEG bytes and Image rgb8 (padded rows), bgr8 and mono8 as packed RGB', async () => {
    await using r = await openMcap(await fileSource(bagPath));
    for (const topic of ['/camera/front/image_raw/compressed', '/camera/front/image_raw', '/camera/bgr/image_raw', '/camera/mono/image_raw']) {
      const channel = r.channel(topic)!;
      const msgs = await all(r, topic);
      const want = bag.images[topic]!;
      expect(msgs).toHaveLength(want.length);
      msgs.forEach((m, i) => {
        const im = cameraImage(channel.schemaName, m.data, topic);
        expect(im.kind).toBe(topic.endsWith('compressed') ? 'compressed' : 'raw');
        if (im.kind === 'raw') expect([im.width, im.height]).toEqual([want[i]!.width, want[i]!.height]);
        if (im.kind === 'compressed') expect(im.format).toBe('jpeg');
        expect(sha256(pixelsOf(im))).toBe(want[i]!.sha256);
      });
    }
  });

  it('names a 16-bit image an unsupported encoding (bad_image), not a crash', async () => {
    await using r = await openMcap(await fileSource(bagPath));
    const m = await r.first('/camera/depth/image_raw');
    expect(() => cameraImage('sensor_msgs/msg/Image', m!.data, '/camera/depth/image_raw')).toThrow(/bad_image: .*unsupported encoding "16UC1"/);
  });

  it('reads in reverse and within log-time bounds', async () => {
    await using r = await openMcap(await fileSource(bagPath));
    const last = await r.first('/joint_states', true);
    expect(last!.logTimeNs).toBe(BigInt(bag.joint_states.at(-1)!.t));
    const t1 = BigInt(bag.joint_states[10]!.t);
    const t2 = BigInt(bag.joint_states[20]!.t);
    const window = [];
    for await (const m of r.messages(['/joint_states'], { startNs: t1, endNs: t2 })) window.push(m.logTimeNs);
    expect(window).toHaveLength(11);
    expect([window[0], window.at(-1)]).toEqual([t1, t2]);
  });

  it('reads from bytes in memory as from a file (the browser path)', async () => {
    await using r = await openMcap(bytesSource(new Uint8Array(await readFile(bagPath))));
    expect((await all(r, '/joint_states')).length).toBe(bag.joint_states.length);
  });
});

describe('a protobuf MCAP written by mcap-protobuf-support (foxglove schemas, lz4 chunks)', () => {
  it('decodes by the FileDescriptorSet: nested fields, Timestamp, RawImage with row padding, CompressedImage', async () => {
    await using r = await openMcap(await fileSource(pbPath));
    expect(r.channels.map((c) => [c.topic, c.schemaName, c.messageEncoding, c.schemaEncoding]).sort()).toEqual([
      ['/camera/jpeg', 'foxglove.CompressedImage', 'protobuf', 'protobuf'],
      ['/camera/raw', 'foxglove.RawImage', 'protobuf', 'protobuf'],
      ['/pose', 'foxglove.PoseInFrame', 'protobuf', 'protobuf'],
    ]);
    const poses = await all(r, '/pose');
    expect(poses.map((m) => (m.data as { pose: { position: { x: number; y: number; z: number } } }).pose.position)).toEqual(pb.pose.map((p) => ({ x: p.position[0], y: p.position[1], z: p.position[2] })));
    expect(poses.map((m) => timestampNs(m.data))).toEqual(pb.pose.map((p) => BigInt(p.t) - BigInt(pb.stamp_offset_ns)));
    for (const topic of ['/camera/raw', '/camera/jpeg']) {
      const msgs = await all(r, topic);
      expect(msgs.map((m) => sha256(pixelsOf(cameraImage(r.channel(topic)!.schemaName, m.data, topic))))).toEqual(pb.images[topic]!.map((x) => x.sha256));
    }
  });

  it('cut short after its lz4 chunks: with recover, read (decoded) as the whole file reads', async () => {
    const whole = new Uint8Array(await readFile(pbPath));
    const summary = await McapIndexedReader.Initialize({ readable: { size: async () => BigInt(whole.byteLength), read: async (o, n) => whole.subarray(Number(o), Number(o + n)) }, decompressHandlers: await loadDecompressHandlers() });
    expect(new Set(summary.chunkIndexes.map((c) => c.compression))).toEqual(new Set(['lz4']));
    const last = summary.chunkIndexes.at(-1)!;
    await using r = await openMcap(bytesSource(whole.subarray(0, Number(last.chunkStartOffset + last.chunkLength) + 3)), { recover: true });
    await using full = await openMcap(bytesSource(whole));
    expect(r.truncated).toBe(true);
    for (const topic of ['/pose', '/camera/raw', '/camera/jpeg']) expect(await all(r, topic)).toEqual(await all(full, topic));
  });
});

/** An MCAP of our own making for the fault cases (the writers above write only good files). */
async function mcapWith(channels: { topic: string; messageEncoding: string; schema?: { name: string; encoding: string; data: string }; messages: Uint8Array[] }[]): Promise<Uint8Array> {
  const parts: Uint8Array[] = [];
  let position = 0n;
  const write = async (b: Uint8Array) => {
    parts.push(b.slice());
    position += BigInt(b.byteLength);
  };
  const w = new McapWriter({ writable: { write, position: () => position } });
  await w.start({ profile: '', library: 'test' });
  let t = 1n;
  for (const c of channels) {
    const schemaId = c.schema ? await w.registerSchema({ name: c.schema.name, encoding: c.schema.encoding, data: new TextEncoder().encode(c.schema.data) }) : 0;
    const channelId = await w.registerChannel({ topic: c.topic, messageEncoding: c.messageEncoding, schemaId, metadata: new Map() });
    for (const data of c.messages) await w.addMessage({ channelId, sequence: 0, logTime: t, publishTime: t++, data });
  }
  await w.end();
  return Buffer.concat(parts);
}

describe('bad input is a typed error naming topic and schema', () => {
  it('a ros2msg schema that does not parse: schema_invalid, and the other topics still read', async () => {
    const bytes = await mcapWith([
      { topic: '/bad', messageEncoding: 'cdr', schema: { name: 'my_msgs/msg/Bad', encoding: 'ros2msg', data: 'float64[ position\n' }, messages: [new Uint8Array(8)] },
      { topic: '/ok', messageEncoding: 'json', messages: [new TextEncoder().encode('{"a":1}')] },
    ]);
    await using r = await openMcap(bytesSource(bytes));
    await expect(r.first('/bad')).rejects.toSatisfy((e) => isRecordingError(e, 'schema_invalid') && /\/bad/.test((e as Error).message) && /my_msgs\/msg\/Bad/.test((e as Error).message));
    expect((await r.first('/ok'))!.data).toEqual({ a: 1 });
  });

  it('a truncated CDR message: message_invalid naming topic and schema', async () => {
    const bytes = await mcapWith([{ topic: '/js', messageEncoding: 'cdr', schema: { name: 'x/msg/V', encoding: 'ros2msg', data: 'float64[] position\n' }, messages: [Uint8Array.of(0, 1, 0, 0, 9, 0, 0, 0)] }]);
    await using r = await openMcap(bytesSource(bytes));
    await expect(r.first('/js')).rejects.toSatisfy((e) => isRecordingError(e, 'message_invalid') && /topic \/js \(schema x\/msg\/V/.test((e as Error).message));
  });

  it('a protobuf schema that is not a FileDescriptorSet: schema_invalid', async () => {
    const bytes = await mcapWith([{ topic: '/p', messageEncoding: 'protobuf', schema: { name: 'foxglove.RawImage', encoding: 'protobuf', data: 'not a descriptor' }, messages: [new Uint8Array(4)] }]);
    await using r = await openMcap(bytesSource(bytes));
    await expect(r.first('/p')).rejects.toSatisfy((e) => isRecordingError(e, 'schema_invalid'));
  });

  it('JSON that is not JSON: message_invalid; an encoding not decoded: unsupported_encoding', async () => {
    const bytes = await mcapWith([
      { topic: '/j', messageEncoding: 'json', messages: [new TextEncoder().encode('{nope')] },
      { topic: '/r1', messageEncoding: 'ros1', schema: { name: 'std_msgs/String', encoding: 'ros1msg', data: 'string data' }, messages: [new Uint8Array(4)] },
    ]);
    await using r = await openMcap(bytesSource(bytes));
    await expect(r.first('/j')).rejects.toSatisfy((e) => isRecordingError(e, 'message_invalid'));
    await expect(r.first('/r1')).rejects.toSatisfy((e) => isRecordingError(e, 'unsupported_encoding') && /\/r1/.test((e as Error).message));
  });

  it('a file without its summary (cut short): unreadable; with recover, the messages of its whole chunks', async () => {
    const whole = new Uint8Array(await readFile(bagPath));
    await expect(openMcap(bytesSource(whole.subarray(0, whole.byteLength - 2000)))).rejects.toSatisfy((e) => isRecordingError(e, 'unreadable'));
    // rosbags' file cut just after its (last) chunk, inside the message indexes that follow it:
    // every message is whole, and reads (decoded) as from the whole file.
    const decompressHandlers = await loadDecompressHandlers();
    const summary = await McapIndexedReader.Initialize({ readable: { size: async () => BigInt(whole.byteLength), read: async (o, n) => whole.subarray(Number(o), Number(o + n)) }, decompressHandlers });
    const last = summary.chunkIndexes.at(-1)!;
    const cut = Number(last.chunkStartOffset + last.chunkLength) + 5;
    await using r = await openMcap(bytesSource(whole.subarray(0, cut)), { recover: true });
    await using full = await openMcap(bytesSource(whole));
    expect([r.truncated, r.profile]).toEqual([true, 'ros2']);
    expect(r.channels.map((c) => [c.topic, c.schemaName, Number(c.messageCount)])).toEqual(full.channels.map((c) => [c.topic, c.schemaName, Number(c.messageCount)]));
    const topics = full.channels.map((c) => c.topic);
    const read = async (rec: McapRecording) => {
      const out = [];
      for await (const m of rec.messages(topics)) out.push(m);
      return out;
    };
    const want = await read(full);
    expect(want.length).toBe(Object.values(bag.topics).reduce((n, t) => n + t.count, 0));
    expect(await read(r)).toEqual(want);
    // Cut inside that chunk: nothing whole to play.
    await using none = await openMcap(bytesSource(whole.subarray(0, Number(last.chunkStartOffset) + 1000)), { recover: true });
    expect([none.truncated, none.channels.length]).toEqual([true, 0]);
  });

  it('foxglove JSON images get their base64 data as bytes', async () => {
    const rgb = Uint8Array.from({ length: 2 * 2 * 3 }, (_, i) => i * 10);
    const msg = { timestamp: { sec: 1, nsec: 5 }, frame_id: 'c', width: 2, height: 2, encoding: 'rgb8', step: 6, data: Buffer.from(rgb).toString('base64') };
    const bytes = await mcapWith([{ topic: '/img', messageEncoding: 'json', schema: { name: 'foxglove.RawImage', encoding: 'jsonschema', data: '{}' }, messages: [new TextEncoder().encode(JSON.stringify(msg))] }]);
    await using r = await openMcap(bytesSource(bytes));
    const m = await r.first('/img');
    expect(timestampNs(m!.data)).toBe(1_000_000_005n);
    const im = cameraImage('foxglove.RawImage', m!.data, '/img');
    expect(im).toEqual({ kind: 'raw', width: 2, height: 2, rgb });
  });
});

describe('cameraImage', () => {
  it('rgba8 and bgra8 drop alpha; image_transport format strings; unknown formats are refused', () => {
    const rgba = Uint8Array.of(1, 2, 3, 255, 4, 5, 6, 255);
    expect(cameraImage('sensor_msgs/msg/Image', { width: 2, height: 1, encoding: 'rgba8', step: 8, data: rgba }, 'w')).toEqual({ kind: 'raw', width: 2, height: 1, rgb: Uint8Array.of(1, 2, 3, 4, 5, 6) });
    expect(cameraImage('sensor_msgs/msg/Image', { width: 2, height: 1, encoding: 'bgra8', step: 8, data: rgba }, 'w')).toEqual({ kind: 'raw', width: 2, height: 1, rgb: Uint8Array.of(3, 2, 1, 6, 5, 4) });
    expect(cameraImage('sensor_msgs/msg/CompressedImage', { format: 'rgb8; jpeg compressed bgr8', data: Uint8Array.of(1) }, 'w')).toMatchObject({ kind: 'compressed', format: 'jpeg' });
    expect(cameraImage('sensor_msgs/msg/CompressedImage', { format: 'png', data: Uint8Array.of(1) }, 'w')).toMatchObject({ kind: 'compressed', format: 'png' });
    expect(() => cameraImage('foxglove.CompressedImage', { format: 'webp', data: Uint8Array.of(1) }, 'w')).toThrow(/bad_image: w: unsupported format "webp"/);
    expect(() => cameraImage('sensor_msgs/msg/Image', { width: 4, height: 4, encoding: 'rgb8', step: 12, data: new Uint8Array(20) }, 'w')).toThrow(/bad_image: w: 20 bytes/);
  });
});

