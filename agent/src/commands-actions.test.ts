import { chmod, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { DAY, type RobotCommand } from '@fleet/protocol';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { ActionRequest, RobotActions } from './actions.js';
import { CommandHandler } from './commands.js';
import { ActionsSectionSchema, configuredRobotActions, type ActionsSectionInput } from './configured-actions.js';
import { RefusalError } from './errors.js';
import { captureLogs, makeTempDir, openTestMachine, removeTempDirs, type TestMachine } from './test-support.js';

const machines: TestMachine[] = [];
afterEach(async () => {
  for (const m of machines.splice(0)) await m.close();
  await removeTempDirs();
});

/** A command handler on a fresh machine; `actions` may be built on the machine's scheduler. */
async function handlerWith(actions: RobotActions | ((m: TestMachine) => RobotActions)): Promise<{ handler: CommandHandler; m: TestMachine }> {
  const m = await openTestMachine();
  machines.push(m);
  const handler = new CommandHandler({
    robotId: m.robotId,
    machine: m.machine,
    actions: typeof actions === 'function' ? actions(m) : actions,
    store: m.store,
    clock: m.clock,
    logger: captureLogs().logger,
    legacyRuntime: false,
    windowMs: DAY,
    publish: async () => {},
  });
  return { handler, m };
}

/** Answers every command with what it was asked, and counts. */
class EchoActions implements RobotActions {
  readonly requests: ActionRequest[] = [];
  async run(request: ActionRequest): Promise<Record<string, unknown>> {
    this.requests.push(request);
    return { echoed: request.command };
  }
}

const cmd = (m: TestMachine, cmdId: string, command: RobotCommand['command'], args?: Record<string, unknown>): RobotCommand => ({
  cmd_id: cmdId,
  command,
  sent_at: m.clock.now(),
  ...(args ? { args } : {}),
});

describe('an action gets the command it answers', () => {
  it('the API body as args ({} when none), the robot id and the command id', async () => {
    const actions = new EchoActions();
    const { handler, m } = await handlerWith(actions);
    expect(await handler.handle(cmd(m, 'c1', 'go_home', { speed: 'slow' }))).toMatchObject({ ok: true, result: { echoed: 'go_home', command: 'go_home', cmd_id: 'c1', robot_id: m.robotId } });
    await handler.handle(cmd(m, 'c2', 'stack.status'));
    expect(actions.requests).toEqual([
      { command: 'go_home', args: { speed: 'slow' }, robot_id: m.robotId, cmd_id: 'c1' },
      { command: 'stack.status', args: {}, robot_id: m.robotId, cmd_id: 'c2' },
    ]);
  });

  it('what an action answers cannot overwrite the fields of the reply the agent owns', async () => {
    const actions: RobotActions = { run: async () => ({ ok: false, cmd_id: 'forged', robot_id: 'rbt_other', command: 'stack.stop', pose: 'home' }) };
    const { handler, m } = await handlerWith(actions);
    expect(await handler.handle(cmd(m, 'c1', 'go_home'))).toEqual({ cmd_id: 'c1', ok: true, result: { pose: 'home', ok: true, cmd_id: 'c1', robot_id: m.robotId, command: 'go_home' } });
  });
});

describe('configured actions under the command handler', () => {
  /** A program that appends one line per run to `runs` and then does what `body` says. */
  async function configured(dir: string, body: string, section: Partial<ActionsSectionInput> = {}) {
    const file = join(dir, 'action');
    await writeFile(file, `#!/bin/sh\necho run >> "${dir}/runs"\n${body}\n`);
    await chmod(file, 0o755);
    const cfg = ActionsSectionSchema.parse({ actions: { go_home: { program: [file] }, 'stack.status': { program: [file] } }, ...section });
    return {
      actionsOn: (m: TestMachine) => configuredRobotActions(cfg, { logger: captureLogs().logger, env: { PATH: process.env.PATH }, scheduler: m.scheduler }),
      runs: async () => (await readFile(join(dir, 'runs'), 'utf8').catch(() => '')).split('\n').filter(Boolean).length,
    };
  }

  it('a decline is stored like any answer: the same id answers it again and the program does not run again', async () => {
    const dir = await makeTempDir();
    const { actionsOn, runs } = await configured(dir, `echo '{"code": "invalid_state", "message": "protective stop"}'\nexit 3`);
    const { handler, m } = await handlerWith(actionsOn);
    const first = await handler.handle(cmd(m, 'd1', 'go_home'));
    expect(first).toEqual({ cmd_id: 'd1', ok: false, error: { code: 'invalid_state', message: 'protective stop' } });
    expect(await handler.handle(cmd(m, 'd1', 'go_home'))).toEqual(first);
    expect(await runs()).toBe(1);
  });

  it('not_configured is stored too, and an unmapped command runs nothing', async () => {
    const dir = await makeTempDir();
    const { actionsOn, runs } = await configured(dir, `echo '{}'`);
    const { handler, m } = await handlerWith(actionsOn);
    const first = await handler.handle(cmd(m, 'n1', 'stack.start'));
    expect(first).toMatchObject({ ok: false, error: { code: 'not_configured', message: 'stack.start is not configured on this robot (agent.yaml: actions.stack.start)' } });
    expect(await handler.handle(cmd(m, 'n1', 'stack.start'))).toEqual(first);
    expect(await runs()).toBe(0);
  });

  it('a timed-out action is final: a retry of the same id answers action_timeout and does not run it again', async () => {
    const dir = await makeTempDir();
    const { actionsOn, runs } = await configured(dir, `echo $$ > "${dir}/pid"\nexec sleep 1000`, { action_timeout_ms: 2000 });
    const { handler, m } = await handlerWith(actionsOn);
    const c = { cmd_id: 't1', command: 'go_home' as const, sent_at: m.clock.now() };
    const pending = handler.handle(c);
    await vi.waitFor(() => readFile(join(dir, 'pid'), 'utf8'), { timeout: 10_000 });
    m.scheduler.advance(2000);
    const answer = await pending;
    expect(answer).toMatchObject({ ok: false, error: { code: 'action_timeout' } });
    expect(await handler.handle(c)).toEqual(answer);
    expect(await runs()).toBe(1);
  });

  it('a read-only action that timed out is not stored: a retry runs it again', async () => {
    const dir = await makeTempDir();
    const { actionsOn, runs } = await configured(dir, 'exec sleep 1000', { action_timeout_ms: 2000 });
    const { handler, m } = await handlerWith(actionsOn);
    const c = { cmd_id: 's1', command: 'stack.status' as const, sent_at: m.clock.now() };
    for (let i = 1; i <= 2; i++) {
      const pending = handler.handle(c);
      await vi.waitFor(async () => expect(await runs()).toBe(i), { timeout: 10_000 });
      m.scheduler.advance(2000);
      expect(await pending).toMatchObject({ ok: false, error: { code: 'action_timeout' } });
    }
  });

  it('an action that throws something else than a refusal is answered failed with its message', async () => {
    const { handler, m } = await handlerWith({
      run: async () => {
        throw new Error('bus error on /dev/ttyUSB0');
      },
    });
    expect(await handler.handle(cmd(m, 'x1', 'go_home'))).toMatchObject({ ok: false, error: { code: 'failed', message: 'the robot could not run go_home: bus error on /dev/ttyUSB0' } });
    // A RefusalError keeps its code and message.
    const { handler: h2, m: m2 } = await handlerWith({
      run: async () => {
        throw new RefusalError('invalid_args', 'speed must be slow or fast');
      },
    });
    expect(await h2.handle(cmd(m2, 'x2', 'go_home'))).toMatchObject({ ok: false, error: { code: 'invalid_args', message: 'speed must be slow or fast' } });
  });
});
