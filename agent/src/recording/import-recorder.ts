/**
 * The `import` recorder: for a robot whose own stack records (its recorder cannot be driven by the
 * agent), that stack writes its recordings into a folder, and each one becomes an episode once its
 * writer has closed it, going through finalize, report, sync and retention like any other.
 *
 * How (import-source.ts says what "closed" is):
 * - `ImportWatcher` scans the folder every `poll_ms` on the injected scheduler (never fs.watch:
 *   a missed event would lose a recording; a scan cannot). Entries are taken oldest first (in the
 *   order first seen, then by mtime, then by name), one at a time, and only while the machine is
 *   idle: an entry still being written starts an episode (the robot reports `recording` while its
 *   stack writes) and finishes it when closed; one found closed starts and finishes at once.
 * - The episode's begin notes the source (name, kind, inode, size, mtime) in the `imports` table in
 *   the same transaction (`RecordingHandle.importSource`), and in a marker file in the episode
 *   directory synced before it (`resume` and `recover` get only the directory); the source is
 *   renamed into the episode directory only after that commit, at the end (`stop()`), never
 *   copied, so the folder must be on the data directory's file system. Hence after kill -9 at any
 *   point: no row, and the episode directory is an orphan the machine deletes, the source imported
 *   afresh; a row in `recording` with the source still in the folder: the same episode resumes
 *   (`Recorder.resume`); a row in `finalizing`: `recover` moves the source (if not yet moved) and
 *   the episode is finalized as interrupted. A graceful stop lets go of a running import
 *   (`detach`) and the next start resumes it. A source whose (name, inode) the table already
 *   knows is never imported again.
 * - The episode's times are the recording's own (MCAP statistics, `metadata.yaml`'s starting_time
 *   + duration, else file times), its context the robot's when the import began.
 * - `fail` while importing runs the configured stop program (if any), waits up to
 *   `stop_timeout_ms` for the source to close, then takes it as it is (outcome `failure`). The
 *   other verbs are the robot stack's business: the runtime answers them `unsupported` (and
 *   `start` reaching the recorder anyway fails: there is no source to take).
 * - Corrupt entries (bad magic, a summary that does not read, a `metadata.yaml` that does not
 *   parse, a listed file missing, a name the episode directory cannot hold) are moved to
 *   `<folder>/.rejected/` with a `<name>.reason` file and a log line once the verdict held over two
 *   scans with nothing changed (a writer may be half way through `metadata.yaml`). A closed entry
 *   byte-identical to an imported one (same size, then same digest as its episode's manifest) goes
 *   there too, "duplicate of ep_…". Copies are best dropped by a rename from a `.`-name: a copy
 *   seen half-written is taken for a recording in progress and becomes an episode of its own.
 * - Every file system error is logged and the scan tried again at the next poll. After `fail` and
 *   at a stop, the wait for the source to close (up to `stop_timeout_ms`) is part of finalizing.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { constants } from 'node:fs';
import { access, mkdir, readFile, rename, stat, writeFile } from 'node:fs/promises';
import { basename, dirname, isAbsolute, join, resolve } from 'node:path';
import type { Clock } from '@fleet/protocol';
import type { Logger } from 'pino';
import { z } from 'zod';
import type { ImportSourceRow } from '../store/types.js';
import { resolveProgram } from '../programs.js';
import type { Scheduler } from '../time.js';
import { type RecordedFiles, type Recorder, type RecorderStats, type RecordingHandle, type RecordingInfo } from './recorder.js';
import { listDataFiles, writeJsonAtomic } from './finalize.js';
import { inspectEntry, recordingTimes, type SourceEntry } from './import-source.js';

export const ImportRecorderConfigSchema = z
  .strictObject({
    kind: z.literal('import'),
    /** Where the robot's stack writes its recordings; on the data directory's file system. */
    folder: z.string().min(1).refine(isAbsolute, 'must be an absolute path'),
    /** How often the folder is scanned. */
    poll_ms: z.number().int().min(10).max(600_000).default(1000),
    /** Run by `fail` to make the robot's stack close its recording (argv, no shell). */
    stop: z.array(z.string().min(1)).min(1).optional(),
    /** The same as one `sh -c` line. */
    stop_shell: z.string().min(1).optional(),
    /** After `fail`, how long to wait for the recording to close before taking it as it is. */
    stop_timeout_ms: z.number().int().min(0).max(3_600_000).default(30_000),
  })
  .refine((c) => !(c.stop && c.stop_shell), { message: 'give `stop` or `stop_shell`, not both', path: ['stop_shell'] });

export type ImportRecorderConfig = z.output<typeof ImportRecorderConfigSchema>;

type Env = Readonly<Record<string, string | undefined>>;

/** The nearest existing directory at or above `path` (the data directory may not exist yet). */
export async function existingAncestor(path: string): Promise<string> {
  let p = resolve(path);
  for (;;) {
    if (await stat(p).then(() => true, () => false)) return p;
    const up = dirname(p);
    if (up === p) return p;
    p = up;
  }
}

/**
 * What `fleet-agent config check` reports about an `import` recorder: the folder exists, is a
 * directory the agent can write (it renames entries out of it), is on the data directory's file
 * system, and the stop program exists. One line per problem, keyed like the YAML file.
 */
export async function checkImportRecorderConfig(cfg: ImportRecorderConfig, opts: { dataDir: string; env: Env }): Promise<string[]> {
  const problems: string[] = [];
  const folder = await stat(cfg.folder).catch(() => undefined);
  if (!folder) problems.push(`recorder.folder: ${cfg.folder} does not exist`);
  else if (!folder.isDirectory()) problems.push(`recorder.folder: ${cfg.folder} is not a directory`);
  else {
    if (!(await access(cfg.folder, constants.W_OK | constants.X_OK).then(() => true, () => false))) problems.push(`recorder.folder: ${cfg.folder} is not writable by this user`);
    const data = await stat(await existingAncestor(opts.dataDir));
    if (data.dev !== folder.dev) problems.push(`recorder.folder: ${cfg.folder} is not on the file system of the data directory ${opts.dataDir} (recordings are moved, not copied)`);
  }
  if (cfg.stop && resolveProgram(cfg.stop[0]!, opts.env.PATH ?? '') === undefined) problems.push(`recorder.stop: ${cfg.stop[0]} is not an executable program${cfg.stop[0]!.includes('/') ? '' : ' on PATH'}`);
  return problems;
}

/** An entry the watcher hands the recorder to start an episode with. */
export interface Source extends SourceEntry {
  ino: number;
  sizeBytes: number;
  mtimeMs: number;
}

export interface ImportRecorderOptions {
  clock: Clock;
  scheduler: Scheduler;
  logger: Logger;
  /** The stop program's environment (default: the agent's). */
  env?: Env;
}

/**
 * The source an episode is made from, kept in its directory (written and synced before the
 * begin commits; `.tmp-` keeps it out of the manifest) so that `resume` and `recover`, which get
 * only the directory, find it again. The `imports` row written with the begin is the same record.
 */
const SOURCE_MARKER = '.tmp-import-source.json';

async function readMarker(dir: string): Promise<Omit<ImportSourceRow, 'episodeId'> | undefined> {
  const text = await readFile(join(dir, SOURCE_MARKER), 'utf8').catch(() => undefined);
  if (text === undefined) return undefined;
  try {
    return JSON.parse(text) as Omit<ImportSourceRow, 'episodeId'>;
  } catch {
    return undefined;
  }
}

/** The output of the stop program kept for the log. */
const STOP_OUTPUT_MAX = 4096;

export class ImportRecorder implements Recorder {
  private pending: Source | undefined;
  private current: ImportRecording | undefined;
  /** How many entries went to `.rejected/` since start. */
  rejected = 0;

  constructor(
    readonly config: ImportRecorderConfig,
    readonly opts: ImportRecorderOptions,
  ) {}

  get folder(): string {
    return this.config.folder;
  }

  /** The import being recorded, if any. */
  get active(): { name: string; episodeId: string } | undefined {
    return this.current ? { name: this.current.source.name, episodeId: this.current.episodeId } : undefined;
  }

  /** Runs `fn` (the machine's start) with `source` as the one `start()` takes. */
  async startWith<T>(source: Source, fn: () => Promise<T>): Promise<T> {
    this.pending = source;
    try {
      return await fn();
    } finally {
      this.pending = undefined;
    }
  }

  async start(dir: string, info: RecordingInfo): Promise<RecordingHandle> {
    const source = this.pending;
    this.pending = undefined;
    if (!source) throw new Error(`the import recorder records what the robot writes into ${this.folder}; it cannot start a recording itself`);
    const handle = new ImportRecording(this, dir, info.episodeId, source, this.opts.clock.now());
    await writeJsonAtomic(dir, SOURCE_MARKER, handle.importSource);
    this.current = handle;
    return handle;
  }

  async resume(dir: string, info: RecordingInfo): Promise<RecordingHandle | undefined> {
    const row = await readMarker(dir);
    if (!row) return undefined;
    const s = await stat(join(this.folder, row.name)).catch(() => undefined);
    if (s?.ino !== row.ino) {
      this.opts.logger.warn({ episode_id: info.episodeId, source: row.name }, 'the recording being imported is no longer in the folder');
      return undefined;
    }
    const handle = new ImportRecording(this, dir, info.episodeId, { name: row.name, kind: row.kind, ino: row.ino, sizeBytes: row.sizeAtBegin, mtimeMs: row.mtimeMs }, row.createdAt);
    this.current = handle;
    return handle;
  }

  /** After a crash in `finalizing`: takes the source if it is still in the folder. */
  async recover(dir: string): Promise<RecordedFiles> {
    const row = await readMarker(dir);
    if (!row) return { files: await listDataFiles(dir), messageCount: null };
    return this.take(dir, basename(dir), row);
  }

  /** @internal */
  release(handle: ImportRecording): void {
    if (this.current === handle) this.current = undefined;
  }

  /**
   * Moves the source into the episode directory (unless a previous run did) and reports its files
   * and the times it holds.
   */
  async take(dir: string, episodeId: string, source: Pick<ImportSourceRow, 'name' | 'kind' | 'ino'>): Promise<RecordedFiles> {
    const from = join(this.folder, source.name);
    const to = join(dir, source.name);
    const there = await stat(from).catch(() => undefined);
    if (there?.ino === source.ino) {
      await mkdir(dir, { recursive: true });
      await rename(from, to);
      this.opts.logger.info({ episode_id: episodeId, source: source.name }, 'imported recording moved into its episode');
    }
    const moved = await stat(to).catch(() => undefined);
    if (!moved) {
      this.opts.logger.error({ episode_id: episodeId, source: source.name }, 'the recording being imported is gone; the episode has no files');
      return { files: [], messageCount: null };
    }
    const files = await listDataFiles(dir);
    const times = await recordingTimes(to, source.kind);
    return { files, messageCount: times.messageCount, ...(times.startedAt !== undefined ? { startedAt: times.startedAt } : {}), ...(times.endedAt !== undefined ? { endedAt: times.endedAt } : {}) };
  }

  /**
   * After `fail`: runs the stop program, then waits until the source is closed (or gone, or
   * corrupt) or `stop_timeout_ms` has passed.
   */
  async closeSource(source: SourceEntry, episodeId: string): Promise<void> {
    const { clock, logger } = this.opts;
    const config = this.config;
    const deadline = clock.now() + config.stop_timeout_ms;
    const look = () =>
      inspectEntry(this.folder, source).catch((err: unknown) => {
        logger.warn({ err, source: source.name }, 'could not look at the recording being imported');
        return undefined;
      });
    // Closed already (the watcher's finish), gone or corrupt: nothing to wait for.
    const first = await look();
    if (first && first.state !== 'open') return;
    const child = this.runStopProgram(episodeId);
    try {
      for (;;) {
        const seen = await look();
        if (seen && seen.state !== 'open') return;
        const left = deadline - clock.now();
        if (left <= 0) {
          logger.warn({ episode_id: episodeId, source: source.name, stop_timeout_ms: config.stop_timeout_ms }, 'the recording did not close in time; taking it as it is');
          return;
        }
        await new Promise<void>((r) => this.opts.scheduler.setTimeout(r, Math.min(config.poll_ms, left)));
      }
    } finally {
      if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
  }

  private runStopProgram(episodeId: string): ChildProcess | undefined {
    const { logger, env } = this.opts;
    const config = this.config;
    const argv = config.stop ?? (config.stop_shell !== undefined ? ['/bin/sh', '-c', config.stop_shell] : undefined);
    if (!argv) return undefined;
    const child = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'], ...(env ? { env: { ...env } } : {}) });
    let output = '';
    const keep = (chunk: Buffer) => {
      if (output.length < STOP_OUTPUT_MAX) output += chunk.toString('utf8').slice(0, STOP_OUTPUT_MAX - output.length);
    };
    child.stdout?.on('data', keep);
    child.stderr?.on('data', keep);
    child.on('error', (err) => logger.error({ err, episode_id: episodeId, stop: argv }, 'the stop program did not start'));
    child.on('close', (code, signal) => logger.info({ episode_id: episodeId, stop: argv, code, signal, output }, 'the stop program ended'));
    logger.info({ episode_id: episodeId, stop: argv }, 'running the stop program');
    return child;
  }

  /** Moves `name` to `.rejected/` (a free name there) with a `.reason` file beside it. */
  async reject(name: string, reason: string): Promise<void> {
    const dir = join(this.folder, '.rejected');
    await mkdir(dir, { recursive: true });
    let target = name;
    for (let n = 1; await stat(join(dir, target)).then(() => true, () => false); n++) target = `${name}~${n}`;
    await rename(join(this.folder, name), join(dir, target));
    await writeFile(join(dir, `${target}.reason`), `${new Date(this.opts.clock.now()).toISOString()} ${reason}\n`);
    this.rejected += 1;
    this.opts.logger.warn({ source: name, rejected_as: `.rejected/${target}`, reason }, 'import folder entry rejected');
  }
}

/** One import in progress: the source stays in the folder until `stop()`. */
class ImportRecording implements RecordingHandle {
  readonly importSource: Omit<ImportSourceRow, 'episodeId'>;

  constructor(
    private readonly recorder: ImportRecorder,
    private readonly dir: string,
    readonly episodeId: string,
    readonly source: Source,
    createdAt: number,
  ) {
    this.importSource = { name: source.name, kind: source.kind, ino: source.ino, sizeAtBegin: source.sizeBytes, mtimeMs: source.mtimeMs, createdAt };
  }

  stats(): RecorderStats {
    return { messageCount: 0, bytes: this.source.sizeBytes };
  }

  async stop(): Promise<RecordedFiles> {
    this.recorder.release(this);
    await this.recorder.closeSource(this.source, this.episodeId);
    return this.recorder.take(this.dir, this.episodeId, this.source);
  }

  /**
   * A begin that did not commit: the source stays in the folder, to be imported at the next scan.
   * (A discard would end here too, and the source be imported again: the import runtime refuses
   * `discard` before it reaches the machine.)
   */
  async abort(): Promise<void> {
    this.recorder.release(this);
  }

  async detach(): Promise<void> {
    this.recorder.release(this);
  }
}

