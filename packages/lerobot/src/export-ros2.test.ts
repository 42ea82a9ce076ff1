/**
 * exportLeRobot on ROS 2 recordings: the simulator's default recording (a rosbag2 directory, cdr
 * sensor_msgs, JPEG frames of 57x43, padded for AV1) with the default mapping and the default
 * codec, and a bag written by Python's rosbags (JointState at 50 Hz with joints out of order,
 * CompressedImage JPEG at 10 Hz, Image rgb8 at 7 Hz, TwistStamped, header stamps 3 ms before log
 * time) with a mapping that picks joints by name and reads nested fields. Both checked with the
 * project's validator; state and action values checked against the bag's own numbers.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DuckDBInstance } from '@duckdb/node-api';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { ManualClock } from '@fleet/protocol';
import { ManualScheduler } from '@fleet/agent';
import { createSyntheticRecorder } from '@fleet/simulator/synthetic-recorder';
import { ensurePythonEnv } from '../../../test/support/python.js';
import { exportLeRobot, type ExportOptions } from './export.js';
import { validateLeRobotDataset } from './validate/index.js';

const FIXTURES = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', 'recordings', 'test-fixtures');
const DST = 'dst_test';
let root: string;
let bucket: string;

interface Member {
  id: string;
  robot_id: string;
  started_at: string;
  ended_at: string;
  outcome: string;
  task_id: string;
  files: { path: string; size_bytes: number; sha256: string }[];
  locations: { destination_id: string; state: string; object_key: string; grant_id: string }[];
  metadata: Record<string, unknown>;
}

const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

async function listFiles(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(dir, { withFileTypes: true, recursive: true })) if (e.isFile()) out.push(relative(dir, join(e.parentPath, e.name)));
  return out.sort();
}

/** Uploads an episode directory (every file under it) to the bucket and returns its manifest line. */
async function member(id: string, dir: string): Promise<Member> {
  const key = `org/rbt_test/${id}/`;
  const files = [];
  for (const path of await listFiles(dir)) {
    const bytes = await readFile(join(dir, path));
    await mkdir(dirname(join(bucket, key, path)), { recursive: true });
    await writeFile(join(bucket, key, path), bytes);
    files.push({ path, size_bytes: bytes.length, sha256: sha256(bytes) });
  }
  return {
    id,
    robot_id: 'rbt_test',
    started_at: '2026-11-26T00:00:00.000Z',
    ended_at: '2026-11-26T00:00:02.000Z',
    outcome: 'success',
    task_id: 'pick-cube',
    metadata: {},
    files,
    locations: [{ destination_id: DST, state: 'verified', object_key: key, grant_id: 'gr_1' }],
  };
}

async function* lines(members: readonly Member[]) {
  yield { dataset_id: 'ds_test', name: 'test', filter: {}, snapshot_at: '2026-11-26T00:00:00.000Z', episode_count: members.length };
  yield* members;
}

const options = (out: string, members: readonly Member[], extra: Partial<ExportOptions> = {}): ExportOptions => ({ manifest: lines(members), outDir: out, sources: { [DST]: `file://${bucket}` }, ...extra });

/** The simulator's default recording (ros2 format, default byte rate) of `durationMs` on a manual clock. */
async function simulate(id: string, durationMs: number, format?: 'json'): Promise<string> {
  const dir = join(root, 'robot', id);
  await mkdir(dir, { recursive: true });
  const clock = new ManualClock();
  const scheduler = new ManualScheduler(clock);
  const recorder = createSyntheticRecorder({ clock, scheduler, ...(format !== undefined ? { format } : {}) });
  const handle = await recorder.start(dir, { robotId: 'rbt_test', episodeId: id, startedAt: clock.now() });
  for (let t = 0; t < durationMs; t += 100) {
    scheduler.advance(100);
    await recorder.settled();
  }
  await handle.stop();
  return dir;
}

async function info(out: string) {
  return JSON.parse(await readFile(join(out, 'meta', 'info.json'), 'utf8')) as { total_episodes: number; features: Record<string, { shape: number[]; names: unknown; info?: Record<string, unknown> }> };
}

/** Every frame of the dataset as DuckDB reads the parquet files (a reader that is not ours). */
async function frames(out: string): Promise<{ frame_index: number; state: number[]; action: number[]; velocity: number[] }[]> {
  const db = await DuckDBInstance.create(':memory:');
  const conn = await db.connect();
  const reader = await conn.runAndReadAll(
    `select frame_index, "observation.state" state, action, "observation.velocity" velocity from '${join(out, 'data', '*', '*.parquet')}' order by "index"`,
  );
  const rows = reader.getRowObjectsJson() as { frame_index: string; state: number[]; action: number[]; velocity: number[] }[];
  conn.closeSync();
  return rows.map((r) => ({ ...r, frame_index: Number(r.frame_index) }));
}

interface BagExpected {
  stamp_offset_ns: number;
  joint_states: { t: string; name: string[]; position: number[] }[];
  joint_commands: { t: string; name: string[]; position: number[] }[];
  cmd_vel: { t: string; linear: number[] }[];
}

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'lerobot-ros2-'));
  bucket = join(root, 'bucket');
}, 60_000);

afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

describe('exportLeRobot on ROS 2 bags', () => {
  test("the simulator's default recording exports with the default mapping and codec (57x43 JPEG frames padded to 64x64 for AV1)", async () => {
    const members = [await member('ep_a', await simulate('ep_a', 2000)), await member('ep_b', await simulate('ep_b', 1500))];
    expect(members[0]!.files.map((f) => f.path)).toEqual(['bag/bag_0.mcap', 'bag/metadata.yaml']);
    const out = join(root, 'sim');
    const res = await exportLeRobot(options(out, members));
    expect(res).toMatchObject({ episodes: 2, skipped: [] });
    const v = await validateLeRobotDataset(out);
    expect(v.ok, JSON.stringify(v)).toBe(true);
    const i = await info(out);
    expect(i.features['observation.images.front']).toMatchObject({ shape: [64, 64, 3], info: { 'video.codec': 'av1', 'video.width': 64, 'video.height': 64 } });
    expect(i.features['observation.state']!.shape).toEqual([7]);
    expect(i.features.action!.shape).toEqual([7]);
  });

  test("the simulator's JSON recording at its default rate (51x39 RawImage frames) exports with the default codec too", async () => {
    const out = join(root, 'sim-json');
    const res = await exportLeRobot(options(out, [await member('ep_json', await simulate('ep_json', 1500, 'json'))]));
    expect(res).toMatchObject({ episodes: 1, skipped: [] });
    expect((await validateLeRobotDataset(out)).ok).toBe(true);
    expect((await info(out)).features['observation.images.front']).toMatchObject({ shape: [64, 64, 3], info: { 'video.codec': 'av1' } });
  });

  test('a bag written by rosbags: joints chosen by name, nested fields, header stamps, JPEG and rgb8 cameras at other rates', async () => {
    const python = ensurePythonEnv();
    const dir = join(root, 'rosbags', 'ep_bag');
    await mkdir(dirname(dir), { recursive: true });
    execFileSync(python, [join(FIXTURES, 'write_rosbag2.py'), join(dir, 'bag'), join(root, 'bag.json')]);
    const bag = JSON.parse(await readFile(join(root, 'bag.json'), 'utf8')) as BagExpected;
    const out = join(root, 'bag-out');
    const mapping = {
      fps: 10,
      robot_type: 'test-arm',
      features: {
        'observation.state': { topic: '/joint_states', fields: ['position'], joints: ['j1', 'j2', 'j3'] },
        action: { topic: '/joint_commands', fields: ['position'], joints: ['j1', 'j2', 'j3'] },
        'observation.velocity': { topic: '/cmd_vel', fields: ['twist.linear.x', 'twist.linear.y'] },
        'observation.images.front': { topic: '/camera/front/image_raw/compressed' },
        'observation.images.raw': { topic: '/camera/front/image_raw' },
      },
    };
    const res = await exportLeRobot(options(out, [await member('ep_bag', dir)], { mapping, codec: 'h264' }));
    expect(res).toMatchObject({ episodes: 1, skipped: [] });
    const v = await validateLeRobotDataset(out);
    expect(v.ok, JSON.stringify(v)).toBe(true);
    const i = await info(out);
    expect(i.features['observation.state']).toMatchObject({ shape: [3], names: ['j1', 'j2', 'j3'] });
    expect(i.features['observation.velocity']).toMatchObject({ shape: [2], names: ['twist.linear.x', 'twist.linear.y'] });
    // 57x43 padded to even for h264.
    expect(i.features['observation.images.front']!.shape).toEqual([44, 58, 3]);
    expect(i.features['observation.images.raw']!.shape).toEqual([44, 58, 3]);

    // The grid starts at the latest first header stamp of the vector topics; hold takes the latest
    // sample at or before each frame. Recomputed here from the bag's own numbers.
    const stamp = (t: string) => BigInt(t) - BigInt(bag.stamp_offset_ns);
    const start = [bag.joint_states, bag.joint_commands, bag.cmd_vel].map((rows) => stamp(rows[0]!.t)).reduce((a, b) => (a > b ? a : b));
    const hold = <T extends { t: string }>(rows: T[], t: bigint): T => rows.filter((r) => stamp(r.t) <= t).at(-1) ?? rows[0]!;
    const byName = (r: { name: string[]; position: number[] }) => ['j1', 'j2', 'j3'].map((j) => r.position[r.name.indexOf(j)]!);
    const rows = await frames(out);
    expect(rows.length).toBeGreaterThan(15);
    for (const row of rows) {
      const t = start + BigInt(row.frame_index) * 100_000_000n;
      const f32 = (xs: number[]) => xs.map((x) => Math.fround(x));
      expect(row.state.map(Math.fround)).toEqual(f32(byName(hold(bag.joint_states, t))));
      expect(row.action.map(Math.fround)).toEqual(f32(byName(hold(bag.joint_commands, t))));
      expect(row.velocity.map(Math.fround)).toEqual(f32(hold(bag.cmd_vel, t).linear.slice(0, 2)));
    }
  });
});
