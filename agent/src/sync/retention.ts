import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { iso, type Clock, type EpisodePruned, type LocalMissing } from '@fleet/protocol';
import type { Logger } from 'pino';
import { deleteDataFiles } from '../recording/finalize.js';
import type { AgentStore, EpisodeRow, NewOutboxMessage } from '../store/types.js';
import type { Scheduler, TimerHandle } from '../time.js';

/** The timer never waits longer than this: a clock that jumped (NTP, a long suspend), or a due time set without a verification, is noticed within the hour. */
export const RETENTION_MAX_WAIT_MS = 60 * 60 * 1000;

/** The outbox message of an `episode.pruned` report: one per episode (the msg_id dedupes a second enqueue). */
export function prunedMessage(episodeId: string, at: number): NewOutboxMessage {
  const body: EpisodePruned = { episode_id: episodeId, pruned_at: at };
  return { msgId: `pruned:${episodeId}`, kind: 'episode.pruned', body, createdAt: at };
}

/** The outbox message of an `episode.local_missing` report: one per episode. */
export function localMissingMessage(episodeId: string, paths: readonly string[], at: number): NewOutboxMessage {
  const body: LocalMissing = { episode_id: episodeId, paths: [...paths], at };
  return { msgId: `local_missing:${episodeId}`, kind: 'episode.local_missing', body, createdAt: at };
}

/** Manifest paths of `episode` that are not on disk now. */
export async function missingFiles(dataDir: string, episode: EpisodeRow): Promise<string[]> {
  const missing: string[] = [];
  for (const f of episode.manifest.files) {
    try {
      await stat(join(dataDir, episode.dir, ...f.path.split('/')));
    } catch {
      missing.push(f.path);
    }
  }
  return missing;
}

/**
 * The local copy's retention (spec, Destination retention directive). The due time of each
 * episode is stored in the agent's SQLite with the replica changes it follows from (the last
 * destination verifying it under `until_all_verified_plus_72h` sets it, any `keep` clears it),
 * so nothing is held only in memory: this part looks for due episodes when it starts and when
 * its timer on the injected scheduler fires, deletes their data files (the rows and the local
 * metadata files stay) and reports `episode.pruned` through the durable outbox.
 */
export class Retention {
  private timer: TimerHandle | undefined;
  private running: Promise<void> | undefined;
  private again = false;
  private stopped = true;

  constructor(
    private readonly opts: {
      store: AgentStore;
      dataDir: string;
      clock: Clock;
      scheduler: Scheduler;
      logger: Logger;
      /** A report was enqueued: wake the outbox sender. */
      onReport: () => void;
    },
  ) {}

  /** Prunes what fell due while the agent was not running, then arms the timer. */
  async start(): Promise<void> {
    this.stopped = false;
    await this.check();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.clear();
    while (this.running) await this.running;
  }

  /** Resolves when no check is running (tests). */
  async idle(): Promise<void> {
    while (this.running) await this.running;
  }

  /** Something changed (a replica verified, an assignment came): look again and re-arm. */
  kick(): void {
    void this.check().catch((err: unknown) => this.opts.logger.error({ err }, 'retention check failed'));
  }

  /** Prunes every due episode, then sets the timer for the next one. Runs one at a time. */
  check(): Promise<void> {
    if (this.stopped) return Promise.resolve();
    if (this.running) {
      this.again = true;
      return this.running;
    }
    const run = (async () => {
      try {
        do {
          this.again = false;
          await this.pruneDue();
        } while (this.again && !this.stopped);
        await this.arm();
      } catch (err) {
        this.opts.logger.error({ err }, 'retention could not prune; trying again later');
        this.wakeIn(RETENTION_MAX_WAIT_MS);
      } finally {
        this.running = undefined;
      }
    })();
    this.running = run;
    return run;
  }

  private async pruneDue(): Promise<void> {
    const { store, clock, logger, dataDir } = this.opts;
    for (;;) {
      if (this.stopped) return;
      const due = await store.sync.pruneDue(clock.now(), 16);
      if (due.length === 0) return;
      for (const episode of due) {
        if (this.stopped) return;
        // The files go first: a crash in between deletes nothing twice and reports once on the next start.
        await deleteDataFiles(join(dataDir, episode.dir)).catch((err: unknown) => {
          // A directory that is already gone has nothing left to delete.
          if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
        });
        const at = clock.now();
        if (await store.sync.markPruned(episode.id, at, prunedMessage(episode.id, at))) {
          this.opts.onReport();
          logger.info({ episode_id: episode.id, bytes: episode.manifest.total_bytes, pruned_at: iso(at) }, 'local copy pruned by retention');
        }
      }
    }
  }

  private async arm(): Promise<void> {
    this.clear();
    if (this.stopped) return;
    // With nothing due the timer still runs hourly: a due time can also appear without a
    // verification here (the cloud dropping an unfinished assignment of an otherwise verified episode).
    const next = await this.opts.store.sync.nextPruneAt();
    this.wakeIn(next === null ? RETENTION_MAX_WAIT_MS : Math.min(RETENTION_MAX_WAIT_MS, Math.max(0, next - this.opts.clock.now())));
  }

  private wakeIn(ms: number): void {
    this.clear();
    if (this.stopped) return;
    this.timer = this.opts.scheduler.setTimeout(() => {
      this.timer = undefined;
      this.kick();
    }, ms);
  }

  private clear(): void {
    if (this.timer !== undefined) this.opts.scheduler.clearTimeout(this.timer);
    this.timer = undefined;
  }
}
