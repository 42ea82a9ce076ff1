import { CommandReplySchema, DAY, type CommandReply, type ManualClock, type RobotCommand } from '@fleet/protocol';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { SimulatedRobotActions, type RobotActions } from './actions.js';
import { stat } from 'node:fs/promises';
import { CommandHandler, type CommandHandlerOptions } from './commands.js';
import { credentialsPath, readCredentials } from './credentials.js';
import type { Agent } from './daemon.js';
import {
  captureLogs,
  commandPayload,
  makeTempDir,
  openTestMachine,
  removeTempDirs,
  startTestAgent,
  testCredentials,
  type LogCapture,
  type TestAgent,
  type TestMachine,
} from './test-support.js';

const running: Agent[] = [];
async function agent(opts: Parameters<typeof startTestAgent>[0] = {}): Promise<TestAgent> {
  const t = await startTestAgent(opts);
  running.push(t.agent);
  return t;
}

afterEach(async () => {
  for (const a of running.splice(0)) await a.stop();
  await removeTempDirs();
});

/** Feeds one payload as if it came from MQTT; returns what the agent replied (if anything). */
async function send(t: TestAgent, cmdId: string, command: RobotCommand['command'], args?: Record<string, unknown>): Promise<CommandReply> {
  const reply = await t.agent.commands.handlePayload(commandPayload(t.clock, cmdId, command, args));
  if (!reply) throw new Error('no reply');
  return CommandReplySchema.parse(reply);
}

function countTransitions(t: TestAgent): { count: () => number } {
  let n = 0;
  t.agent.on('state', () => (n += 1));
  return { count: () => n };
}

describe('robot commands over MQTT', () => {
  it('episodes.start answers with the episode, session, sequence and state', async () => {
    const t = await agent();
    const reply = await send(t, 'cmd-1', 'episodes.start');
    expect(reply.ok).toBe(true);
    if (!reply.ok) return;
    expect(reply.cmd_id).toBe('cmd-1');
    expect(reply.result).toMatchObject({
      cmd_id: 'cmd-1',
      command: 'episodes.start',
      robot_id: t.credentials.robot_id,
      ok: true,
      recording_state: 'recording',
      episode_seq: 1,
    });
    expect(reply.result.episode_id).toMatch(/^ep_/);
    expect(reply.result.recording_session_id).toMatch(/^rs_/);
    const end = await send(t, 'cmd-2', 'episodes.finish');
    expect(end).toMatchObject({ ok: true, result: { episode_id: reply.result.episode_id, outcome: 'success', recording_state: 'finalizing' } });
  });

  it('a verb in the wrong state answers invalid_state and changes nothing', async () => {
    const t = await agent();
    const transitions = countTransitions(t);
    for (const [i, cmd] of (['episodes.finish', 'episodes.fail', 'episodes.discard'] as const).entries()) {
      expect(await send(t, `w${i}`, cmd)).toMatchObject({ ok: false, error: { code: 'invalid_state' } });
    }
    await send(t, 's', 'episodes.start');
    expect(await send(t, 's2', 'episodes.start')).toMatchObject({ ok: false, error: { code: 'invalid_state' } });
    expect(transitions.count()).toBe(1);
    expect(t.agent.machine.state).toBe('recording');
  });

  it('a repeated cmd_id is answered from storage with one transition', async () => {
    const t = await agent();
    const transitions = countTransitions(t);
    const first = await send(t, 'idem-1', 'episodes.start');
    const again = await send(t, 'idem-1', 'episodes.start');
    expect(again).toEqual(first);
    expect(transitions.count()).toBe(1);
    // A refusal is remembered too: the same id keeps its answer after the state changed.
    const refused = await send(t, 'idem-2', 'episodes.finish', { metadata: 'not an object' });
    expect(refused).toMatchObject({ ok: false, error: { code: 'invalid_args' } });
    expect(await send(t, 'idem-2', 'episodes.finish')).toEqual(refused);
    expect(t.agent.machine.state).toBe('recording');
    expect(t.logs.messages()).toContain('repeated command answered from storage');
  });

  it('the same cmd_id delivered twice at once acts once', async () => {
    const t = await agent();
    const transitions = countTransitions(t);
    const payload = commandPayload(t.clock, 'dup', 'episodes.start');
    const [a, b] = await Promise.all([t.agent.commands.handlePayload(payload), t.agent.commands.handlePayload(payload)]);
    expect(a).toEqual(b);
    expect(a?.ok).toBe(true);
    expect(transitions.count()).toBe(1);
  });

  it('remembers answers across a restart of the agent on the same data directory', async () => {
    const dataDir = await makeTempDir();
    const credentials = testCredentials();
    const first = await startTestAgent({ dataDir, credentials });
    const started = await send(first, 'restart-1', 'episodes.start');
    const finished = await send(first, 'restart-2', 'episodes.finish');
    await first.agent.machine.whenSettled();
    await first.agent.stop();

    const second = await agent({ dataDir, credentials, clock: first.clock });
    const transitions = countTransitions(second);
    expect(await send(second, 'restart-1', 'episodes.start')).toEqual(started);
    expect(await send(second, 'restart-2', 'episodes.finish')).toEqual(finished);
    expect(transitions.count()).toBe(0);
    expect(second.agent.machine.state).toBe('idle');
  });

  it('forgets a cmd_id after the window: the same id then runs again', async () => {
    const t = await agent();
    const first = await send(t, 'old', 'go_home');
    t.clock.advance(DAY + 1);
    await t.agent.commands.prune();
    await send(t, 'x', 'start_autonomous');
    expect(await send(t, 'old', 'go_home')).toMatchObject({ ok: false, error: { code: 'invalid_state' } });
    expect(first.ok).toBe(true);
  });

  it('ignores a command sent longer ago than the window', async () => {
    const t = await agent();
    const stale: RobotCommand = { cmd_id: 'stale', command: 'episodes.start', sent_at: t.clock.now() - DAY - 1 };
    expect(await t.agent.commands.handlePayload(JSON.stringify(stale))).toBeUndefined();
    expect(t.agent.machine.state).toBe('idle');
  });

  it('validates the episode verb bodies and never attaches them to the recording', async () => {
    const t = await agent();
    await t.agent.setContext({ task_id: 'robot_task' });
    expect(await send(t, 'a1', 'episodes.start', { task_id: 5 })).toMatchObject({ ok: false, error: { code: 'invalid_args' } });
    expect(await send(t, 'a2', 'episodes.start', { unknown: 1 })).toMatchObject({ ok: false, error: { code: 'invalid_args' } });
    const ok = await send(t, 'a3', 'episodes.start', { task_id: 'api_task', subtask_id: 'api_sub', metadata: { k: 'v' } });
    expect(ok.ok).toBe(true);
    await send(t, 'a4', 'episodes.finish', { metadata: { k2: 'v2' } });
    await t.agent.machine.whenSettled();
    const [episode] = await listEpisodes(t);
    expect(episode?.facts).toMatchObject({ task_id: 'robot_task', subtask_id: null, metadata: {} });
  });

  it('runs the other commands on the robot actions', async () => {
    const t = await agent();
    expect(await send(t, 'h', 'go_home')).toMatchObject({ ok: true, result: { command: 'go_home', pose: 'home', robot_id: t.credentials.robot_id, ok: true } });
    await send(t, 'stop', 'stack.stop');
    expect(await send(t, 'st', 'stack.status')).toMatchObject({ ok: true, result: { stack: 'stopped', autonomous: false, pose: 'home' } });
    expect(await send(t, 'auto', 'start_autonomous')).toMatchObject({ ok: false, error: { code: 'invalid_state' } });
    expect(t.actions.state.autonomous).toBe(false);
  });
});

describe('legacy runtime', () => {
  it('answers unsupported to start, finish and discard; fail works', async () => {
    const t = await agent({ config: { legacyRuntime: true } });
    expect(t.agent.capabilities).toEqual([]);
    expect(await send(t, 'l1', 'episodes.start')).toMatchObject({ ok: false, error: { code: 'unsupported' } });
    expect(t.agent.machine.state).toBe('idle');
    // The headset still starts recordings on an old runtime.
    await t.agent.episode('start');
    expect(await send(t, 'l2', 'episodes.finish')).toMatchObject({ ok: false, error: { code: 'unsupported' } });
    expect(await send(t, 'l3', 'episodes.discard')).toMatchObject({ ok: false, error: { code: 'unsupported' } });
    expect(t.agent.machine.state).toBe('recording');
    expect(await send(t, 'l4', 'episodes.fail')).toMatchObject({ ok: true, result: { outcome: 'failure' } });
    await t.agent.machine.whenSettled();
    expect((await listEpisodes(t)).map((e) => e.outcome)).toEqual(['failure']);
  });

  it('a current runtime announces episodes.v1', async () => {
    const t = await agent();
    expect(t.agent.capabilities).toEqual(['episodes.v1']);
  });
});

describe('malformed MQTT payloads', () => {
  it('are logged and dropped, and the agent keeps working', async () => {
    const t = await agent();
    const bad: (string | Buffer)[] = [
      'not json',
      '',
      Buffer.from([0xff, 0xfe, 0x00]),
      'null',
      '[]',
      JSON.stringify({ cmd_id: 'x', command: 'self_destruct', sent_at: t.clock.now() }),
      JSON.stringify({ cmd_id: '', command: 'go_home', sent_at: t.clock.now() }),
      JSON.stringify({ command: 'go_home', sent_at: t.clock.now() }),
      JSON.stringify({ cmd_id: 'x', command: 'go_home', sent_at: 'yesterday' }),
      JSON.stringify({ cmd_id: 'x', command: 'go_home', sent_at: t.clock.now(), args: 'nope' }),
      JSON.stringify({ cmd_id: 'x', command: 'go_home', sent_at: t.clock.now(), pad: 'x'.repeat(70_000) }),
    ];
    for (const payload of bad) expect(await t.agent.commands.handlePayload(payload)).toBeUndefined();
    const dropped = t.logs.records.filter((r) => String(r.msg).startsWith('dropped'));
    expect(dropped).toHaveLength(bad.length);
    expect(t.agent.machine.state).toBe('idle');
    expect(await send(t, 'fine', 'episodes.start')).toMatchObject({ ok: true });
  });
});

async function listEpisodes(t: TestAgent) {
  const { openAgentStore } = await import('./store/sqlite.js');
  const store = openAgentStore(t.dataDir, t.clock);
  try {
    return await store.episodes.list();
  } finally {
    await store.close();
  }
}

/** Simulated actions that count go_home calls; `then` decides what happens after the count. */
class ObservedActions extends SimulatedRobotActions {
  goHomeCalls = 0;
  constructor(private readonly then: 'move' | 'hang' | 'throw' = 'move') {
    super();
  }
  override async goHome(): Promise<Record<string, unknown>> {
    this.goHomeCalls += 1;
    const moved = await super.goHome();
    // 'hang': the robot moved and the process dies before anything else happens.
    if (this.then === 'hang') return new Promise<never>(() => {});
    if (this.then === 'throw') throw new Error('servo fault after moving');
    return moved;
  }
}

async function handlerOn(
  dataDir: string,
  actions: RobotActions,
  clock?: ManualClock,
  extra: Partial<CommandHandlerOptions> = {},
): Promise<{ handler: CommandHandler; m: TestMachine; logs: LogCapture }> {
  const m = await openTestMachine({ dataDir, ...(clock ? { clock } : {}) });
  machines.push(m);
  const logs = captureLogs();
  const handler = new CommandHandler({
    robotId: m.robotId,
    machine: m.machine,
    actions,
    store: m.store,
    clock: m.clock,
    logger: logs.logger,
    legacyRuntime: false,
    windowMs: DAY,
    publish: async () => {},
    ...extra,
  });
  return { handler, m, logs };
}

const machines: TestMachine[] = [];
afterEach(async () => {
  for (const m of machines.splice(0)) await m.close();
});

const goHome = (clock: ManualClock, cmdId: string) => ({ cmd_id: cmdId, command: 'go_home' as const, sent_at: clock.now() });

describe('a non-episode action and its stored answer', () => {
  it('a crash after the robot acted and before the answer was stored: the restarted agent answers interrupted and does not act again', async () => {
    const dataDir = await makeTempDir();
    const before = new ObservedActions('hang');
    const first = await handlerOn(dataDir, before);
    void first.handler.handle(goHome(first.m.clock, 'crash-1'));
    await vi.waitFor(() => expect(before.goHomeCalls).toBe(1));
    // kill -9 now: the action ran, no answer was stored. The next process opens the same file.
    await first.m.close();
    machines.splice(machines.indexOf(first.m), 1);

    const after = new ObservedActions();
    const second = await handlerOn(dataDir, after, first.m.clock);
    const retry = await second.handler.handle(goHome(second.m.clock, 'crash-1'));
    expect(retry).toMatchObject({ cmd_id: 'crash-1', ok: false, error: { code: 'interrupted' } });
    expect(after.goHomeCalls).toBe(0);
    expect(after.state.pose).toBe('unknown');
    // The answer is final and stored: the same id keeps it, also after another restart.
    expect(await second.handler.handle(goHome(second.m.clock, 'crash-1'))).toEqual(retry);
    await second.m.close();
    machines.splice(machines.indexOf(second.m), 1);
    const third = await handlerOn(dataDir, after, first.m.clock);
    expect(await third.handler.handle(goHome(third.m.clock, 'crash-1'))).toEqual(retry);
    expect(after.goHomeCalls).toBe(0);
    // A new command id acts as usual.
    expect(await third.handler.handle(goHome(third.m.clock, 'crash-2'))).toMatchObject({ ok: true, result: { pose: 'home' } });
    expect(after.goHomeCalls).toBe(1);
  });

  it('stack.status only reads: it writes no intent, so after a crash mid-read the retry reads again', async () => {
    const dataDir = await makeTempDir();
    let reads = 0;
    const hanging = new (class extends SimulatedRobotActions {
      override async stackStatus(): Promise<Record<string, unknown>> {
        reads += 1;
        return new Promise<never>(() => {});
      }
    })();
    const first = await handlerOn(dataDir, hanging);
    void first.handler.handle({ cmd_id: 'st-1', command: 'stack.status', sent_at: first.m.clock.now() });
    await vi.waitFor(() => expect(reads).toBe(1));
    await first.m.close();
    machines.splice(machines.indexOf(first.m), 1);
    const second = await handlerOn(dataDir, new SimulatedRobotActions(), first.m.clock);
    expect(await second.handler.handle({ cmd_id: 'st-1', command: 'stack.status', sent_at: second.m.clock.now() })).toMatchObject({
      ok: true,
      result: { stack: 'running' },
    });
  });

  it('an answer that could not be stored: the robot still answers, and a retry answers interrupted and does not act again', async () => {
    const actions = new ObservedActions();
    const { handler, m, logs } = await handlerOn(await makeTempDir(), actions);
    const put = m.store.commandResults.put.bind(m.store.commandResults);
    m.store.commandResults.put = async () => {
      throw new Error('disk I/O error');
    };
    // The robot moved: the answer says so even though it could not be stored.
    expect(await handler.handlePayload(commandPayload(m.clock, 'lost', 'go_home'))).toMatchObject({ ok: true, result: { pose: 'home' } });
    expect(logs.messages()).toContain('could not store the answer of an action; a retry of this id will answer interrupted');
    expect(actions.goHomeCalls).toBe(1);
    m.store.commandResults.put = put;
    expect(await handler.handle(goHome(m.clock, 'lost'))).toMatchObject({ ok: false, error: { code: 'interrupted' } });
    expect(actions.goHomeCalls).toBe(1);
  });

  it('a failed action is final: the same id answers the same failure and does not run again', async () => {
    const actions = new ObservedActions('throw');
    const { handler, m } = await handlerOn(await makeTempDir(), actions);
    const failed = await handler.handle(goHome(m.clock, 'f1'));
    expect(failed).toMatchObject({ ok: false, error: { code: 'failed' } });
    expect(await handler.handle(goHome(m.clock, 'f1'))).toEqual(failed);
    expect(actions.goHomeCalls).toBe(1);
  });

  it('a refused action is stored like any answer: the same id keeps it after the state changed', async () => {
    const actions = new ObservedActions();
    const { handler, m } = await handlerOn(await makeTempDir(), actions);
    await handler.handle({ cmd_id: 's0', command: 'stack.stop', sent_at: m.clock.now() });
    const refused = await handler.handle(goHome(m.clock, 'r1'));
    expect(refused).toMatchObject({ ok: false, error: { code: 'invalid_state' } });
    await handler.handle({ cmd_id: 's1', command: 'stack.start', sent_at: m.clock.now() });
    expect(await handler.handle(goHome(m.clock, 'r1'))).toEqual(refused);
    expect(actions.state.pose).toBe('unknown');
  });

  it('an episode verb that fails commits nothing and is not remembered: a retry runs it', async () => {
    const { handler, m } = await handlerOn(await makeTempDir(), new ObservedActions());
    const apply = m.machine.apply.bind(m.machine);
    m.machine.apply = async () => {
      throw new Error('disk full');
    };
    expect(await handler.handle({ cmd_id: 'e1', command: 'episodes.start', sent_at: m.clock.now() })).toMatchObject({ ok: false, error: { code: 'failed' } });
    m.machine.apply = apply;
    expect(await handler.handle({ cmd_id: 'e1', command: 'episodes.start', sent_at: m.clock.now() })).toMatchObject({ ok: true, result: { recording_state: 'recording' } });
  });
});

describe('credentials.rotate', () => {
  const NEXT = 'rsec_next_secret_0123456789abcdefghijklmnop';

  it('stores the new password durably (0600) before answering, keeps the identity, and never logs or echoes it', async () => {
    const t = await agent();
    const reply = await send(t, 'rot-1', 'credentials.rotate', { password: NEXT });
    expect(reply).toMatchObject({ ok: true, result: { rotated: true, command: 'credentials.rotate', robot_id: t.credentials.robot_id } });
    expect(JSON.stringify(reply)).not.toContain(NEXT);
    const stored = await readCredentials(t.dataDir);
    // The old password stays as the previous one until the new one has worked once.
    expect(stored).toEqual({ ...t.credentials, mqtt: { ...t.credentials.mqtt, password: NEXT, previous_password: t.credentials.mqtt.password } });
    expect((await stat(credentialsPath(t.dataDir))).mode & 0o777).toBe(0o600);
    expect(t.agent.credentials.mqtt.password).toBe(NEXT);
    expect(JSON.stringify(t.logs.records)).not.toContain(NEXT);
    // The same command id again is answered from storage.
    expect(await send(t, 'rot-1', 'credentials.rotate', { password: NEXT })).toEqual(reply);
  });

  it('the same secret delivered again (its answer was lost) keeps the previous password, and a newer one keeps it too', async () => {
    const t = await agent();
    const old = t.credentials.mqtt.password;
    expect(await send(t, 'rot-1', 'credentials.rotate', { password: NEXT })).toMatchObject({ ok: true });
    expect(await send(t, 'rot-2', 'credentials.rotate', { password: NEXT })).toMatchObject({ ok: true });
    expect((await readCredentials(t.dataDir))?.mqtt).toMatchObject({ password: NEXT, previous_password: old });
    // The new password never worked: the one kept is still the one before it.
    const later = 'rsec_later_secret_0123456789abcdefghijklmno';
    expect(await send(t, 'rot-3', 'credentials.rotate', { password: later })).toMatchObject({ ok: true });
    expect((await readCredentials(t.dataDir))?.mqtt).toMatchObject({ password: later, previous_password: old });
    expect(t.agent.credentials.mqtt).toMatchObject({ password: later, previous_password: old });
  });

  it('refuses arguments without a usable password and changes nothing', async () => {
    const t = await agent();
    for (const [i, args] of [undefined, {}, { password: 'short' }, { password: NEXT, extra: 1 }].entries()) {
      expect(await send(t, `bad-${i}`, 'credentials.rotate', args)).toMatchObject({ ok: false, error: { code: 'invalid_args' } });
    }
    expect(await readCredentials(t.dataDir)).toBeUndefined();
  });

  it('answers failed, unremembered, when the credentials cannot be written: the same id stores them once it can', async () => {
    let fail = true;
    const stored: string[] = [];
    const { handler, m } = await handlerOn(await makeTempDir(), new SimulatedRobotActions(), undefined, {
      rotateCredentials: async ({ password }) => {
        if (fail) throw new Error('ENOSPC: no space left on device');
        stored.push(password);
      },
    });
    const cmd = { cmd_id: 'rot-f', command: 'credentials.rotate', args: { password: NEXT }, sent_at: m.clock.now() } as const;
    expect(await handler.handle(cmd)).toMatchObject({ ok: false, error: { code: 'failed' } });
    fail = false;
    expect(await handler.handle(cmd)).toMatchObject({ ok: true });
    expect(stored).toEqual([NEXT]);
  });

  it('answers unsupported when the agent has no way to store credentials', async () => {
    const { handler, m } = await handlerOn(await makeTempDir(), new SimulatedRobotActions());
    expect(await handler.handle({ cmd_id: 'rot-u', command: 'credentials.rotate', args: { password: NEXT }, sent_at: m.clock.now() })).toMatchObject({
      ok: false,
      error: { code: 'unsupported' },
    });
  });
});

