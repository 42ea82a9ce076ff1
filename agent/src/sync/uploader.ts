import { join } from 'node:path';
import { iso, type Clock, type Pressure } from '@fleet/protocol';
import type { Logger } from 'pino';
import type { AgentStore, EpisodeRow, ReplicaRow, SyncCounts, UploadFileRow } from '../store/types.js';
import type { Scheduler, TimerHandle } from '../time.js';
import { newReqId, SyncChannel, type AssignmentsMessage, type GrantAnswer, type SyncTransport } from './channel.js';
import { measurePressure, type FreeBytes } from './pressure.js';
import { ReplicaProgress, type UploadProgressView } from './progress.js';
import { oneLine, reached } from './replica.js';
import { ReplicaStates } from './replica-states.js';
import { uploadFiles, validateGrant } from './replica-upload.js';
import { localMissingMessage, missingFiles } from './retention.js';
import { UploadError } from '../errors.js';
import type { UploadHttp } from './transfer.js';

export interface UploaderOptions {
  store: AgentStore;
  dataDir: string;
  transport: SyncTransport;
  http: UploadHttp;
  clock: Clock;
  scheduler: Scheduler;
  logger: Logger;
  /** Jitter source in [0, 1). */
  random: () => number;
  /** A replica report was enqueued: wake the outbox sender. */
  onReport: () => void;
  /** A replica became verified: the local copy's retention may have a new due time. */
  onVerified?: (episodeId: string) => void;
  /** Replicas uploading at once (default 2). */
  concurrency?: number;
  /** Multipart parts on the wire at once per file (default 3). */
  partParallel?: number;
  /** A grant request unanswered this long is retried like a failure (default 30 s). */
  grantTimeoutMs?: number;
  /**
   * While online, the complete assignment list is asked for again this long after the last
   * answer (default 5 min): an assignment the cloud pushed while the link or a replica was going
   * down is otherwise not seen before the next reconnection.
   */
  assignmentsRefreshMs?: number;
  /** Waits after the 1st, 2nd, … failed attempt; the last one repeats. */
  retryScheduleMs?: readonly number[];
  /** Each wait (retries and deferrals) is spread by ± this fraction (default 0.2). */
  jitter?: number;
  /** Default: measured from the data directory's file system and the store. */
  pressure?: () => Promise<Pressure>;
  /** How the default measure reads the file system's free bytes (default `statfs`). */
  freeBytes?: FreeBytes;
}

export const DEFAULT_SYNC_RETRY_SCHEDULE_MS: readonly number[] = [10_000, 60_000, 5 * 60_000, 15 * 60_000, 60 * 60_000];

/** How one replica attempt ended, as `fleet-agent metrics` counts it. */
export type AttemptResult = 'completed' | 'deferred' | 'url_expired' | 'failed' | 'aborted' | 'nothing_to_send';

const key = (r: Pick<ReplicaRow, 'episodeId' | 'destinationId'>) => `${r.episodeId}\u0000${r.destinationId}`;

/** Bytes of an episode the destination already holds: complete files (of the manifest's content) and accepted parts. */
export function bytesAtDestination(files: readonly UploadFileRow[], episode: EpisodeRow | undefined): number {
  const sha = new Map((episode?.manifest.files ?? []).map((f) => [f.path, f.sha256]));
  let n = 0;
  for (const f of files) {
    if (f.complete && f.sha256Sent === sha.get(f.path)) n += f.bytesSent ?? 0;
    else if (!f.complete) for (const p of f.parts) n += p.size;
  }
  return n;
}

/**
 * The agent's uploader (docs/architecture.md, The uploader): for each replica the cloud assigned and
 * whose time has come it asks the cloud for a grant over MQTT, uploads the episode's files
 * straight to the grant's URLs, and reports the replica's states through the durable outbox.
 * Each replica has its own next attempt time, so one failing episode, file or destination
 * never holds the others back; at most `concurrency` replicas upload at once.
 */
export class Uploader {
  readonly channel: SyncChannel;
  private readonly replicas: ReplicaStates;
  private readonly active = new Map<string, AbortController>();
  /** Live progress of the replicas whose files are being sent now. */
  private readonly live = new Map<string, ReplicaProgress>();
  private readonly runs = new Set<Promise<unknown>>();
  private online = false;
  private stopped = true;
  private pumping = false;
  private again = false;
  private wakeTimer: TimerHandle | undefined;
  private assignmentsTimer: TimerHandle | undefined;
  private assignmentsReqId: string | undefined;
  /** How long the unanswered assignments.request in flight waits before it is asked again. */
  private assignmentsWaitMs = 0;
  /** The last assignments.request is still being handed to the broker. */
  private assignmentsSending = false;
  private cached: SyncCounts = { open: 0, failing: 0, verified: 0, settled: 0 };
  private readonly concurrency: number;
  private readonly partParallel: number;
  private readonly grantTimeoutMs: number;
  private readonly assignmentsRefreshMs: number;
  private readonly schedule: readonly number[];
  private readonly jitter: number;
  /** Since start: bytes handed to upload connections (resent ones included) and attempts by result. */
  readonly totals = { bytesSent: 0, attempts: {} as Partial<Record<AttemptResult, number>> };

  constructor(private readonly opts: UploaderOptions) {
    this.concurrency = opts.concurrency ?? 2;
    this.partParallel = opts.partParallel ?? 3;
    this.grantTimeoutMs = opts.grantTimeoutMs ?? 30_000;
    this.assignmentsRefreshMs = opts.assignmentsRefreshMs ?? 5 * 60_000;
    this.schedule = opts.retryScheduleMs ?? DEFAULT_SYNC_RETRY_SCHEDULE_MS;
    this.jitter = opts.jitter ?? 0.2;
    if (this.schedule.length === 0) throw new RangeError('retryScheduleMs must not be empty');
    this.replicas = new ReplicaStates({ store: opts.store, clock: opts.clock, logger: opts.logger, random: opts.random, onReport: opts.onReport, ...(opts.onVerified ? { onVerified: opts.onVerified } : {}), schedule: this.schedule, jitter: this.jitter });
    this.channel = new SyncChannel({
      transport: opts.transport,
      scheduler: opts.scheduler,
      logger: opts.logger,
      onAssignments: (msg) => void this.track(this.onAssignments(msg)).catch((err: unknown) => opts.logger.error({ err }, 'could not store assignments')),
    });
  }

  /** Replicas uploading now. */
  get activeCount(): number {
    return this.active.size;
  }

  /** What `fleet-agent status` shows: replica counts as of the last look, and how many upload now. */
  get status(): SyncCounts & { uploading: number } {
    return { ...this.cached, uploading: this.active.size };
  }

  /**
   * Every replica with work ahead (and any running now), for `fleet-agent status`: its state,
   * bytes at the destination or on their way of the episode's total, the rate over the last few
   * seconds while sending, the last error. At most `limit` replicas, oldest assignment first.
   */
  async uploads(limit = 100): Promise<UploadProgressView[]> {
    const { store, clock } = this.opts;
    const rows = (await store.sync.list()).filter((r) => r.nextAttemptAt !== null || this.active.has(key(r))).slice(0, limit);
    const views: UploadProgressView[] = [];
    for (const r of rows) {
      const k = key(r);
      const live = this.live.get(k);
      const episode = await store.episodes.get(r.episodeId);
      const total = episode?.manifest.total_bytes ?? 0;
      const sent = live ? live.bytesSent : bytesAtDestination(await store.sync.files(r.episodeId, r.destinationId), episode);
      const running = this.active.has(k);
      views.push({
        episode_id: r.episodeId,
        destination_id: r.destinationId,
        state: r.state,
        active: running,
        bytes_sent: sent,
        bytes_total: live?.bytesTotal ?? total,
        rate_bps: live ? Math.round(live.rate()) : 0,
        last_error: r.lastError,
        note: r.note,
        next_attempt_at: running || r.nextAttemptAt === null ? null : iso(Math.max(r.nextAttemptAt, clock.now())),
      });
    }
    return views;
  }

  /** Loads the counts; call once before use. */
  async start(): Promise<void> {
    this.stopped = false;
    this.cached = await this.opts.store.sync.counts();
  }

  /** The link is up: ask for the complete assignment list and resume work. */
  connected(): void {
    if (this.stopped) return;
    this.online = true;
    this.requestAssignments();
    this.kick();
  }

  /** The link dropped: grant requests waiting for an answer fail now; uploads already granted go on. */
  disconnected(): void {
    this.online = false;
    if (this.assignmentsTimer !== undefined) this.opts.scheduler.clearTimeout(this.assignmentsTimer);
    this.assignmentsTimer = undefined;
    this.channel.failAll('link_down', 'the MQTT link dropped while waiting for a grant');
    this.clearWake();
  }

  /** A message from `…/sync`. */
  handleMessage(payload: Buffer): void {
    if (this.stopped) return;
    this.channel.handle(payload);
  }

  /** Aborts running uploads (their progress is stored) and waits for them; the next start resumes. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.online = false;
    this.clearWake();
    if (this.assignmentsTimer !== undefined) this.opts.scheduler.clearTimeout(this.assignmentsTimer);
    this.assignmentsTimer = undefined;
    this.channel.failAll('stopping', 'the agent is stopping');
    for (const ac of this.active.values()) ac.abort();
    while (this.runs.size > 0) await Promise.allSettled([...this.runs]);
  }

  /** Resolves when nothing runs: whatever a timer or message set going has finished (tests). */
  async idle(): Promise<void> {
    while (this.runs.size > 0) await Promise.allSettled([...this.runs]);
  }

  /** Something changed (an episode finalized, an assignment arrived): look for due work. */
  kick(): void {
    if (this.stopped) return;
    this.again = true;
    if (this.pumping) return;
    this.pumping = true;
    void this.track(this.pump());
  }

  /**
   * Asks for the complete assignment list, and again until it is answered: first after two grant
   * timeouts, then each wait twice the last, up to the refresh interval, so that robots whose
   * cloud is slow to answer (overloaded, or not reading its link) do not ask it every minute. A
   * repeat is sent only once the previous ask has left (the broker took it): asks do not pile up
   * behind a stalled connection.
   */
  private requestAssignments(again = false): void {
    const first = this.grantTimeoutMs * 2;
    this.assignmentsWaitMs = again ? Math.max(first, Math.min(this.assignmentsWaitMs * 2, this.assignmentsRefreshMs)) : first;
    let reqId = this.assignmentsReqId;
    if (!again || !this.assignmentsSending) {
      const id = newReqId();
      reqId = id;
      this.assignmentsReqId = id;
      this.assignmentsSending = true;
      this.channel
        .send({ type: 'assignments.request', req_id: id })
        .catch((err: unknown) => this.opts.logger.debug({ err }, 'could not send assignments.request'))
        .finally(() => {
          if (this.assignmentsReqId === id) this.assignmentsSending = false;
        });
    }
    if (this.assignmentsTimer !== undefined) this.opts.scheduler.clearTimeout(this.assignmentsTimer);
    this.assignmentsTimer = this.opts.scheduler.setTimeout(() => {
      this.assignmentsTimer = undefined;
      if (this.online && !this.stopped && this.assignmentsReqId === reqId) this.requestAssignments(true);
    }, this.assignmentsWaitMs);
  }

  private async onAssignments(msg: AssignmentsMessage): Promise<void> {
    const { store, clock, logger } = this.opts;
    if (msg.req_id !== undefined && msg.complete) {
      if (msg.req_id !== this.assignmentsReqId) {
        logger.debug({ req_id: msg.req_id }, 'complete assignment list for an older request; ignored');
        return;
      }
      this.assignmentsReqId = undefined;
      if (this.assignmentsTimer !== undefined) this.opts.scheduler.clearTimeout(this.assignmentsTimer);
      // Asked again later: a pushed assignment lost on its way is then seen without a reconnection.
      this.assignmentsTimer = this.opts.scheduler.setTimeout(() => {
        this.assignmentsTimer = undefined;
        if (this.online && !this.stopped && this.assignmentsReqId === undefined) this.requestAssignments();
      }, this.assignmentsRefreshMs);
      const { added, removed } = await store.sync.reconcile(msg.assignments, clock.now());
      // The cloud no longer wants these: stop working on them (a grant wait ends at once).
      for (const a of removed) this.active.get(key({ episodeId: a.episode_id, destinationId: a.destination_id }))?.abort();
      logger.info({ assignments: msg.assignments.length, added, removed: removed.length }, 'assignments reconciled with the cloud');
    } else {
      const added = await store.sync.add(msg.assignments, clock.now());
      if (added > 0) logger.info({ added }, 'new assignments');
    }
    this.kick();
  }

  private async pump(): Promise<void> {
    try {
      while (this.again && !this.stopped) {
        this.again = false;
        await this.fill();
      }
      this.cached = await this.opts.store.sync.counts();
      await this.arm();
    } catch (err) {
      this.opts.logger.error({ err }, 'uploader could not read its work; retrying');
      this.wakeIn(5_000);
    } finally {
      this.pumping = false;
    }
  }

  /** Starts due replicas into the free slots, soonest first. */
  private async fill(): Promise<void> {
    if (!this.online || this.stopped) return;
    const free = this.concurrency - this.active.size;
    if (free <= 0) return;
    const due = await this.opts.store.sync.due(this.opts.clock.now(), free + this.active.size);
    let started = 0;
    for (const row of due) {
      if (started >= free || this.stopped || !this.online) break;
      if (this.active.has(key(row))) continue;
      started += 1;
      this.launch(row);
    }
  }

  /** Sets a timer for the next replica that falls due (when a slot is free for it). */
  private async arm(): Promise<void> {
    this.clearWake();
    if (!this.online || this.stopped || this.active.size >= this.concurrency) return;
    const upcoming = await this.opts.store.sync.due(Number.MAX_SAFE_INTEGER, this.active.size + 1);
    const next = upcoming.find((r) => !this.active.has(key(r)));
    if (next?.nextAttemptAt == null) return;
    this.wakeIn(Math.max(0, next.nextAttemptAt - this.opts.clock.now()));
  }

  private wakeIn(ms: number): void {
    this.clearWake();
    if (this.stopped) return;
    this.wakeTimer = this.opts.scheduler.setTimeout(() => {
      this.wakeTimer = undefined;
      this.kick();
    }, ms);
  }

  private clearWake(): void {
    if (this.wakeTimer !== undefined) this.opts.scheduler.clearTimeout(this.wakeTimer);
    this.wakeTimer = undefined;
  }

  private launch(row: ReplicaRow): void {
    const ac = new AbortController();
    const k = key(row);
    this.active.set(k, ac);
    const run = this.attempt(row, ac.signal)
      .catch(async (err: unknown) => {
        this.counted(this.stopped || ac.signal.aborted ? 'aborted' : 'failed');
        if (err instanceof UploadError && err.code === 'file_missing') await this.reportMissing(row.episodeId);
        throw err;
      })
      .catch((err: unknown) => this.replicas.failed(row, err, this.stopped || ac.signal.aborted))
      .catch((err: unknown) => this.opts.logger.error({ err, episode_id: row.episodeId, destination_id: row.destinationId }, 'could not record a sync attempt'))
      .finally(() => {
        this.active.delete(k);
        this.live.delete(k);
        this.kick();
      });
    void this.track(run);
  }

  /** One attempt: a grant request, then the upload of every file not yet complete, then verification. */
  private async attempt(initial: ReplicaRow, signal: AbortSignal): Promise<void> {
    const { store, clock, logger } = this.opts;
    let row = initial;
    const episode = await store.episodes.get(row.episodeId);
    if (!episode) {
      await this.replicas.park(row, 'unknown_episode', 'this robot has no such episode');
      this.counted('nothing_to_send');
      return;
    }
    if (episode.manifest.files.length === 0) {
      // A discarded episode (or one that recorded nothing) has no bytes to send.
      await store.sync.update(row.episodeId, row.destinationId, { nextAttemptAt: null, note: 'no files to upload (discarded or empty episode)' }, clock.now());
      logger.info({ episode_id: row.episodeId, destination_id: row.destinationId }, 'assignment has no files to upload');
      this.counted('nothing_to_send');
      return;
    }
    if (reached(row.state, 'granted') && (await this.allFilesSent(row, episode))) {
      // Everything went out before a stop or crash cut the attempt short: no new grant needed.
      await this.replicas.finish(row, episode);
      this.counted('completed');
      return;
    }
    const answer = await this.askForGrant(row, signal);
    if (answer.type === 'deferral') {
      const wait = this.replicas.jittered(answer.retry_after_s * 1000);
      const next = clock.now() + wait;
      await store.sync.update(
        row.episodeId,
        row.destinationId,
        { attempts: row.attempts + 1, nextAttemptAt: next, note: oneLine(`deferred (${answer.reason})`, answer.message || 'no reason given') },
        clock.now(),
      );
      logger.info({ episode_id: row.episodeId, destination_id: row.destinationId, reason: answer.reason, retry_at: iso(next) }, 'grant deferred');
      this.counted('deferred');
      return;
    }
    row = await this.replicas.granted(row, answer);
    validateGrant(answer, episode, this.opts.http.allowHttp);
    let syncing: Promise<void> | undefined;
    const onFirstByte = () => {
      syncing ??= this.replicas.moveTo(row, 'syncing').then((r) => {
        row = r;
      });
    };
    const progress = new ReplicaProgress(clock, episode.manifest.total_bytes, bytesAtDestination(await store.sync.files(row.episodeId, row.destinationId), episode));
    this.live.set(key(row), progress);
    // URLs live about an hour; a long upload outlives them. When the store says a URL expired
    // after this grant already moved the upload on, that is the expected end of the grant, not a
    // failure: ask again at once with resume (no backoff, no error report). An expiry before any
    // progress (a store clock far ahead of the provider's) stays a failure, so it cannot loop.
    let progressed = false;
    try {
      await uploadFiles({
        store: store.sync,
        clock,
        http: this.opts.http,
        episodeDir: join(this.opts.dataDir, episode.dir),
        episode,
        row,
        grant: answer,
        partParallel: this.partParallel,
        signal,
        onFirstByte,
        onBytes: (n) => {
          progress.add(n);
          this.totals.bytesSent += n;
        },
        onProgress: () => {
          progressed = true;
        },
        logger,
      });
    } catch (err) {
      if (!(progressed && !signal.aborted && err instanceof UploadError && err.code === 'url_expired')) throw err;
      if (syncing) await syncing;
      await this.replicas.urlsExpired(row, err.message);
      this.counted('url_expired');
      return;
    } finally {
      if (syncing) await syncing;
    }
    await this.replicas.finish(row, episode);
    this.counted('completed');
  }

  private counted(result: AttemptResult): void {
    this.totals.attempts[result] = (this.totals.attempts[result] ?? 0) + 1;
  }

  /**
   * Files of the episode disappeared before a verified sync: the cloud hears it once per episode
   * (`episode.local_missing`, counted in sync health), besides the replica's `file_missing` error.
   * Never for an episode retention pruned.
   */
  private async reportMissing(episodeId: string): Promise<void> {
    const { store, clock, logger, dataDir } = this.opts;
    try {
      const episode = await store.episodes.get(episodeId);
      if (!episode) return;
      const paths = await missingFiles(dataDir, episode);
      if (paths.length === 0) return;
      const at = clock.now();
      if (await store.sync.noteLocalMissing(episodeId, at, localMissingMessage(episodeId, paths, at))) {
        this.opts.onReport();
        logger.warn({ episode_id: episodeId, paths }, 'episode files missing before a verified sync; reported to the cloud');
      }
    } catch (err) {
      logger.error({ err, episode_id: episodeId }, 'could not report missing episode files');
    }
  }

  private async allFilesSent(row: ReplicaRow, episode: EpisodeRow): Promise<boolean> {
    const files = new Map((await this.opts.store.sync.files(row.episodeId, row.destinationId)).map((f) => [f.path, f]));
    return episode.manifest.files.every((m) => {
      const f = files.get(m.path);
      return f?.complete === true && f.sha256Sent === m.sha256;
    });
  }

  private async askForGrant(row: ReplicaRow, signal: AbortSignal): Promise<GrantAnswer> {
    const { store, clock } = this.opts;
    const files = await store.sync.files(row.episodeId, row.destinationId);
    const inFlight = files.filter((f) => f.uploadId !== null && !f.complete);
    let pressure: Pressure | undefined;
    try {
      pressure = this.opts.pressure ? await this.opts.pressure() : await measurePressure(this.opts.dataDir, store.sync, clock.now(), this.opts.freeBytes);
    } catch (err) {
      this.opts.logger.debug({ err }, 'could not measure disk pressure');
    }
    return this.channel.request(
      {
        type: 'grant.request',
        req_id: newReqId(),
        episode_id: row.episodeId,
        destination_id: row.destinationId,
        ...(inFlight.length > 0
          ? {
              resume: [
                {
                  destination_id: row.destinationId,
                  uploads: inFlight.map((f) => ({ path: f.path, upload_id: f.uploadId!, parts_done: f.parts.map((p) => p.partNumber) })),
                },
              ],
            }
          : {}),
        ...(pressure ? { pressure } : {}),
      },
      this.grantTimeoutMs,
      signal,
    );
  }

  private track<T>(p: Promise<T>): Promise<T> {
    this.runs.add(p);
    const done = () => this.runs.delete(p);
    p.then(done, done);
    return p;
  }
}
