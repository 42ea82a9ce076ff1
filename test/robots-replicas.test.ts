import { randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import mqtt, { type IClientOptions, type MqttClient } from 'mqtt';
import { topics } from '@fleet/protocol';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { makeTempDir, type CloudProcess, type TempDir } from './support/cloud.js';
import { recordShortEpisode, waitForIndexed, waitOutboxEmpty } from './support/episodes.js';
import { ensureMosquitto, startMosquitto, type MosquittoBroker } from './support/mosquitto.js';
import { sample, scrapeMetrics, startReplicas, type ReplicaSet } from './support/replicas.js';
import {
  createEnrollmentToken,
  enrollCli,
  getRobot,
  readStoredCredentials,
  sendCommand,
  spawnAgent,
  startAgentProcess,
  type AgentProcess,
  type StoredCredentials,
  waitForRobot,
} from './support/robots.js';
import { waitFor } from './support/wait.js';

// Two `fleet-cloud serve` replicas on one data store, behind one real mosquitto 2 that holds the
// robot accounts (dynamic security plugin, provisioned by the cloud). Skipped, with the reason
// printed, where mosquitto cannot be installed.
const available = ensureMosquitto();

let broker: MosquittoBroker;
let replicas: ReplicaSet;
let a: CloudProcess;
let b: CloudProcess;
let agent: AgentProcess;
let dir: TempDir;

describe.skipIf(!available.ok)('cloud replicas behind mosquitto', () => {
  beforeAll(async () => {
    broker = await startMosquitto();
    replicas = await startReplicas({ broker });
    [a, b] = replicas.clouds as [CloudProcess, CloudProcess];
    dir = await makeTempDir('fr-e2e-');
    // Enrolled through replica A, connected to the broker both replicas read.
    agent = await startAgentProcess(a);
  }, 120_000);

  afterAll(async () => {
    await Promise.allSettled(clients.map((c) => c.endAsync(true)));
    await agent?.[Symbol.asyncDispose]();
    await replicas?.[Symbol.asyncDispose]();
    await broker?.[Symbol.asyncDispose]();
    await dir?.[Symbol.asyncDispose]();
  });

  const clients: MqttClient[] = [];
  function connectAs(creds: StoredCredentials, opts: Partial<IClientOptions> = {}): Promise<MqttClient> {
    return mqtt
      .connectAsync(broker.url, {
        protocolVersion: 4,
        clientId: creds.mqtt.client_id,
        username: creds.mqtt.username,
        password: creds.mqtt.password,
        reconnectPeriod: 0,
        connectTimeout: 15_000,
        ...opts,
      })
      .then((c) => {
        clients.push(c);
        return c;
      });
  }

  /** The CONNACK return code of a refused connection (5: not authorized). */
  async function refusedCode(creds: StoredCredentials, opts: Partial<IClientOptions> = {}): Promise<number | string> {
    try {
      const c = await connectAs(creds, opts);
      await c.endAsync(true);
      return 'accepted';
    } catch (err) {
      return (err as { code?: number }).code ?? String(err);
    }
  }

  async function suback(client: MqttClient, topic: string): Promise<number[]> {
    try {
      return (await client.subscribeAsync(topic, { qos: 1 })).map((g) => g.qos);
    } catch (err) {
      const granted = (err as { packet?: { granted?: (number | { qos: number })[] } }).packet?.granted;
      if (!granted) throw err;
      return granted.map((g) => (typeof g === 'number' ? g : g.qos));
    }
  }

  async function enrollRaw(cloud: CloudProcess, name: string): Promise<StoredCredentials> {
    const token = await createEnrollmentToken(cloud);
    const robotDir = join(dir.path, name);
    const r = await enrollCli(cloud, { token: token.token, dataDir: robotDir });
    if (r.code !== 0) throw new Error(`enroll failed: ${r.stderr}`);
    return readStoredCredentials(robotDir);
  }

  test('a command sent through either replica gets the robot\'s answer', async () => {
    for (const cloud of [a, b, a, b]) {
      const r = await sendCommand(cloud, agent.robotId, 'stack/status');
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      expect(r.body.status).toBe('ok');
    }
  });

  test('a robot may use only its own topics on the broker', async () => {
    // Enrolled through replica B: the account it got exists on the broker.
    const mallory = await enrollRaw(b, 'mallory');
    const client = await connectAs(mallory);
    const refused = [topics.command(agent.robotId), topics.outboxAck(agent.robotId), topics.sync(agent.robotId), 'fleet/v1/robots/+/cmd', '#', topics.commandReply(agent.robotId), topics.status(agent.robotId), topics.outbox(mallory.robot_id)];
    for (const t of refused) expect(await suback(client, t), t).toEqual([128]);
    expect(await suback(client, topics.command(mallory.robot_id))).toEqual([1]);

    // What it publishes on another robot's topics never reaches anyone: a watcher with the
    // cloud's account sees its allowed marker (published last) and nothing before it.
    const watcher = await mqtt.connectAsync(broker.url, { protocolVersion: 4, ...broker.account, reconnectPeriod: 0 });
    clients.push(watcher);
    const seen: string[] = [];
    const marker = new Promise<void>((resolve) =>
      watcher.on('message', (topic, _payload, packet) => {
        // Retained statuses are what robots published before; only live messages count.
        if (packet.retain) return;
        seen.push(topic);
        if (topic === topics.commandReply(mallory.robot_id)) resolve();
      }),
    );
    await watcher.subscribeAsync('fleet/v1/robots/#', { qos: 1 });
    await client.publishAsync(topics.status(agent.robotId), JSON.stringify({ online: false, at: Date.now() }), { qos: 1, retain: true });
    await client.publishAsync(topics.outbox(agent.robotId), '{}', { qos: 1 });
    await client.publishAsync(topics.command(agent.robotId), '{}', { qos: 1 });
    await client.publishAsync(topics.commandReply(mallory.robot_id), '{}', { qos: 1 });
    await marker;
    expect(seen.filter((t) => t.includes(agent.robotId))).toEqual([]);

    // The robot it tried to impersonate is unaffected.
    expect((await getRobot(a, agent.robotId)).body.connected).toBe(true);
    expect((await sendCommand(b, agent.robotId, 'stack/status')).status).toBe(200);

    // Its credentials with another client id are refused.
    expect(await refusedCode(mallory, { clientId: `${mallory.robot_id}x` })).toBe(5);
  });

  test('a de-enrolled robot is disconnected and cannot connect again', async () => {
    const eve = await enrollRaw(a, 'eve');
    const client = await connectAs(eve);
    const closed = new Promise<void>((resolve) => client.once('close', () => resolve()));
    // De-enrolled through the other replica than the one that enrolled it.
    const res = await b.fetch(`/v1/robots/${eve.robot_id}`, { method: 'DELETE' });
    expect(res.status).toBe(204);
    await closed;
    expect(await refusedCode(eve)).toBe(5);
  });

  test("after a rotation is acknowledged the robot's old secret is refused and it runs on the new one", async () => {
    await using rotating = await startAgentProcess(b);
    const before = await readStoredCredentials(rotating.dataDir);
    const reconnects = () => rotating.process.stderrLines.filter((l) => l.includes('"reconnect":true')).length;
    const reconnectsBefore = reconnects();
    const res = await a.fetch(`/v1/robots/${rotating.robotId}/rotate-credentials`, { method: 'POST' });
    expect(res.status, await res.clone().text()).toBe(200);
    expect(((await res.json()) as { state: string }).state).toBe('completed');
    const after = await readStoredCredentials(rotating.dataDir);
    expect(after.mqtt.password).not.toBe(before.mqtt.password);
    expect(await refusedCode(before)).toBe(5);
    // The broker closed its connection; it reconnected with the new secret and takes commands
    // through both replicas (a command sent while it was away is lost and times out: poll).
    await waitFor(() => (reconnects() > reconnectsBefore ? true : undefined), { description: 'the robot to reconnect' });
    for (const cloud of [a, b]) {
      await waitFor(async () => ((await sendCommand(cloud, rotating.robotId, 'stack/status')).status === 200 ? true : undefined), {
        timeoutMs: 30_000,
        description: `a command through ${cloud.http} to the rotated robot`,
      });
    }
  });

  test('a robot that stored a rotation whose answer was lost with its connection falls back on its old secret, and the rotation completes', { timeout: 120_000 }, async () => {
    const dataDir = join(dir.path, 'lost-answer');
    const first = await startAgentProcess(a, { dataDir });
    const robotId = first.robotId;
    await first.kill('SIGTERM');
    await waitForRobot(b, robotId, (r) => !r.connected, { description: 'offline' });
    const before = await readStoredCredentials(dataDir);
    const res = await b.fetch(`/v1/robots/${robotId}/rotate-credentials`, { method: 'POST' });
    expect(res.status, await res.clone().text()).toBe(202);
    const requested = (await res.json()) as { state: string; requested_at: string };
    expect(requested.state).toBe('pending');

    // As if the robot had stored a new secret and its answer and connection were lost together:
    // mosquitto, one password per client, still has the old one only.
    const stored = `rsec_never_acknowledged_${randomBytes(16).toString('hex')}`;
    await writeFile(join(dataDir, 'credentials.json'), `${JSON.stringify({ ...before, mqtt: { ...before.mqtt, password: stored, previous_password: before.mqtt.password } }, null, 2)}\n`, { mode: 0o600 });
    expect(await refusedCode({ ...before, mqtt: { ...before.mqtt, password: stored } })).toBe(5);

    await using proc = await spawnAgent(dataDir);
    await proc.waitForStderr((l) => l.includes('the broker refused the current password; connecting with the previous one'), { description: 'the fallback on the previous password' });
    const rotated = await waitForRobot(a, robotId, (r) => r.credentials.rotation === 'none' && r.credentials.rotated_at !== null, {
      timeoutMs: 60_000,
      description: 'the rotation to complete',
    });
    expect(Date.parse(rotated.credentials.rotated_at!)).toBeGreaterThanOrEqual(Date.parse(requested.requested_at));
    // The cloud closed the connection; the robot came back with the new secret and forgot the old one.
    const after = await waitFor(async () => {
      const c = await readStoredCredentials(dataDir);
      return c.mqtt.previous_password === undefined ? c : undefined;
    }, { timeoutMs: 30_000, description: 'the previous password to be forgotten' });
    expect([before.mqtt.password, stored]).not.toContain(after.mqtt.password);
    for (const cloud of [a, b]) {
      await waitFor(async () => ((await sendCommand(cloud, robotId, 'stack/status')).status === 200 ? true : undefined), {
        timeoutMs: 60_000,
        description: `a command through ${cloud.http} to the robot on its new secret`,
      });
    }
    expect(await refusedCode(before)).toBe(5);
    const logged = proc.stderrLines.join('\n');
    for (const secret of [before.mqtt.password, stored, after.mqtt.password]) expect(logged).not.toContain(secret);
    await proc.kill('SIGTERM');
  });

  test('episode reports are each indexed once, and both replicas handle some', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 6; i++) ids.push(await recordShortEpisode(agent.dataDir));
    const counts = await waitForIndexed(a, ids);
    expect([...counts.values()].every((n) => n === 1)).toBe(true);
    await waitOutboxEmpty(agent.dataDir);
    // Each report went to one replica (shared subscription): inserted counts add up to the
    // episodes, and neither replica saw another's report as a duplicate.
    const [ma, mb] = await Promise.all([scrapeMetrics(a), scrapeMetrics(b)]);
    const inserted = [sample(ma, 'fleet_episode_reports_total{result="inserted"}'), sample(mb, 'fleet_episode_reports_total{result="inserted"}')];
    expect(inserted[0]! + inserted[1]!).toBe(ids.length);
    expect(inserted[0], 'replica A handled some').toBeGreaterThan(0);
    expect(inserted[1], 'replica B handled some').toBeGreaterThan(0);
    expect(sample(ma, 'fleet_episode_reports_total{result="duplicate"}') + sample(mb, 'fleet_episode_reports_total{result="duplicate"}')).toBe(0);
  });

  test('a robot that leaves without a will is offline (503, not a 504), and its retained online status does not bring it back', { timeout: 120_000 }, async () => {
    const ghost = await enrollRaw(a, 'ghost');
    // No will: the broker publishes nothing when it goes, and its retained status says online.
    const client = await connectAs(ghost);
    await client.publishAsync(topics.status(ghost.robot_id), JSON.stringify({ online: true, recording_state: 'idle', at: Date.now() }), { qos: 1, retain: true });
    await waitForRobot(b, ghost.robot_id, (r) => r.connected, { description: 'connected' });
    await client.endAsync();
    // The replicas read the broker's log of the disconnect.
    await waitForRobot(a, ghost.robot_id, (r) => !r.connected, { description: 'disconnected' });
    const res = await sendCommand(b, ghost.robot_id, 'stack/status');
    expect(res.status, JSON.stringify(res.body)).toBe(503);

    // A replica that starts now reads the retained `online: true` and asks the robot, which does not answer.
    const c = await replicas.add();
    await c.waitForStderr((l) => l.includes('a retained online status was not confirmed') && l.includes(ghost.robot_id), { timeoutMs: 60_000 });
    expect((await getRobot(c, ghost.robot_id)).body.connected).toBe(false);
    // The running agent, which the store already shows connected, stays so.
    expect((await getRobot(c, agent.robotId)).body.connected).toBe(true);
  });

  test('a broker restart keeps the robot accounts: the robot reconnects and both replicas reach it again', async () => {
    await broker.restart();
    for (const cloud of [a, b]) {
      await waitFor(async () => ((await sendCommand(cloud, agent.robotId, 'stack/status')).status === 200 ? true : undefined), {
        timeoutMs: 60_000,
        description: `a command through ${cloud.http} after the broker restart`,
      });
    }
  });
});

describe.skipIf(!available.ok)('presence when no replica ran', () => {
  test('a starting replica reads the retained statuses: a robot that left or came while no replica ran shows as it is', { timeout: 180_000 }, async () => {
    await using mosq = await startMosquitto();
    await using set = await startReplicas({ broker: mosq, count: 1 });
    const first = set.clouds[0]!;
    const robot = await startAgentProcess(first);
    try {
      // Every replica stops; then the robot goes away (its status, retained, says offline).
      await first.kill('SIGTERM');
      await robot.kill('SIGTERM');
      const second = await set.add();
      // A shared subscription gets no retained message; without the snapshot the store would
      // keep the robot connected for good.
      await waitForRobot(second, robot.robotId, (r) => !r.connected, { description: 'disconnected' });

      // The same the other way round: the robot comes back while no replica runs.
      await second.kill('SIGTERM');
      const again = await spawnAgent(robot.dataDir);
      try {
        await again.waitForStdout((l) => l.includes('"state":"connected"'), { description: 'the agent connected' });
        const third = await set.add();
        await waitForRobot(third, robot.robotId, (r) => r.connected, { description: 'connected' });
        expect((await sendCommand(third, robot.robotId, 'stack/status')).status).toBe(200);
      } finally {
        await again.kill('SIGTERM');
      }
    } finally {
      await robot[Symbol.asyncDispose]();
    }
  });
});
