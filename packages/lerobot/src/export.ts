import { createReadStream, createWriteStream, existsSync } from 'node:fs';
import { mkdir, readFile, readdir, rename, rm } from 'node:fs/promises';
import { once } from 'node:events';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { EPISODE_STEPS, PROGRESS_INTERVAL_MS, startTicker, systemProgressClock, systemProgressScheduler, type EpisodeStep, type ExportProgress, type ProgressClock, type ProgressScheduler } from './progress.js';
import { DEFAULT_MAPPING, EpisodeFetcher, isSourceError, loadGridEpisode, parseManifestLine, parseMapping, SourceError, type ManifestEpisode, type ManifestHeader, type Mapping, type S3SourceOptions } from './source/index.js';
import type { DatasetShape } from './types.js';
import { assembleDataset, isStaged, resizeProblem, stageEpisode, WriterError, type VideoCodec, type VideoEncoding } from './writer/index.js';
import { writeFileAtomic } from './writer/files.js';

/**
 * Where an export keeps its work, inside the output directory: the manifest as first read, the
 * outcome of every episode, the downloads in progress and the staged episodes. A run that finds
 * it continues; the finished dataset replaces it.
 */
export const WORK_DIR = '.fleet-export';

/** Why an episode was left out (the report's `reason`). */
export type SkipReason =
  | 'missing'
  | 'denied'
  | 'checksum_mismatch'
  | 'size_mismatch'
  | 'no_location'
  | 'no_recording'
  | 'corrupt_recording'
  | 'too_short'
  | 'stale_stream'
  | 'shape_changed'
  | 'shape_mismatch'
  | 'bad_image'
  | 'task_missing'
  | 'mapping_invalid'
  | 'io';

export interface SkippedEpisode {
  episode_id: string;
  /** The line of the manifest (1 is the first episode). */
  position: number;
  reason: SkipReason;
  message: string;
}

/** What each manifest position came to; kept in the work directory, one small file each. */
export type PositionResult = { position: number; episode_id: string; staged: true; frames: number; bytes: number } | ({ staged: false } & SkippedEpisode);

/**
 * The export's own error table: why a whole export stopped (an episode's own problem is a skip
 * reason instead), each with the exit code the CLI gives it. Tests check codes, not messages.
 */
export const EXPORT_ERROR_CODES = {
  /** An option is malformed or out of range: a `resize` the codec cannot encode, a source URL that is not s3:// or file://, a size cap that is not positive. */
  options: { exit: 2, summary: 'an option is invalid' },
  /** The mapping file is malformed, or does not fit the recordings (a missing topic, a field that is not numeric, a feature with no value); the message names topic and field. */
  mapping: { exit: 1, summary: 'the mapping does not fit the recordings' },
  /** The snapshot's manifest does not parse, or the dataset is still live. */
  manifest: { exit: 1, summary: 'the manifest is unusable' },
  /** The output directory holds an unfinished export made with other settings. */
  resume_mismatch: { exit: 1, summary: 'an unfinished export with other settings is in the way' },
  /** The dataset has no episode, or every one was skipped. */
  empty: { exit: 1, summary: 'no episode could be exported' },
  /** `strict`: an episode could not be exported; the message names it and its skip reason. */
  strict: { exit: 1, summary: 'an episode could not be exported (--strict)' },
  /** A camera's frames are larger than the codec encodes (SVT-AV1 16384x8704, x264 16384x16384): give `resize`. */
  frame_size: { exit: 1, summary: 'camera frames too large for the codec' },
  /** ffmpeg or ffprobe is not installed, or failed; the message says which, with its last output. */
  ffmpeg_failed: { exit: 1, summary: 'ffmpeg or ffprobe failed' },
  /** The disk filled up; the next run with room continues. */
  disk_full: { exit: 1, summary: 'the disk is full' },
  /** The output directory already holds a finished dataset. */
  io: { exit: 1, summary: 'the output directory cannot be used' },
} as const satisfies Record<string, { exit: number; summary: string }>;

export type ExportErrorCode = keyof typeof EXPORT_ERROR_CODES;

/** The export as a whole cannot go on (a mapping that does not fit, a full disk, --strict, …): see `EXPORT_ERROR_CODES`. */
export class ExportError extends Error {
  constructor(
    readonly code: ExportErrorCode,
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
    this.name = 'ExportError';
  }
}

/** The manifest's first line. */
export interface ManifestHeaderLine {
  dataset_id: string;
  name: string;
  snapshot_at: string;
  episode_count: number;
}

/** Maps a write that failed for lack of space to the export's own error. */
export function diskError(err: unknown): never {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  if (code === 'ENOSPC' || code === 'EDQUOT') {
    throw new ExportError('disk_full', `the disk is full (${(err as Error).message}); free space and run the same command again: it continues where it stopped`, { cause: err });
  }
  throw err;
}

/**
 * The work directory of one export. The manifest is saved once (so a resumed run exports exactly
 * the same members, in the same order, with the same metadata, even if an outcome was changed
 * meanwhile), and each position's result is written as it is known.
 */
export class WorkDir {
  readonly root: string;
  readonly downloads: string;
  readonly stage: string;
  readonly results: string;

  constructor(outDir: string) {
    this.root = join(outDir, WORK_DIR);
    this.downloads = join(this.root, 'downloads');
    this.stage = join(this.root, 'stage');
    this.results = join(this.root, 'results');
  }

  get manifestPath(): string {
    return join(this.root, 'manifest.ndjson');
  }

  get statePath(): string {
    return join(this.root, 'export.json');
  }

  async create(): Promise<void> {
    for (const d of [this.root, this.downloads, this.stage, this.results]) await mkdir(d, { recursive: true });
  }

  /** The settings a resumed run must share with the first (they shape every byte of the output). */
  async checkSettings(settings: Record<string, unknown>): Promise<void> {
    const text = JSON.stringify(settings);
    if (existsSync(this.statePath)) {
      const before = await readFile(this.statePath, 'utf8');
      if (before !== text) {
        throw new ExportError(
          'resume_mismatch',
          `${this.root} holds an unfinished export made with other settings (${before}); run it with the same dataset, mapping and options, or remove that directory to start over`,
        );
      }
      return;
    }
    await writeFileAtomic(this.statePath, text);
  }

  /** Saves the manifest lines once; later runs read them back. Returns the header and the episode count. */
  async saveManifest(lines: AsyncIterable<unknown>): Promise<void> {
    if (existsSync(this.manifestPath)) return;
    const tmp = `${this.manifestPath}.tmp-${process.pid}`;
    const out = createWriteStream(tmp);
    try {
      for await (const line of lines) {
        if (!out.write(`${JSON.stringify(line)}\n`)) await once(out, 'drain');
      }
      out.end();
      await once(out, 'finish');
    } catch (err) {
      out.destroy();
      await rm(tmp, { force: true });
      throw err;
    }
    await rename(tmp, this.manifestPath);
  }

  /** The saved manifest's lines, parsed, in order (the header first). */
  async *manifestLines(): AsyncGenerator<unknown> {
    const rl = createInterface({ input: createReadStream(this.manifestPath), crlfDelay: Infinity });
    for await (const line of rl) if (line !== '') yield JSON.parse(line) as unknown;
  }

  resultPath(position: number): string {
    return join(this.results, `${String(position).padStart(8, '0')}.json`);
  }

  async result(position: number): Promise<PositionResult | null> {
    try {
      return JSON.parse(await readFile(this.resultPath(position), 'utf8')) as PositionResult;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw err;
    }
  }

  async setResult(r: PositionResult): Promise<void> {
    await writeFileAtomic(this.resultPath(r.position), JSON.stringify(r));
  }

  downloadDir(position: number): string {
    return join(this.downloads, String(position).padStart(8, '0'));
  }

  /** Every result known, by position. */
  async allResults(): Promise<Map<number, PositionResult>> {
    const out = new Map<number, PositionResult>();
    for (const name of await readdir(this.results)) {
      if (!/^\d{8}\.json$/.test(name)) continue;
      const r = JSON.parse(await readFile(join(this.results, name), 'utf8')) as PositionResult;
      out.set(r.position, r);
    }
    return out;
  }
}

/** Runs `work` on each item with at most `limit` at once; the first rejection stops taking new items and is thrown. */
export async function eachLimited<T>(items: AsyncIterable<T>, limit: number, work: (item: T) => Promise<void>): Promise<void> {
  const running = new Set<Promise<void>>();
  let failure: { err: unknown } | null = null;
  for await (const item of items) {
    if (failure) break;
    const p = work(item).then(
      () => void running.delete(p),
      (err: unknown) => {
        running.delete(p);
        failure ??= { err };
      },
    );
    running.add(p);
    if (running.size >= limit) await Promise.race(running);
  }
  await Promise.all(running);
  if (failure) throw (failure as { err: unknown }).err;
}


export interface ExportOptions {
  /** The snapshot's manifest: its header object, then one object per member (as `GET /v1/datasets/{id}/manifest` pages them). */
  manifest: AsyncIterable<unknown>;
  /** The dataset directory. An unfinished export there is continued. */
  outDir: string;
  /** Where each destination's objects are: `dst_…` (or `*` for any) → `s3://bucket[/prefix]` or `file:///dir`. */
  sources: Readonly<Record<string, string>>;
  s3?: S3SourceOptions;
  /** A mapping file's JSON (default: the simulator's recordings). */
  mapping?: unknown;
  codec?: VideoCodec;
  /** Episodes fetched and converted at once (default 2). */
  concurrency?: number;
  /** Fail on the first episode that cannot be exported instead of skipping it. */
  strict?: boolean;
  dataFileSizeMb?: number;
  videoFileSizeMb?: number;
  /** Keep the work directory after a finished export. */
  keepWork?: boolean;
  /**
   * Every camera scaled to exactly this size (no aspect kept, as LeRobot's own resize transforms
   * do) by ffmpeg's bilinear `scale` before encoding, instead of the default padding. Even sides
   * (yuv420p), at least 64x64 for AV1; otherwise `options`. Part of the resumable settings.
   */
  resize?: { width: number; height: number };
  /**
   * Called once a second while the export runs (downloads, decoding, encoding, assembly), on
   * `scheduler`, and at each phase change (`manifest` first, `done` last).
   */
  onProgress?: (p: ExportProgress) => void;
  /** The clock of `elapsedMs` (default the system's); `ManualClock` of @fleet/protocol fits. */
  clock?: ProgressClock;
  /** The timer of the progress ticks (default the system's); `ManualScheduler` of @fleet/protocol fits. */
  scheduler?: ProgressScheduler;
  /** Overrides for tests and benchmarks (ffmpeg binaries, encoder threads). */
  encoding?: Partial<VideoEncoding>;
}

export interface ExportResult {
  outDir: string;
  datasetId: string;
  snapshotAt: string;
  episodes: number;
  frames: number;
  tasks: number;
  skipped: SkippedEpisode[];
  /** Episodes staged by an earlier, interrupted run and reused. */
  resumed: number;
}

/** Source errors that leave one episode out (the others are the export's own failure). */
const SKIPPABLE: ReadonlySet<string> = new Set(['missing', 'denied', 'checksum_mismatch', 'size_mismatch', 'no_location', 'io', 'corrupt_recording', 'too_short', 'stale_stream', 'shape_changed', 'bad_image', 'task_missing']);

/**
 * A snapshot's manifest to a LeRobot v3.0 dataset in `outDir`: each member's recording fetched
 * from the customer's own storage (checked against the manifest's SHA-256), resampled onto the
 * mapping's grid, encoded and staged; then the dataset assembled in manifest order. Resumable:
 * the manifest, each episode's outcome and each staged episode are kept in `outDir/.fleet-export`
 * until the dataset is complete, and a second run with the same settings continues from there and
 * writes the same bytes an uninterrupted run would.
 */
export async function exportLeRobot(opts: ExportOptions): Promise<ExportResult> {
  const clock = opts.clock ?? systemProgressClock;
  const started = clock.now();
  let mapping: Mapping;
  try {
    mapping = parseMapping(opts.mapping ?? DEFAULT_MAPPING);
  } catch (err) {
    throw new ExportError('mapping', err instanceof Error ? err.message.replace(/^mapping_invalid: /, '') : String(err));
  }
  const codec = opts.codec ?? 'av1';
  checkOptions(opts, codec);
  let fetcher: EpisodeFetcher;
  try {
    fetcher = new EpisodeFetcher({ sources: opts.sources, ...(opts.s3 !== undefined ? { s3: opts.s3 } : {}) });
  } catch (err) {
    if (err instanceof SourceError) throw new ExportError('options', err.message.replace(/^[a-z_]+: /, ''));
    throw err;
  }
  const work = new WorkDir(opts.outDir);
  if (existsSync(join(opts.outDir, 'meta', 'info.json')) && !existsSync(work.root)) {
    throw new ExportError('io', `${opts.outDir} already holds a dataset; export into another directory, or remove it first`);
  }
  const progress: ExportProgress = {
    total: 0,
    done: 0,
    skipped: 0,
    frames: 0,
    bytes: 0,
    elapsedMs: 0,
    doneThisRun: 0,
    phase: 'manifest',
    working: { downloading: 0, decoding: 0, encoding: 0 },
  };
  /** Per episode in progress: its step, and the frames its cameras have sent to the encoder (all cameras together). */
  const active = new Map<number, { step: EpisodeStep; framesSent: number; cameras: number }>();
  const tell = () => {
    if (opts.onProgress === undefined) return;
    const working = Object.fromEntries(EPISODE_STEPS.map((s) => [s, 0])) as Record<EpisodeStep, number>;
    let partial = 0;
    for (const a of active.values()) {
      working[a.step]++;
      // The cameras are encoded one after the other: frames on the grid so far are the mean.
      if (a.cameras > 0) partial += Math.floor(a.framesSent / a.cameras);
    }
    opts.onProgress({ ...progress, frames: progress.frames + partial, working, elapsedMs: clock.now() - started });
  };
  // A line a second whatever happens meanwhile: a download stalled mid-body still reports.
  const stopTicker = startTicker(opts.scheduler ?? systemProgressScheduler, PROGRESS_INTERVAL_MS, tell);
  try {
    return await runExport(opts, { mapping, codec, fetcher, work, progress, active, tell });
  } finally {
    stopTicker();
    fetcher.destroy();
  }
}

/** What `exportLeRobot` set up for the run: the parsed options and the progress it reports. */
interface RunContext {
  mapping: Mapping;
  codec: VideoCodec;
  fetcher: EpisodeFetcher;
  work: WorkDir;
  progress: ExportProgress;
  active: Map<number, { step: EpisodeStep; framesSent: number; cameras: number }>;
  tell: () => void;
}

/** Options the export cannot run with, refused before anything is read or written. */
function checkOptions(opts: ExportOptions, codec: VideoCodec): void {
  const bad = (what: string) => {
    throw new ExportError('options', what);
  };
  if (codec !== 'av1' && codec !== 'h264') bad(`codec ${String(codec)}: av1 or h264`);
  if (opts.concurrency !== undefined && !(Number.isInteger(opts.concurrency) && opts.concurrency >= 1)) bad(`concurrency ${opts.concurrency}: a positive integer`);
  for (const [name, v] of [['dataFileSizeMb', opts.dataFileSizeMb], ['videoFileSizeMb', opts.videoFileSizeMb]] as const) {
    if (v !== undefined && !(Number.isFinite(v) && v > 0)) bad(`${name} ${v}: a positive number of MB`);
  }
  if (opts.resize !== undefined) {
    const problem = resizeProblem(opts.resize, codec);
    if (problem !== null) bad(`resize ${problem}`);
  }
}

async function runExport(opts: ExportOptions, { mapping, codec, fetcher, work, progress, active, tell }: RunContext): Promise<ExportResult> {
  tell();

  try {
    await work.create();
    // The manifest as first read: a resumed run exports exactly these members with this metadata.
    await work.saveManifest(opts.manifest);
  } catch (err) {
    diskError(err);
  }

  let header: ManifestHeader | null = null as ManifestHeader | null;
  const positions: { position: number; line: ManifestEpisode }[] = [];
  let n = 0;
  for await (const raw of work.manifestLines()) {
    n++;
    let parsed;
    try {
      parsed = parseManifestLine(JSON.stringify(raw), n);
    } catch (err) {
      throw new ExportError('manifest', err instanceof Error ? err.message : String(err));
    }
    if (parsed.kind === 'header') {
      if (n !== 1) throw new ExportError('manifest', `line ${n} of the manifest is a second header`);
      header = parsed.header;
    } else {
      if (header === null) throw new ExportError('manifest', 'the manifest does not start with its header line');
      // Positions count members from 1; what is kept per member is small (files and locations).
      positions.push({ position: n - 1, line: parsed.episode });
    }
  }
  if (header === null) throw new ExportError('manifest', 'the manifest is empty');
  if (!header.snapshot_at) throw new ExportError('manifest', `dataset ${header.dataset_id} is live: snapshot it first`);
  if (positions.length === 0) throw new ExportError('empty', `dataset ${header.dataset_id} has no episodes`);

  const dataFileSizeMb = opts.dataFileSizeMb ?? 100;
  const videoFileSizeMb = opts.videoFileSizeMb ?? 200;
  const resize = opts.resize !== undefined ? { width: opts.resize.width, height: opts.resize.height } : undefined;
  await work.checkSettings({
    dataset_id: header.dataset_id,
    snapshot_at: header.snapshot_at,
    mapping,
    codec,
    dataFileSizeMb,
    videoFileSizeMb,
    encoding: opts.encoding ?? null,
    // Only when given, so that work directories of runs without it keep matching.
    ...(resize !== undefined ? { resize } : {}),
  });

  progress.total = positions.length;
  progress.phase = 'episodes';
  const known = await work.allResults();
  let resumed = 0;
  for (const r of known.values()) {
    if (r.staged) {
      progress.done++;
      progress.frames += r.frames;
      resumed++;
    } else progress.skipped++;
  }
  tell();

  const shapePath = join(work.root, 'shape.json');
  let shape: DatasetShape | null = existsSync(shapePath) ? (JSON.parse(await readFile(shapePath, 'utf8')) as DatasetShape) : null;
  const encoding: Partial<VideoEncoding> = { ...opts.encoding, ...(resize !== undefined ? { resize } : {}) };
  const stageOpts = { codec, ...(Object.keys(encoding).length > 0 ? { encoding } : {}) };

  const skip = async (position: number, line: ManifestEpisode, reason: SkipReason, message: string) => {
    if (opts.strict) throw new ExportError('strict', `episode ${line.id} (line ${position} of the manifest): ${reason}: ${message}`);
    await work.setResult({ staged: false, position, episode_id: line.id, reason, message });
    progress.skipped++;
  };

  const one = async ({ position, line }: { position: number; line: ManifestEpisode }): Promise<void> => {
    if (known.has(position)) return;
    const downloads = work.downloadDir(position);
    const me = { step: 'downloading' as EpisodeStep, framesSent: 0, cameras: 0 };
    active.set(position, me);
    try {
      const fetched = await fetcher.fetchEpisode(line, downloads, {
        onBytes: (n) => {
          progress.bytes += n;
        },
      });
      me.step = 'decoding';
      const mcap = fetched.files.find((f) => f.path.endsWith('.mcap'));
      if (mcap === undefined) {
        await skip(position, line, 'no_recording', `none of its ${line.files.length} file(s) is an MCAP recording`);
        return;
      }
      // Its SHA-256 was checked on the way in: the MCAP's own CRCs need not be computed again.
      const loaded = await loadGridEpisode(mcap.localPath, line, mapping, { checksummed: true });
      try {
        if (shape === null) {
          // The first episode staged fixes the dataset's shape (episodes run one at a time until then).
          shape = loaded.shape;
          await writeFileAtomic(shapePath, JSON.stringify(shape));
        } else if (JSON.stringify(loaded.shape) !== JSON.stringify(shape)) {
          await skip(position, line, 'shape_mismatch', `its features (${describeShape(loaded.shape)}) differ from the dataset's (${describeShape(shape)})`);
          return;
        }
        if (!(await isStaged(work.stage, position, shape, stageOpts))) {
          me.step = 'encoding';
          me.cameras = Object.keys(shape.cameras).length;
          await stageEpisode(work.stage, position, loaded.episode, shape, stageOpts, {
            onFrame: () => {
              me.framesSent++;
            },
          });
        }
      } finally {
        await loaded.close();
      }
      await work.setResult({ staged: true, position, episode_id: line.id, frames: loaded.episode.length, bytes: mcap.sizeBytes });
      // Out of `active` in the same turn its frames are counted, so no tick counts them twice.
      active.delete(position);
      progress.done++;
      progress.doneThisRun++;
      progress.frames += loaded.episode.length;
      await rm(downloads, { recursive: true, force: true });
    } catch (err) {
      if (err instanceof ExportError) throw err;
      if (isSourceError(err, 'mapping_invalid')) throw new ExportError('mapping', `episode ${line.id}: ${err.message.replace(/^mapping_invalid: /, '')}`);
      if (err instanceof SourceError && SKIPPABLE.has(err.code)) {
        await skip(position, line, err.code as SkipReason, err.message.replace(`${err.code}: `, ''));
        await rm(downloads, { recursive: true, force: true });
        return;
      }
      if (err instanceof WriterError && err.code === 'frame_mismatch') {
        await skip(position, line, 'shape_changed', err.message);
        return;
      }
      throwWriterError(err, `episode ${line.id}: `, work);
      diskError(err);
    } finally {
      active.delete(position);
    }
  };

  try {
    // Until the shape is known, one episode at a time (so the first staged one fixes it, whatever
    // the timing); then several at once.
    let i = 0;
    while (shape === null && i < positions.length) await one(positions[i++]!);
    await eachLimited(
      (async function* () {
        yield* positions.slice(i);
      })(),
      Math.max(1, opts.concurrency ?? 2),
      one,
    );
  } finally {
    fetcher.destroy();
  }

  const results = await work.allResults();
  const staged = positions.filter((p) => results.get(p.position)?.staged === true);
  const skipped = positions.flatMap((p) => {
    const r = results.get(p.position);
    return r !== undefined && !r.staged ? [{ episode_id: r.episode_id, position: r.position, reason: r.reason, message: r.message }] : [];
  });
  if (staged.length === 0 || shape === null) throw new ExportError('empty', `no episode of dataset ${header.dataset_id} could be exported (${skipped.length} skipped: ${skipped[0]?.reason ?? 'none'}…)`);

  progress.phase = 'assembling';
  tell();
  let assembled;
  try {
    assembled = await assembleDataset(
      work.stage,
      opts.outDir,
      staged.map((p) => p.position),
      shape,
      {
        ...stageOpts,
        dataFilesSizeInMb: dataFileSizeMb,
        videoFilesSizeInMb: videoFileSizeMb,
        provenance: {
          dataset_id: header.dataset_id,
          dataset_name: header.name,
          snapshot_at: header.snapshot_at,
          mapping,
          skipped,
        },
      },
    );
  } catch (err) {
    throwWriterError(err, '', work);
    diskError(err);
  }
  if (!opts.keepWork) await rm(work.root, { recursive: true, force: true });
  progress.phase = 'done';
  tell();
  return {
    outDir: opts.outDir,
    datasetId: header.dataset_id,
    snapshotAt: header.snapshot_at,
    episodes: assembled.totalEpisodes,
    frames: assembled.totalFrames,
    tasks: assembled.tasks.length,
    skipped,
    resumed,
  };
}

/**
 * A writer's refusal that is the input's or the machine's problem, as the export's own error (the
 * rest, e.g. `invalid_episode`, would be this package's bug and stays as it is).
 */
function throwWriterError(err: unknown, where: string, work: WorkDir): void {
  if (!(err instanceof WriterError)) return;
  switch (err.code) {
    case 'frame_too_large':
      // The run's settings are saved already: another resize is a resume_mismatch until removed.
      throw new ExportError('frame_size', `${where}${err.message} (remove ${work.root} first: it holds this run's settings)`, { cause: err });
    case 'invalid_shape':
      throw new ExportError('mapping', `${where}${err.message}`, { cause: err });
    case 'ffmpeg_failed':
      throw new ExportError('ffmpeg_failed', `${where}${err.message}`, { cause: err });
    default:
      return;
  }
}

function describeShape(s: DatasetShape): string {
  const parts = [
    ...Object.entries(s.vectors).map(([k, v]) => `${k} [${v.shape.join(',')}]`),
    ...Object.entries(s.cameras).map(([k, c]) => `${k} ${c.width}x${c.height}`),
    `fps ${s.fps}`,
  ];
  return parts.join(', ');
}
