import { mkdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { Field, Float64, Int64, List, Table, Utf8, type Data, type DataType, type RecordBatch } from 'apache-arrow';
import type { DatasetShape } from '../types.js';
import { WriterError } from './errors.js';
import { commitFile, jsonText, tempSibling, writeFileAtomic } from './files.js';
import { chunkFile, datasetFeatures, nextChunkFile, stageFingerprint, type DatasetFeature } from './features.js';
import { codecNames, concatVideos, SCALE_FLAGS } from './ffmpeg.js';
import {
  float64Column,
  inferredColumn,
  int64Column,
  parquetBytes,
  readParquetTable,
  stringColumn,
  tableOf,
  writeParquetStream,
  type Column,
} from './parquet.js';
import {
  FRAMES_FILE,
  STATS_FILE,
  readStagedEpisode,
  resolveEncoding,
  stagedDir,
  stagedVideo,
  type StageOptions,
  type StagedEpisode,
} from './stage.js';
import {
  aggregateInto,
  constantStats,
  nest,
  STAT_KEYS,
  statsToJson,
  vectorStats,
  type FeatureStats,
  type StatsByFeature,
} from './stats.js';

export interface AssembleOptions extends StageOptions {
  /** Files per chunk directory (LeRobot default 1000). */
  chunksSize?: number;
  /** A data file takes no further episode once it would reach this size (default 100). */
  dataFilesSizeInMb?: number;
  /** A video file takes no further episode once it would reach this size (default 200). */
  videoFilesSizeInMb?: number;
  /** Written to `meta/fleet.json` under `provenance` (e.g. the snapshot and export ids). */
  provenance?: Record<string, unknown>;
}

export interface AssembleResult {
  totalEpisodes: number;
  totalFrames: number;
  tasks: string[];
  /** Relative paths of the data files, in order. */
  dataFiles: string[];
  /** Relative paths of each camera's video files, in order. */
  videoFiles: Record<string, string[]>;
}

export const DATA_PATH = 'data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet';
export const VIDEO_PATH = 'videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4';
const MB = 1024 * 1024;

/** Where each episode goes in a family of rotating files. */
interface Placement {
  chunk: number;
  file: number;
  /** Frames of earlier episodes in the same file. */
  framesBefore: number;
}

/**
 * LeRobot's rotation: an episode opens a new file when the current one already holds episodes and
 * its size plus the episode's would reach the cap. Sizes are those of the staged files, so the plan
 * depends only on what is staged.
 */
function planFiles(sizes: number[], lengths: number[], capBytes: number, chunksSize: number): Placement[] {
  const out: Placement[] = [];
  let chunk = 0;
  let file = 0;
  let bytes = 0;
  let frames = 0;
  sizes.forEach((size, i) => {
    if (i > 0 && bytes + size >= capBytes) {
      [chunk, file] = nextChunkFile(chunk, file, chunksSize);
      bytes = 0;
      frames = 0;
    }
    out.push({ chunk, file, framesBefore: frames });
    bytes += size;
    frames += lengths[i]!;
  });
  return out;
}

/** Consecutive runs of episodes sharing a file. */
function groups(plan: Placement[]): { chunk: number; file: number; episodes: number[] }[] {
  const out: { chunk: number; file: number; episodes: number[] }[] = [];
  plan.forEach((p, i) => {
    const last = out.at(-1);
    if (last !== undefined && last.chunk === p.chunk && last.file === p.file) last.episodes.push(i);
    else out.push({ chunk: p.chunk, file: p.file, episodes: [i] });
  });
  return out;
}

/**
 * A staged frame table with the global `index` and `task_index` appended, columns in feature order.
 * The reader may split a staged table into several record batches; each is extended alike.
 */
function episodeTable(staged: Table, features: DatasetFeature[], fromIndex: number, taskIndex: number, episodeIndex: number): Table {
  const batches: RecordBatch[] = [];
  let offset = fromIndex;
  for (const batch of staged.batches) {
    const n = batch.numRows;
    const columns: Column[] = [];
    for (const f of features) {
      if (f.kind === 'video') continue;
      if (f.key === 'index') columns.push(int64Column('index', Array.from({ length: n }, (_, i) => offset + i)));
      // Staged under its manifest position: its place in the dataset is known only now.
      else if (f.key === 'episode_index') columns.push(int64Column('episode_index', new Array<number>(n).fill(episodeIndex)));
      else if (f.key === 'task_index') columns.push(int64Column('task_index', new Array<number>(n).fill(taskIndex)));
      else {
        const field = batch.schema.fields.find((x) => x.name === f.key);
        const child = batch.getChild(f.key);
        if (field === undefined || child === null) throw new WriterError('not_staged', `staged frames lack column ${f.key}`);
        columns.push({ field, data: child.data[0] as Data });
      }
    }
    batches.push(...tableOf(columns).batches);
    offset += n;
  }
  return new Table(batches);
}

/** pandas' metadata for `DataFrame({'task_index': …}, index=pd.Index(tasks, name='task')).to_parquet()`. */
function pandasTasksMetadata(): string {
  return JSON.stringify({
    index_columns: ['task'],
    column_indexes: [{ name: null, field_name: null, pandas_type: 'unicode', numpy_type: 'object', metadata: { encoding: 'UTF-8' } }],
    columns: [
      { name: 'task_index', field_name: 'task_index', pandas_type: 'int64', numpy_type: 'int64', metadata: null },
      { name: 'task', field_name: 'task', pandas_type: 'unicode', numpy_type: 'object', metadata: null },
    ],
    creator: { library: 'pyarrow', version: '17.0.0' },
    pandas_version: '2.2.3',
  });
}

const float64List = () => new List(new Field('item', new Float64(), true));
const int64List = () => new List(new Field('item', new Int64(), true));
const nestedFloat64 = (depth: number): DataType => (depth === 1 ? float64List() : new List(new Field('item', nestedFloat64(depth - 1), true)));

/** The `stats/<feature>/<stat>` columns of meta/episodes, as `flatten_dict({"stats": …})` names them. */
function statsColumns(features: DatasetFeature[], perEpisode: StatsByFeature[]): Column[] {
  const columns: Column[] = [];
  for (const f of features) {
    const first = perEpisode[0]?.[f.key];
    if (first === undefined) continue;
    for (const stat of STAT_KEYS) {
      const name = `stats/${f.key}/${stat}`;
      if (stat === 'count') {
        columns.push(inferredColumn(name, int64List(), perEpisode.map((s) => [BigInt(s[f.key]!.count)])));
      } else {
        const type = nestedFloat64(first.shape.length);
        columns.push(inferredColumn(name, type, perEpisode.map((s) => nest(s[f.key]!.values[stat], s[f.key]!.shape))));
      }
    }
  }
  return columns;
}

async function loadStats(stageDir: string, i: number): Promise<StatsByFeature> {
  return JSON.parse(await readFile(join(stagedDir(stageDir, i), STATS_FILE), 'utf8')) as StatsByFeature;
}

/**
 * Build the LeRobot v3.0 layout in `outDir` from episodes `0 … count-1` staged in `stageDir`,
 * in index order, so that the result depends only on what is staged (a resumed export is byte for
 * byte an uninterrupted one). `outDir`'s `data/`, `videos/` and `meta/` are replaced; every file is
 * written under a temp name and renamed, and `meta/info.json` comes last. One staged episode is in
 * memory at a time; the per-episode rows of `meta/episodes` (a few hundred numbers each) are kept
 * until that file is written.
 */
export async function assembleDataset(
  stageDir: string,
  outDir: string,
  episodes: number | readonly number[],
  shape: DatasetShape,
  opts: AssembleOptions = {},
): Promise<AssembleResult> {
  // Which staged episodes, in dataset order: `0 … count-1`, or the staged indices given (an
  // export stages by manifest position; skipped positions leave gaps). Dataset episode i is `at[i]`.
  const at: readonly number[] = typeof episodes === 'number' ? Array.from({ length: Math.max(0, episodes) }, (_, i) => i) : episodes;
  const count = typeof episodes === 'number' ? episodes : episodes.length;
  const enc = resolveEncoding(opts);
  const features = datasetFeatures(shape, enc);
  const fingerprint = stageFingerprint(shape, enc);
  const chunksSize = opts.chunksSize ?? 1000;
  const dataMb = opts.dataFilesSizeInMb ?? 100;
  const videoMb = opts.videoFilesSizeInMb ?? 200;
  if (!Number.isInteger(count) || count < 1) throw new WriterError('invalid_shape', `count must be a positive integer, got ${count}`);
  if (!Number.isInteger(chunksSize) || chunksSize < 1 || !(dataMb > 0) || !(videoMb > 0)) {
    throw new WriterError('invalid_shape', 'chunksSize, dataFilesSizeInMb and videoFilesSizeInMb must be positive');
  }
  const metaKeys = shape.metadataKeys;
  const metaColumnNames = ['meta/episode_id', ...metaKeys.map((k) => `meta/${k}`)];
  if (new Set(metaColumnNames).size !== metaColumnNames.length || metaColumnNames.some((c) => c.startsWith('meta/episodes/'))) {
    throw new WriterError('invalid_shape', `metadata keys collide with meta/episode_id or meta/episodes/*: ${metaKeys.join(', ')}`);
  }

  // Plan from the small episode.json files: tasks, offsets, and which file each episode goes to.
  const staged: StagedEpisode[] = [];
  for (let i = 0; i < count; i++) {
    const ep = await readStagedEpisode(stageDir, at[i]!).catch((err: unknown) => {
      throw new WriterError('not_staged', `episode ${at[i]} is not staged in ${stageDir}`, { cause: err });
    });
    if (ep.fingerprint !== fingerprint || ep.episodeIndex !== at[i]) {
      throw new WriterError('not_staged', `episode ${at[i]} was staged for another shape or encoding`);
    }
    staged.push(ep);
  }
  const taskIndex = new Map<string, number>();
  for (const ep of staged) if (!taskIndex.has(ep.task)) taskIndex.set(ep.task, taskIndex.size);
  const lengths = staged.map((ep) => ep.length);
  const fromIndex: number[] = [];
  let totalFrames = 0;
  for (const n of lengths) {
    fromIndex.push(totalFrames);
    totalFrames += n;
  }
  const dataPlan = planFiles(staged.map((ep) => ep.framesBytes), lengths, dataMb * MB, chunksSize);
  const cameraKeys = features.filter((f) => f.kind === 'video').map((f) => f.key);
  const videoPlans = Object.fromEntries(
    cameraKeys.map((k) => [k, planFiles(staged.map((ep) => ep.cameras[k]!.bytes), lengths, videoMb * MB, chunksSize)]),
  );

  for (const dir of ['meta', 'data', 'videos']) await rm(join(outDir, dir), { recursive: true, force: true });

  const result: AssembleResult = { totalEpisodes: count, totalFrames, tasks: [...taskIndex.keys()], dataFiles: [], videoFiles: {} };

  // Data: one parquet file per group, streamed one staged episode at a time.
  for (const g of groups(dataPlan)) {
    const rel = `data/${chunkFile(g.chunk, g.file)}.parquet`;
    const path = join(outDir, rel);
    await mkdir(join(path, '..'), { recursive: true });
    const tmp = tempSibling(path);
    let k = 0;
    await writeParquetStream(tmp, async () => {
      const i = g.episodes[k++];
      if (i === undefined) return null;
      const frames = readParquetTable(await readFile(join(stagedDir(stageDir, at[i]!), FRAMES_FILE)));
      return episodeTable(frames, features, fromIndex[i]!, taskIndex.get(staged[i]!.task)!, i);
    });
    await commitFile(tmp, path);
    result.dataFiles.push(rel);
  }

  // Videos: each file the concatenation of its episodes' mp4s, without re-encoding.
  for (const key of cameraKeys) {
    result.videoFiles[key] = [];
    for (const g of groups(videoPlans[key]!)) {
      const rel = `videos/${key}/${chunkFile(g.chunk, g.file)}.mp4`;
      const path = join(outDir, rel);
      await mkdir(join(path, '..'), { recursive: true });
      const tmp = `${tempSibling(path)}.mp4`;
      await concatVideos(g.episodes.map((i) => ({ path: stagedVideo(stageDir, at[i]!, key), frames: lengths[i]! })), tmp, enc, shape.fps);
      await commitFile(tmp, path);
      result.videoFiles[key].push(rel);
    }
  }

  // meta/episodes and the aggregate stats, one staged stats file at a time.
  const perEpisode: StatsByFeature[] = [];
  let aggregate: StatsByFeature | null = null;
  for (let i = 0; i < count; i++) {
    const stagedStats = await loadStats(stageDir, at[i]!);
    const n = lengths[i]!;
    const ordered: StatsByFeature = {};
    for (const f of features) {
      let s: FeatureStats | undefined;
      if (f.key === 'index') s = vectorStats(Float64Array.from({ length: n }, (_, j) => fromIndex[i]! + j), n, 1);
      else if (f.key === 'task_index') s = constantStats(taskIndex.get(staged[i]!.task)!, n);
      else if (f.key === 'episode_index') s = constantStats(i, n);
      else s = stagedStats[f.key];
      if (s === undefined) throw new WriterError('not_staged', `episode ${i} has no stats for ${f.key}`);
      ordered[f.key] = s;
    }
    perEpisode.push(ordered);
    aggregate = aggregateInto(aggregate, ordered);
  }

  const fps = shape.fps;
  const episodeColumns: Column[] = [
    int64Column('episode_index', staged.map((_, i) => i)),
    inferredColumn('tasks', new List(new Field('item', new Utf8(), true)), staged.map((ep) => [ep.task])),
    int64Column('length', lengths),
    int64Column('data/chunk_index', dataPlan.map((p) => p.chunk)),
    int64Column('data/file_index', dataPlan.map((p) => p.file)),
    int64Column('dataset_from_index', fromIndex),
    int64Column('dataset_to_index', fromIndex.map((f, i) => f + lengths[i]!)),
  ];
  for (const key of cameraKeys) {
    const plan = videoPlans[key]!;
    episodeColumns.push(
      int64Column(`videos/${key}/chunk_index`, plan.map((p) => p.chunk)),
      int64Column(`videos/${key}/file_index`, plan.map((p) => p.file)),
      float64Column(`videos/${key}/from_timestamp`, plan.map((p) => p.framesBefore / fps)),
      float64Column(`videos/${key}/to_timestamp`, plan.map((p, i) => (p.framesBefore + lengths[i]!) / fps)),
    );
  }
  episodeColumns.push(...statsColumns(features, perEpisode));
  episodeColumns.push(int64Column('meta/episodes/chunk_index', new Array<number>(count).fill(0)));
  episodeColumns.push(int64Column('meta/episodes/file_index', new Array<number>(count).fill(0)));
  episodeColumns.push(stringColumn('meta/episode_id', staged.map((ep) => ep.episodeId)));
  for (const k of metaKeys) episodeColumns.push(stringColumn(`meta/${k}`, staged.map((ep) => ep.metadata[k]!)));
  await writeFileAtomic(join(outDir, 'meta/episodes', `${chunkFile(0, 0)}.parquet`), parquetBytes(tableOf(episodeColumns)));

  const pandas = new Map([['pandas', pandasTasksMetadata()]]);
  const tasksTable = tableOf(
    [int64Column('task_index', [...taskIndex.values()]), stringColumn('task', [...taskIndex.keys()])],
    pandas,
  );
  await writeFileAtomic(join(outDir, 'meta/tasks.parquet'), parquetBytes(tasksTable, pandas));

  const statsJson = Object.fromEntries(features.map((f) => [f.key, statsToJson(aggregate![f.key]!)]));
  await writeFileAtomic(join(outDir, 'meta/stats.json'), jsonText(statsJson));

  const fleet = {
    format: 'fleet.lerobot-export',
    version: 1,
    episode_columns: {
      'meta/episode_id': "the platform's episode id (ep_…) of each episode_index",
      ...Object.fromEntries(metaKeys.map((k) => [`meta/${k}`, `episode metadata "${k}"`])),
    },
    video: cameraKeys.length === 0 ? null : {
      encoder: codecNames(enc.codec).encoder,
      gop: enc.gop,
      crf: enc.crf,
      preset: enc.preset,
      threads: enc.threads,
      pix_fmt: 'yuv420p',
      ...(enc.resize !== null ? { scale: { width: enc.resize.width, height: enc.resize.height, flags: SCALE_FLAGS } } : {}),
    },
    provenance: opts.provenance ?? {},
  };
  await writeFileAtomic(join(outDir, 'meta/fleet.json'), jsonText(fleet));

  // Field order of LeRobot's `DatasetInfo.to_dict()`; written last, so its presence means complete.
  const info = {
    codebase_version: 'v3.0',
    fps,
    features: Object.fromEntries(features.map((f) => [f.key, f.info])),
    total_episodes: count,
    total_frames: totalFrames,
    total_tasks: taskIndex.size,
    chunks_size: chunksSize,
    data_files_size_in_mb: dataMb,
    video_files_size_in_mb: videoMb,
    data_path: DATA_PATH,
    video_path: cameraKeys.length === 0 ? null : VIDEO_PATH,
    robot_type: shape.robotType,
    splits: { train: `0:${count}` },
  };
  await writeFileAtomic(join(outDir, 'meta/info.json'), jsonText(info));
  return result;
}
