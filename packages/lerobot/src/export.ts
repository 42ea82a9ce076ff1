import { createReadStream, createWriteStream, existsSync } from 'node:fs';
import { mkdir, readFile, readdir, rename, rm } from 'node:fs/promises';
import { once } from 'node:events';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { ExportProgress } from './progress.js';
import { DEFAULT_MAPPING, EpisodeFetcher, isSourceError, loadGridEpisode, parseManifestLine, parseMapping, SourceError, type ManifestEpisode, type ManifestHeader, type Mapping, type S3SourceOptions } from './source/index.js';
import type { DatasetShape } from './types.js';
import { assembleDataset, isStaged, stageEpisode, WriterError, type VideoCodec, type VideoEncoding } from './writer/index.js';
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

/** The export as a whole cannot go on (a mapping that does not fit, a full disk, --strict). */
export class ExportError extends Error {
  constructor(
    readonly code: 'mapping' | 'manifest' | 'disk_full' | 'strict' | 'resume_mismatch' | 'empty' | 'io',
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
  onProgress?: (p: ExportProgress) => void;
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
const SKIPPABLE: ReadonlySet<string> = new Set(['missing', 'denied', 'checksum_mismatch', 'size_mismatch', 'no_location', 'io', 'corrupt_recording', 'too_short', 'shape_changed', 'bad_image', 'task_missing']);

/**
 * A snapshot's manifest to a LeRobot v3.0 dataset in `outDir`: each member's recording fetched
 * from the customer's own storage (checked against the manifest's SHA-256), resampled onto the
 * mapping's grid, encoded and staged; then the dataset assembled in manifest order. Resumable:
 * the manifest, each episode's outcome and each staged episode are kept in `outDir/.fleet-export`
 * until the dataset is complete, and a second run with the same settings continues from there and
 * writes the same bytes an uninterrupted run would.
 */
export async function exportLeRobot(opts: ExportOptions): Promise<ExportResult> {
  const started = Date.now();
  let mapping: Mapping;
  try {
    mapping = parseMapping(opts.mapping ?? DEFAULT_MAPPING);
  } catch (err) {
    throw new ExportError('mapping', err instanceof Error ? err.message.replace(/^mapping_invalid: /, '') : String(err));
  }
  const work = new WorkDir(opts.outDir);
  if (existsSync(join(opts.outDir, 'meta', 'info.json')) && !existsSync(work.root)) {
    throw new ExportError('io', `${opts.outDir} already holds a dataset; export into another directory, or remove it first`);
  }
  const progress: ExportProgress = { total: 0, done: 0, skipped: 0, frames: 0, bytes: 0, elapsedMs: 0, doneThisRun: 0, phase: 'manifest' };
  const tell = () => opts.onProgress?.({ ...progress, elapsedMs: Date.now() - started });
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

  const codec = opts.codec ?? 'av1';
  const dataFileSizeMb = opts.dataFileSizeMb ?? 100;
  const videoFileSizeMb = opts.videoFileSizeMb ?? 200;
  await work.checkSettings({ dataset_id: header.dataset_id, snapshot_at: header.snapshot_at, mapping, codec, dataFileSizeMb, videoFileSizeMb, encoding: opts.encoding ?? null });

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
  const stageOpts = { codec, ...(opts.encoding !== undefined ? { encoding: opts.encoding } : {}) };
  const fetcher = new EpisodeFetcher({ sources: opts.sources, ...(opts.s3 !== undefined ? { s3: opts.s3 } : {}) });

  const skip = async (position: number, line: ManifestEpisode, reason: SkipReason, message: string) => {
    if (opts.strict) throw new ExportError('strict', `episode ${line.id} (line ${position} of the manifest): ${reason}: ${message}`);
    await work.setResult({ staged: false, position, episode_id: line.id, reason, message });
    progress.skipped++;
    tell();
  };

  const one = async ({ position, line }: { position: number; line: ManifestEpisode }): Promise<void> => {
    if (known.has(position)) return;
    const downloads = work.downloadDir(position);
    try {
      const fetched = await fetcher.fetchEpisode(line, downloads);
      for (const f of fetched.files) if (!f.reused) progress.bytes += f.sizeBytes;
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
        if (!(await isStaged(work.stage, position, shape, stageOpts))) await stageEpisode(work.stage, position, loaded.episode, shape, stageOpts);
      } finally {
        await loaded.close();
      }
      await work.setResult({ staged: true, position, episode_id: line.id, frames: loaded.episode.length, bytes: mcap.sizeBytes });
      progress.done++;
      progress.doneThisRun++;
      progress.frames += loaded.episode.length;
      tell();
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
      diskError(err);
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

function describeShape(s: DatasetShape): string {
  const parts = [
    ...Object.entries(s.vectors).map(([k, v]) => `${k} [${v.shape.join(',')}]`),
    ...Object.entries(s.cameras).map(([k, c]) => `${k} ${c.width}x${c.height}`),
    `fps ${s.fps}`,
  ];
  return parts.join(', ');
}
