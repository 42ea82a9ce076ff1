/**
 * Fleet administration against a real `fleet-cloud serve`, real agents and a real simulated
 * fleet: enrollment tokens listed and revoked, a robot de-enrolled while connected, a robot's
 * broker credentials rotated (connected and offline), and the webhook delivery log.
 */
import { join } from 'node:path';
import mqtt from 'mqtt';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import type { CredentialRotation, DeliveryAttempt, EnrollmentTokenInfo, Robot } from '@fleet/protocol';
import { createTestPki, startHttpsReceiver, type TestPki } from '../cloud/src/egress/test-https.js';
import { makeTempDir, startCloud, type CloudProcess } from './support/cloud.js';
import { AGENT_ARGS, listEpisodes, recordEpisode, waitForIndexed } from './support/episodes.js';
import {
  createEnrollmentToken,
  enrollCli,
  getRobot,
  listRobots,
  otherOrganization,
  readStoredCredentials,
  sendCommand,
  spawnAgent,
  startAgentProcess,
  startFleet,
  waitForRobot,
  type StoredCredentials,
} from './support/robots.js';
import { waitFor } from './support/wait.js';

let pki: TestPki;
let cloud: CloudProcess;
let other: { org: string; key: string };
beforeAll(async () => {
  pki = createTestPki();
  cloud = await startCloud({ args: ['--egress-allow-loopback', '--egress-ca-file', pki.caFile] });
  other = await otherOrganization(cloud, 'elsewhere');
});
afterAll(async () => {
  await cloud?.[Symbol.asyncDispose]();
  pki?.cleanup();
});

async function call<T = Record<string, unknown>>(path: string, init: Parameters<CloudProcess['fetch']>[1] = {}): Promise<{ status: number; body: T }> {
  const res = await cloud.fetch(path, init);
  const text = await res.text();
  return { status: res.status, body: (text ? JSON.parse(text) : {}) as T };
}

const errorCode = (body: unknown) => (body as { error?: { code?: string } }).error?.code;

/** Connects to the broker as the robot; resolves 'connected' or the broker's refusal. */
async function brokerAnswer(creds: StoredCredentials, password: string): Promise<'connected' | 'refused'> {
  try {
    const c = await mqtt.connectAsync(cloud.mqtt, {
      protocolVersion: 4,
      clientId: creds.mqtt.client_id,
      username: creds.mqtt.username,
      password,
      reconnectPeriod: 0,
      connectTimeout: 15_000,
    });
    await c.endAsync(true);
    return 'connected';
  } catch (err) {
    // CONNACK 4 (bad user name or password) or 5 (not authorized).
    if (/bad user ?name or password|not authorized/i.test((err as Error).message)) return 'refused';
    throw err;
  }
}

describe('enrollment tokens: list and revoke', () => {
  test('listed page by page without their secret; a revoked token enrolls no robot; another organization sees none of them', async () => {
    await using dir = await makeTempDir('fa-e2e-');
    const a = await createEnrollmentToken(cloud, { namePrefix: 'cell-a', maxUses: 3 });
    const b = await createEnrollmentToken(cloud, { namePrefix: 'cell-b' });

    const all: EnrollmentTokenInfo[] = [];
    let cursor: string | null = null;
    do {
      const q: string = cursor === null ? '?limit=1' : `?limit=1&cursor=${encodeURIComponent(cursor)}`;
      const page = await call<{ enrollment_tokens: EnrollmentTokenInfo[]; cursor: string | null }>(`/v1/robots/enrollment-tokens${q}`);
      expect(page.status).toBe(200);
      expect(page.body.enrollment_tokens.length).toBeLessThanOrEqual(1);
      // Never the secret, in any form.
      expect(JSON.stringify(page.body)).not.toContain(a.token);
      expect(JSON.stringify(page.body)).not.toContain(b.token);
      all.push(...page.body.enrollment_tokens);
      cursor = page.body.cursor;
    } while (cursor !== null);
    const listedA = all.find((t) => t.id === a.id)!;
    expect(listedA).toMatchObject({ name_prefix: 'cell-a', max_uses: 3, uses: 0, revoked_at: null, expires_at: a.expires_at });
    expect(a.token.startsWith(listedA.token_prefix)).toBe(true);
    expect(listedA.token_prefix.length).toBeLessThan(a.token.length);
    expect(all.some((t) => t.id === b.id)).toBe(true);

    // One use, then the revocation.
    const first = await enrollCli(cloud, { token: a.token, dataDir: join(dir.path, 'r1') });
    expect(first.code, first.stderr).toBe(0);
    // Another organization can neither see nor revoke it.
    const foreign = await call<{ enrollment_tokens: EnrollmentTokenInfo[] }>('/v1/robots/enrollment-tokens', { key: other.key });
    expect(foreign.body.enrollment_tokens.map((t) => t.id)).not.toContain(a.id);
    expect(errorCode((await call(`/v1/robots/enrollment-tokens/${a.id}`, { method: 'DELETE', key: other.key })).body)).toBe('not_found');

    const revoked = await cloud.fetch(`/v1/robots/enrollment-tokens/${a.id}`, { method: 'DELETE' });
    expect(revoked.status).toBe(204);
    const after = (await call<{ enrollment_tokens: EnrollmentTokenInfo[] }>('/v1/robots/enrollment-tokens?limit=100')).body.enrollment_tokens.find((t) => t.id === a.id)!;
    expect(after.uses).toBe(1);
    expect(after.revoked_at).not.toBeNull();
    // A second revocation keeps the first time.
    expect((await cloud.fetch(`/v1/robots/enrollment-tokens/${a.id}`, { method: 'DELETE' })).status).toBe(204);
    const again = (await call<{ enrollment_tokens: EnrollmentTokenInfo[] }>('/v1/robots/enrollment-tokens?limit=100')).body.enrollment_tokens.find((t) => t.id === a.id)!;
    expect(again.revoked_at).toBe(after.revoked_at);

    // The real enrollment attempt with the revoked token (uses left) is refused, by the CLI and the API.
    const refused = await enrollCli(cloud, { token: a.token, dataDir: join(dir.path, 'r2') });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/revoked/);
    const api = await call('/v1/robots/enroll', { method: 'POST', key: null, json: { token: a.token } });
    expect([api.status, errorCode(api.body)]).toEqual([401, 'unauthenticated']);
    // The other token still works.
    expect((await enrollCli(cloud, { token: b.token, dataDir: join(dir.path, 'r3') })).code).toBe(0);
  });
});

describe('de-enrolling a robot', () => {
  test('its live connection is closed and its credentials refused; its episodes stay; commands answer robot_deenrolled', { timeout: 120_000 }, async () => {
    await using agent = await startAgentProcess(cloud, { args: AGENT_ARGS });
    const creds = await readStoredCredentials(agent.dataDir);
    const episodeId = await recordEpisode(agent.dataDir);
    await waitForIndexed(cloud, [episodeId]);

    // Another organization cannot de-enroll it.
    expect(errorCode((await call(`/v1/robots/${agent.robotId}`, { method: 'DELETE', key: other.key })).body)).toBe('not_found');

    const lostBefore = agent.process.stderrLines.filter((l) => l.includes('mqtt connection lost')).length;
    const res = await cloud.fetch(`/v1/robots/${agent.robotId}`, { method: 'DELETE' });
    expect(res.status).toBe(204);
    // The broker closed the agent's live connection at once…
    await waitFor(() => (agent.process.stderrLines.filter((l) => l.includes('mqtt connection lost')).length > lostBefore ? true : undefined), {
      description: 'the agent to lose its broker connection',
    });
    // …and refuses the robot's credentials from now on.
    expect(await brokerAnswer(creds, creds.mqtt.password)).toBe('refused');

    const robot = await getRobot(cloud, agent.robotId);
    expect(robot.status).toBe(200);
    expect(robot.body.deenrolled_at).not.toBeNull();
    expect(robot.body.connected).toBe(false);
    // Left out of the list unless asked for.
    expect((await listRobots(cloud)).map((r) => r.id)).not.toContain(agent.robotId);
    const withDeenrolled = await call<{ robots: Robot[] }>('/v1/robots?limit=100&include_deenrolled=true');
    expect(withDeenrolled.body.robots.map((r) => r.id)).toContain(agent.robotId);
    // Its episodes stay queryable.
    expect((await listEpisodes(cloud, `robot_id=${agent.robotId}`)).map((e) => e.id)).toEqual([episodeId]);
    // Commands and rotations answer a clear error instead of robot_offline.
    const cmd = await sendCommand(cloud, agent.robotId, 'stack/status');
    expect([cmd.status, cmd.body.error?.code]).toEqual([409, 'robot_deenrolled']);
    const rot = await call(`/v1/robots/${agent.robotId}/rotate-credentials`, { method: 'POST' });
    expect([rot.status, errorCode(rot.body)]).toEqual([409, 'robot_deenrolled']);
    // A second DELETE keeps the first time.
    expect((await cloud.fetch(`/v1/robots/${agent.robotId}`, { method: 'DELETE' })).status).toBe(204);
    expect((await getRobot(cloud, agent.robotId)).body.deenrolled_at).toBe(robot.body.deenrolled_at);
    // The agent keeps trying and stays refused: the API never shows it connected again.
    expect((await getRobot(cloud, agent.robotId)).body.connected).toBe(false);
  });
});

describe('rotating a robot\'s credentials', () => {
  test('a connected simulated robot gets the new secret over its command channel, reconnects with it, and the old one is refused', { timeout: 120_000 }, async () => {
    await using fleet = await startFleet(cloud, { count: 1 });
    const robotId = fleet.robots[0]!;
    const dir = fleet.robotDir(0);
    const before = await readStoredCredentials(dir);
    const reconnectsBefore = fleet.process.stderrLines.filter((l) => l.includes('"reconnect":true') && l.includes(robotId)).length;

    const res = await call<CredentialRotation>(`/v1/robots/${robotId}/rotate-credentials`, { method: 'POST', headers: { 'idempotency-key': `rot-${robotId}` } });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body).toMatchObject({ robot_id: robotId, state: 'completed' });
    expect(res.body.rotated_at).not.toBeNull();

    // The robot stored the new secret durably before it answered, keeping the old one until the
    // new one has worked.
    const after = await readStoredCredentials(dir);
    expect(after.mqtt.password).toMatch(/^rsec_/);
    expect(after.mqtt.password).not.toBe(before.mqtt.password);
    expect(after.mqtt.previous_password).toBe(before.mqtt.password);
    expect({ ...after, mqtt: { ...after.mqtt, password: '', previous_password: undefined } }).toEqual({ ...before, mqtt: { ...before.mqtt, password: '', previous_password: undefined } });

    // The cloud closed its connection; it reconnected with the new secret and takes commands.
    await waitFor(() => (fleet.process.stderrLines.filter((l) => l.includes('"reconnect":true') && l.includes(robotId)).length > reconnectsBefore ? true : undefined), {
      description: 'the robot to reconnect',
    });
    await waitForRobot(cloud, robotId, (r) => r.connected, { description: 'connected again' });
    // Connected with the new secret: the old one is forgotten.
    const forgotten = await waitFor(async () => {
      const c = await readStoredCredentials(dir);
      return c.mqtt.previous_password === undefined ? c : undefined;
    }, { description: 'the previous password to be forgotten' });
    expect(forgotten).toEqual({ ...before, mqtt: { ...before.mqtt, password: after.mqtt.password } });
    const cmd = await sendCommand(cloud, robotId, 'stack/status');
    expect(cmd.status, JSON.stringify(cmd.body)).toBe(200);
    const robot = (await getRobot(cloud, robotId)).body;
    expect(robot.credentials).toMatchObject({ rotation: 'none', rotation_requested_at: null, rotated_at: res.body.rotated_at });

    // The old secret is refused by the broker.
    expect(await brokerAnswer(before, before.mqtt.password)).toBe('refused');
    // The same Idempotency-Key replays the answer; it rotates nothing again.
    const replay = await cloud.fetch(`/v1/robots/${robotId}/rotate-credentials`, { method: 'POST', headers: { 'idempotency-key': `rot-${robotId}` } });
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect((await readStoredCredentials(dir)).mqtt.password).toBe(after.mqtt.password);
    // Neither secret ever reached the cloud's output.
    const printed = [...cloud.stdoutLines, ...cloud.stderrLines].join('\n');
    expect(printed).not.toContain(after.mqtt.password);
    expect(printed).not.toContain(before.mqtt.password);
    // The robot's own logs do not carry it either.
    expect(fleet.process.stderrLines.join('\n')).not.toContain(after.mqtt.password);
  });

  test('an offline robot\'s rotation is pending, its old secret works until it connects, then the rotation completes', { timeout: 120_000 }, async () => {
    // Disposed last: it owns the data directory the second process starts on.
    await using agent = await startAgentProcess(cloud);
    const robotId = agent.robotId;
    const dataDir = agent.dataDir;
    await agent.kill('SIGTERM');
    await waitForRobot(cloud, robotId, (r) => !r.connected, { description: 'offline' });
    const before = await readStoredCredentials(dataDir);

    const res = await call<CredentialRotation>(`/v1/robots/${robotId}/rotate-credentials`, { method: 'POST' });
    expect([res.status, res.body.state, res.body.rotated_at]).toEqual([202, 'pending', null]);
    const pending = (await getRobot(cloud, robotId)).body;
    expect(pending.credentials).toMatchObject({ rotation: 'pending', rotation_requested_at: res.body.requested_at });
    // Until the robot has the new secret, the old one still works.
    expect(await brokerAnswer(before, before.mqtt.password)).toBe('connected');

    // The robot comes back with its old secret; the rotation goes out on that connection.
    await using proc = await spawnAgent(dataDir);
    const rotated = await waitForRobot(cloud, robotId, (r) => r.credentials.rotation === 'none' && r.credentials.rotated_at !== null, {
      timeoutMs: 30_000,
      description: 'the rotation to complete',
    });
    expect(Date.parse(rotated.credentials.rotated_at!)).toBeGreaterThanOrEqual(Date.parse(res.body.requested_at));
    const after = await readStoredCredentials(dataDir);
    expect(after.mqtt.password).not.toBe(before.mqtt.password);
    // Behind mosquitto the robot's presence learns of the closed connection from its will, a
    // moment after the rotation completed: a command may still find it reconnecting (504, the
    // answer a client retries), so this waits for one that reaches it.
    await waitFor(async () => ((await sendCommand(cloud, robotId, 'stack/status')).status === 200 ? true : undefined), {
      timeoutMs: 60_000,
      description: 'a command answered by the robot with its new secret',
    });
    expect(await brokerAnswer(before, before.mqtt.password)).toBe('refused');
    await proc.kill('SIGTERM');
  });
});

describe('webhook delivery log', () => {
  test('every attempt, successful or not, with its status, latency and outcome, newest first and paginated; another organization gets 404', { timeout: 60_000 }, async () => {
    let n = 0;
    await using rx = await startHttpsReceiver(pki.issue(['localhost'], ['127.0.0.1']), (_req, res) => {
      // The first event is refused for good (a 4xx dead-letters at once); later ones are taken.
      res.writeHead(++n === 1 ? 400 : 200).end();
    });
    const created = await call<{ id: string }>('/v1/webhooks', { method: 'POST', json: { url: `https://127.0.0.1:${rx.port}/hook`, events: ['episode.finalized'] } });
    expect(created.status).toBe(201);
    const sub = created.body.id;
    try {
      const events: string[] = [];
      for (let i = 0; i < 2; i++) {
        const t = await call<{ event_id: string }>(`/v1/webhooks/${sub}/test`, { method: 'POST' });
        events.push(t.body.event_id);
        // One at a time, so the receiver's first answer goes to the first event.
        await waitFor(async () => ((await call<{ deliveries: DeliveryAttempt[] }>(`/v1/webhooks/${sub}/deliveries`)).body.deliveries.length === i + 1 ? true : undefined), {
          description: `attempt ${i + 1} to be logged`,
        });
      }
      const log = await call<{ deliveries: DeliveryAttempt[]; cursor: string | null }>(`/v1/webhooks/${sub}/deliveries`);
      expect(log.status).toBe(200);
      const [newest, oldest] = log.body.deliveries;
      expect(oldest).toMatchObject({ event_id: events[0], event: 'episode.finalized', attempt: 1, status_code: 400, error: 'HTTP 400', outcome: 'dead' });
      expect(newest).toMatchObject({ event_id: events[1], event: 'episode.finalized', attempt: 1, status_code: 200, error: null, outcome: 'delivered' });
      for (const a of log.body.deliveries) {
        expect(a.latency_ms).toEqual(expect.any(Number));
        expect(a.latency_ms).toBeGreaterThanOrEqual(0);
      }
      expect(log.body.cursor).toBeNull();

      const page1 = await call<{ deliveries: DeliveryAttempt[]; cursor: string | null }>(`/v1/webhooks/${sub}/deliveries?limit=1`);
      expect(page1.body.deliveries.map((d) => d.id)).toEqual([newest!.id]);
      const page2 = await call<{ deliveries: DeliveryAttempt[]; cursor: string | null }>(`/v1/webhooks/${sub}/deliveries?limit=1&cursor=${encodeURIComponent(page1.body.cursor!)}`);
      expect(page2.body.deliveries.map((d) => d.id)).toEqual([oldest!.id]);
      expect(page2.body.cursor).toBeNull();

      expect(errorCode((await call(`/v1/webhooks/${sub}/deliveries`, { key: other.key })).body)).toBe('not_found');
      expect(errorCode((await call(`/v1/webhooks/${sub}/deliveries?cursor=nonsense`)).body)).toBe('validation_failed');
    } finally {
      await cloud.fetch(`/v1/webhooks/${sub}`, { method: 'DELETE' });
    }
  });
});
