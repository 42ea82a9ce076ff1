import { randomBytes } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, ManualScheduler, SimulatedRobotActions, parseAgentConfig, type Credentials, type EpisodeFacts } from '@fleet/agent';
import { ManualClock } from '@fleet/protocol';
import { pino } from 'pino';
import { afterEach, describe, expect, test } from 'vitest';
import { agentAsOperatorRobot, FleetError, operatorScript, parseFleetOptions, runFleet } from './fleet.js';
import { ScriptedOperator } from './operator.js';
import { SyntheticRecorder } from './recording/synthetic-recorder.js';
import { seededRandom } from './random.js';

const dirs: string[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

async function tempDir(): Promise<string> {
  const d = await mkdtemp(join(tmpdir(), 'fs-'));
  dirs.push(d);
  return d;
}

function credentials(): Credentials {
  const id = `rbt_${[...randomBytes(26)].map((b) => 'abcdefghijklmnopqrstuvwxyz234567'[b & 31]).join('')}`;
  return { robot_id: id, name: 'sim-0', mqtt: { url: 'mqtt://127.0.0.1:1', client_id: id, username: id, password: 'x', topic_prefix: `fleet/v1/robots/${id}/` }, api_url: 'http://127.0.0.1:1' };
}

/** A real agent (no broker, no socket) on a manual clock, with the simulator's operator. */
async function simulatedRobot(auto: number) {
  const dataDir = await tempDir();
  const clock = new ManualClock(Date.parse('2026-03-01T08:00:00Z'));
  const scheduler = new ManualScheduler(clock);
  const logger = pino({ level: 'silent' });
  const config = parseAgentConfig({ dataDir, bytesPerSecond: 4096 });
  const agent = new Agent(config, {
    clock,
    scheduler,
    logger,
    recorder: new SyntheticRecorder({ clock, scheduler, bytesPerSecond: config.bytesPerSecond, chunkIntervalMs: config.chunkIntervalMs }),
    actions: new SimulatedRobotActions(),
    credentials: credentials(),
    link: false,
    controlSocket: false,
  });
  await agent.start();
  const opts = parseFleetOptions({ api: 'http://127.0.0.1:1', count: 1, dataDir, subtaskMs: 1000, autoEpisodesPerMinute: auto });
  const operator = new ScriptedOperator({
    robot: agentAsOperatorRobot(agent),
    script: operatorScript(0, 'sim-0', opts),
    clock,
    scheduler,
    random: seededRandom(5),
    logger,
    autoEpisodesPerMinute: auto,
  });
  const advance = async (ms: number) => {
    for (let done = 0; done < ms; done += 100) {
      scheduler.advance(Math.min(100, ms - done));
      await operator.settled();
      await agent.machine.whenSettled();
    }
  };
  const episodes = async (): Promise<EpisodeFacts[]> => {
    const root = join(dataDir, 'episodes');
    const names = await readdir(root).catch(() => [] as string[]);
    const out: EpisodeFacts[] = [];
    for (const n of names.sort()) {
      const text = await readFile(join(root, n, 'episode.json'), 'utf8').catch(() => null);
      if (text) out.push(JSON.parse(text) as EpisodeFacts);
    }
    return out;
  };
  return { agent, operator, advance, episodes, dataDir };
}

describe('the operator driving a real agent', () => {
  test('a recording started through the API is stamped with the operator context, and its subtasks become segments', async () => {
    const { agent, operator, advance, episodes } = await simulatedRobot(0);
    try {
      operator.start();
      await operator.settled();
      await agent.episode('start', 'mqtt');
      await operator.settled();
      await advance(4_500);
      const ended = await agent.episode('finish', 'mqtt');
      expect(ended.outcome).toBe('success');
      await advance(100);
      await operator.settled();
      await agent.machine.whenSettled();
      expect(agent.machine.state).toBe('idle');

      const [ep, ...more] = await episodes();
      expect(more).toEqual([]);
      expect(ep).toMatchObject({
        task_id: 'task_pick_place',
        task_name: 'Pick and place',
        operator_id: 'op_0',
        operator_name: 'Operator 0',
        control_mode: 'teleop',
        policy_version_id: 'pv_sim_1',
        session_name: 'sim-0-session',
        outcome: 'success',
      });
      expect(ep!.segments.map((s) => [s.subtask_id, s.start_offset_s, s.end_offset_s])).toEqual([
        ['reach', 0, 1],
        ['grasp', 1, 2],
        ['place', 2, 4.5],
      ]);
      // The operator cleared the subtask once the recording ended.
      expect((await agent.getContext()).subtask_id).toBeNull();
    } finally {
      await operator.stop();
      await agent.stop();
    }
  });

  test('a task id set on the robot by hand (fleet-agent context set --task-id) is not stamped with the operator task\'s name', async () => {
    const { agent, operator, advance, episodes } = await simulatedRobot(0);
    try {
      operator.start();
      await operator.settled();
      expect(await agent.getContext()).toMatchObject({ task_id: 'task_pick_place', task_name: 'Pick and place' });
      // What the quickstart does: a task id of its own, no name.
      await agent.setContext({ task_id: 'stack-blocks', operator_id: 'bob' });
      await agent.episode('start', 'mqtt');
      await advance(1_500);
      await agent.episode('finish', 'mqtt');
      await agent.machine.whenSettled();
      const [ep] = await episodes();
      expect(ep).toMatchObject({ task_id: 'stack-blocks', task_name: null, operator_id: 'bob', operator_name: null });
    } finally {
      await operator.stop();
      await agent.stop();
    }
  });

  test('with auto episodes the operator records episodes on its own with seeded outcomes and rotating tasks', async () => {
    const { agent, operator, advance, episodes } = await simulatedRobot(12);
    try {
      operator.start();
      await advance(90_000);
      await operator.stop();
      if (agent.machine.state === 'recording') await agent.episode('discard');
      await agent.machine.whenSettled();
      const eps = await episodes();
      expect(eps.length).toBeGreaterThanOrEqual(8);
      expect(new Set(eps.map((e) => e.task_id)).size).toBeGreaterThan(1);
      for (const e of eps) expect(['success', 'failure', 'discarded']).toContain(e.outcome);
      expect(eps.filter((e) => e.outcome === 'success').length).toBeGreaterThan(0);
      // Every episode the operator ran has one segment per subtask of its task.
      const own = eps.slice(0, -1);
      for (const e of own) expect(e.segments.length).toBeGreaterThanOrEqual(2);
      expect(operator.counters.episodesStarted).toBeGreaterThanOrEqual(eps.length - 1);
      // Each episode carries the name of its own task, never another task's.
      const names = new Map(operatorScript(0, 'sim-0', { subtaskMs: 1000 }).tasks.map((t) => [t.id, t.name]));
      for (const e of eps) expect({ task_id: e.task_id, task_name: e.task_name }).toEqual({ task_id: e.task_id, task_name: names.get(e.task_id!) });
    } finally {
      await operator.stop();
      await agent.stop();
    }
  });
});

describe('runFleet', () => {
  test('a robot with no credentials and no token: FleetError, nothing left running', async () => {
    const dataDir = await tempDir();
    await expect(runFleet({ api: 'http://127.0.0.1:1', count: 2, dataDir, logLevel: 'silent' }, { logger: pino({ level: 'silent' }) })).rejects.toThrow(FleetError);
  });

  test('options are validated once, with documented defaults', () => {
    const o = parseFleetOptions({ api: 'http://127.0.0.1:8080', count: '3', dataDir: '/tmp/x' });
    expect(o).toMatchObject({ count: 3, legacyRuntime: false, autoEpisodesPerMinute: 0, platform: 'sim-arm', namePrefix: 'sim', controlSocket: true });
    // Simulated robots sync exactly as real agents do, with the agent's defaults.
    expect(o).toMatchObject({ sync: true, syncConcurrency: 2, syncPartParallel: 3, allowHttpUploads: false });
    expect(o.uploadCaFile).toBeUndefined();
    expect(o.uploadLimit).toBeUndefined();
    expect(parseFleetOptions({ api: 'http://x', count: 1, dataDir: '/tmp/x', uploadLimit: '1048576' }).uploadLimit).toBe(1_048_576);
    expect(() => parseFleetOptions({ api: 'http://x', count: 1, dataDir: '/tmp/x', uploadLimit: '10' })).toThrow();
    expect(Object.isFrozen(o)).toBe(true);
    expect(() => parseFleetOptions({ api: 'ftp://x', count: 1, dataDir: '/tmp/x' })).toThrow();
    expect(() => parseFleetOptions({ api: 'http://x', count: 0, dataDir: '/tmp/x' })).toThrow();
    expect(() => parseFleetOptions({ api: 'http://x', count: 1, dataDir: '/tmp/x', bogus: 1 } as never)).toThrow();
  });
});
