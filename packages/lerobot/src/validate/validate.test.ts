import { execFile } from 'node:child_process';
import { cp, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import * as arrow from 'apache-arrow';
import * as pw from 'parquet-wasm/node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { validateLeRobotDataset, type Invariant, type ValidationResult } from './index.js';

const run = promisify(execFile);

// A small valid dataset: two episodes (12 + 8 frames at 10 fps) in one data file and one video.
const FPS = 10;
const LENGTHS = [12, 8];
const TASKS = ['pick the cube', 'place the cube'];
const CAMERA = 'observation.images.front';
const FEATURES = {
  'observation.state': { dtype: 'float32', shape: [2], names: ['x', 'y'] },
  action: { dtype: 'float32', shape: [2], names: ['x', 'y'] },
  'next.success': { dtype: 'bool', shape: [1], names: null },
  [CAMERA]: { dtype: 'video', shape: [48, 64, 3], names: ['height', 'width', 'channels'] },
  timestamp: { dtype: 'float32', shape: [1], names: null },
  frame_index: { dtype: 'int64', shape: [1], names: null },
  episode_index: { dtype: 'int64', shape: [1], names: null },
  index: { dtype: 'int64', shape: [1], names: null },
  task_index: { dtype: 'int64', shape: [1], names: null },
} as const;
const STATS = ['min', 'max', 'mean', 'std', 'count', 'q01', 'q10', 'q50', 'q90', 'q99'];
const DATA_FILE = 'data/chunk-000/file-000.parquet';
const VIDEO_FILE = `videos/${CAMERA}/chunk-000/file-000.mp4`;

const f32 = new arrow.Float32();
const f64 = new arrow.Float64();
const i64 = new arrow.Int64();
const listOf = (type: arrow.DataType) => new arrow.List(new arrow.Field('item', type, true));

async function writeParquet(path: string, columns: Record<string, arrow.Vector>, metadata: Array<[string, string]> = []): Promise<void> {
  const ipc = arrow.tableToIPC(new arrow.Table(columns), 'stream');
  const props = new pw.WriterPropertiesBuilder().setCompression(pw.Compression.SNAPPY).setKeyValueMetadata(new Map(metadata)).build();
  await mkdir(dirname(path), { recursive: true });
  await writeFile(path, pw.writeParquet(pw.Table.fromIPCStream(ipc), props));
}

/** The data file's columns as plain arrays, for a test to bend before writing. */
function dataRows() {
  const rows = { state: [] as number[][], action: [] as number[][], success: [] as boolean[], timestamp: [] as number[], frame: [] as number[], episode: [] as number[], index: [] as number[], task: [] as number[] };
  let index = 0;
  LENGTHS.forEach((length, episode) => {
    for (let frame = 0; frame < length; frame++) {
      rows.state.push([frame, -frame]);
      rows.action.push([frame + 1, -frame - 1]);
      rows.success.push(frame === length - 1);
      rows.timestamp.push(frame / FPS);
      rows.frame.push(frame);
      rows.episode.push(episode);
      rows.index.push(index++);
      rows.task.push(episode);
    }
  });
  return rows;
}

function dataColumns(rows: ReturnType<typeof dataRows>): Record<string, arrow.Vector> {
  const big = (xs: number[]) => arrow.vectorFromArray(xs.map(BigInt), i64);
  return {
    'observation.state': arrow.vectorFromArray(rows.state, listOf(f32)),
    action: arrow.vectorFromArray(rows.action, listOf(f32)),
    'next.success': arrow.vectorFromArray(rows.success, new arrow.Bool()),
    timestamp: arrow.vectorFromArray(rows.timestamp, f32),
    frame_index: big(rows.frame),
    episode_index: big(rows.episode),
    index: big(rows.index),
    task_index: big(rows.task),
  };
}

function statShape(key: string, stat: string): number[] {
  const ft = FEATURES[key as keyof typeof FEATURES];
  if (stat === 'count') return [1];
  return ft.dtype === 'video' ? [3, 1, 1] : [...ft.shape];
}

function filled(shape: number[]): unknown {
  const [n, ...rest] = shape;
  return Array.from({ length: n ?? 0 }, () => (rest.length === 0 ? 0.5 : filled(rest)));
}

function statsJson(): Record<string, Record<string, unknown>> {
  return Object.fromEntries(Object.keys(FEATURES).map((key) => [key, Object.fromEntries(STATS.map((s) => [s, filled(statShape(key, s))]))]));
}

async function writeTasks(dir: string, pandas = true): Promise<void> {
  const metadata: Array<[string, string]> = pandas ? [['pandas', JSON.stringify({ index_columns: ['task'], columns: [] })]] : [];
  await writeParquet(join(dir, 'meta/tasks.parquet'), {
    task_index: arrow.vectorFromArray(TASKS.map((_, i) => BigInt(i)), i64),
    task: arrow.vectorFromArray(TASKS, new arrow.Utf8()),
  }, metadata);
}

async function writeVideo(dir: string, frames: number): Promise<void> {
  const path = join(dir, VIDEO_FILE);
  await mkdir(dirname(path), { recursive: true });
  await run('ffmpeg', ['-v', 'error', '-y', '-f', 'lavfi', '-i', `testsrc=size=64x48:rate=${FPS}`, '-frames:v', String(frames), '-c:v', 'libx264', '-pix_fmt', 'yuv420p', path]);
}

async function buildDataset(dir: string): Promise<void> {
  const total = LENGTHS.reduce((a, b) => a + b, 0);
  const info = {
    codebase_version: 'v3.0', robot_type: 'so100', total_episodes: LENGTHS.length, total_frames: total, total_tasks: TASKS.length,
    chunks_size: 1000, data_files_size_in_mb: 100, video_files_size_in_mb: 200, fps: FPS, splits: { train: `0:${LENGTHS.length}` },
    data_path: 'data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet',
    video_path: 'videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4',
    features: FEATURES,
  };
  await mkdir(join(dir, 'meta'), { recursive: true });
  await writeFile(join(dir, 'meta/info.json'), JSON.stringify(info, null, 2));
  await writeFile(join(dir, 'meta/stats.json'), JSON.stringify(statsJson()));
  await writeTasks(dir);
  await writeParquet(join(dir, DATA_FILE), dataColumns(dataRows()));
  await writeVideo(dir, total);

  const starts = LENGTHS.map((_, i) => LENGTHS.slice(0, i).reduce((a, b) => a + b, 0));
  const zeros = LENGTHS.map(() => 0n);
  const episodes: Record<string, arrow.Vector> = {
    episode_index: arrow.vectorFromArray(LENGTHS.map((_, i) => BigInt(i)), i64),
    tasks: arrow.vectorFromArray(LENGTHS.map((_, i) => [TASKS[i]!]), listOf(new arrow.Utf8())),
    length: arrow.vectorFromArray(LENGTHS.map(BigInt), i64),
    'data/chunk_index': arrow.vectorFromArray(zeros, i64),
    'data/file_index': arrow.vectorFromArray(zeros, i64),
    dataset_from_index: arrow.vectorFromArray(starts.map(BigInt), i64),
    dataset_to_index: arrow.vectorFromArray(starts.map((s, i) => BigInt(s + LENGTHS[i]!)), i64),
    [`videos/${CAMERA}/chunk_index`]: arrow.vectorFromArray(zeros, i64),
    [`videos/${CAMERA}/file_index`]: arrow.vectorFromArray(zeros, i64),
    [`videos/${CAMERA}/from_timestamp`]: arrow.vectorFromArray(starts.map((s) => s / FPS), f64),
    [`videos/${CAMERA}/to_timestamp`]: arrow.vectorFromArray(starts.map((s, i) => (s + LENGTHS[i]!) / FPS), f64),
    'meta/episodes/chunk_index': arrow.vectorFromArray(zeros, i64),
    'meta/episodes/file_index': arrow.vectorFromArray(zeros, i64),
  };
  for (const key of Object.keys(FEATURES)) {
    for (const stat of STATS) {
      const n = statShape(key, stat).reduce((a, b) => a * b, 1);
      episodes[`stats/${key}/${stat}`] = arrow.vectorFromArray(LENGTHS.map(() => Array.from({ length: n }, () => 0.5)), listOf(f64));
    }
  }
  await writeParquet(join(dir, 'meta/episodes/chunk-000/file-000.parquet'), episodes);
}

let root: string;
let base: string;
let copies = 0;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'lerobot-validate-'));
  base = join(root, 'base');
  await buildDataset(base);
});

afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

/** A fresh copy of the valid dataset for one test to break. */
async function copyOfValid(): Promise<string> {
  const dir = join(root, `case-${copies++}`);
  await cp(base, dir, { recursive: true });
  return dir;
}

function invariants(res: ValidationResult): Invariant[] {
  return res.ok ? [] : res.problems.map((p) => p.invariant);
}

function firstProblem(res: ValidationResult) {
  if (res.ok) throw new Error('expected the dataset to be invalid');
  return res.problem;
}

describe('validateLeRobotDataset', () => {
  it('passes a valid dataset and counts it', async () => {
    const res = await validateLeRobotDataset(base);
    expect(res).toEqual({ ok: true, summary: { episodes: 2, frames: 20, tasks: 2, dataFiles: 1, videoFiles: 1 } });
  });

  it('finds a stray parquet file under data/', async () => {
    const dir = await copyOfValid();
    await cp(join(dir, DATA_FILE), join(dir, 'data/chunk-000/file-001.parquet'));
    await cp(join(dir, DATA_FILE), join(dir, 'data/backup.parquet'));
    const res = await validateLeRobotDataset(dir);
    expect(res.ok ? [] : res.problems).toEqual([
      expect.objectContaining({ invariant: 'files.data_path', where: 'data/backup.parquet' }),
      expect.objectContaining({ invariant: 'files.unreferenced', where: 'data/chunk-000/file-001.parquet' }),
    ]);
  });

  it('finds a stray video file', async () => {
    const dir = await copyOfValid();
    await cp(join(dir, VIDEO_FILE), join(dir, `videos/${CAMERA}/chunk-000/file-007.mp4`));
    expect(firstProblem(await validateLeRobotDataset(dir, { checkVideos: false }))).toMatchObject({ invariant: 'files.unreferenced', where: `videos/${CAMERA}/chunk-000/file-007.mp4` });
  });

  it('finds an extra column in a data file', async () => {
    const dir = await copyOfValid();
    const rows = dataRows();
    await writeParquet(join(dir, DATA_FILE), { ...dataColumns(rows), 'observation.extra': arrow.vectorFromArray(rows.timestamp, f32) });
    expect(firstProblem(await validateLeRobotDataset(dir))).toMatchObject({ invariant: 'data.columns', where: `${DATA_FILE} columns observation.extra` });
  });

  it('finds a vector of the wrong length and a plain value stored as a list', async () => {
    const dir = await copyOfValid();
    const rows = dataRows();
    rows.state[3] = [1, 2, 3];
    await writeParquet(join(dir, DATA_FILE), { ...dataColumns(rows), timestamp: arrow.vectorFromArray(rows.timestamp.map((t) => [t]), listOf(f32)) });
    const res = await validateLeRobotDataset(dir);
    expect(res.ok ? [] : res.problems.map((p) => [p.invariant, p.where])).toEqual([
      ['data.types', `${DATA_FILE} column observation.state`],
      ['data.types', `${DATA_FILE} column timestamp`],
    ]);
  });

  it('finds a gap in index', async () => {
    const dir = await copyOfValid();
    const rows = dataRows();
    rows.index = rows.index.map((i) => (i >= 10 ? i + 1 : i));
    await writeParquet(join(dir, DATA_FILE), dataColumns(rows));
    expect(firstProblem(await validateLeRobotDataset(dir))).toMatchObject({ invariant: 'data.index', where: `${DATA_FILE} row 10 column index` });
  });

  it('finds a timestamp off by 1e-3 s', async () => {
    const dir = await copyOfValid();
    const rows = dataRows();
    rows.timestamp[14] = rows.timestamp[14]! + 1e-3;
    await writeParquet(join(dir, DATA_FILE), dataColumns(rows));
    const res = await validateLeRobotDataset(dir);
    expect(res.ok ? [] : res.problems).toEqual([
      expect.objectContaining({ invariant: 'data.timestamp', where: `${DATA_FILE} row 14 (episode 1) column timestamp` }),
    ]);
  });

  it('finds an episode whose rows fall short of its length', async () => {
    const dir = await copyOfValid();
    const rows = dataRows();
    for (const column of Object.values(rows)) column.pop();
    await writeParquet(join(dir, DATA_FILE), dataColumns(rows));
    const problem = firstProblem(await validateLeRobotDataset(dir, { checkVideos: false }));
    expect(problem.invariant).toBe('data.length');
    expect(problem.where).toContain('episode 1');
  });

  it('finds a wrong length in meta/episodes', async () => {
    const dir = await copyOfValid();
    const path = join(dir, 'meta/episodes/chunk-000/file-000.parquet');
    const table = arrow.tableFromIPC(pw.readParquet(await readFile(path)).intoIPCStream());
    const columns = Object.fromEntries(table.schema.names.map((name) => [name, table.getChild(name)!]));
    await writeParquet(path, { ...columns, length: arrow.vectorFromArray([13n, 8n], i64) });
    const res = await validateLeRobotDataset(dir, { checkVideos: false });
    expect(invariants(res)).toContain('data.length');
    expect(firstProblem(res).invariant).toBe('episodes.order');
    expect(firstProblem(res).where).toContain('(episode 0)');
  });

  it('finds a missing stats column in meta/episodes', async () => {
    const dir = await copyOfValid();
    const path = join(dir, 'meta/episodes/chunk-000/file-000.parquet');
    const table = arrow.tableFromIPC(pw.readParquet(await readFile(path)).intoIPCStream());
    const names = table.schema.names.map(String).filter((name) => name !== 'stats/action/q99');
    await writeParquet(path, Object.fromEntries(names.map((name) => [name, table.getChild(name)!])));
    const problem = firstProblem(await validateLeRobotDataset(dir, { checkVideos: false }));
    expect(problem).toMatchObject({ invariant: 'episodes.stats', where: 'meta/episodes/chunk-000/file-000.parquet' });
    expect(problem.message).toContain('stats/action/q99');
  });

  it('finds a video whose frame count differs from its episodes', async () => {
    const dir = await copyOfValid();
    await writeVideo(dir, 19);
    expect(firstProblem(await validateLeRobotDataset(dir))).toMatchObject({ invariant: 'video.frames', where: VIDEO_FILE });
    // Without decoding, only the layout and the timestamps are checked.
    expect((await validateLeRobotDataset(dir, { checkVideos: false })).ok).toBe(true);
  });

  it('finds a tasks.parquet without pandas metadata', async () => {
    const dir = await copyOfValid();
    await writeTasks(dir, false);
    expect(firstProblem(await validateLeRobotDataset(dir, { checkVideos: false }))).toMatchObject({ invariant: 'tasks.pandas', where: 'meta/tasks.parquet' });
  });

  it('finds a stat of the wrong shape', async () => {
    const dir = await copyOfValid();
    const stats = statsJson();
    stats['observation.state']!['mean'] = [0.5, 0.5, 0.5];
    stats[CAMERA]!['std'] = [0.5, 0.5, 0.5];
    await writeFile(join(dir, 'meta/stats.json'), JSON.stringify(stats));
    const res = await validateLeRobotDataset(dir, { checkVideos: false });
    expect(res.ok ? [] : res.problems.map((p) => [p.invariant, p.where])).toEqual([
      ['stats.shape', 'meta/stats.json observation.state.mean'],
      ['stats.shape', `meta/stats.json ${CAMERA}.std`],
    ]);
  });

  it('refuses another codebase version', async () => {
    const dir = await copyOfValid();
    const info = JSON.parse(await readFile(join(dir, 'meta/info.json'), 'utf8')) as Record<string, unknown>;
    await writeFile(join(dir, 'meta/info.json'), JSON.stringify({ ...info, codebase_version: 'v2.1' }));
    expect(firstProblem(await validateLeRobotDataset(dir))).toMatchObject({ invariant: 'info.version' });
  });

  it('finds totals in info.json that disagree with the files', async () => {
    const dir = await copyOfValid();
    const info = JSON.parse(await readFile(join(dir, 'meta/info.json'), 'utf8')) as Record<string, unknown>;
    await writeFile(join(dir, 'meta/info.json'), JSON.stringify({ ...info, total_frames: 21 }));
    expect(firstProblem(await validateLeRobotDataset(dir, { checkVideos: false }))).toMatchObject({ invariant: 'info.totals', where: 'meta/info.json total_frames' });
  });
});
