import type { LightMyRequestResponse } from 'fastify';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { CAPABILITY_EPISODES_V1, COMMAND_ARGS_LIMITS, CommandResultSchema, type CommandRefusal, type CommandReply, type RobotCommandName } from '@fleet/protocol';
import { createEnrollmentToken, enrollRobot } from '../../robots/enrollment.js';
import { errorCode, errorDetails, startTestCloud, type TestCloud, type TestTenant } from '../../test-support.js';
import { dumpTables } from '../../store/test-store.js';
import type { CommandSender } from './types.js';
import { COMMAND_ROUTES } from './robot-commands.js';
import { ApiError } from '../../errors.js';

/** Stands in for the MQTT link: answers every command with what `answer` says, and counts. */
class ScriptedRobot implements CommandSender {
  sent: { command: RobotCommandName; cmdId: string; args?: Record<string, unknown> }[] = [];
  answer: (command: RobotCommandName, cmdId: string) => CommandReply = (command, cmdId) => ({ cmd_id: cmdId, ok: true, result: { command, cmd_id: cmdId, ok: true } });
  /** While set, the robot answers only once it resolves (a command the robot takes its time on). */
  gate: Promise<void> | null = null;

  async send(_robotId: string, command: RobotCommandName, cmdId: string, args?: Record<string, unknown>): Promise<CommandReply> {
    this.sent.push({ command, cmdId, ...(args ? { args } : {}) });
    if (this.gate) await this.gate;
    return this.answer(command, cmdId);
  }

  refuse(code: CommandRefusal, message = `robot says ${code}`): void {
    this.answer = (_command, cmdId) => ({ cmd_id: cmdId, ok: false, error: { code, message } });
  }
}

let t: TestCloud;
let tenant: TestTenant;
let robot: ScriptedRobot;
let robotId: string;

beforeEach(async () => {
  robot = new ScriptedRobot();
  t = await startTestCloud({ deps: { robots: robot } });
  tenant = await t.createTenant();
  const { token } = await createEnrollmentToken(t.store, t.clock, { org: tenant.org, createdBy: 'test' });
  robotId = (await enrollRobot(t.store, t.clock, { token, name: 'r1' }, ['mqtt://localhost:1883'])).robot_id;
  await t.store.robots.updateStatus(robotId, { connected: true, capabilities: [CAPABILITY_EPISODES_V1], recordingState: 'idle', seenAt: t.clock.now() });
});
afterEach(async () => {
  await t.close();
});

function post(path: string, headers: Record<string, string> = {}): Promise<LightMyRequestResponse> {
  return t.app.inject({ method: 'POST', url: `/v1/robots/${robotId}/${path}`, headers: { ...tenant.auth, ...headers } });
}

const NON_EPISODE = COMMAND_ROUTES.filter((r) => !r.command.startsWith('episodes.'));
const EPISODE_VERBS = COMMAND_ROUTES.filter((r) => r.command.startsWith('episodes.'));

describe('a robot that declines a non-episode command', () => {
  it.each(['invalid_state', 'failed', 'interrupted', 'invalid_args', 'not_configured', 'action_timeout'] as const)('%s: 200 with the decline in result, on every non-episode route', async (code) => {
    robot.refuse(code, 'cannot go home while the stack is stopped');
    for (const route of NON_EPISODE) {
      const res = await post(route.path, { 'idempotency-key': `k-${code}-${route.path}` });
      expect(res.statusCode, `${route.path}: ${res.payload}`).toBe(200);
      const body = res.json<unknown>();
      expect(body).toEqual({
        status: 'ok',
        result: {
          ok: false,
          error: { code, message: 'cannot go home while the stack is stopped' },
          cmd_id: `k-${code}-${route.path}`,
          command: route.command,
          robot_id: robotId,
        },
      });
      expect(CommandResultSchema.safeParse(body).success).toBe(true);
    }
  });

  it('without an Idempotency-Key the decline names the cmd_ id the cloud picked', async () => {
    robot.refuse('invalid_state');
    const res = await post('go-home');
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ result: { ok: false, cmd_id: robot.sent[0]!.cmdId, command: 'go_home' } });
    expect(robot.sent[0]!.cmdId).toMatch(/^cmd_/);
  });

  it('is a completed response: the same Idempotency-Key replays it without asking the robot again', async () => {
    robot.refuse('invalid_state');
    const first = await post('go-home', { 'idempotency-key': 'decline-1' });
    robot.answer = () => {
      throw new Error('the robot must not be asked again');
    };
    const replay = await post('go-home', { 'idempotency-key': 'decline-1' });
    expect(replay.statusCode).toBe(200);
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(replay.json()).toEqual(first.json());
    expect(robot.sent).toHaveLength(1);
  });

  it('unsupported stays 422 validation_failed: the runtime lacks the command', async () => {
    robot.refuse('unsupported');
    const res = await post('stack/start');
    expect(res.statusCode).toBe(422);
    expect(errorCode(res)).toBe('validation_failed');
    expect(errorDetails(res)).toMatchObject({ robot_error: 'unsupported' });
  });

  it('an accepted command still answers its result', async () => {
    const res = await post('go-home');
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ status: 'ok', result: { ok: true, command: 'go_home' } });
  });
});

describe('a robot that refuses an episode verb', () => {
  it.each([
    ['invalid_state', 500, 'internal'],
    ['failed', 500, 'internal'],
    ['invalid_args', 400, 'validation_failed'],
    ['unsupported', 422, 'validation_failed'],
  ] as const)('%s: %i %s naming the robot code', async (code, status, apiCode) => {
    robot.refuse(code);
    for (const route of EPISODE_VERBS) {
      const res = await post(route.path);
      expect(res.statusCode, `${route.path}: ${res.payload}`).toBe(status);
      expect(errorCode(res)).toBe(apiCode);
      expect(errorDetails(res)).toMatchObject({ robot_error: code, cmd_id: expect.stringMatching(/^cmd_/) as string });
    }
  });

  it('a 500 for the wrong recording state is stored under the Idempotency-Key like any completed response', async () => {
    robot.refuse('invalid_state');
    const first = await post('episodes/finish', { 'idempotency-key': 'verb-1' });
    expect(first.statusCode).toBe(500);
    const replay = await post('episodes/finish', { 'idempotency-key': 'verb-1' });
    expect(replay.statusCode).toBe(500);
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(robot.sent).toHaveLength(1);
  });
});

describe('an Idempotency-Key claim while the robot takes its time', () => {
  /** The stored lease of the claim on `key` (the clock is manual: renewals set it from the clock's now). */
  async function leaseUntil(key: string): Promise<number | null> {
    const rows = JSON.parse((await dumpTables(t.store)).idempotency_keys ?? '[]') as { key: string; state: string; lease_until: number | string | null }[];
    const row = rows.find((r) => r.key === key);
    return row?.state === 'in_flight' && row.lease_until !== null ? Number(row.lease_until) : null;
  }

  it('is renewed while the request runs: a retry is refused however long the robot takes, then replays its answer', async () => {
    const lease = t.config.idempotencyLeaseMs;
    const renewEvery = Math.floor(lease / 3);
    const timersBefore = t.scheduler.pending;
    let release!: () => void;
    robot.gate = new Promise((resolve) => (release = resolve));
    const first = post('go-home', { 'idempotency-key': 'slow' });
    await vi.waitFor(() => expect(robot.sent).toHaveLength(1));
    expect(await leaseUntil('slow')).toBe(t.clock.now() + lease);
    expect(t.scheduler.pending).toBe(timersBefore + 1);

    // Three leases long: each renewal moves the lease on, so the key is never free for a retry.
    for (let i = 0; i < 9; i++) {
      t.scheduler.advance(renewEvery);
      await vi.waitFor(async () => expect(await leaseUntil('slow')).toBe(t.clock.now() + lease));
      expect(errorCode(await post('go-home', { 'idempotency-key': 'slow' }))).toBe('idempotency_key_in_use');
    }
    expect(robot.sent).toHaveLength(1);

    release();
    const res = await first;
    expect(res.statusCode, res.payload).toBe(200);
    // Completed: no renewal timer is left, and a retry replays the stored answer without reaching the robot.
    expect(t.scheduler.pending).toBe(timersBefore);
    const replay = await post('go-home', { 'idempotency-key': 'slow' });
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(replay.payload).toBe(res.payload);
    expect(robot.sent).toHaveLength(1);
  });

  it('renews every claim the process holds at once, and stops renewing one whose request ended', async () => {
    const lease = t.config.idempotencyLeaseMs;
    const renewEvery = Math.floor(lease / 3);
    let release!: () => void;
    robot.gate = new Promise((resolve) => (release = resolve));
    const a = post('go-home', { 'idempotency-key': 'a' });
    const b = post('stack/status', { 'idempotency-key': 'b' });
    await vi.waitFor(() => expect(robot.sent).toHaveLength(2));
    const started = t.clock.now();
    t.scheduler.advance(renewEvery);
    await vi.waitFor(async () => expect([await leaseUntil('a'), await leaseUntil('b')]).toEqual([started + renewEvery + lease, started + renewEvery + lease]));

    // A robot that answers "offline-ish" (a transient error) releases the claim: a retry runs again.
    release();
    expect((await a).statusCode).toBe(200);
    expect((await b).statusCode).toBe(200);
    robot.gate = null;
    robot.answer = () => {
      throw new ApiError('command_timeout', 'robot did not answer');
    };
    const timedOut = await post('go-home', { 'idempotency-key': 'c' });
    expect(errorCode(timedOut)).toBe('command_timeout');
    expect(await leaseUntil('c')).toBeNull();
    robot.answer = (command, cmdId) => ({ cmd_id: cmdId, ok: true, result: { command, cmd_id: cmdId, ok: true } });
    expect((await post('go-home', { 'idempotency-key': 'c' })).statusCode).toBe(200);
  });
});

describe('command arguments and the bound the robot takes', () => {
  /** `{metadata: {pad, deep}}` whose innermost array sits at `depth` (the body being depth 1), `bytes` long as JSON. */
  function argsAt(depth: number, bytes?: number): Record<string, unknown> {
    let deep: unknown = [];
    for (let d = depth; d > 3; d--) deep = [deep];
    const args = { metadata: { pad: '', deep } };
    if (bytes !== undefined) args.metadata.pad = 'x'.repeat(bytes - JSON.stringify(args).length);
    return args;
  }
  function postBody(path: string, body: unknown): Promise<LightMyRequestResponse> {
    return t.app.inject({ method: 'POST', url: `/v1/robots/${robotId}/${path}`, headers: tenant.auth, payload: body as Record<string, unknown> });
  }

  it('metadata nested one level beyond the bound is 400 validation_failed, and the robot is never asked', async () => {
    // Metadata nested 30 deep: within the API's JSON body bounds, beyond what the robot takes.
    const res = await postBody('episodes/start', argsAt(COMMAND_ARGS_LIMITS.maxDepth + 1));
    expect(res.statusCode, res.payload).toBe(400);
    expect(errorCode(res)).toBe('validation_failed');
    expect(errorDetails(res)).toMatchObject({ issues: [{ location: 'body', code: 'json_depth' }], limits: { max_depth: COMMAND_ARGS_LIMITS.maxDepth } });
    expect(robot.sent).toHaveLength(0);
  });

  it('metadata one byte over the size bound is 400 validation_failed, on every verb that takes it', async () => {
    for (const path of ['episodes/start', 'episodes/finish', 'episodes/fail', 'episodes/discard']) {
      const res = await postBody(path, argsAt(4, COMMAND_ARGS_LIMITS.maxBytes + 1));
      expect(res.statusCode, `${path}: ${res.payload}`).toBe(400);
      expect(errorDetails(res)).toMatchObject({ issues: [{ location: 'body', code: 'json_bytes' }], limits: { max_bytes: COMMAND_ARGS_LIMITS.maxBytes } });
    }
    expect(robot.sent).toHaveLength(0);
  });

  it('metadata exactly at the depth and size bounds reaches the robot as the command args', async () => {
    const args = argsAt(COMMAND_ARGS_LIMITS.maxDepth, COMMAND_ARGS_LIMITS.maxBytes);
    expect(Buffer.byteLength(JSON.stringify(args))).toBe(COMMAND_ARGS_LIMITS.maxBytes);
    const res = await postBody('episodes/start', args);
    expect(res.statusCode, res.payload).toBe(200);
    expect(robot.sent).toEqual([expect.objectContaining({ command: 'episodes.start', args })]);
  });
});
