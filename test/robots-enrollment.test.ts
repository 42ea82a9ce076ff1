import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { AGENT_RUNTIME_VERSION } from '@fleet/agent';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { makeTempDir, startCloud, type CloudProcess } from './support/cloud.js';
import {
  createEnrollmentToken,
  enrollCli,
  getRobot,
  listRobots,
  otherOrganization,
  readStoredCredentials,
  runAgentCli,
  sendCommand,
  startAgentProcess,
  waitForRobot,
} from './support/robots.js';
import { exitWithin } from './support/process.js';
import { beforeDeadline, untilPast } from './support/wait.js';

// One cloud for the file: every test makes its own tokens and robots.
let cloud: CloudProcess;
beforeAll(async () => {
  cloud = await startCloud();
});
afterAll(async () => {
  await cloud?.[Symbol.asyncDispose]();
});

const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/;

describe('enrollment tokens and fleet-agent enroll', () => {
  test('a token is shown once; the robot enrolls with the CLI; its credentials file is 0600; no secret reaches the logs', async () => {
    await using dir = await makeTempDir('fa-e2e-');
    const before = Date.now();
    const token = await createEnrollmentToken(cloud, { namePrefix: 'arm' });
    expect(token.token).toMatch(/^ret_[A-Za-z0-9_-]{20,}$/);
    // Defaults: one use, 24 h.
    expect(token).toMatchObject({ max_uses: 1, uses: 0, name_prefix: 'arm' });
    const ttl = Date.parse(token.expires_at) - before;
    expect(ttl).toBeGreaterThan(23 * 3600_000);
    expect(ttl).toBeLessThanOrEqual(24 * 3600_000 + 60_000);

    const dataDir = join(dir.path, 'robot');
    const r = await enrollCli(cloud, { token: token.token, dataDir, platform: 'so-100' });
    expect(r.code, r.stderr).toBe(0);
    const printed = JSON.parse(r.stdout) as { robot_id: string; name: string };
    expect(printed.robot_id).toMatch(/^rbt_[a-z2-7]{26}$/);
    expect(printed.name).toMatch(/^arm-\d+$/);

    const file = join(dataDir, 'credentials.json');
    expect((await stat(file)).mode & 0o777).toBe(0o600);
    const creds = await readStoredCredentials(dataDir);
    // On a broker cluster the robot gets every node, in an order of its own (ranked by its id); its
    // `url` is the first of them. On one broker that is the cloud's.
    const urls = creds.mqtt.urls ?? [creds.mqtt.url];
    expect(urls).toContain(cloud.mqtt);
    expect(creds).toMatchObject({ robot_id: printed.robot_id, mqtt: { client_id: printed.robot_id, username: printed.robot_id, url: urls[0] } });
    if (urls.length === 1) expect(creds.mqtt.url).toBe(cloud.mqtt);
    expect(creds.mqtt.password).toMatch(/^rsec_/);

    // The robot record exists and is not connected yet.
    const robot = await getRobot(cloud, printed.robot_id);
    expect(robot.status).toBe(200);
    expect(robot.body).toMatchObject({ id: printed.robot_id, connected: false, last_seen_at: null });

    // Shown once: neither the token nor the robot's password is in anything the cloud printed.
    const printedByCloud = [...cloud.stdoutLines, ...cloud.stderrLines].join('\n');
    expect(printedByCloud).not.toContain(token.token);
    expect(printedByCloud).not.toContain(creds.mqtt.password);

    // Enrolling again into the same directory is refused: it would make a new robot.
    const again = await enrollCli(cloud, { token: (await createEnrollmentToken(cloud)).token, dataDir });
    expect(again.code).toBe(2);
    expect(again.stderr).toMatch(/already enrolled/);
  });

  test('a token past max_uses is refused: the CLI exits non-zero saying why, the API answers 401 unauthenticated', async () => {
    await using dir = await makeTempDir('fa-e2e-');
    const token = await createEnrollmentToken(cloud, { maxUses: 2 });
    for (const n of [1, 2]) {
      const r = await enrollCli(cloud, { token: token.token, dataDir: join(dir.path, `r${n}`) });
      expect(r.code, r.stderr).toBe(0);
    }
    const third = await enrollCli(cloud, { token: token.token, dataDir: join(dir.path, 'r3') });
    expect(third.code).toBe(1);
    expect(third.stderr).toMatch(/401 unauthenticated/);
    expect(third.stderr).toMatch(/no uses left/);
    // Nothing was written for the refused robot.
    await expect(stat(join(dir.path, 'r3', 'credentials.json'))).rejects.toThrow();

    const api = await cloud.fetch('/v1/robots/enroll', { method: 'POST', key: null, json: { token: token.token } });
    expect(api.status).toBe(401);
    expect(((await api.json()) as { error: { code: string } }).error.code).toBe('unauthenticated');
  });

  test('an expired token and an unknown token are refused the same way, each with its own reason', async () => {
    await using dir = await makeTempDir('fa-e2e-');
    // The cloud runs on the real clock: a token expiring shortly (a wider window if creating it
    // took the whole window on a slow machine), then wait until the clock is past its expiry.
    const { value: created, deadline: expiresAt } = await beforeDeadline(
      (deadline) =>
        createEnrollmentToken(cloud, { expiresAt: deadline.toISOString() }).then(
          (token) => ({ token }),
          (err: unknown) => ({ err }),
        ),
      { windowMs: 1_500, description: 'creating a short-lived enrollment token' },
    );
    if (!('token' in created)) throw created.err;
    const token = created.token;
    expect(token.expires_at).toBe(expiresAt.toISOString());
    await untilPast(expiresAt);
    const r = await enrollCli(cloud, { token: token.token, dataDir: join(dir.path, 'late') });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/401 unauthenticated.*expired/);
    const api = await cloud.fetch('/v1/robots/enroll', { method: 'POST', key: null, json: { token: token.token } });
    expect(api.status).toBe(401);

    const unknown = await enrollCli(cloud, { token: 'ret_not-a-real-token-at-all-000000000', dataDir: join(dir.path, 'unknown') });
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/401 unauthenticated.*unknown/);

    // A token cannot be created already expired.
    const past = await cloud.fetch('/v1/robots/enrollment-tokens', { method: 'POST', json: { expires_at: new Date(Date.now() - 1000).toISOString() } });
    expect(past.status).toBe(400);
  });

  test('fleet-agent start without enrollment exits non-zero and says to enroll', async () => {
    await using dir = await makeTempDir('fa-e2e-');
    const r = await runAgentCli(['start', '--data-dir', join(dir.path, 'fresh')]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/not enrolled/);
    expect(r.stderr).toMatch(/fleet-agent enroll/);
    expect(r.stdout).toBe('');
  });
});

describe('robots in the API', () => {
  test('GET /v1/robots and /v1/robots/{id} show a started robot connected with what it announced', async () => {
    const since = Date.now();
    await using agent = await startAgentProcess(cloud, { platform: 'so-100', name: 'left-arm' });
    const one = await getRobot(cloud, agent.robotId);
    expect(one.status).toBe(200);
    expect(one.body).toMatchObject({
      id: agent.robotId,
      name: 'left-arm',
      connected: true,
      recording_state: 'idle',
      capabilities: ['episodes.v1'],
      runtime_version: AGENT_RUNTIME_VERSION,
      platform: 'so-100',
    });
    expect(one.body.last_seen_at).toMatch(ISO);
    expect(Date.parse(one.body.last_seen_at!)).toBeGreaterThanOrEqual(since - 1000);

    const listed = (await listRobots(cloud)).find((r) => r.id === agent.robotId);
    expect(listed).toEqual(one.body);
  });

  test("another organization's robots are 404, absent from its list, and cannot be commanded", async () => {
    await using agent = await startAgentProcess(cloud);
    const other = await otherOrganization(cloud, 'rival');
    const res = await getRobot(cloud, agent.robotId, other.key);
    expect(res.status).toBe(404);
    expect(res.body.error?.code).toBe('not_found');
    expect((await listRobots(cloud, other.key)).map((r) => r.id)).not.toContain(agent.robotId);
    const cmd = await sendCommand(cloud, agent.robotId, 'stack/status', { key: other.key });
    expect(cmd.status).toBe(404);
    expect(cmd.body.error?.code).toBe('not_found');
    // Its own organization still sees it.
    expect((await getRobot(cloud, agent.robotId)).status).toBe(200);
    expect((await getRobot(cloud, 'rbt_aaaaaaaaaaaaaaaaaaaaaaaaaa')).status).toBe(404);
  });

  test('a clean SIGTERM of the agent exits 0 and publishes offline at once (not by the broker timing out)', async () => {
    await using agent = await startAgentProcess(cloud);
    const before = await getRobot(cloud, agent.robotId);
    expect(before.body.connected).toBe(true);
    agent.process.child.kill('SIGTERM');
    const exit = await exitWithin(agent.process, 20_000);
    expect(exit).toEqual({ code: 0, signal: null });
    // "At once" is an event, not a stopwatch: the link was up when the agent stopped (no
    // "connection lost"), so it published its retained offline status and the broker
    // acknowledged it (QoS 1; a failure or a missing PUBACK logs "could not publish the offline
    // status"), then it disconnected cleanly: no last will and no keepalive timeout is involved.
    // The API then shows it offline; the bound is only a failure bound, and still far below the
    // 45 s a silent connection takes to time out (keepalive 30 s).
    const logs = agent.process.stderrLines.join('\n');
    expect(logs).not.toMatch(/mqtt connection lost/);
    expect(logs).not.toMatch(/could not publish the offline status/);
    expect(logs).toMatch(/agent stopped/);
    const after = await waitForRobot(cloud, agent.robotId, (r) => !r.connected, { timeoutMs: 20_000, description: 'connected: false' });
    expect(after.connected).toBe(false);
    const cmd = await sendCommand(cloud, agent.robotId, 'stack/status');
    expect(cmd.status).toBe(503);
    expect(cmd.body.error?.code).toBe('robot_offline');
  });
});
