import { execFile } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm, mkdir, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { promisify } from 'node:util';
import { DuckDBInstance, type DuckDBConnection } from '@duckdb/node-api';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DatasetShape, GridEpisode } from '../types.js';
import { assembleDataset, datasetFeatures, isStaged, stageEpisode, videoEncoding, WriterError, type AssembleOptions, type StageOptions } from './index.js';
import { stagedDir } from './stage.js';
import { validateLeRobotDataset } from '../validate/index.js';
import { probeFrameTimes } from '../validate/videos.js';

const run = promisify(execFile);
const W = 64;
const H = 48;
const FPS = 10;
const LENGTHS = [20, 12, 20];
const TASKS = ['pick the cube', 'place the cube', 'pick the cube'];

const shape: DatasetShape = {
  fps: FPS,
  robotType: 'so100',
  vectors: {
    'observation.state': { shape: [2], names: ['x', 'y'] },
    action: { shape: [1], names: ['gripper'] },
  },
  cameras: { 'observation.images.front': { width: W, height: H } },
  metadataKeys: ['operator'],
};
const h264: StageOptions = { codec: 'h264' };

function pixel(i: number, j: number, ep: number): number {
  return (j * 7 + i * 13 + ep * 31) % 256;
}

async function* frames(ep: number, n: number, width = W, height = H): AsyncGenerator<Uint8Array> {
  for (let i = 0; i < n; i++) yield Uint8Array.from({ length: width * height * 3 }, (_, j) => pixel(i, j, ep));
}

function episode(ep: number, n = LENGTHS[ep]!): GridEpisode {
  return {
    episodeId: `ep_${ep}`,
    task: TASKS[ep]!,
    length: n,
    vectors: {
      'observation.state': Float32Array.from({ length: n * 2 }, (_, k) => ep * 100 + k * 0.5),
      action: Float32Array.from({ length: n }, (_, k) => ep + k / 4),
    },
    success: ep !== 1,
    cameras: { 'observation.images.front': { width: W, height: H, frames: frames(ep, n) } },
    metadata: { operator: `op-${ep}` },
  };
}

async function stageAll(stageDir: string, opts: StageOptions = h264): Promise<void> {
  for (let i = 0; i < LENGTHS.length; i++) await stageEpisode(stageDir, i, episode(i), shape, opts);
}

async function listFiles(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (e.isFile()) out.push(relative(dir, join(e.parentPath, e.name)));
  }
  return out.sort();
}

let duck: Promise<DuckDBConnection> | undefined;
async function query(sql: string): Promise<Record<string, unknown>[]> {
  duck ??= DuckDBInstance.create(':memory:').then((db) => db.connect());
  return (await (await duck).runAndReadAll(sql)).getRowObjectsJson();
}

async function countFrames(path: string): Promise<number> {
  const { stdout } = await run('ffprobe', ['-v', 'error', '-count_frames', '-select_streams', 'v:0', '-show_entries', 'stream=nb_read_frames', '-of', 'csv=p=0', path]);
  return Number(stdout.trim());
}

let root: string;
let stageDir: string;
const total = LENGTHS.reduce((a, b) => a + b, 0);

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'lerobot-writer-'));
  stageDir = join(root, 'stage');
  await stageAll(stageDir);
});
afterAll(async () => {
  if (duck !== undefined) (await duck).closeSync();
  await rm(root, { recursive: true, force: true });
});

describe('a three-episode dataset with one camera', () => {
  let out: string;
  beforeAll(async () => {
    out = join(root, 'out');
    await assembleDataset(stageDir, out, 3, shape, { ...h264, provenance: { snapshot: 'snap_1' } });
  });

  it('lays out LeRobot v3.0 files, info.json listing every feature', async () => {
    expect(await listFiles(out)).toEqual([
      'data/chunk-000/file-000.parquet',
      'meta/episodes/chunk-000/file-000.parquet',
      'meta/fleet.json',
      'meta/info.json',
      'meta/stats.json',
      'meta/tasks.parquet',
      'videos/observation.images.front/chunk-000/file-000.mp4',
    ]);
    const info = JSON.parse(await readFile(join(out, 'meta/info.json'), 'utf8')) as Record<string, unknown>;
    expect(info).toMatchObject({
      codebase_version: 'v3.0',
      robot_type: 'so100',
      fps: 10,
      total_episodes: 3,
      total_frames: total,
      total_tasks: 2,
      chunks_size: 1000,
      data_files_size_in_mb: 100,
      video_files_size_in_mb: 200,
      splits: { train: '0:3' },
      data_path: 'data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet',
      video_path: 'videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4',
    });
    const features = info.features as Record<string, Record<string, unknown>>;
    expect(Object.keys(features)).toEqual([
      'observation.state', 'action', 'observation.images.front', 'next.done', 'next.success',
      'timestamp', 'frame_index', 'episode_index', 'index', 'task_index',
    ]);
    expect(features['observation.images.front']).toMatchObject({
      dtype: 'video',
      shape: [H, W, 3],
      names: ['height', 'width', 'channels'],
      info: { 'video.height': H, 'video.width': W, 'video.codec': 'h264', 'video.pix_fmt': 'yuv420p', 'video.fps': 10, 'video.channels': 3, has_audio: false, is_depth_map: false },
    });
    expect(features.action).toEqual({ dtype: 'float32', shape: [1], names: ['gripper'] });
  });

  it('writes data parquet that DuckDB reads with the right types and values', async () => {
    const file = join(out, 'data/chunk-000/file-000.parquet');
    const types = await query(`DESCRIBE SELECT * FROM '${file}'`);
    expect(types.map((r) => [r.column_name, r.column_type])).toEqual([
      ['observation.state', 'FLOAT[]'],
      ['action', 'FLOAT'],
      ['next.done', 'BOOLEAN'],
      ['next.success', 'BOOLEAN'],
      ['timestamp', 'FLOAT'],
      ['frame_index', 'BIGINT'],
      ['episode_index', 'BIGINT'],
      ['index', 'BIGINT'],
      ['task_index', 'BIGINT'],
    ]);
    const rows = await query(`SELECT * FROM '${file}' ORDER BY "index"`);
    expect(rows).toHaveLength(total);
    expect(rows.map((r) => Number(r.index))).toEqual(Array.from({ length: total }, (_, i) => i));
    const ep1 = rows.filter((r) => Number(r.episode_index) === 1);
    expect(ep1).toHaveLength(12);
    expect(ep1[3]).toMatchObject({ 'observation.state': [103, 103.5], action: 1.75, frame_index: '3', task_index: '1', 'next.done': false });
    expect(ep1[3]!.timestamp).toBeCloseTo(0.3, 6);
    expect(ep1.at(-1)).toMatchObject({ 'next.done': true, 'next.success': false });
    expect(rows.at(-1)).toMatchObject({ 'next.done': true, 'next.success': true, task_index: '0' });
    const codecs = await query(`SELECT DISTINCT compression FROM parquet_metadata('${file}')`);
    expect(codecs).toEqual([{ compression: 'SNAPPY' }]);
  });

  it('writes tasks.parquet as pandas would, row i holding task_index i', async () => {
    const file = join(out, 'meta/tasks.parquet');
    expect(await query(`SELECT task_index, task FROM '${file}'`)).toEqual([
      { task_index: '0', task: 'pick the cube' },
      { task_index: '1', task: 'place the cube' },
    ]);
    const kv = await query(`SELECT decode(key) AS key, decode(value) AS value FROM parquet_kv_metadata('${file}') WHERE decode(key) = 'pandas'`);
    expect(JSON.parse(kv[0]!.value as string)).toMatchObject({ index_columns: ['task'] });
  });

  it('writes meta/episodes with locations, timestamps, stats and provenance', async () => {
    const file = join(out, 'meta/episodes/chunk-000/file-000.parquet');
    const rows = await query(`SELECT * FROM '${file}' ORDER BY episode_index`);
    expect(rows.map((r) => [r.episode_index, r.tasks, r.length, r.dataset_from_index, r.dataset_to_index])).toEqual([
      ['0', ['pick the cube'], '20', '0', '20'],
      ['1', ['place the cube'], '12', '20', '32'],
      ['2', ['pick the cube'], '20', '32', '52'],
    ]);
    const k = 'videos/observation.images.front';
    expect(rows.map((r) => [r[`${k}/from_timestamp`], r[`${k}/to_timestamp`], r[`${k}/file_index`]])).toEqual([
      [0, 2, '0'],
      [2, 3.2, '0'],
      [3.2, 5.2, '0'],
    ]);
    expect(rows.map((r) => [r['meta/episode_id'], r['meta/operator'], r['meta/episodes/file_index']])).toEqual([
      ['ep_0', 'op-0', '0'],
      ['ep_1', 'op-1', '0'],
      ['ep_2', 'op-2', '0'],
    ]);
    const types: Record<string, unknown> = Object.fromEntries((await query(`DESCRIBE SELECT * FROM '${file}'`)).map((r) => [String(r.column_name), r.column_type]));
    expect(types).toMatchObject({
      'stats/observation.state/mean': 'DOUBLE[]',
      'stats/observation.state/count': 'BIGINT[]',
      'stats/observation.images.front/q50': 'DOUBLE[][][]',
      'stats/index/max': 'DOUBLE[]',
      'stats/task_index/min': 'DOUBLE[]',
    });
    expect(rows[1]!['stats/index/min']).toEqual([20]);
    expect(rows[1]!['stats/task_index/max']).toEqual([1]);
    expect(rows[2]!['stats/action/count']).toEqual(['20']);
    expect(rows[0]!['stats/observation.images.front/count']).toEqual(['20']);
  });

  it('aggregates stats.json over all frames, images per channel as [3, 1, 1]', async () => {
    const stats = JSON.parse(await readFile(join(out, 'meta/stats.json'), 'utf8')) as Record<string, Record<string, unknown>>;
    expect(Object.keys(stats.index!)).toEqual(['min', 'max', 'mean', 'std', 'count', 'q01', 'q10', 'q50', 'q90', 'q99']);
    expect(stats.index).toMatchObject({ min: [0], max: [total - 1], count: [total] });
    expect((stats.index!.mean as number[])[0]).toBeCloseTo((total - 1) / 2, 9);
    expect((stats['next.done']!.mean as number[])[0]).toBeCloseTo(3 / total, 9);
    const img = stats['observation.images.front']!;
    expect(img.count).toEqual([total]);
    expect((img.mean as number[][][]).map((c) => [c.length, c[0]!.length])).toEqual([[1, 1], [1, 1], [1, 1]]);
    expect((img.max as number[][][])[0]![0]![0]).toBeLessThanOrEqual(1);
  });

  it('has videos whose frame count is the total, each episode starting at its from_timestamp', async () => {
    const file = join(out, 'videos/observation.images.front/chunk-000/file-000.mp4');
    expect(await countFrames(file)).toBe(total);
    const { stdout } = await run('ffprobe', ['-v', 'error', '-select_streams', 'v:0', '-show_entries', 'packet=pts_time', '-of', 'csv=p=0', file]);
    const pts = stdout.trim().split('\n').map(Number).sort((a, b) => a - b);
    expect(pts[20]).toBeCloseTo(2, 6);
    expect(pts[32]).toBeCloseTo(3.2, 6);
  });
});

describe('file rotation', () => {
  it('starts a new data and video file per episode under tiny caps, rolling chunks at chunks_size', async () => {
    const out = join(root, 'rotated');
    const opts: AssembleOptions = { ...h264, dataFilesSizeInMb: 0.000_001, videoFilesSizeInMb: 0.000_001, chunksSize: 2 };
    const result = await assembleDataset(stageDir, out, 3, shape, opts);
    expect(result.dataFiles).toEqual(['data/chunk-000/file-000.parquet', 'data/chunk-000/file-001.parquet', 'data/chunk-001/file-000.parquet']);
    const vids = result.videoFiles['observation.images.front']!;
    expect(vids).toEqual([0, 1, 2].map((i) => `videos/observation.images.front/${['chunk-000/file-000', 'chunk-000/file-001', 'chunk-001/file-000'][i]}.mp4`));
    for (const [i, v] of vids.entries()) expect(await countFrames(join(out, v))).toBe(LENGTHS[i]);
    const rows = await query(`SELECT "data/chunk_index" AS c, "data/file_index" AS f, "videos/observation.images.front/from_timestamp" AS t FROM '${join(out, 'meta/episodes/chunk-000/file-000.parquet')}' ORDER BY episode_index`);
    expect(rows).toEqual([{ c: '0', f: '0', t: 0 }, { c: '0', f: '1', t: 0 }, { c: '1', f: '0', t: 0 }]);
    const data = await query(`SELECT min("index") AS lo, count(*) AS n FROM '${join(out, 'data/chunk-000/file-001.parquet')}'`);
    expect(data).toEqual([{ lo: '20', n: '12' }]);
  });

  it('keeps two episodes per file when the cap fits them', async () => {
    const sizes = await Promise.all([0, 1].map(async (i) => (await readFile(join(stagedDir(stageDir, i), 'frames.parquet'))).byteLength));
    const capMb = (sizes[0]! + sizes[1]! + 1) / (1024 * 1024);
    const result = await assembleDataset(stageDir, join(root, 'two'), 3, shape, { ...h264, dataFilesSizeInMb: capMb });
    expect(result.dataFiles).toEqual(['data/chunk-000/file-000.parquet', 'data/chunk-000/file-001.parquet']);
  });
});

describe('frame times at a rate whose frame is not a whole millisecond', () => {
  // At 30 fps an episode of 31 frames lasts 1.0333 s; an mp4's own duration is in ms, so a
  // concatenation that trusted it would start the next episode 0.67 ms late, past LeRobot's
  // tolerance of 0.1 ms (its loader then raises FrameTimestampError).
  for (const codec of ['h264', 'av1'] as const) {
    it(`every frame of every episode is at from_timestamp + i / fps (${codec})`, async () => {
      const lengths = [31, 17, 31];
      const shape30: DatasetShape = { ...shape, fps: 30, cameras: { 'observation.images.front': { width: 64, height: 64 } } };
      const dir = join(root, `fps30-${codec}`);
      for (const [i, n] of lengths.entries()) {
        const ep = episode(i, n);
        await stageEpisode(join(dir, 'stage'), i, { ...ep, cameras: { 'observation.images.front': { width: 64, height: 64, frames: frames(i, n, 64, 64) } } }, shape30, { codec });
      }
      await assembleDataset(join(dir, 'stage'), join(dir, 'out'), 3, shape30, { codec });
      const times = await probeFrameTimes('ffprobe', join(dir, 'out', 'videos/observation.images.front/chunk-000/file-000.mp4'));
      expect(times).toHaveLength(79);
      const worst = Math.max(...times.map((t, k) => Math.abs(t - k / 30)));
      expect(worst).toBeLessThan(1e-4);
      const res = await validateLeRobotDataset(join(dir, 'out'));
      expect(res.ok, JSON.stringify(res)).toBe(true);
    });
  }
});

describe('determinism and resume', () => {
  it('gives the same bytes for a resumed export as for an uninterrupted one', async () => {
    const resumedStage = join(root, 'stage-resumed');
    await stageEpisode(resumedStage, 0, episode(0), shape, h264);
    await stageEpisode(resumedStage, 1, episode(1), shape, h264);
    // An interrupted stage of episode 2: a temp dir left behind, nothing under its final name.
    await mkdir(join(resumedStage, '.tmp-crashed'), { recursive: true });
    await writeFile(join(resumedStage, '.tmp-crashed', 'frames.parquet'), 'partial');
    expect(await isStaged(resumedStage, 2)).toBe(false);
    expect(await isStaged(resumedStage, 1, shape, h264)).toBe(true);
    expect(await isStaged(resumedStage, 1, shape, { codec: 'av1' })).toBe(false);
    await stageEpisode(resumedStage, 2, episode(2), shape, h264);

    const a = join(root, 'det-a');
    const b = join(root, 'det-b');
    await assembleDataset(stageDir, a, 3, shape, h264);
    await assembleDataset(resumedStage, b, 3, shape, h264);
    const files = await listFiles(a);
    expect(await listFiles(b)).toEqual(files);
    for (const f of files) expect(Buffer.compare(await readFile(join(a, f)), await readFile(join(b, f))), f).toBe(0);
    for (const i of [0, 1, 2]) {
      const staged = await listFiles(stagedDir(stageDir, i));
      for (const f of staged) {
        const x = await readFile(join(stagedDir(stageDir, i), f));
        const y = await readFile(join(stagedDir(resumedStage, i), f));
        expect(Buffer.compare(x, y), `ep ${i} ${f}`).toBe(0);
      }
    }
  });

  it('encodes AV1 (libsvtav1) to the same bytes twice', async () => {
    const av1Shape: DatasetShape = { ...shape, cameras: { 'observation.images.front': { width: 64, height: 64 } } };
    const ep = (): GridEpisode => ({ ...episode(0, 6), cameras: { 'observation.images.front': { width: 64, height: 64, frames: frames(0, 6, 64, 64) } } });
    const dirs = [join(root, 'av1-a'), join(root, 'av1-b')];
    for (const d of dirs) await stageEpisode(d, 0, ep(), av1Shape);
    const [x, y] = await Promise.all(dirs.map((d) => readFile(join(stagedDir(d, 0), 'observation.images.front.mp4'))));
    expect(Buffer.compare(x!, y!)).toBe(0);
    const { stdout } = await run('ffprobe', ['-v', 'error', '-select_streams', 'v:0', '-show_entries', 'stream=codec_name,pix_fmt', '-of', 'csv=p=0', join(stagedDir(dirs[0]!, 0), 'observation.images.front.mp4')]);
    expect(stdout.trim()).toBe('av1,yuv420p');
  });

  it('pads odd and small frames right and bottom with black: to even for h264, to at least 64x64 for AV1', async () => {
    for (const [codec, src, want] of [
      ['h264', { width: 51, height: 39 }, { width: 52, height: 40 }],
      ['av1', { width: 57, height: 43 }, { width: 64, height: 64 }],
    ] as const) {
      const oddShape: DatasetShape = { ...shape, cameras: { 'observation.images.front': src } };
      // A flat grey picture: the codec keeps it within a few levels, so what is source and what is padding is plain.
      const grey = async function* () {
        for (let i = 0; i < 4; i++) yield new Uint8Array(src.width * src.height * 3).fill(180);
      };
      const dir = join(root, `pad-${codec}`);
      await stageEpisode(dir, 0, { ...episode(0, 4), cameras: { 'observation.images.front': { ...src, frames: grey() } } }, oddShape, { codec });
      const mp4 = join(stagedDir(dir, 0), 'observation.images.front.mp4');
      const { stdout } = await run('ffprobe', ['-v', 'error', '-select_streams', 'v:0', '-show_entries', 'stream=width,height', '-of', 'csv=p=0', mp4]);
      expect(stdout.trim()).toBe(`${want.width},${want.height}`);
      const { stdout: raw } = await run('ffmpeg', ['-v', 'error', '-i', mp4, '-frames:v', '1', '-f', 'rawvideo', '-pix_fmt', 'rgb24', 'pipe:1'], { encoding: 'buffer' });
      const px = raw as unknown as Buffer;
      const at = (x: number, y: number) => px[(y * want.width + x) * 3]!;
      expect(Math.abs(at(Math.floor(src.width / 2), Math.floor(src.height / 2)) - 180)).toBeLessThan(8);
      expect(at(want.width - 1, want.height - 1)).toBeLessThan(8);
      expect(at(want.width - 1, 0)).toBeLessThan(8);
    }
  });

  it('resize scales every frame to exactly WxH (no padding, no aspect kept): the source picture fills the video', async () => {
    const src = { width: 51, height: 39 };
    const oddShape: DatasetShape = { ...shape, cameras: { 'observation.images.front': src } };
    // Left half dark, right half bright: after scaling, the boundary is at the video's middle.
    const halves = async function* () {
      const f = new Uint8Array(src.width * src.height * 3);
      for (let y = 0; y < src.height; y++) for (let x = 0; x < src.width; x++) f.fill(x < src.width / 2 ? 30 : 220, (y * src.width + x) * 3, (y * src.width + x) * 3 + 3);
      for (let i = 0; i < 4; i++) yield f;
    };
    const dir = join(root, 'resize');
    const opts: StageOptions = { codec: 'av1', encoding: { resize: { width: 128, height: 64 } } };
    await stageEpisode(dir, 0, { ...episode(0, 4), cameras: { 'observation.images.front': { ...src, frames: halves() } } }, oddShape, opts);
    const mp4 = join(stagedDir(dir, 0), 'observation.images.front.mp4');
    const { stdout } = await run('ffprobe', ['-v', 'error', '-select_streams', 'v:0', '-show_entries', 'stream=width,height', '-of', 'csv=p=0', mp4]);
    expect(stdout.trim()).toBe('128,64');
    const { stdout: raw } = await run('ffmpeg', ['-v', 'error', '-i', mp4, '-frames:v', '1', '-f', 'rawvideo', '-pix_fmt', 'rgb24', 'pipe:1'], { encoding: 'buffer' });
    const px = raw as unknown as Buffer;
    const at = (x: number, y: number) => px[(y * 128 + x) * 3]!;
    // Bright up to the last column and row (padding would leave them black), dark on the left.
    expect(at(127, 63)).toBeGreaterThan(200);
    expect(at(100, 32)).toBeGreaterThan(200);
    expect(at(20, 32)).toBeLessThan(50);
    // A staged episode is not reused for another size.
    expect(await isStaged(dir, 0, oddShape, opts)).toBe(true);
    expect(await isStaged(dir, 0, oddShape, { codec: 'av1' })).toBe(false);
    expect(await isStaged(dir, 0, oddShape, { codec: 'av1', encoding: { resize: { width: 64, height: 64 } } })).toBe(false);
  });
});

describe('refusals', () => {
  it('refuses frames larger than the codec encodes with frame_too_large, before starting ffmpeg', async () => {
    const big: DatasetShape = { ...shape, cameras: { 'observation.images.front': { width: 16384, height: 8706 } } };
    const never: AsyncIterable<Uint8Array> = {
      [Symbol.asyncIterator]: () => {
        throw new Error('no frame may be read');
      },
    };
    const ep = { ...episode(0, 2), cameras: { 'observation.images.front': { width: 16384, height: 8706, frames: never } } };
    // 8706 rows: over SVT-AV1's 8704, within x264's 16384.
    await expect(stageEpisode(join(root, 'big'), 0, ep, big, { codec: 'av1' })).rejects.toMatchObject({ code: 'frame_too_large' });
    expect(() => datasetFeatures(big, videoEncoding('h264'))).not.toThrow();
  });

  it('refuses a camera that yields fewer frames than the episode length, staging nothing', async () => {
    const dir = join(root, 'short');
    const ep = { ...episode(0), cameras: { 'observation.images.front': { width: W, height: H, frames: frames(0, 5) } } };
    const err = await stageEpisode(dir, 0, ep, shape, h264).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(WriterError);
    expect(err).toMatchObject({ code: 'frame_mismatch' });
    expect(await isStaged(dir, 0)).toBe(false);
    expect(await readdir(dir)).toEqual([]);
  });

  it('refuses vectors of the wrong size and assembling an unstaged episode', async () => {
    const ep = { ...episode(0), vectors: { ...episode(0).vectors, action: new Float32Array(3) } };
    await expect(stageEpisode(join(root, 'bad'), 0, ep, shape, h264)).rejects.toMatchObject({ code: 'invalid_episode' });
    await expect(assembleDataset(stageDir, join(root, 'missing'), 4, shape, h264)).rejects.toMatchObject({ code: 'not_staged' });
  });
});
