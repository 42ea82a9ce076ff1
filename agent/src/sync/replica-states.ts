import { iso, jitter, type Clock } from '@fleet/protocol';
import type { Logger } from 'pino';
import type { EpisodeRow, ReplicaPatch, ReplicaRow, SyncStore } from '../store/types.js';
import { checkReplicaTransition, oneLine, reached, replicaReportMessage, type ReplicaLocalState } from './replica.js';
import { verifyReplica, type GrantMessage } from './replica-upload.js';
import { UploadError } from '../errors.js';

/** Errors that will not go away by asking again: the replica is parked (reported once, no further attempts). */
const PARKING_CODES = new Set(['file_changed', 'file_missing']);

/**
 * The durable side of a replica: each state change goes through {@link checkReplicaTransition}
 * and is written with its `replica.state` outbox row in one transaction; a failed attempt keeps
 * the state, sets the one-line error, reports it (once there is a grant) and schedules the
 * retry on the schedule with jitter.
 */
export class ReplicaStates {
  constructor(
    private readonly opts: {
      store: { sync: SyncStore };
      clock: Clock;
      logger: Logger;
      random: () => number;
      /** A report was enqueued: wake the outbox sender. */
      onReport: () => void;
      /** A replica became verified (retention may have a new due time). */
      onVerified?: (episodeId: string) => void;
      schedule: readonly number[];
      jitter: number;
    },
  ) {}

  /** A grant arrived: note it (before it is checked), report `granted` the first time. */
  async granted(row: ReplicaRow, grant: GrantMessage): Promise<ReplicaRow> {
    const { store, clock, logger } = this.opts;
    const patch: ReplicaPatch = { attempts: row.attempts + 1, grantId: grant.grant_id, objectKey: grant.object_key ?? null, retention: grant.retention, note: null };
    const at = clock.now();
    // Noted before it is checked, so a failure report names the grant it failed with.
    if (row.state === 'assigned') {
      checkReplicaTransition(row.state, 'granted');
      // A state change ends the previous attempt's error (spec decisions: kept until the next attempt moves the state).
      const updated = { ...row, ...patch, state: 'granted' as const, lastError: null };
      row = await store.sync.update(row.episodeId, row.destinationId, { ...patch, state: 'granted', lastError: null }, at, this.report(updated, 'granted', at));
      this.opts.onReport();
    } else {
      row = await store.sync.update(row.episodeId, row.destinationId, patch, at);
    }
    logger.info({ episode_id: row.episodeId, destination_id: row.destinationId, grant_id: grant.grant_id, protocol: grant.protocol, files: grant.files.length }, 'grant received');
    return row;
  }

  /** All files are complete: `synced`, then `verified` when every receipt proves the bytes. */
  async finish(row: ReplicaRow, episode: EpisodeRow): Promise<void> {
    const { store, clock, logger } = this.opts;
    const files = await store.sync.files(row.episodeId, row.destinationId);
    const verdict = verifyReplica(episode, files);
    if (!verdict.ok) throw new UploadError(verdict.code, verdict.message);
    const at = clock.now();
    if (!reached(row.state, 'synced')) {
      checkReplicaTransition(row.state, 'synced');
      const note = verdict.note ?? null;
      const updated = { ...row, state: 'synced' as const, note, lastError: null };
      row = await store.sync.update(
        row.episodeId,
        row.destinationId,
        { state: 'synced', lastError: null, failures: 0, note, nextAttemptAt: note === null ? at : null },
        at,
        this.report(updated, 'synced', at),
      );
      this.opts.onReport();
      logger.info({ episode_id: row.episodeId, destination_id: row.destinationId, note }, 'replica synced');
    }
    if (verdict.note !== undefined) {
      if (row.nextAttemptAt !== null) await store.sync.update(row.episodeId, row.destinationId, { nextAttemptAt: null, note: verdict.note }, at);
      return;
    }
    checkReplicaTransition(row.state, 'verified');
    const updated = { ...row, state: 'verified' as const, lastError: null };
    await store.sync.update(row.episodeId, row.destinationId, { state: 'verified', lastError: null, failures: 0, nextAttemptAt: null }, at, this.report(updated, 'verified', at));
    this.opts.onReport();
    this.opts.onVerified?.(row.episodeId);
    logger.info({ episode_id: row.episodeId, destination_id: row.destinationId }, 'replica verified');
  }

  /** Moves to `to` (when not there yet) with its report. */
  async moveTo(row: ReplicaRow, to: Exclude<ReplicaLocalState, 'assigned'>): Promise<ReplicaRow> {
    if (reached(row.state, to)) return row;
    checkReplicaTransition(row.state, to);
    const at = this.opts.clock.now();
    const updated = { ...row, state: to, lastError: null };
    const out = await this.opts.store.sync.update(row.episodeId, row.destinationId, { state: to, lastError: null }, at, this.report(updated, to, at));
    this.opts.onReport();
    return out;
  }

  /** A failed attempt: the replica keeps its state, its error is set and reported, a retry is scheduled. */
  async failed(initial: ReplicaRow, err: unknown, interrupted: boolean): Promise<void> {
    const { store, clock, logger } = this.opts;
    const row = await store.sync.get(initial.episodeId, initial.destinationId);
    // Dropped from the assignments meanwhile: nothing left to record.
    if (!row) return;
    const code = err instanceof UploadError ? err.code : 'internal';
    const message = err instanceof Error ? err.message : String(err);
    const ids = { episode_id: row.episodeId, destination_id: row.destinationId };
    if (interrupted || code === 'stopping' || code === 'aborted') {
      logger.info(ids, 'upload interrupted by stop; resumes at the next start');
      return;
    }
    if (code === 'link_down') {
      // Not the replica's fault: ask again as soon as the link is back, no backoff.
      logger.info(ids, 'grant request interrupted by a disconnect; asking again after reconnect');
      return;
    }
    if (code === 'internal') logger.error({ err, ...ids }, 'sync attempt failed unexpectedly');
    const now = clock.now();
    // The failure report has the state of the report before it, and the cloud keeps the newer of
    // two reports in one state (robot clock): a failure in the same millisecond as that report (a
    // small corrupted file fails right after `syncing`), or after the clock stepped back, must
    // still be newer. `updated_at` is at least the time of this replica's last report.
    const at = Math.max(now, row.updatedAt + 1);
    const park = PARKING_CODES.has(code);
    const failures = row.failures + 1;
    const next = park ? null : now + this.jittered(this.opts.schedule[Math.min(failures, this.opts.schedule.length) - 1]!);
    const error = oneLine(code, next === null ? `${message}; not retried` : `${message}; retrying at ${iso(next)}`);
    const patch: ReplicaPatch = { lastError: error, failures, nextAttemptAt: next };
    // A grant of an earlier attempt counts one; an attempt that failed before any grant (a timeout) counts too.
    if (row.attempts === initial.attempts) patch.attempts = row.attempts + 1;
    const reportable = row.grantId !== null && row.state !== 'assigned';
    const updated = { ...row, lastError: error };
    await store.sync.update(row.episodeId, row.destinationId, patch, at, reportable ? this.report(updated, row.state as Exclude<ReplicaLocalState, 'assigned'>, at) : undefined);
    if (reportable) this.opts.onReport();
    logger.warn({ ...ids, error, state: row.state, retry_at: next === null ? null : iso(next) }, park ? 'sync attempt failed; not retried' : 'sync attempt failed; will retry');
  }

  /** The grant's URLs expired after the upload moved on: ask again now (with resume); not a failure, nothing reported. */
  async urlsExpired(row: ReplicaRow, message: string): Promise<void> {
    const { store, clock, logger } = this.opts;
    const at = clock.now();
    await store.sync.update(row.episodeId, row.destinationId, { nextAttemptAt: at, note: oneLine('url_expired', `${message}; asking again with resume`) }, at);
    logger.info({ episode_id: row.episodeId, destination_id: row.destinationId }, 'upload URLs expired mid-upload; asking again with resume');
  }

  /** No further attempts, with the reason as the local error (not reported: there may be no grant). */
  async park(row: ReplicaRow, code: string, message: string): Promise<void> {
    const error = oneLine(code, message);
    await this.opts.store.sync.update(row.episodeId, row.destinationId, { lastError: error, nextAttemptAt: null }, this.opts.clock.now());
    this.opts.logger.warn({ episode_id: row.episodeId, destination_id: row.destinationId, error }, 'assignment parked');
  }

  private report(row: ReplicaRow, state: Exclude<ReplicaLocalState, 'assigned'>, at: number) {
    return replicaReportMessage(row, {
      grant_id: row.grantId ?? '',
      state,
      error: row.lastError,
      object_key: row.objectKey,
      ...(row.note !== null ? { note: row.note } : {}),
      at,
    });
  }

  /** `ms` spread by ± jitter, never negative. */
  jittered(ms: number): number {
    return Math.round(jitter(ms, this.opts.jitter, this.opts.random));
  }

}
