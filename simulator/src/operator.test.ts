import { ManualScheduler, type EndVerb, type OperatorContextPatch, type RecordingState } from '@fleet/agent';
import { ManualClock } from '@fleet/protocol';
import { pino } from 'pino';
import { describe, expect, test } from 'vitest';
import { ScriptedOperator, type OperatorRobot, type OperatorScript } from './operator.js';
import { seededRandom, weightedPick } from './random.js';

type Call = { at: number; context: OperatorContextPatch } | { at: number; verb: 'start' | EndVerb };

/**
 * A robot that keeps only the recording state table (idle, recording, finalizing) and notes every
 * call with the manual clock's time. Finalizing lasts `finalizeMs` on the manual scheduler.
 */
class FakeRobot implements OperatorRobot {
  state: RecordingState = 'idle';
  readonly calls: Call[] = [];
  private readonly listeners = new Set<(s: RecordingState) => void>();

  constructor(
    private readonly clock: ManualClock,
    private readonly scheduler: ManualScheduler,
    private readonly finalizeMs = 500,
  ) {}

  get recordingState(): RecordingState {
    return this.state;
  }

  async setContext(patch: OperatorContextPatch): Promise<unknown> {
    this.calls.push({ at: this.clock.now(), context: patch });
    return patch;
  }

  async episode(verb: 'start' | EndVerb): Promise<unknown> {
    this.calls.push({ at: this.clock.now(), verb });
    this.apply(verb);
    return { ok: true };
  }

  /** What the API or the buttons do: the same table, not counted as an operator call. */
  external(verb: 'start' | EndVerb): void {
    this.apply(verb);
  }

  onState(listener: (s: RecordingState) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  verbs(): ('start' | EndVerb)[] {
    return this.calls.flatMap((c) => ('verb' in c ? [c.verb] : []));
  }

  /** Subtask changes after the initial context. */
  subtaskSteps(): { at: number; subtask_id: string | null | undefined }[] {
    return this.calls.slice(1).flatMap((c) => ('context' in c && 'subtask_id' in c.context ? [{ at: c.at, subtask_id: c.context.subtask_id }] : []));
  }

  private apply(verb: 'start' | EndVerb): void {
    if (verb === 'start') {
      if (this.state !== 'idle') throw new Error(`cannot start while ${this.state}`);
      this.set('recording');
      return;
    }
    if (this.state !== 'recording') throw new Error(`cannot ${verb} while ${this.state}`);
    this.set('finalizing');
    this.scheduler.setTimeout(() => this.set('idle'), this.finalizeMs);
  }

  private set(s: RecordingState): void {
    this.state = s;
    for (const l of this.listeners) l(s);
  }
}

const SCRIPT: OperatorScript = {
  tasks: [
    { id: 'task_a', name: 'Task A', subtasks: [{ id: 'a1', name: 'A one' }, { id: 'a2', name: 'A two' }, { id: 'a3', name: 'A three' }] },
    { id: 'task_b', name: 'Task B', subtasks: [{ id: 'b1', name: 'B one' }] },
  ],
  operatorId: 'op_1',
  operatorName: 'Ada',
  controlMode: 'teleop',
  policyVersionId: 'pv_7',
  sessionName: 'morning',
  subtaskMs: 1000,
};

function setup(opts: { auto?: number; seed?: number; weights?: Record<EndVerb, number> } = {}) {
  const clock = new ManualClock(Date.parse('2026-03-01T08:00:00Z'));
  const scheduler = new ManualScheduler(clock);
  const robot = new FakeRobot(clock, scheduler);
  const operator = new ScriptedOperator({
    robot,
    script: SCRIPT,
    clock,
    scheduler,
    random: seededRandom(opts.seed ?? 42),
    logger: pino({ level: 'silent' }),
    autoEpisodesPerMinute: opts.auto ?? 0,
    ...(opts.weights ? { outcomeWeights: opts.weights } : {}),
  });
  /** Moves time in small steps, letting the operator's queued calls run between them. */
  const advance = async (ms: number) => {
    for (let done = 0; done < ms; done += 50) {
      scheduler.advance(Math.min(50, ms - done));
      await operator.settled();
    }
  };
  return { clock, scheduler, robot, operator, advance, t0: clock.now() };
}

describe('ScriptedOperator', () => {
  test('sets the whole task context at start and starts no episode on its own without auto episodes', async () => {
    const { robot, operator, advance } = setup();
    operator.start();
    await operator.settled();
    expect(robot.calls[0]).toMatchObject({
      context: {
        task_id: 'task_a',
        task_name: 'Task A',
        subtask_id: null,
        subtask_name: null,
        operator_id: 'op_1',
        operator_name: 'Ada',
        control_mode: 'teleop',
        policy_version_id: 'pv_7',
        session_name: 'morning',
      },
    });
    await advance(10 * 60_000);
    expect(robot.verbs()).toEqual([]);
    expect(robot.calls).toHaveLength(1);
    await operator.stop();
  });

  test('steps through the subtasks of a recording someone else started, one per subtaskMs, and never ends it', async () => {
    const { robot, operator, advance, t0 } = setup();
    operator.start();
    await operator.settled();
    await advance(5_000);
    robot.external('start');
    await operator.settled();
    await advance(10_000);
    expect(robot.subtaskSteps()).toEqual([
      { at: t0 + 5_000, subtask_id: 'a1' },
      { at: t0 + 6_000, subtask_id: 'a2' },
      { at: t0 + 7_000, subtask_id: 'a3' },
    ]);
    // The API started it, so the API ends it: the operator never sent a verb.
    expect(robot.verbs()).toEqual([]);
    expect(robot.state).toBe('recording');

    robot.external('finish');
    await operator.settled();
    await advance(2_000);
    // The subtask is cleared when the recording ends, so it does not leak into the next one.
    expect(robot.subtaskSteps().at(-1)).toEqual({ at: t0 + 15_000, subtask_id: null });
    expect(robot.state).toBe('idle');
    expect(operator.counters.subtaskSteps).toBe(3);
    await operator.stop();
  });

  test('a recording that ends early stops the stepping', async () => {
    const { robot, operator, advance } = setup();
    operator.start();
    robot.external('start');
    await advance(1_500);
    robot.external('discard');
    await advance(10_000);
    expect(robot.subtaskSteps().map((s) => s.subtask_id)).toEqual(['a1', 'a2', null]);
    await operator.stop();
  });

  test('with auto episodes it starts episodes, steps through the subtasks and ends each with a drawn outcome, next task each time', async () => {
    const { robot, operator, advance } = setup({ auto: 6 });
    operator.start();
    await advance(10 * 60_000);
    const verbs = robot.verbs();
    const starts = verbs.filter((v) => v === 'start').length;
    // 6 per minute with episodes of a few seconds: roughly 60 in ten minutes, never wildly off.
    expect(starts).toBeGreaterThan(30);
    expect(starts).toBeLessThan(80);
    // Every start is followed by exactly one end verb (the last episode may still run).
    for (let i = 0; i < verbs.length; i += 2) expect(verbs[i]).toBe('start');
    for (let i = 1; i < verbs.length; i += 2) expect(['finish', 'fail', 'discard']).toContain(verbs[i]);
    const ends = verbs.filter((v) => v !== 'start');
    expect(new Set(ends)).toEqual(new Set(['finish', 'fail', 'discard']));
    expect(ends.filter((v) => v === 'finish').length).toBeGreaterThan(ends.length / 2);
    expect(operator.counters.episodesStarted).toBe(starts);
    expect(operator.counters.refusals).toBe(0);

    // Episode 1 works on task A (subtasks a1..a3, the first set before the start), episode 2 on task B.
    const contexts = robot.calls.filter((c): c is { at: number; context: OperatorContextPatch } => 'context' in c);
    const taskChanges = contexts.flatMap((c) => (c.context.task_id ? [c.context.task_id] : []));
    expect(taskChanges.slice(0, 4)).toEqual(['task_a', 'task_b', 'task_a', 'task_b']);
    const firstStart = robot.calls.findIndex((c) => 'verb' in c && c.verb === 'start');
    expect(robot.calls[firstStart - 1]).toMatchObject({ context: { subtask_id: 'a1' } });
    await operator.stop();
  });

  test('the same seed gives the same episodes at the same times; another seed does not', async () => {
    const run = async (seed: number) => {
      const s = setup({ auto: 4, seed });
      s.operator.start();
      await s.advance(5 * 60_000);
      await s.operator.stop();
      return s.robot.calls.map((c) => ('verb' in c ? `${c.at - s.t0}:${c.verb}` : `${c.at - s.t0}:ctx`));
    };
    const a = await run(7);
    expect(await run(7)).toEqual(a);
    expect(await run(8)).not.toEqual(a);
  });

  test('outcome weights are honoured', async () => {
    const { robot, operator, advance } = setup({ auto: 10, weights: { finish: 0, fail: 1, discard: 0 } });
    operator.start();
    await advance(3 * 60_000);
    const ends = robot.verbs().filter((v) => v !== 'start');
    expect(ends.length).toBeGreaterThan(5);
    expect(new Set(ends)).toEqual(new Set(['fail']));
    await operator.stop();
  });

  test('a robot already recording (the API got there first) is followed, not fought: no refused start, no end verb for it', async () => {
    const { robot, operator, advance } = setup({ auto: 60 });
    operator.start();
    robot.external('start');
    await advance(30_000);
    // It stepped through the API's recording but left it running and started nothing meanwhile.
    expect(robot.verbs()).toEqual([]);
    expect(robot.state).toBe('recording');
    expect(robot.subtaskSteps().map((s) => s.subtask_id)).toEqual(['a1', 'a2', 'a3']);
    robot.external('finish');
    await advance(10_000);
    expect(robot.verbs()[0]).toBe('start');
    await operator.stop();
  });

  test('a start the robot refuses is counted and retried at the next idle', async () => {
    const { robot, operator, advance, scheduler } = setup({ auto: 60 });
    const realEpisode = robot.episode.bind(robot);
    let refuseNext = true;
    robot.episode = async (verb) => {
      if (verb === 'start' && refuseNext) {
        refuseNext = false;
        // Another surface started a recording just before the operator's verb arrived.
        robot.external('start');
        scheduler.setTimeout(() => robot.external('fail'), 100);
        throw new Error('cannot start while recording');
      }
      return realEpisode(verb);
    };
    operator.start();
    await advance(60_000);
    expect(operator.counters.refusals).toBe(1);
    expect(operator.counters.episodesStarted).toBeGreaterThan(0);
    await operator.stop();
  });

  test('stop cancels every timer: nothing happens afterwards', async () => {
    const { robot, operator, advance, scheduler } = setup({ auto: 30 });
    operator.start();
    robot.external('start');
    await advance(500);
    await operator.stop();
    const before = robot.calls.length;
    await advance(5 * 60_000);
    expect(robot.calls.length).toBe(before);
    expect(operator.operatorState).toBe('stopped');
    // Only the fake robot's own finalize timers could remain; the operator left none.
    expect(scheduler.pending).toBe(0);
  });
});

describe('seeded random', () => {
  test('is deterministic and spreads over [0, 1)', () => {
    const a = seededRandom(1);
    const b = seededRandom(1);
    const xs = Array.from({ length: 1000 }, () => a());
    expect(Array.from({ length: 1000 }, () => b())).toEqual(xs);
    expect(Math.min(...xs)).toBeGreaterThanOrEqual(0);
    expect(Math.max(...xs)).toBeLessThan(1);
    expect(xs.filter((x) => x < 0.5).length).toBeGreaterThan(400);
    expect(xs.filter((x) => x < 0.5).length).toBeLessThan(600);
  });

  test('weightedPick follows the weights and refuses all-zero weights', () => {
    const r = seededRandom(3);
    const picks = Array.from({ length: 2000 }, () => weightedPick({ a: 3, b: 1, c: 0 }, r));
    expect(picks).not.toContain('c');
    const a = picks.filter((p) => p === 'a').length;
    expect(a).toBeGreaterThan(1350);
    expect(a).toBeLessThan(1650);
    expect(() => weightedPick({ a: 0 }, r)).toThrow(/zero/);
  });
});
