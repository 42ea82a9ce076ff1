/**
 * The import folder's watcher: scans the folder the robot's own stack writes recordings into and
 * drives the recording state machine with the ImportRecorder (the design is in
 * import-recorder.ts's header).
 */
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { Clock } from '@fleet/protocol';
import type { Logger } from 'pino';
import { IllegalTransitionError } from '../errors.js';
import type { AgentStore } from '../store/types.js';
import type { Scheduler } from '../time.js';
import { existingAncestor, type ImportRecorder, type ImportRecorderConfig, type Source } from './import-recorder.js';
import { contentDigest, digestFromManifest, inspectEntry, listEntries, type Inspection, type SourceEntry } from './import-source.js';
import { EPISODE_META_FILES } from './recorder.js';
import type { RecordingStateMachine } from './state-machine.js';

export interface ImportWatcherOptions {
  config: ImportRecorderConfig;
  machine: RecordingStateMachine;
  recorder: ImportRecorder;
  store: AgentStore;
  dataDir: string;
  clock: Clock;
  scheduler: Scheduler;
  logger: Logger;
}

export interface ImportWatcherStatus {
  folder: string;
  /** The entry being imported now. */
  importing: string | null;
  /** Entries moved to `.rejected/` since start (corrupt, duplicate). */
  rejected: number;
}

const SOURCE = { source: 'import' } as const;

/** Names the episode directory cannot hold as they are (see listDataFiles and finalize). */
function unusableName(name: string): string | undefined {
  if ((EPISODE_META_FILES as readonly string[]).includes(name)) return `its name ${name} is the agent's own file name`;
  if (name.includes('.tmp-')) return 'its name holds `.tmp-`, which marks files left out of an episode';
  return undefined;
}

/** Scans the import folder and drives the recording state machine; see the file header. */
export class ImportWatcher {
  private timer: ReturnType<Scheduler['setTimeout']> | undefined;
  private running: Promise<void> | undefined;
  private stopped = true;
  private scans = 0;
  /** The scan each name was first seen in, for oldest-first order. */
  private readonly firstSeen = new Map<string, number>();
  /** A corrupt verdict's signature from the previous scan: rejected only when it holds unchanged. */
  private readonly suspects = new Map<string, string>();

  constructor(private readonly opts: ImportWatcherOptions) {}

  /** Refuses a folder that is missing or on another file system than the data directory; then scans now and every `poll_ms`. */
  async start(): Promise<void> {
    const { config, dataDir } = this.opts;
    const folder = await stat(config.folder).catch(() => undefined);
    if (!folder?.isDirectory()) throw new Error(`recorder.folder: ${config.folder} is not a directory`);
    const data = await stat(await existingAncestor(dataDir));
    if (data.dev !== folder.dev) throw new Error(`recorder.folder: ${config.folder} is not on the file system of the data directory ${dataDir}: recordings are moved into it, never copied`);
    this.stopped = false;
    this.opts.logger.info({ folder: config.folder, poll_ms: config.poll_ms }, 'watching the import folder');
    this.tick();
  }

  /** Stops polling; waits for a scan under way. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer !== undefined) this.opts.scheduler.clearTimeout(this.timer);
    this.timer = undefined;
    await this.running;
  }

  status(): ImportWatcherStatus {
    return { folder: this.opts.config.folder, importing: this.opts.recorder.active?.name ?? null, rejected: this.opts.recorder.rejected };
  }

  /** One scan (the poll's; also for tests), after any scan under way. */
  scan(): Promise<void> {
    const run = (this.running ?? Promise.resolve()).then(() => this.scanOnce());
    this.running = run;
    void run.then(() => {
      if (this.running === run) this.running = undefined;
    });
    return run;
  }

  private tick(): void {
    if (this.stopped) return;
    void this.scan().then(() => {
      if (!this.stopped) this.timer = this.opts.scheduler.setTimeout(() => this.tick(), this.opts.config.poll_ms);
    });
  }

  private async scanOnce(): Promise<void> {
    const { machine, recorder, logger } = this.opts;
    this.scans += 1;
    try {
      if (machine.state === 'finalizing') return;
      if (machine.state === 'recording') return await this.followActive();
      const entries = await listEntries(recorder.folder);
      const names = new Set(entries.map((e) => e.name));
      for (const name of this.firstSeen.keys()) if (!names.has(name)) this.firstSeen.delete(name);
      for (const name of this.suspects.keys()) if (!names.has(name)) this.suspects.delete(name);
      const looked: { entry: SourceEntry; seen: Inspection }[] = [];
      for (const entry of entries) {
        if (!this.firstSeen.has(entry.name)) this.firstSeen.set(entry.name, this.scans);
        looked.push({ entry, seen: await inspectEntry(recorder.folder, entry) });
      }
      const mtime = (s: Inspection) => (s.state === 'gone' ? 0 : s.mtimeMs);
      looked.sort((a, b) => this.firstSeen.get(a.entry.name)! - this.firstSeen.get(b.entry.name)! || mtime(a.seen) - mtime(b.seen) || (a.entry.name < b.entry.name ? -1 : 1));
      for (const { entry, seen } of looked) {
        if (await this.consider(entry, seen)) return;
      }
    } catch (err) {
      logger.error({ err, folder: recorder.folder }, 'import folder scan failed; trying again at the next poll');
    }
  }

  /** While an import records: finish it once its source is closed, fail it if it went away. */
  private async followActive(): Promise<void> {
    const { machine, recorder, logger } = this.opts;
    const active = recorder.active;
    if (!active) return;
    const row = await this.opts.store.imports.byEpisode(active.episodeId);
    if (!row) return;
    const seen = await inspectEntry(recorder.folder, { name: row.name, kind: row.kind });
    if (seen.state === 'open' && seen.ino === row.ino) return;
    try {
      if (seen.state === 'closed' && seen.ino === row.ino) await machine.finish(SOURCE);
      else {
        const why = seen.state === 'corrupt' ? seen.reason : 'it left the folder';
        logger.error({ episode_id: active.episodeId, source: row.name, reason: why }, 'the recording being imported cannot be finished; the episode fails');
        await machine.fail(SOURCE);
      }
    } catch (err) {
      // Another verb (an operator's fail) came first.
      if (!(err instanceof IllegalTransitionError)) throw err;
    }
  }

  /** Acts on one entry while idle; true when it started an episode (one at a time). */
  private async consider(entry: SourceEntry, seen: Inspection): Promise<boolean> {
    const { machine, recorder, store, logger } = this.opts;
    if (seen.state === 'gone') return false;
    const unusable = unusableName(entry.name);
    const verdict = unusable ?? (seen.state === 'corrupt' ? seen.reason : undefined);
    if (verdict !== undefined) {
      // Rejected only when the same verdict holds over two scans with nothing changed.
      if (this.suspects.get(entry.name) !== seen.signature) {
        this.suspects.set(entry.name, seen.signature);
        return false;
      }
      this.suspects.delete(entry.name);
      await recorder.reject(entry.name, verdict);
      return false;
    }
    this.suspects.delete(entry.name);
    const source: Source = { ...entry, ino: seen.ino, sizeBytes: seen.sizeBytes, mtimeMs: seen.mtimeMs };
    const known = await store.imports.bySource(entry.name, seen.ino);
    if (known) {
      // Its episode exists already (a move that failed after the episode began): never a second one.
      await recorder.reject(entry.name, `already imported as ${known.episodeId}`);
      return false;
    }
    if (seen.state === 'closed') {
      const duplicate = await this.duplicateOf(source);
      if (duplicate) {
        logger.warn({ source: entry.name, episode_id: duplicate }, 'a copy of an imported recording was dropped again');
        await recorder.reject(entry.name, `duplicate of ${duplicate}`);
        return false;
      }
    }
    const started = await recorder.startWith(source, () => machine.start(SOURCE)).catch((err: unknown) => {
      if (err instanceof IllegalTransitionError) return undefined;
      throw err;
    });
    if (!started) return true;
    logger.info({ source: entry.name, episode_id: started.episode_id, closed: seen.state === 'closed' }, 'importing a recording');
    if (seen.state === 'closed') {
      await machine.finish(SOURCE).catch((err: unknown) => {
        if (!(err instanceof IllegalTransitionError)) throw err;
      });
    }
    return true;
  }

  /** The episode a closed entry is a byte-identical copy of, if any. */
  private async duplicateOf(source: Source): Promise<string | undefined> {
    const { store, recorder } = this.opts;
    const rows = (await store.imports.withSize(source.sizeBytes)).filter((r) => r.kind === source.kind);
    if (rows.length === 0) return undefined;
    const digest = await contentDigest(join(recorder.folder, source.name), source.kind);
    for (const row of rows) {
      const episode = await store.episodes.get(row.episodeId);
      if (episode && digestFromManifest(episode.manifest, row.name, row.kind) === digest) return row.episodeId;
    }
    return undefined;
  }
}
