import type { EndVerb, OperatorContextPatch, RecordingState, Scheduler, TimerHandle } from '@fleet/agent';
import type { Clock } from '@fleet/protocol';
import type { Logger } from 'pino';
import { weightedPick } from './random.js';

/** What the operator needs from a robot: the real `Agent` through {@link agentAsOperatorRobot}, or a fake in tests. */
export interface OperatorRobot {
  readonly recordingState: RecordingState;
  setContext(patch: OperatorContextPatch): Promise<unknown>;
  /** An episode verb from the robot itself (as the headset would send it). */
  episode(verb: 'start' | EndVerb): Promise<unknown>;
  /** Calls `listener` on every recording state change; returns the unsubscribe function. */
  onState(listener: (state: RecordingState) => void): () => void;
}

export interface OperatorSubtask {
  id: string;
  name: string;
}

export interface OperatorTask {
  id: string;
  name: string;
  /** Stepped through in order while a recording runs; each step becomes a segment. */
  subtasks: readonly OperatorSubtask[];
}

/** Who operates the robot and what it works on. */
export interface OperatorScript {
  /** Worked on round-robin, one task per episode (the first until an episode ends). */
  tasks: readonly OperatorTask[];
  operatorId: string;
  operatorName: string;
  controlMode: string;
  policyVersionId: string | null;
  evalId?: string | null;
  sessionName: string;
  /** Time spent on each subtask. */
  subtaskMs: number;
}

export type OutcomeWeights = Readonly<Record<EndVerb, number>>;

/** How an operator's own episodes end, when it runs them: mostly successes. */
export const DEFAULT_OUTCOME_WEIGHTS: OutcomeWeights = { finish: 0.7, fail: 0.2, discard: 0.1 };

export interface ScriptedOperatorOptions {
  robot: OperatorRobot;
  script: OperatorScript;
  clock: Clock;
  scheduler: Scheduler;
  /** Seeded (see random.ts) so a run repeats. */
  random: () => number;
  logger: Logger;
  /**
   * Episodes the operator starts on its own per minute (0: never; recordings then start only
   * through the API or the local control surface). The time between one episode's end and the
   * next start is drawn uniformly from 0.5 to 1.5 times the mean.
   */
  autoEpisodesPerMinute: number;
  /** How the operator's own episodes end; default {@link DEFAULT_OUTCOME_WEIGHTS}. */
  outcomeWeights?: OutcomeWeights;
}

/** The operator's own state. */
export type OperatorState =
  /** Not started, or stopped: does nothing and schedules nothing. */
  | 'stopped'
  /** Sets context, steps through subtasks while recording and, in auto mode, runs episodes. */
  | 'running';

/** What the operator has done, for tests and the simulator's summary. */
export interface OperatorCounters {
  episodesStarted: number;
  episodesEnded: Record<EndVerb, number>;
  subtaskSteps: number;
  /** Verbs the robot refused (for example a start while the API had already started one). */
  refusals: number;
}

/**
 * A scripted operator, standing in for the person with the headset: sets the task context
 * (task, operator, control mode, policy version, session), steps through the task's subtasks
 * while a recording runs, whoever started it, and clears the subtask when it ends. Only with
 * `autoEpisodesPerMinute` > 0 does it start episodes itself and end them after the last subtask
 * with an outcome drawn from the seeded random.
 *
 * Every call on the robot goes through one queue, so context changes land in the order decided.
 */
export class ScriptedOperator {
  private state: OperatorState = 'stopped';
  private queue: Promise<void> = Promise.resolve();
  private taskIndex = 0;
  /** Index of the subtask the robot is on while recording; -1 when none is set. */
  private subtaskIndex = -1;
  private stepTimer: TimerHandle | undefined;
  private episodeTimer: TimerHandle | undefined;
  /** The current recording was started by this operator (so it also ends it). */
  private ownsRecording = false;
  private unsubscribe: (() => void) | undefined;
  private lastState: RecordingState;
  readonly counters: OperatorCounters = { episodesStarted: 0, episodesEnded: { finish: 0, fail: 0, discard: 0 }, subtaskSteps: 0, refusals: 0 };

  constructor(private readonly opts: ScriptedOperatorOptions) {
    if (opts.script.tasks.length === 0) throw new Error('the operator script needs at least one task');
    if (opts.autoEpisodesPerMinute < 0) throw new Error('autoEpisodesPerMinute must not be negative');
    this.lastState = opts.robot.recordingState;
  }

  get operatorState(): OperatorState {
    return this.state;
  }

  get currentTask(): OperatorTask {
    return this.task();
  }

  /** Sets the context and starts following the robot's recording state. */
  start(): void {
    if (this.state === 'running') return;
    this.state = 'running';
    this.log('operator started', { auto_episodes_per_minute: this.opts.autoEpisodesPerMinute });
    const { script } = this.opts;
    const task = this.task();
    this.enqueue(() =>
      this.opts.robot.setContext({
        task_id: task.id,
        task_name: task.name,
        subtask_id: null,
        subtask_name: null,
        operator_id: script.operatorId,
        operator_name: script.operatorName,
        control_mode: script.controlMode,
        policy_version_id: script.policyVersionId,
        eval_id: script.evalId ?? null,
        session_name: script.sessionName,
      }),
    );
    this.unsubscribe = this.opts.robot.onState((s) => this.onRecordingState(s));
    this.lastState = this.opts.robot.recordingState;
    if (this.lastState === 'recording') this.beginStepping(false);
    else if (this.lastState === 'idle') this.scheduleEpisode();
  }

  /** Stops scheduling and waits for the calls already made. A running recording is left as it is. */
  async stop(): Promise<void> {
    if (this.state === 'stopped') return this.settled();
    this.state = 'stopped';
    this.unsubscribe?.();
    this.unsubscribe = undefined;
    this.clearStepTimer();
    if (this.episodeTimer !== undefined) this.opts.scheduler.clearTimeout(this.episodeTimer);
    this.episodeTimer = undefined;
    await this.settled();
  }

  /** Resolves once every call queued so far on the robot has returned. */
  async settled(): Promise<void> {
    let seen: Promise<void>;
    do {
      seen = this.queue;
      await seen;
    } while (seen !== this.queue);
  }

  private task(): OperatorTask {
    const tasks = this.opts.script.tasks;
    return tasks[this.taskIndex % tasks.length]!;
  }

  private onRecordingState(s: RecordingState): void {
    const before = this.lastState;
    this.lastState = s;
    if (this.state !== 'running' || s === before) return;
    if (s === 'recording') {
      this.beginStepping(this.ownsRecording);
      return;
    }
    if (before === 'recording') this.recordingEnded();
    if (s === 'idle') this.scheduleEpisode();
  }

  /** A recording runs: step through the task's subtasks (the first may already be set). */
  private beginStepping(firstAlreadySet: boolean): void {
    this.clearStepTimer();
    if (firstAlreadySet && this.subtaskIndex === 0) {
      this.scheduleStep(1);
      return;
    }
    this.step(0);
  }

  private step(index: number): void {
    this.stepTimer = undefined;
    if (this.state !== 'running' || this.lastState !== 'recording') return;
    const subtasks = this.task().subtasks;
    if (index >= subtasks.length) {
      // Past the last subtask: the operator's own episode ends here; one started by the API or
      // the buttons is left for them to end.
      if (this.ownsRecording) this.endOwnEpisode();
      return;
    }
    this.setSubtask(index);
    this.scheduleStep(index + 1);
  }

  private scheduleStep(index: number): void {
    this.stepTimer = this.opts.scheduler.setTimeout(() => this.step(index), this.opts.script.subtaskMs);
  }

  private setSubtask(index: number): void {
    const sub = this.task().subtasks[index];
    if (!sub) return;
    this.subtaskIndex = index;
    this.counters.subtaskSteps += 1;
    this.enqueue(() => this.opts.robot.setContext({ subtask_id: sub.id, subtask_name: sub.name }));
  }

  private recordingEnded(): void {
    this.clearStepTimer();
    this.ownsRecording = false;
    const hadSubtask = this.subtaskIndex >= 0;
    this.subtaskIndex = -1;
    // The next episode is about the next task; the subtask is cleared so it does not leak into it.
    if (this.opts.autoEpisodesPerMinute > 0) this.taskIndex += 1;
    const task = this.task();
    const patch: OperatorContextPatch = { subtask_id: null, subtask_name: null };
    if (this.opts.autoEpisodesPerMinute > 0) Object.assign(patch, { task_id: task.id, task_name: task.name });
    if (hadSubtask || this.opts.autoEpisodesPerMinute > 0) this.enqueue(() => this.opts.robot.setContext(patch));
  }

  private endOwnEpisode(): void {
    const verb = weightedPick(this.opts.outcomeWeights ?? DEFAULT_OUTCOME_WEIGHTS, this.opts.random);
    this.enqueue(async () => {
      if (this.opts.robot.recordingState !== 'recording') return;
      try {
        await this.opts.robot.episode(verb);
        this.counters.episodesEnded[verb] += 1;
        this.log('operator ended its episode', { verb });
      } catch (err) {
        this.refused(verb, err);
      }
    });
  }

  private scheduleEpisode(): void {
    const perMinute = this.opts.autoEpisodesPerMinute;
    if (perMinute <= 0 || this.state !== 'running' || this.episodeTimer !== undefined) return;
    const meanMs = 60_000 / perMinute;
    const delay = Math.round(meanMs * (0.5 + this.opts.random()));
    this.episodeTimer = this.opts.scheduler.setTimeout(() => {
      this.episodeTimer = undefined;
      this.startOwnEpisode();
    }, delay);
  }

  private startOwnEpisode(): void {
    if (this.state !== 'running') return;
    if (this.lastState !== 'idle') return; // busy: the next idle schedules another attempt
    // The first subtask is set before the verb, so the episode is stamped with it from its start.
    this.setSubtask(0);
    this.ownsRecording = true;
    this.enqueue(async () => {
      try {
        await this.opts.robot.episode('start');
        this.counters.episodesStarted += 1;
        this.log('operator started an episode', { task_id: this.task().id });
      } catch (err) {
        // Someone else got there first (API, buttons): follow their recording instead.
        this.ownsRecording = false;
        this.refused('start', err);
        if (this.opts.robot.recordingState === 'idle') this.scheduleEpisode();
      }
    });
  }

  private refused(verb: string, err: unknown): void {
    this.counters.refusals += 1;
    this.opts.logger.debug({ verb, err: { message: (err as Error).message } }, 'operator verb refused');
  }

  private clearStepTimer(): void {
    if (this.stepTimer !== undefined) this.opts.scheduler.clearTimeout(this.stepTimer);
    this.stepTimer = undefined;
  }

  private enqueue(fn: () => Promise<unknown>): void {
    this.queue = this.queue.then(fn).then(
      () => undefined,
      (err: unknown) => this.opts.logger.warn({ err: { message: (err as Error).message } }, 'operator call failed'),
    );
  }

  private log(msg: string, extra: Record<string, unknown>): void {
    this.opts.logger.debug({ ...extra, at: this.opts.clock.now() }, msg);
  }
}
