import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { makeTempDir, startCloud, type CloudProcess } from './support/cloud.js';
import {
  createEnrollmentToken,
  enrollCli,
  episodeDirs,
  finalizedEpisodes,
  getRobot,
  readStoredCredentials,
  sendCommand,
  startAgentProcess,
  waitForRobot,
  type CommandResponse,
} from './support/robots.js';

// One cloud for the file, with a short command timeout so a 504 comes quickly.
const COMMAND_TIMEOUT_MS = 3_000;
let cloud: CloudProcess;
beforeAll(async () => {
  cloud = await startCloud({ args: ['--command-timeout-ms', String(COMMAND_TIMEOUT_MS)] });
});
afterAll(async () => {
  await cloud?.[Symbol.asyncDispose]();
});

/**
 * A command that must reach the robot: the short timeout is there for the 504 test, and on a
 * loaded machine any round trip (a just-resumed agent's above all) may outlast it. So a 504 is
 * retried with the same Idempotency-Key, the API's own retry (the robot acts at most once for
 * a key), until the robot answers; 30 s is only a failure bound.
 */
async function untilAnswered(robotId: string, route: string, idempotencyKey: string = `${route.replace('/', '-')}-${randomUUID()}`): Promise<CommandResponse> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const r = await sendCommand(cloud, robotId, route, { idempotencyKey });
    if (r.status !== 504 || Date.now() > deadline) return r;
  }
}

describe('503 robot_offline', () => {
  test('a robot whose agent was killed with SIGKILL goes offline through its last will; commands answer 503', async () => {
    await using agent = await startAgentProcess(cloud);
    expect((await untilAnswered(agent.robotId, 'stack/status')).status).toBe(200);
    const exit = await agent.kill('SIGKILL');
    expect(exit.signal).toBe('SIGKILL');
    // Nobody said goodbye: only the broker's last will can mark it offline.
    const robot = await waitForRobot(cloud, agent.robotId, (r) => !r.connected, { description: 'connected: false after SIGKILL' });
    expect(robot.recording_state).toBe('idle');
    for (const route of ['stack/status', 'go-home', 'episodes/start', 'episodes/fail']) {
      const r = await sendCommand(cloud, agent.robotId, route);
      expect(r.status, `${route}: ${JSON.stringify(r.body)}`).toBe(503);
      expect(r.body.error?.code).toBe('robot_offline');
    }
  });

  test('a robot that enrolled but never connected answers 503 to every command, episode verbs included (offline, not legacy)', async () => {
    await using dir = await makeTempDir('fa-e2e-');
    const token = await createEnrollmentToken(cloud);
    const enrolled = await enrollCli(cloud, { token: token.token, dataDir: join(dir.path, 'never') });
    expect(enrolled.code, enrolled.stderr).toBe(0);
    const { robot_id } = await readStoredCredentials(join(dir.path, 'never'));
    expect((await getRobot(cloud, robot_id)).body).toMatchObject({ connected: false, last_seen_at: null, capabilities: [] });
    for (const route of ['stack/status', 'episodes/start', 'episodes/finish', 'episodes/discard', 'episodes/fail']) {
      const r = await sendCommand(cloud, robot_id, route);
      expect(r.status, `${route}: ${JSON.stringify(r.body)}`).toBe(503);
      expect(r.body.error?.code).toBe('robot_offline');
    }
  });
});

describe('504 command_timeout and the retry with the same Idempotency-Key', () => {
  test('a stopped robot times out; after it resumes, the same key returns the real result and exactly one recording started', async () => {
    await using agent = await startAgentProcess(cloud);
    const key = `start-${Date.now()}`;
    // SIGSTOP: the TCP connection stays up (no last will, still "connected") but nothing answers.
    agent.process.child.kill('SIGSTOP');
    let resumed = false;
    try {
      const first = await sendCommand(cloud, agent.robotId, 'episodes/start', { idempotencyKey: key });
      expect(first.status, JSON.stringify(first.body)).toBe(504);
      expect(first.body.error?.code).toBe('command_timeout');
      // The robot has not acted yet (it is stopped).
      expect(await episodeDirs(agent.dataDir)).toEqual([]);
      agent.process.child.kill('SIGCONT');
      resumed = true;
    } finally {
      if (!resumed) agent.process.child.kill('SIGCONT');
    }

    // On resuming, the robot runs the queued command (its reply finds nobody waiting). The retry
    // with the same key is the same cmd_id: answered from the robot's memory, not run again.
    const retry = await untilAnswered(agent.robotId, 'episodes/start', key);
    expect(retry.status, JSON.stringify(retry.body)).toBe(200);
    expect(retry.body.result).toMatchObject({ cmd_id: key, command: 'episodes.start', robot_id: agent.robotId, ok: true, recording_state: 'recording' });
    const episodeId = retry.body.result!.episode_id as string;

    // Exactly one transition: one episode directory, the agent records that episode, and a new
    // start (new key) is refused because it is already recording.
    expect(await episodeDirs(agent.dataDir)).toEqual([episodeId]);
    expect(await agent.status()).toMatchObject({ recording_state: 'recording', episode_id: episodeId, episode_seq: 1 });
    const again = await untilAnswered(agent.robotId, 'episodes/start', `${key}-new`);
    expect(again.status).toBe(500);
    expect(again.body.error?.code).toBe('internal');
    // A third try with the first key still answers the same stored result.
    const third = await untilAnswered(agent.robotId, 'episodes/start', key);
    expect(third.status).toBe(200);
    expect(third.body.result?.episode_id).toBe(episodeId);

    const fin = await untilAnswered(agent.robotId, 'episodes/finish');
    expect(fin.status).toBe(200);
    await waitForRobot(cloud, agent.robotId, (r) => r.recording_state === 'idle', { description: 'idle' });
    expect((await finalizedEpisodes(agent.dataDir)).map((e) => [e.id, e.outcome])).toEqual([[episodeId, 'success']]);
  });
});

describe('422 validation_failed on a legacy runtime', () => {
  test('start, finish and discard answer 422 while fail works; the local surface starts recordings there', async () => {
    await using agent = await startAgentProcess(cloud, { legacy: true });
    const robot = (await getRobot(cloud, agent.robotId)).body;
    expect(robot).toMatchObject({ connected: true, capabilities: [], runtime_version: '0.0.9-legacy' });
    expect(robot.capabilities).not.toContain('episodes.v1');

    const assert422 = async (route: string) => {
      const r = await sendCommand(cloud, agent.robotId, route);
      expect(r.status, `${route}: ${JSON.stringify(r.body)}`).toBe(422);
      expect(r.body.error).toMatchObject({ code: 'validation_failed', details: { required_capability: 'episodes.v1' } });
    };
    await assert422('episodes/start');
    expect(await episodeDirs(agent.dataDir)).toEqual([]);

    // The headset predates episodes.v1 too and keeps every verb.
    const start = await agent.control(['episode', 'start']);
    expect(start.code, start.stderr).toBe(0);
    const episodeId = (JSON.parse(start.stdout) as { episode_id: string }).episode_id;
    await waitForRobot(cloud, agent.robotId, (r) => r.recording_state === 'recording', { description: 'recording' });

    await assert422('episodes/finish');
    await assert422('episodes/discard');
    await assert422('episodes/start');
    expect(await agent.status()).toMatchObject({ recording_state: 'recording', episode_id: episodeId });

    // fail works on every runtime.
    const fail = await untilAnswered(agent.robotId, 'episodes/fail');
    expect(fail.status, JSON.stringify(fail.body)).toBe(200);
    expect(fail.body.result).toMatchObject({ command: 'episodes.fail', ok: true, episode_id: episodeId, outcome: 'failure' });
    await waitForRobot(cloud, agent.robotId, (r) => r.recording_state === 'idle', { description: 'idle' });
    expect((await finalizedEpisodes(agent.dataDir)).map((e) => [e.id, e.outcome])).toEqual([[episodeId, 'failure']]);

    // The non-episode commands are not versioned.
    expect((await untilAnswered(agent.robotId, 'stack/status')).status).toBe(200);
  });
});
