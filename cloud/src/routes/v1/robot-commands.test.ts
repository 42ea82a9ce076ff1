import type { LightMyRequestResponse } from 'fastify';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CAPABILITY_EPISODES_V1, CommandResultSchema, type CommandRefusal, type CommandReply, type RobotCommandName } from '@fleet/protocol';
import { createEnrollmentToken, enrollRobot } from '../../robots/enrollment.js';
import { errorCode, errorDetails, startTestCloud, type TestCloud, type TestTenant } from '../../test-support.js';
import type { CommandSender } from './types.js';
import { COMMAND_ROUTES } from './robot-commands.js';

/** Stands in for the MQTT link: answers every command with what `answer` says, and counts. */
class ScriptedRobot implements CommandSender {
  sent: { command: RobotCommandName; cmdId: string }[] = [];
  answer: (command: RobotCommandName, cmdId: string) => CommandReply = (command, cmdId) => ({ cmd_id: cmdId, ok: true, result: { command, cmd_id: cmdId, ok: true } });

  async send(_robotId: string, command: RobotCommandName, cmdId: string): Promise<CommandReply> {
    this.sent.push({ command, cmdId });
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
  robotId = (await enrollRobot(t.store, t.clock, { token, name: 'r1' }, 'mqtt://localhost:1883')).robot_id;
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
  it.each(['invalid_state', 'failed', 'interrupted', 'invalid_args'] as const)('%s: 200 with the decline in result, on every non-episode route', async (code) => {
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
