/**
 * exportLeRobot with real recordings (the agent's synthetic recorder on a manual clock) read from
 * a `file://` source, and the faults the export must survive: a missing object, a checksum that
 * differs, a truncated MCAP, a recording without a mapped topic, an episode shorter than one
 * frame, --strict, a full disk (a 1 MiB tmpfs, as root) and the run after it. Then progress on a
 * manual clock while an S3 download stalls mid-body, and the refusals that name an export code
 * (options, frame sizes, a missing ffmpeg) instead of ending as an unknown error.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdir, mkdtemp, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test, vi } from 'vitest';
import { ManualClock } from '@fleet/protocol';
import { ManualScheduler } from '@fleet/agent';
import { SyntheticRecorder } from '@fleet/simulator/synthetic-recorder';
import { ExportError, exportLeRobot, type ExportOptions } from './export.js';
import type { ExportProgress } from './progress.js';
import { validateLeRobotDataset } from './validate/index.js';
import { JOINT_STATE_JSON_SCHEMA, RAW_IMAGE_JSON_SCHEMA, jointState, mcapBytes, ms, rawImage, writeMcap } from './source/fixtures.js';

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


/**
 * An S3-compatible store in process (path-style GET) whose object bodies stop after each of
 * `cuts` bytes until the test calls `release()`: a download that stalls mid-body, under the
 * test's control.
 */
async function stallingS3(objects: Map<string, Buffer>, cuts: readonly number[]) {
  const gates = cuts.map(() => {
    let open!: () => void;
    const opened = new Promise<void>((ok) => (open = ok));
    return { open, opened };
  });
  let released = 0;
  const server = createServer((req, res) => {
    const body = objects.get(decodeURIComponent(new URL(req.url!, 'http://x').pathname));
    if (body === undefined) {
      res.writeHead(404, { 'content-type': 'application/xml' });
      res.end('<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchKey</Code><Message>NoSuchKey</Message></Error>');
      return;
    }
    res.writeHead(200, { 'content-length': String(body.length), 'content-type': 'application/octet-stream', etag: '"x"' });
    void (async () => {
      let from = 0;
      for (const [i, cut] of cuts.entries()) {
        res.write(body.subarray(from, cut));
        from = cut;
        await gates[i]!.opened;
      }
      res.end(body.subarray(from));
    })();
  });
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  return {
    endpoint: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    release: () => gates[released++]!.open(),
    [Symbol.asyncDispose]: () => new Promise<void>((ok) => server.close(() => ok())),
  };
}

describe('exportLeRobot progress', () => {
  test('a line every tick of the injected clock while a download stalls mid-body, with the bytes counted as they arrive', async () => {
    const bytes = await readFile(join(bucket, good[0]!.locations[0]!.object_key, 'recording.mcap'));
    const cuts = [Math.floor(bytes.length / 3), Math.floor((2 * bytes.length) / 3)];
    await using s3 = await stallingS3(new Map([[`/episodes/${good[0]!.locations[0]!.object_key}recording.mcap`, bytes]]), cuts);
    const clock = new ManualClock();
    const scheduler = new ManualScheduler(clock);
    const seen: ExportProgress[] = [];
    const running = exportLeRobot({
      ...options(join(root, 'progress'), [good[0]!]),
      sources: { [DST]: 's3://episodes' },
      s3: { endpoint: s3.endpoint, forcePathStyle: true, region: 'us-east-1', credentials: { accessKeyId: 'k', secretAccessKey: 's' }, maxAttempts: 1 },
      clock,
      scheduler,
      onProgress: (p) => seen.push(p),
    });
    const tick = () => {
      const before = seen.length;
      scheduler.advance(1000);
      // Exactly one line per tick, whatever else happens.
      expect(seen.length).toBe(before + 1);
      return seen.at(-1)!;
    };
    // Each stall: tick until the bytes sent so far have arrived, then three more ticks with the
    // body still stalled, each a line with the same count and the episode still downloading.
    for (const cut of cuts) {
      await vi.waitFor(() => expect(tick().bytes).toBe(cut), { timeout: 30_000, interval: 10 });
      for (let i = 0; i < 3; i++) expect(tick()).toMatchObject({ phase: 'episodes', bytes: cut, done: 0, total: 1, working: { downloading: 1, decoding: 0, encoding: 0 } });
      s3.release();
    }
    const res = await running;
    expect(res.episodes).toBe(1);
    expect(seen.at(-1)).toMatchObject({ phase: 'done', bytes: bytes.length, done: 1, frames: res.frames });
    // The clock the lines carry is the injected one: elapsed time is what the test moved it by.
    expect(seen.at(-1)!.elapsedMs).toBeGreaterThanOrEqual(9000);
    // The ticker is stopped with the export: no timer left behind.
    expect(scheduler.pending).toBe(0);
  });
});

describe('exportLeRobot refusals with a documented code', () => {
  test('options the export cannot run with: resize the codec cannot encode, a bad source URL', async () => {
    const out = join(root, 'bad-options');
    await expect(exportLeRobot(options(out, good, { resize: { width: 63, height: 48 } }))).rejects.toMatchObject({ code: 'options', message: expect.stringContaining('even') as unknown });
    await expect(exportLeRobot(options(out, good, { codec: 'av1', resize: { width: 32, height: 32 } }))).rejects.toMatchObject({ code: 'options', message: expect.stringContaining('64x64') as unknown });
    await expect(exportLeRobot(options(out, good, { resize: { width: 16386, height: 64 } }))).rejects.toMatchObject({ code: 'options', message: expect.stringContaining('16384') as unknown });
    await expect(exportLeRobot(options(out, good, { sources: { [DST]: 'ftp://x/y' } }))).rejects.toMatchObject({ code: 'options' });
    await expect(exportLeRobot(options(out, good, { videoFileSizeMb: 0 }))).rejects.toMatchObject({ code: 'options' });
    expect(existsSync(out)).toBe(false);
  });

  test('--resize: every camera scaled to exactly WxH; info.json says so; a resumed run with another size is resume_mismatch', async () => {
    const out = join(root, 'resized');
    const resize = { width: 96, height: 40 };
    // Stopped by --strict on a missing episode after the first is staged: an unfinished export.
    const missing = await member('ep_gone', Buffer.from('x'));
    await rm(join(bucket, missing.locations[0]!.object_key, 'recording.mcap'));
    await expect(exportLeRobot(options(out, [good[0]!, missing], { resize, strict: true, keepWork: true }))).rejects.toMatchObject({ code: 'strict' });
    await expect(exportLeRobot(options(out, [good[0]!, missing], { resize: { width: 64, height: 48 } }))).rejects.toMatchObject({ code: 'resume_mismatch' });
    await expect(exportLeRobot(options(out, [good[0]!, missing]))).rejects.toMatchObject({ code: 'resume_mismatch' });
    const res = await exportLeRobot(options(out, [good[0]!, missing], { resize }));
    expect(res).toMatchObject({ episodes: 1, resumed: 1 });
    expect((await validateLeRobotDataset(out)).ok).toBe(true);
    const info = JSON.parse(await readFile(join(out, 'meta', 'info.json'), 'utf8')) as { features: Record<string, { shape: number[]; info: Record<string, unknown> }> };
    expect(info.features['observation.images.front']).toMatchObject({ shape: [40, 96, 3], info: { 'video.width': 96, 'video.height': 40 } });
    const probe = execFileSync('ffprobe', ['-v', 'error', '-select_streams', 'v:0', '-show_entries', 'stream=width,height', '-of', 'csv=p=0', join(out, 'videos', 'observation.images.front', 'chunk-000', 'file-000.mp4')], { encoding: 'utf8' });
    expect(probe.trim()).toBe('96,40');
    const fleet = JSON.parse(await readFile(join(out, 'meta', 'fleet.json'), 'utf8')) as { video: { scale?: unknown } };
    expect(fleet.video.scale).toEqual({ width: 96, height: 40, flags: 'bilinear+accurate_rnd' });
  });

  test('frames larger than the codec encodes stop the export with frame_size, before ffmpeg runs; --resize brings them down', async () => {
    const t = [0, 100, 200, 300];
    const wide = await mcapBytes([
      { topic: '/joint_states', schemaName: 'fleet.JointState', schema: JOINT_STATE_JSON_SCHEMA, messages: t.map((x) => ({ logTimeNs: ms(x), data: jointState(['j1'], [x]) })) },
      { topic: '/joint_commands', schemaName: 'fleet.JointCommand', schema: JOINT_STATE_JSON_SCHEMA, messages: t.map((x) => ({ logTimeNs: ms(x), data: jointState(['j1'], [x]) })) },
      { topic: '/camera/image', schemaName: 'foxglove.RawImage', schema: RAW_IMAGE_JSON_SCHEMA, messages: t.map((x) => ({ logTimeNs: ms(x), data: rawImage(16386, 2, x % 256) })) },
    ]);
    const m = await member('ep_wide', wide);
    await expect(exportLeRobot(options(join(root, 'wide'), [m]))).rejects.toMatchObject({ code: 'frame_size', message: expect.stringMatching(/16386x2 .*16384x16384.*--resize/) as unknown });
    const res = await exportLeRobot(options(join(root, 'wide-resized'), [m], { resize: { width: 256, height: 64 } }));
    expect(res.episodes).toBe(1);
  });

  test('ffmpeg missing is ffmpeg_failed, naming the binary', async () => {
    const err = await exportLeRobot(options(join(root, 'no-ffmpeg'), [good[0]!], { encoding: { ffmpegPath: join(root, 'no', 'ffmpeg') } })).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ExportError);
    expect(err).toMatchObject({ code: 'ffmpeg_failed', message: expect.stringContaining('could not start') as unknown });
  });
});
