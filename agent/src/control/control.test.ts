import { stat } from 'node:fs/promises';
import { createConnection } from 'node:net';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Agent } from '../daemon.js';
import { openAgentStore } from '../store/sqlite.js';
import { commandPayload, removeTempDirs, startTestAgent, type TestAgent } from '../test-support.js';
import { ControlError } from '../errors.js';
import { ControlClient, controlSocketPath } from './client.js';

const running: Agent[] = [];
const clients: ControlClient[] = [];

async function agentWithSocket(config: Parameters<typeof startTestAgent>[0] = {}): Promise<TestAgent & { client: ControlClient }> {
  const t = await startTestAgent({ controlSocket: true, ...config });
  running.push(t.agent);
  const client = await ControlClient.connect(controlSocketPath(t.dataDir));
  clients.push(client);
  return { ...t, client };
}

afterEach(async () => {
  for (const c of clients.splice(0)) c.close();
  for (const a of running.splice(0)) await a.stop();
  await removeTempDirs();
});

describe('local control surface', () => {
  it('listens on <dataDir>/agent.sock with mode 0600', async () => {
    const t = await agentWithSocket();
    expect((await stat(controlSocketPath(t.dataDir))).mode & 0o777).toBe(0o600);
  });

  it('runs the episode verbs, the context and the status', async () => {
    const t = await agentWithSocket();
    const ctx = await t.client.setContext({ task_id: 'task_1', operator_name: 'Ada', session_name: 'bench' });
    expect(ctx).toMatchObject({ task_id: 'task_1', operator_name: 'Ada', session_name: 'bench', subtask_id: null });
    expect(await t.client.getContext()).toEqual(ctx);
    const started = await t.client.episode('start');
    expect(started).toMatchObject({ robot_id: t.credentials.robot_id, recording_state: 'recording', episode_seq: 1 });
    expect(await t.client.status()).toMatchObject({
      robot_id: t.credentials.robot_id,
      recording_state: 'recording',
      episode_id: started.episode_id,
      connected: false,
      capabilities: ['episodes.v1'],
    });
    expect(await t.client.episode('discard')).toMatchObject({ episode_id: started.episode_id, outcome: 'discarded', recording_state: 'finalizing' });
    await t.agent.machine.whenSettled();
    expect(await t.client.status()).toMatchObject({ recording_state: 'idle', episode_id: null });
  });

  it('refuses an illegal transition with invalid_state and changes nothing', async () => {
    const t = await agentWithSocket();
    const err = (await t.client.episode('finish').catch((e: unknown) => e)) as ControlError;
    expect(err).toBeInstanceOf(ControlError);
    expect(err.code).toBe('invalid_state');
    expect(err.message).toMatch(/idle/);
    expect(t.agent.machine.state).toBe('idle');
  });

  it('answers bad requests without dropping the connection', async () => {
    const t = await agentWithSocket();
    const raw = createConnection(controlSocketPath(t.dataDir));
    const lines: string[] = [];
    raw.setEncoding('utf8');
    let buf = '';
    raw.on('data', (d: string) => {
      buf += d;
      const parts = buf.split('\n');
      buf = parts.pop()!;
      lines.push(...parts);
    });
    raw.write('not json\n{"op":"self_destruct","id":7}\n{"op":"context.set","context":{"task_id":5}}\n{"op":"status","id":"s"}\n');
    await expect.poll(() => lines.length).toBe(4);
    raw.destroy();
    const answers = lines.map((l) => JSON.parse(l) as { ok: boolean; id?: unknown; error?: { code: string } });
    expect(answers.slice(0, 3).map((a) => a.error?.code)).toEqual(['bad_request', 'bad_request', 'bad_request']);
    expect(answers[1]!.id).toBe(7);
    expect(answers[3]).toMatchObject({ ok: true, id: 's' });
  });

  it('lists and shows episodes; an unknown id is not_found, a malformed one bad_request', async () => {
    const t = await agentWithSocket();
    const { episode_id } = (await t.client.episode('start')) as { episode_id: string };
    expect((await t.client.listEpisodes()).map((e) => [e.id, e.state])).toEqual([[episode_id, 'recording']]);
    t.clock.advance(1000);
    await t.client.episode('finish');
    await t.agent.machine.whenSettled();
    const [listed] = await t.client.listEpisodes(10);
    expect(listed).toMatchObject({ id: episode_id, state: 'finalized', outcome: 'success', dir: join(t.dataDir, 'episodes', episode_id), sync: [] });
    expect(listed!.files.map((f) => f.path)).toEqual(['recording.mcap']);
    expect(await t.client.showEpisode(episode_id)).toEqual(listed);
    await expect(t.client.showEpisode('ep_2222222222aaaaaaaaaaaaaaaa')).rejects.toMatchObject({ code: 'not_found' });
    await expect(t.client.showEpisode('../etc')).rejects.toMatchObject({ code: 'bad_request' });
    await expect(t.client.listEpisodes(0)).rejects.toMatchObject({ code: 'bad_request' });
  });

  it('keeps every verb on a legacy runtime (the headset predates episodes.v1)', async () => {
    const t = await agentWithSocket({ config: { legacyRuntime: true } });
    await t.client.episode('start');
    expect(await t.client.episode('finish')).toMatchObject({ outcome: 'success' });
  });

  it('produces the same episode data as the MQTT command', async () => {
    const t = await agentWithSocket();
    await t.client.setContext({ task_id: 'task_1', subtask_id: 'st_1', subtask_name: 'Reach', operator_id: 'op_1', control_mode: 'teleop' });
    await t.client.episode('start');
    t.clock.advance(1000);
    await t.client.episode('finish');
    await t.agent.machine.whenSettled();
    const viaMqtt = await t.agent.commands.handlePayload(commandPayload(t.clock, 'c1', 'episodes.start'));
    expect(viaMqtt?.ok).toBe(true);
    t.clock.advance(1000);
    await t.agent.commands.handlePayload(commandPayload(t.clock, 'c2', 'episodes.finish'));
    await t.agent.machine.whenSettled();
    const store = openAgentStore(t.dataDir, t.clock);
    const [local, remote] = await store.episodes.list();
    await store.close();
    const strip = (f: Record<string, unknown>) => {
      const { id: _id, episode_seq: _seq, started_at: _s, ended_at: _e, message_count: _m, bag_size_bytes: _b, ...rest } = f;
      return rest;
    };
    expect(local && remote).toBeTruthy();
    expect(Object.keys(remote!.facts).sort()).toEqual(Object.keys(local!.facts).sort());
    expect(strip({ ...remote!.facts })).toEqual(strip({ ...local!.facts }));
    expect([local!.facts.episode_seq, remote!.facts.episode_seq]).toEqual([1, 2]);
  });

  it('a second agent on the same data directory refuses to start', async () => {
    const t = await agentWithSocket();
    await expect(startTestAgent({ dataDir: t.dataDir, controlSocket: true, credentials: t.credentials })).rejects.toThrow(/already running/);
  });

  it('the client says when no agent is running', async () => {
    await expect(ControlClient.connect('/nonexistent/agent.sock')).rejects.toMatchObject({ code: 'not_running' });
  });
});
