import { EventEmitter } from 'node:events';
import { mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { Clock, RecordingState as ProtocolRecordingState } from '@fleet/protocol';
import type { Logger } from 'pino';
import { applyContextPatch, type OperatorContext, type OperatorContextPatch } from '../rules/operator-context.js';
import { IllegalTransitionError } from '../errors.js';
import { newEpisodeId, newRecordingSessionId } from '../ids.js';
import type { AgentStore, RecordingRow, StoredCommandResult } from '../store/types.js';
import type { Scheduler, TimerHandle } from '../time.js';
import type { EpisodeOutcome, SubtaskStep } from '../rules/episode-facts.js';
import { closeRecordingFiles, finalizeEpisode, removeOrphanDirectories, withRecordedTimes } from './finalize.js';
import type { Recorder, RecorderExit, RecordingHandle } from './recorder.js';
import { episodeReportMessage } from './report.js';

/** The robot's recording state (spec: Robot recording state). */
export type RecordingState =
  /** Nothing is being recorded; only `start` is valid. */
  | 'idle'
  /** The recorder is writing an episode; only `finish`, `fail` and `discard` are valid. */
  | 'recording'
  /** The episode has ended and its files are being closed and checksummed; no verb is valid. */
  | 'finalizing';

// The protocol's wire type and this one must stay the same set of states.
const sameStates: [RecordingState, ProtocolRecordingState] extends [ProtocolRecordingState, RecordingState] ? true : never = true;
void sameStates;

/** What moves the machine: the four episode verbs and two of its own. */
export type RecordingEvent =
  | 'start'
  | 'finish'
  | 'fail'
  | 'discard'
  /** The episode's files are closed and checksummed, its manifest and facts written. */
  | 'finalized'
  /** At start-up: a recording a previous process left behind is finalized as interrupted. */
  | 'interrupted';

const TRANSITIONS: Record<RecordingEvent, { from: readonly RecordingState[]; to: RecordingState }> = {
  start: { from: ['idle'], to: 'recording' },
  finish: { from: ['recording'], to: 'finalizing' },
  fail: { from: ['recording'], to: 'finalizing' },
  discard: { from: ['recording'], to: 'finalizing' },
  finalized: { from: ['finalizing'], to: 'idle' },
  interrupted: { from: ['recording', 'finalizing'], to: 'finalizing' },
};

const OUTCOME_OF = { finish: 'success', fail: 'failure', discard: 'discarded' } as const satisfies Record<string, EpisodeOutcome>;
export type EndVerb = keyof typeof OUTCOME_OF;

/** What a verb answers; the command reply and the control surface both carry these fields. */
export interface EpisodeTransitionResult {
  episode_id: string;
  recording_session_id: string;
  episode_seq: number;
  /** The state after the verb. */
  recording_state: RecordingState;
  /** Set by finish, fail and discard. */
  outcome?: EpisodeOutcome;
}

/** Who asked for a transition. */
export interface TransitionCause {
  /** For the log: `mqtt`, `control`, `simulator`, ... */
  source: string;
  /** The command result to store in the same transaction as the state change. */
  commandResult?: (result: EpisodeTransitionResult) => StoredCommandResult;
}

export interface StateChange {
  event: RecordingEvent;
  from: RecordingState;
  to: RecordingState;
  episodeId: string;
}

export interface RecordingStatus {
  state: RecordingState;
  episode_id: string | null;
  recording_session_id: string | null;
  episode_seq: number | null;
  started_at: number | null;
}

export interface RecordingStateMachineOptions {
  store: AgentStore;
  recorder: Recorder;
  robotId: string;
  dataDir: string;
  clock: Clock;
  scheduler: Scheduler;
  logger: Logger;
  finalizingDelayMs: number;
  finalizeRetryMs: number;
  /** How often a running recording is noted alive; bounds `ended_at` after a crash. */
  aliveIntervalMs?: number;
}

interface ActiveRecording {
  row: RecordingRow;
  /** Absent for a recording recovered from a previous process. */
  handle?: RecordingHandle;
  /** Added to the finalized episode's metadata (`recorder_exit` of a recorder that died). */
  metadata?: Record<string, unknown>;
}

/**
 * The recording state machine of one robot. Every change goes through `transition`, which checks
 * the state table, persists (with the causing command's result, in one transaction), logs and
 * emits `state`. Verbs, context changes and the end of finalization are serialized.
 */
export class RecordingStateMachine extends EventEmitter<{ state: [StateChange] }> {
  private current: RecordingState = 'idle';
  private active: ActiveRecording | undefined;
  private lock: Promise<unknown> = Promise.resolve();
  private finalizing: Promise<void> | undefined;
  private aliveTimer: TimerHandle | undefined;
  private wake: (() => void) | undefined;
  private closing = false;

  constructor(private readonly opts: RecordingStateMachineOptions) {
    super();
  }

  get state(): RecordingState {
    return this.current;
  }

  status(): RecordingStatus {
    const r = this.active?.row;
    return {
      state: this.current,
      episode_id: r?.episodeId ?? null,
      recording_session_id: r?.recordingSessionId ?? null,
      episode_seq: r?.episodeSeq ?? null,
      started_at: r?.startedAt ?? null,
    };
  }

  /**
   * Loads the state and finalizes a recording the previous process left in `recording` or
   * `finalizing` (outcome `failure`, files kept, `interrupted`), so the robot starts idle.
   */
  async init(): Promise<void> {
    const row = await this.opts.store.recording.get();
    if (row && !(await this.resumed(row))) {
      this.current = row.state;
      this.active = { row };
      this.opts.logger.warn({ episode_id: row.episodeId, state: row.state }, 'recovering a recording interrupted by a crash');
      await this.exclusive(() =>
        this.transition('interrupted', async () => {
          if (row.state !== 'recording') return;
          await this.opts.store.recording.end({ episodeId: row.episodeId, outcome: 'failure', endedAt: row.aliveAt });
          this.active = { row: { ...row, state: 'finalizing', outcome: 'failure', endedAt: row.aliveAt } };
        }),
      );
      await this.startFinalize(this.active, true);
    }
    await removeOrphanDirectories({ dataDir: this.opts.dataDir, store: this.opts.store, logger: this.opts.logger, currentEpisodeId: this.active?.row.episodeId });
  }

  /**
   * A recording left in `recording` that the recorder can go on with (`Recorder.resume`: the
   * import recorder's source still in its folder) stays `recording` as the same episode.
   */
  private async resumed(row: RecordingRow): Promise<boolean> {
    const recorder = this.opts.recorder;
    if (row.state !== 'recording' || !recorder.resume) return false;
    const info = { robotId: this.opts.robotId, episodeId: row.episodeId, startedAt: row.startedAt, taskId: row.context.task_id };
    const handle = await recorder.resume(join(this.opts.dataDir, row.dir), info).catch((err: unknown) => {
      this.opts.logger.error({ err, episode_id: row.episodeId }, 'the recorder could not resume the recording; ending it as interrupted');
      return undefined;
    });
    if (!handle) return false;
    this.current = 'recording';
    this.active = { row, handle };
    handle.onUnexpectedEnd?.((exit) => this.recorderEnded(row.episodeId, exit));
    this.scheduleAlive();
    this.opts.logger.info({ episode_id: row.episodeId }, 'resuming the recording the previous process left running');
    return true;
  }

  start(cause?: TransitionCause): Promise<EpisodeTransitionResult> {
    return this.exclusive(() => this.transition('start', () => this.begin(cause), cause));
  }

  finish(cause?: TransitionCause): Promise<EpisodeTransitionResult> {
    return this.end('finish', cause);
  }

  fail(cause?: TransitionCause): Promise<EpisodeTransitionResult> {
    return this.end('fail', cause);
  }

  discard(cause?: TransitionCause): Promise<EpisodeTransitionResult> {
    return this.end('discard', cause);
  }

  /** Runs `verb`: `start`, `finish`, `fail` or `discard`. */
  apply(verb: 'start' | EndVerb, cause?: TransitionCause): Promise<EpisodeTransitionResult> {
    return verb === 'start' ? this.start(cause) : this.end(verb, cause);
  }

  getContext(): Promise<OperatorContext> {
    return this.opts.store.context.get();
  }

  /**
   * Changes the operator context. A new session name makes the next recording start a new
   * session; a subtask change while recording appends a step to the recording's timeline.
   */
  setContext(patch: OperatorContextPatch): Promise<OperatorContext> {
    return this.exclusive(async () => {
      const before = await this.opts.store.context.get();
      const next = applyContextPatch(before, patch);
      const newSession = next.session_name !== before.session_name;
      const subtaskChanged = next.subtask_id !== before.subtask_id || next.subtask_name !== before.subtask_name;
      const row = this.active?.row;
      const step =
        this.current === 'recording' && row && subtaskChanged
          ? { episodeId: row.episodeId, step: { at: this.opts.clock.now(), subtask_id: next.subtask_id, subtask_name: next.subtask_name } }
          : undefined;
      await this.opts.store.context.set({ context: next, newSession, ...(step ? { step } : {}) });
      this.opts.logger.info({ context: next, new_session: newSession, subtask_step: step !== undefined }, 'operator context set');
      return next;
    });
  }

  /** Resolves once no finalization is running. */
  async whenSettled(): Promise<void> {
    while (this.finalizing) await this.finalizing;
  }

  /**
   * Stops cleanly: waits for a running finalization (cutting its configured delay short), closes
   * the files of a running recording and leaves it `recording` on disk, so the next start
   * finalizes it as interrupted. Nothing is half-done.
   */
  async close(): Promise<void> {
    this.closing = true;
    this.wake?.();
    await this.exclusive(async () => {
      this.stopAlive();
      const active = this.active;
      if (this.current === 'recording' && active?.handle) {
        await this.opts.store.recording.touch(active.row.episodeId, this.opts.clock.now());
        // A recording that goes on without the agent (import) is let go, to be resumed at the next start.
        const stopped = active.handle.detach ? active.handle.detach() : active.handle.stop();
        await stopped.catch((err: unknown) => this.opts.logger.error({ err }, 'recorder did not stop cleanly'));
        active.handle = undefined;
      }
    });
    await this.whenSettled();
  }

  private end(verb: EndVerb, cause?: TransitionCause): Promise<EpisodeTransitionResult> {
    return this.exclusive(() => this.endRecording(verb, cause));
  }

  private async endRecording(verb: EndVerb, cause?: TransitionCause): Promise<EpisodeTransitionResult> {
    const result = await this.transition(verb, () => this.stopRecording(verb, cause), cause);
    const active = this.active!;
    void this.startFinalize(active, false);
    return result;
  }

  /**
   * The recorder's program ended by itself while `episodeId` was recording: the episode ends as a
   * failure with `metadata.recorder_exit`. Too late (already ending, or another episode) is a no-op.
   */
  private recorderEnded(episodeId: string, exit: RecorderExit): void {
    const run = this.exclusive(async () => {
      const active = this.active;
      if (this.current !== 'recording' || active?.row.episodeId !== episodeId) return;
      this.opts.logger.error({ episode_id: episodeId, recorder_exit: exit }, 'recorder ended while recording; the episode fails');
      active.metadata = { ...active.metadata, recorder_exit: exit };
      await this.endRecording('fail', { source: 'recorder' });
    });
    run.catch((err: unknown) => this.opts.logger.error({ err, episode_id: episodeId }, 'could not end the episode of a recorder that ended'));
  }

  /** The one place the state changes. */
  private async transition<T>(event: RecordingEvent, persist: () => Promise<T>, cause?: TransitionCause): Promise<T> {
    const rule = TRANSITIONS[event];
    const from = this.current;
    if (!rule.from.includes(from)) {
      this.opts.logger.info({ event, state: from, source: cause?.source }, 'refused recording transition');
      throw new IllegalTransitionError(event, from, rule.from);
    }
    const out = await persist();
    this.current = rule.to;
    const episodeId = this.active?.row.episodeId ?? '';
    this.opts.logger.info({ event, from, to: rule.to, episode_id: episodeId, source: cause?.source }, 'recording state changed');
    this.emit('state', { event, from, to: rule.to, episodeId });
    return out;
  }

  private async begin(cause?: TransitionCause): Promise<EpisodeTransitionResult> {
    const { store, clock, dataDir } = this.opts;
    const now = clock.now();
    const context = await store.context.get();
    const session = (await store.sessions.current()) ?? { id: newRecordingSessionId(now), name: context.session_name, nextSeq: 1, createdAt: now };
    const episodeId = newEpisodeId(now);
    const rel = `episodes/${episodeId}`;
    const dir = join(dataDir, rel);
    await mkdir(dir, { recursive: true });
    const row: RecordingRow = {
      state: 'recording',
      episodeId,
      recordingSessionId: session.id,
      sessionName: session.name,
      episodeSeq: session.nextSeq,
      startedAt: now,
      aliveAt: now,
      endedAt: null,
      outcome: null,
      context,
      dir: rel,
    };
    const result: EpisodeTransitionResult = { episode_id: episodeId, recording_session_id: session.id, episode_seq: row.episodeSeq, recording_state: 'recording' };
    const firstStep: SubtaskStep | undefined =
      context.subtask_id !== null || context.subtask_name !== null ? { at: now, subtask_id: context.subtask_id, subtask_name: context.subtask_name } : undefined;
    let handle: RecordingHandle | undefined;
    try {
      handle = await this.opts.recorder.start(dir, { robotId: this.opts.robotId, episodeId, startedAt: now, taskId: context.task_id });
      const commandResult = cause?.commandResult?.(result);
      // An imported recording's source is noted in the same transaction: see import-recorder.ts.
      const importSource = handle.importSource ? { ...handle.importSource, episodeId } : undefined;
      await store.recording.begin({ recording: row, session, ...(firstStep ? { firstStep } : {}), ...(commandResult ? { commandResult } : {}), ...(importSource ? { importSource } : {}) });
    } catch (err) {
      // Nothing was committed: undo the files so the robot is exactly as before.
      await handle?.abort().catch(() => undefined);
      await rm(dir, { recursive: true, force: true });
      throw err;
    }
    this.active = { row, handle };
    handle.onUnexpectedEnd?.((exit) => this.recorderEnded(episodeId, exit));
    this.scheduleAlive();
    return result;
  }

  private async stopRecording(verb: EndVerb, cause?: TransitionCause): Promise<EpisodeTransitionResult> {
    const active = this.active!;
    const outcome = OUTCOME_OF[verb];
    const endedAt = this.opts.clock.now();
    const r = active.row;
    const result: EpisodeTransitionResult = {
      episode_id: r.episodeId,
      recording_session_id: r.recordingSessionId,
      episode_seq: r.episodeSeq,
      recording_state: 'finalizing',
      outcome,
    };
    const commandResult = cause?.commandResult?.(result);
    await this.opts.store.recording.end({ episodeId: r.episodeId, outcome, endedAt, ...(commandResult ? { commandResult } : {}) });
    this.stopAlive();
    active.row = { ...r, state: 'finalizing', outcome, endedAt, aliveAt: endedAt };
    return result;
  }

  /** Closes the files, then checksums and writes the episode, retrying that part until it works. */
  private async runFinalize(active: ActiveRecording, interrupted: boolean): Promise<void> {
    const { logger, dataDir } = this.opts;
    const row = active.row as RecordingRow & { outcome: EpisodeOutcome; endedAt: number };
    const dir = join(dataDir, row.dir);
    const handle = active.handle;
    active.handle = undefined;
    // Capture ends with the verb; the configured delay (a slow flush) is the least time spent
    // finalizing, counted from the verb.
    const delayed = interrupted ? Promise.resolve() : this.delay(this.opts.finalizingDelayMs);
    const recorded = await closeRecordingFiles({ handle, discard: row.outcome === 'discarded', dir, recorder: this.opts.recorder, logger, episodeId: row.episodeId });
    await delayed;
    const metadata: Record<string, unknown> = { ...active.metadata };
    let outcome = row.outcome;
    if (interrupted) {
      metadata.interrupted = true;
      // A discard that was already acknowledged stays a discard; anything else is a failure.
      if (outcome === 'success') metadata.requested_outcome = outcome;
      if (outcome !== 'discarded') outcome = 'failure';
    }
    for (;;) {
      try {
        // The recording's own times, when the recorder read them (an import), over the verbs' clock.
        const timed = withRecordedTimes({ ...row, outcome }, await this.opts.store.recording.steps(row.episodeId), recorded);
        const episode = await finalizeEpisode({
          dataDir,
          robotId: this.opts.robotId,
          recording: timed.recording,
          steps: timed.steps,
          files: recorded.files,
          messageCount: recorded.messageCount,
          metadata,
          interrupted,
          finalizedAt: this.opts.clock.now(),
        });
        await this.exclusive(async () => {
          // The report is enqueued in the same transaction: a crash leaves both or neither.
          await this.transition('finalized', () => this.opts.store.recording.complete(episode, episodeReportMessage(episode)));
          this.active = undefined;
        });
        return;
      } catch (err) {
        logger.error({ err, episode_id: row.episodeId }, 'finalization failed; retrying');
        if (this.closing) return;
        await this.delay(this.opts.finalizeRetryMs);
      }
    }
  }

  /** Runs the finalization of `active` in the background; `whenSettled()` waits for it. */
  private startFinalize(active: ActiveRecording, interrupted: boolean): Promise<void> {
    const run = this.runFinalize(active, interrupted).catch((err: unknown) => this.opts.logger.error({ err }, 'finalization stopped'));
    this.finalizing = run;
    void run.then(() => {
      if (this.finalizing === run) this.finalizing = undefined;
    });
    return run;
  }

  private scheduleAlive(): void {
    const every = this.opts.aliveIntervalMs ?? 5_000;
    this.aliveTimer = this.opts.scheduler.setTimeout(() => {
      const row = this.active?.row;
      if (this.current !== 'recording' || !row) return;
      this.opts.store.recording.touch(row.episodeId, this.opts.clock.now()).catch((err: unknown) => this.opts.logger.warn({ err }, 'could not note recording alive'));
      this.scheduleAlive();
    }, every);
  }

  private stopAlive(): void {
    if (this.aliveTimer !== undefined) this.opts.scheduler.clearTimeout(this.aliveTimer);
    this.aliveTimer = undefined;
  }

  /** Waits on the scheduler; `close()` cuts it short. */
  private delay(ms: number): Promise<void> {
    if (ms <= 0 || this.closing) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = this.opts.scheduler.setTimeout(() => {
        this.wake = undefined;
        resolve();
      }, ms);
      this.wake = () => {
        this.opts.scheduler.clearTimeout(timer);
        this.wake = undefined;
        resolve();
      };
    });
  }

  private exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.lock.then(fn, fn);
    this.lock = run.catch(() => undefined);
    return run;
  }
}
