/**
 * exportLeRobot with real recordings (the agent's synthetic recorder on a manual clock) read from
 * a `file://` source, and the faults the export must survive: a missing object, a checksum that
 * differs, a truncated MCAP, a recording without a mapped topic, an episode shorter than one
 * frame, --strict, a full disk (a 1 MiB tmpfs, as root) and the run after it.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { ManualClock } from '@fleet/protocol';
import { ManualScheduler } from '@fleet/agent';
import { SyntheticRecorder } from '@fleet/simulator/synthetic-recorder';
import { ExportError, exportLeRobot, type ExportOptions } from './export.js';
import { validateLeRobotDataset } from './validate/index.js';
import { JOINT_STATE_JSON_SCHEMA, RAW_IMAGE_JSON_SCHEMA, jointState, ms, writeMcap } from './source/fixtures.js';

let root: string;
/** `file://` source: `<bucket>/<object_key><path>`. */
let bucket: string;
const DST = 'dst_test';

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

/** Records `ms` of manual time into the bucket as episode `id` and returns its manifest line. */
async function record(id: string, durationMs: number, outcome = 'success'): Promise<Member> {
  const dir = join(root, 'robot', id);
  await mkdir(dir, { recursive: true });
  const clock = new ManualClock();
  const scheduler = new ManualScheduler(clock);
  const recorder = new SyntheticRecorder({ clock, scheduler, format: 'json', bytesPerSecond: 64 * 1024, chunkIntervalMs: 100, cameras: 1, cameraWidth: 64, cameraHeight: 48, cameraHz: 10, stateHz: 50 });
  const handle = await recorder.start(dir, { robotId: 'rbt_test', episodeId: id, startedAt: clock.now() });
  for (let t = 0; t < durationMs; t += 100) {
    scheduler.advance(100);
    await recorder.settled();
  }
  await handle.stop();
  return member(id, await readFile(join(dir, 'recording.mcap')), outcome);
}

/** Puts `bytes` in the bucket as the episode's recording and returns its manifest line. */
async function member(id: string, bytes: Buffer, outcome = 'success'): Promise<Member> {
  const key = `org/rbt_test/${id}/`;
  await mkdir(join(bucket, key), { recursive: true });
  await writeFile(join(bucket, key, 'recording.mcap'), bytes);
  return {
    id,
    robot_id: 'rbt_test',
    started_at: '2026-11-26T00:00:00.000Z',
    ended_at: '2026-11-26T00:00:02.000Z',
    outcome,
    task_id: 'pick-cube',
    metadata: { operator: 'ada' },
    files: [{ path: 'recording.mcap', size_bytes: bytes.length, sha256: sha256(bytes) }],
    locations: [{ destination_id: DST, state: 'verified', object_key: key, grant_id: 'gr_1' }],
  };
}

const header = (n: number) => ({ dataset_id: 'ds_test', name: 'test', filter: {}, snapshot_at: '2026-11-26T00:00:00.000Z', episode_count: n });

async function* lines(members: readonly Member[]) {
  yield header(members.length);
  yield* members;
}

function options(out: string, members: readonly Member[], extra: Partial<ExportOptions> = {}): ExportOptions {
  return { manifest: lines(members), outDir: out, sources: { [DST]: `file://${bucket}` }, codec: 'h264', ...extra };
}

let good: Member[];

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'lerobot-export-'));
  bucket = join(root, 'bucket');
  good = [await record('ep_one', 1500), await record('ep_two', 1200, 'failure'), await record('ep_three', 1000)];
}, 60_000);

afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

describe('exportLeRobot', () => {
  test('three recordings become a dataset validate passes; the work directory is gone; provenance names each episode', async () => {
    const out = join(root, 'ok');
    const progress: string[] = [];
    const res = await exportLeRobot(options(out, good, { onProgress: (p) => progress.push(p.phase) }));
    expect(res).toMatchObject({ datasetId: 'ds_test', episodes: 3, tasks: 1, skipped: [], resumed: 0 });
    expect(res.frames).toBeGreaterThan(30);
    expect(progress[0]).toBe('manifest');
    expect(progress.at(-1)).toBe('done');
    expect(existsSync(join(out, '.fleet-export'))).toBe(false);
    const v = await validateLeRobotDataset(out);
    expect(v.ok, JSON.stringify(v)).toBe(true);
    const fleet = JSON.parse(await readFile(join(out, 'meta', 'fleet.json'), 'utf8')) as { provenance: { dataset_id: string; skipped: unknown[] } };
    expect(fleet.provenance).toMatchObject({ dataset_id: 'ds_test', skipped: [] });
  });

  test('faults: a missing object, a checksum that differs, a truncated MCAP and a recording with no frame are skipped with their reasons; --strict fails on the first', async () => {
    const missing = await member('ep_missing', Buffer.from('x'));
    await rm(join(bucket, missing.locations[0]!.object_key, 'recording.mcap'));
    const tampered = await member('ep_tampered', await readFile(join(bucket, good[0]!.locations[0]!.object_key, 'recording.mcap')));
    tampered.files[0]!.sha256 = '0'.repeat(64);
    // An MCAP cut off as a crash leaves it (no summary), with the manifest's checksum of those bytes.
    const whole = await readFile(join(bucket, good[1]!.locations[0]!.object_key, 'recording.mcap'));
    const truncated = await member('ep_truncated', whole.subarray(0, Math.floor(whole.length / 2)));
    // Joint states and commands, and a camera topic without a single frame.
    const emptyPath = join(root, 'empty.mcap');
    const names = ['j1'];
    await writeMcap(emptyPath, [
      { topic: '/joint_states', schemaName: 'fleet.JointState', schema: JOINT_STATE_JSON_SCHEMA, messages: [0, 100, 200].map((t) => ({ logTimeNs: ms(t), data: jointState(names, [t]) })) },
      { topic: '/joint_commands', schemaName: 'fleet.JointCommand', schema: JOINT_STATE_JSON_SCHEMA, messages: [0, 100, 200].map((t) => ({ logTimeNs: ms(t), data: jointState(names, [t]) })) },
      { topic: '/camera/image', schemaName: 'foxglove.RawImage', schema: RAW_IMAGE_JSON_SCHEMA, messages: [] },
    ]);
    const noFrame = await member('ep_no_frame', await readFile(emptyPath));
    const members = [good[0]!, missing, tampered, truncated, noFrame, good[2]!];

    await expect(exportLeRobot(options(join(root, 'strict'), members, { strict: true }))).rejects.toMatchObject({ code: 'strict', message: expect.stringContaining('ep_missing') as unknown });

    const out = join(root, 'faults');
    const res = await exportLeRobot(options(out, members));
    expect(res.episodes).toBe(2);
    expect(res.skipped.map((s) => [s.episode_id, s.reason])).toEqual([
      ['ep_missing', 'missing'],
      ['ep_tampered', 'checksum_mismatch'],
      ['ep_truncated', 'corrupt_recording'],
      ['ep_no_frame', 'too_short'],
    ]);
    for (const s of res.skipped) expect(s.message.length).toBeGreaterThan(10);
    expect((await validateLeRobotDataset(out)).ok).toBe(true);
    const fleet = JSON.parse(await readFile(join(out, 'meta', 'fleet.json'), 'utf8')) as { provenance: { skipped: { episode_id: string }[] } };
    expect(fleet.provenance.skipped.map((s) => s.episode_id)).toEqual(['ep_missing', 'ep_tampered', 'ep_truncated', 'ep_no_frame']);
  });

  test('a mapping naming a topic the recording lacks is an error naming the topic, before anything is written', async () => {
    const out = join(root, 'mapping');
    const mapping = {
      features: {
        'observation.state': { topic: '/joint_states', fields: ['position'], names_from: 'name' },
        action: { topic: '/joint_commands', fields: ['position'] },
        'observation.images.wrist': { topic: '/camera/wrist/image' },
      },
    };
    const err = await exportLeRobot(options(out, good, { mapping })).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ExportError);
    expect(err).toMatchObject({ code: 'mapping', message: expect.stringContaining('/camera/wrist/image') as unknown });
    expect(existsSync(join(out, 'meta', 'info.json'))).toBe(false);
  });

  const root_ = process.getuid?.() === 0;
  test.skipIf(!root_)('a disk that fills mid-export is a clear error; the next run, with room, continues and finishes', async () => {
    const mnt = join(root, 'small');
    await mkdir(mnt);
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=256k', 'tmpfs', mnt]);
    try {
      const out = join(mnt, 'ds');
      const err = await exportLeRobot(options(out, good)).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ExportError);
      expect(err).toMatchObject({ code: 'disk_full', message: expect.stringContaining('the disk is full') as unknown });
      expect(existsSync(join(out, 'meta', 'info.json'))).toBe(false);
      const before = await readdir(join(out, '.fleet-export'));
      expect(before).toContain('manifest.ndjson');
      execFileSync('mount', ['-o', 'remount,size=64m', mnt]);
      const res = await exportLeRobot(options(out, good));
      expect(res.episodes).toBe(3);
      expect((await validateLeRobotDataset(out)).ok).toBe(true);
      // The same bytes as the export that never ran out of room.
      for (const f of ['meta/info.json', 'meta/stats.json', 'meta/tasks.parquet', 'data/chunk-000/file-000.parquet']) {
        expect(sha256(await readFile(join(out, f))), f).toBe(sha256(await readFile(join(root, 'ok', f))));
      }
    } finally {
      execFileSync('umount', [mnt]);
    }
  });

  test('a second run over a finished dataset refuses to overwrite it', async () => {
    const out = join(root, 'ok');
    expect((await stat(join(out, 'meta', 'info.json'))).isFile()).toBe(true);
    await expect(exportLeRobot(options(out, good))).rejects.toMatchObject({ code: 'io', message: expect.stringContaining('already holds a dataset') as unknown });
  });
});

