import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { startCloud, type CloudProcess } from './support/cloud.js';
import {
  episodeDirs,
  finalizedEpisodes,
  getRobot,
  sendCommand,
  startAgentProcess,
  waitForRobot,
  type AgentProcess,
  type CommandResponse,
  type EpisodeFile,
} from './support/robots.js';

/** The spec's eleven command routes and the command each sends. */
const ROUTES = {
  'go-home': 'go_home',
  'go-to-start': 'go_to_start',
  'start-autonomous': 'start_autonomous',
  'stop-autonomous': 'stop_autonomous',
  'stack/start': 'stack.start',
  'stack/stop': 'stack.stop',
  'stack/status': 'stack.status',
  'episodes/start': 'episodes.start',
  'episodes/finish': 'episodes.finish',
  'episodes/fail': 'episodes.fail',
  'episodes/discard': 'episodes.discard',
} as const;
type Route = keyof typeof ROUTES;

// One cloud and two robots for the file; the tests run in order on them and each leaves its
// robot idle. `slow` holds finalizing long enough to send verbs into it: four command round trips
// and a read must land inside the hold even on a loaded machine, so it is generous (the test
// waits it out once).
const FINALIZING_MS = 15_000;
let cloud: CloudProcess;
let robot: AgentProcess;
let slow: AgentProcess;
beforeAll(async () => {
  cloud = await startCloud();
  [robot, slow] = await Promise.all([startAgentProcess(cloud, { platform: 'so-100' }), startAgentProcess(cloud, { finalizingDelayMs: FINALIZING_MS })]);
});
afterAll(async () => {
  await Promise.allSettled([robot?.[Symbol.asyncDispose](), slow?.[Symbol.asyncDispose]()]);
  await cloud?.[Symbol.asyncDispose]();
});

/** Every command answered 200, by route, across the file. */
const answered = new Set<Route>();

async function command(agent: AgentProcess, route: Route, opts: { body?: unknown; idempotencyKey?: string } = {}): Promise<CommandResponse> {
  const r = await sendCommand(cloud, agent.robotId, route, opts);
  if (r.status === 200) {
    // A 200 is an answer from the robot: a result (ok true) or a decline (ok false).
    expect(r.body.status).toBe('ok');
    expect(r.body.result).toMatchObject({ command: ROUTES[route], robot_id: agent.robotId, ok: expect.any(Boolean) as boolean });
    expect(r.body.result!.cmd_id).toEqual(opts.idempotencyKey ?? expect.stringMatching(/^cmd_/));
    if (r.body.result!.ok === true) answered.add(route);
  }
  return r;
}

async function ok(agent: AgentProcess, route: Route, opts: { body?: unknown; idempotencyKey?: string } = {}): Promise<Record<string, unknown>> {
  const r = await command(agent, route, opts);
  expect(r.status, `${route}: ${JSON.stringify(r.body)}`).toBe(200);
  expect(r.body.result!.ok, `${route}: ${JSON.stringify(r.body)}`).toBe(true);
  return r.body.result!;
}

/** A non-episode command the robot declines in its state: 200 with the decline in `result`. */
async function declined(agent: AgentProcess, route: Route): Promise<void> {
  const r = await command(agent, route);
  expect(r.status, `${route}: ${JSON.stringify(r.body)}`).toBe(200);
  expect(r.body).toEqual({
    status: 'ok',
    result: { ok: false, error: { code: 'invalid_state', message: expect.any(String) as string }, cmd_id: expect.stringMatching(/^cmd_/) as string, command: ROUTES[route], robot_id: agent.robotId },
  });
}

/** An episode verb in the wrong recording state: 500 internal naming the robot's code. */
async function refused(agent: AgentProcess, route: Route): Promise<void> {
  const r = await command(agent, route);
  expect(r.status, `${route}: ${JSON.stringify(r.body)}`).toBe(500);
  expect(r.body.error).toMatchObject({ code: 'internal', details: { robot_error: 'invalid_state' } });
}

const idle = (agent: AgentProcess) => waitForRobot(cloud, agent.robotId, (r) => r.recording_state === 'idle', { description: 'recording_state idle' });

async function episodeFile(agent: AgentProcess, episodeId: string): Promise<EpisodeFile> {
  return JSON.parse(await readFile(join(agent.dataDir, 'episodes', episodeId, 'episode.json'), 'utf8')) as EpisodeFile;
}

describe('robot commands through /v1', () => {
  test('the non-episode commands change the simulated robot, and a decline in the wrong state is a 200 answer', async () => {
    expect(await ok(robot, 'stack/status')).toMatchObject({ stack: 'running', autonomous: false, pose: 'unknown' });
    expect(await ok(robot, 'stack/stop', { idempotencyKey: 'stop-1' })).toMatchObject({ stack: 'stopped' });
    expect(await ok(robot, 'stack/status')).toMatchObject({ stack: 'stopped' });
    // Autonomy and motion need the stack.
    await declined(robot, 'start-autonomous');
    await declined(robot, 'go-home');
    await declined(robot, 'stack/stop');
    expect(await ok(robot, 'stack/start')).toMatchObject({ stack: 'running' });
    expect(await ok(robot, 'go-home')).toMatchObject({ pose: 'home' });
    expect(await ok(robot, 'go-to-start')).toMatchObject({ pose: 'start' });
    expect(await ok(robot, 'stack/status')).toMatchObject({ stack: 'running', pose: 'start', autonomous: false });
    expect(await ok(robot, 'start-autonomous')).toMatchObject({ autonomous: true });
    await declined(robot, 'stack/stop');
    await declined(robot, 'go-home');
    expect(await ok(robot, 'stack/status')).toMatchObject({ autonomous: true });
    expect(await ok(robot, 'stop-autonomous')).toMatchObject({ autonomous: false });
    await declined(robot, 'stop-autonomous');
    // The same Idempotency-Key answers the stored result and does not act again: a second
    // stack.stop would be refused (already stopped), the replay is the first answer.
    const replay = await command(robot, 'stack/stop', { idempotencyKey: 'stop-1' });
    expect(replay.status).toBe(200);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(await ok(robot, 'stack/status')).toMatchObject({ stack: 'running' });
  });

  test('a non-episode command takes no body fields', async () => {
    const r = await sendCommand(cloud, robot.robotId, 'go-home', { body: { speed: 2 } });
    expect(r.status).toBe(400);
    expect(r.body.error?.code).toBe('validation_failed');
  });
});

describe('the recording state table through /v1', () => {
  test('idle + finish, fail, discard: 500 internal and nothing changes', async () => {
    const dirs = await episodeDirs(robot.dataDir);
    for (const verb of ['episodes/finish', 'episodes/fail', 'episodes/discard'] as const) await refused(robot, verb);
    expect((await getRobot(cloud, robot.robotId)).body.recording_state).toBe('idle');
    expect(await robot.status()).toMatchObject({ recording_state: 'idle', episode_id: null });
    expect(await episodeDirs(robot.dataDir)).toEqual(dirs);
  });

  test.each([
    ['episodes/finish', 'success'],
    ['episodes/fail', 'failure'],
    ['episodes/discard', 'discarded'],
  ] as const)('idle + start -> recording; recording + start -> 500; recording + %s -> %s, finalizing, then idle', async (verb, outcome) => {
    const dirsBefore = await episodeDirs(robot.dataDir);
    const started = await ok(robot, 'episodes/start');
    expect(started).toMatchObject({ recording_state: 'recording', episode_seq: expect.any(Number) as number });
    const episodeId = started.episode_id as string;
    expect(episodeId).toMatch(/^ep_[a-z2-7]{26}$/);
    await waitForRobot(cloud, robot.robotId, (r) => r.recording_state === 'recording', { description: 'recording_state recording' });
    expect(await robot.status()).toMatchObject({ recording_state: 'recording', episode_id: episodeId });

    // recording + start: refused, the same recording goes on, no second directory.
    await refused(robot, 'episodes/start');
    expect(await robot.status()).toMatchObject({ recording_state: 'recording', episode_id: episodeId });
    expect(await episodeDirs(robot.dataDir)).toEqual([...dirsBefore, episodeId].sort());

    const ended = await ok(robot, verb);
    expect(ended).toMatchObject({ episode_id: episodeId, outcome, recording_state: 'finalizing' });
    await idle(robot);
    const ep = await episodeFile(robot, episodeId);
    expect(ep).toMatchObject({ id: episodeId, robot_id: robot.robotId, outcome });
    // The simulated robot records a rosbag2 directory (its MCAP and metadata.yaml).
    const mcap = join(robot.dataDir, 'episodes', episodeId, 'bag', 'bag_0.mcap');
    const manifest = JSON.parse(await readFile(join(robot.dataDir, 'episodes', episodeId, 'manifest.json'), 'utf8')) as { files: { path: string }[] };
    if (outcome === 'discarded') {
      // Recorded files are deleted; the row (episode.json) is kept.
      expect(existsSync(mcap)).toBe(false);
      expect(manifest.files).toEqual([]);
      expect(ep.bag_size_bytes).toBe(0);
    } else {
      expect(existsSync(mcap)).toBe(true);
      expect(manifest.files.map((f) => f.path)).toEqual(['bag/bag_0.mcap', 'bag/metadata.yaml']);
    }
  });

  test('finalizing + any verb: 500 internal, the state is unchanged, and the robot returns to idle afterwards', async () => {
    const started = await ok(slow, 'episodes/start');
    const ended = await ok(slow, 'episodes/finish');
    expect(ended.recording_state).toBe('finalizing');
    // The robot holds finalizing for FINALIZING_MS after the verb; these land inside it.
    const verbs = ['episodes/start', 'episodes/finish', 'episodes/fail', 'episodes/discard'] as const;
    const answers = await Promise.all(verbs.map((v) => command(slow, v)));
    for (const [i, a] of answers.entries()) {
      expect(a.status, `${verbs[i]}: ${JSON.stringify(a.body)}`).toBe(500);
      expect(a.body.error).toMatchObject({ code: 'internal', details: { robot_error: 'invalid_state' } });
    }
    const during = await getRobot(cloud, slow.robotId);
    expect(during.body.recording_state).toBe('finalizing');
    await waitForRobot(cloud, slow.robotId, (r) => r.recording_state === 'idle', { timeoutMs: FINALIZING_MS + 15_000, description: 'idle after finalizing' });
    // The refused verbs changed nothing: one episode, the outcome of the finish.
    const eps = await finalizedEpisodes(slow.dataDir);
    expect(eps.map((e) => [e.id, e.outcome])).toEqual([[started.episode_id, 'success']]);
    expect(await slow.status()).toMatchObject({ recording_state: 'idle' });
  });

  test('every command route answered 200 at least once', () => {
    expect([...answered].sort()).toEqual(Object.keys(ROUTES).sort());
  });
});

describe('the same transitions from the local control surface', () => {
  test('fleet-agent episode start|finish|fail talk to the running daemon; the API sees the states and refuses alike', async () => {
    const ctx = await robot.control(['context', 'set', '--task-id', 'task_local', '--task-name', 'Local task', '--operator-id', 'op_local', '--control-mode', 'teleop', '--subtask-id', 'grasp']);
    expect(ctx.code, ctx.stderr).toBe(0);

    const start = await robot.control(['episode', 'start']);
    expect(start.code, start.stderr).toBe(0);
    const started = JSON.parse(start.stdout) as { episode_id: string; recording_state: string; robot_id: string };
    expect(started).toMatchObject({ recording_state: 'recording', robot_id: robot.robotId });
    await waitForRobot(cloud, robot.robotId, (r) => r.recording_state === 'recording', { description: 'recording after a local start' });

    // The same state machine: the local surface and the API refuse alike.
    const again = await robot.control(['episode', 'start']);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/invalid_state/);
    await refused(robot, 'episodes/start');

    const finish = await robot.control(['episode', 'finish']);
    expect(finish.code, finish.stderr).toBe(0);
    expect(JSON.parse(finish.stdout)).toMatchObject({ episode_id: started.episode_id, outcome: 'success', recording_state: 'finalizing' });
    await idle(robot);
    const idleFail = await robot.control(['episode', 'fail']);
    expect(idleFail.code).toBe(1);
    expect(idleFail.stderr).toMatch(/invalid_state/);

    // Started through the API, ended by the buttons: one episode, the same context stamps.
    const apiStarted = await ok(robot, 'episodes/start');
    const fail = await robot.control(['episode', 'fail']);
    expect(fail.code, fail.stderr).toBe(0);
    expect(JSON.parse(fail.stdout)).toMatchObject({ episode_id: apiStarted.episode_id, outcome: 'failure' });
    await idle(robot);

    const local = await episodeFile(robot, started.episode_id);
    const viaApi = await episodeFile(robot, apiStarted.episode_id as string);
    expect(local).toMatchObject({ outcome: 'success', task_id: 'task_local', operator_id: 'op_local', subtask_id: 'grasp' });
    expect(viaApi).toMatchObject({ outcome: 'failure', task_id: 'task_local', operator_id: 'op_local', subtask_id: 'grasp' });
    expect(Object.keys(viaApi).sort()).toEqual(Object.keys(local).sort());
    expect(local.segments.map((s) => s.subtask_id)).toEqual(['grasp']);
  });
});

describe('episode verb bodies', () => {
  test('task_id, subtask_id and metadata are validated and never attached: the robot stamps its own context', async () => {
    const ctx = await robot.control(['context', 'set', '--task-id', 'task_robot', '--subtask-id', 'reach', '--operator-id', 'op_robot']);
    expect(ctx.code, ctx.stderr).toBe(0);
    const started = await ok(robot, 'episodes/start', { body: { task_id: 'task_from_api', subtask_id: 'sub_from_api', metadata: { source: 'api', n: 1 } } });
    const ended = await ok(robot, 'episodes/finish', { body: { metadata: { reviewer: 'api' } } });
    expect(ended.episode_id).toBe(started.episode_id);
    await idle(robot);
    const ep = await episodeFile(robot, started.episode_id as string);
    expect(ep).toMatchObject({ task_id: 'task_robot', subtask_id: 'reach', operator_id: 'op_robot' });
    expect(JSON.stringify(ep)).not.toMatch(/from_api|reviewer|"source"/);
  });

  test.each([
    ['episodes/start', { foo: 1 }],
    ['episodes/start', { task_id: 5 }],
    ['episodes/start', { metadata: 'not an object' }],
    ['episodes/fail', { task_id: 'only start takes task_id' }],
    ['episodes/discard', { subtask_id: 'x' }],
    ['episodes/finish', { metadata: { ok: 1 }, extra: true }],
  ] as const)('%s with %j: 400 validation_failed and nothing changes', async (route, body) => {
    const dirs = await episodeDirs(robot.dataDir);
    const r = await sendCommand(cloud, robot.robotId, route, { body });
    expect(r.status).toBe(400);
    expect(r.body.error?.code).toBe('validation_failed');
    expect(await episodeDirs(robot.dataDir)).toEqual(dirs);
    expect((await robot.status()).recording_state).toBe('idle');
  });
});

describe('a declined non-episode command is an answer, not a server error', () => {
  test('stack/start while the stack runs: 200 with the decline, replayed under the same Idempotency-Key, and nothing changes', async () => {
    expect(await ok(robot, 'stack/status')).toMatchObject({ stack: 'running' });
    const first = await command(robot, 'stack/start', { idempotencyKey: 'decline-start-1' });
    expect(first.status, JSON.stringify(first.body)).toBe(200);
    expect(first.body).toEqual({
      status: 'ok',
      result: { ok: false, error: { code: 'invalid_state', message: expect.stringMatching(/already running/) as string }, cmd_id: 'decline-start-1', command: 'stack.start', robot_id: robot.robotId },
    });
    const replay = await command(robot, 'stack/start', { idempotencyKey: 'decline-start-1' });
    expect(replay.status).toBe(200);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.body).toEqual(first.body);
    expect(await ok(robot, 'stack/status')).toMatchObject({ stack: 'running' });
  });
});
