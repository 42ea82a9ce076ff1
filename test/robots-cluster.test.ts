import { join } from 'node:path';
import mqtt, { type IClientOptions, type MqttClient } from 'mqtt';
import { topics } from '@fleet/protocol';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { startBrokerCluster, type BrokerCluster } from './support/broker-cluster.js';
import { databaseEnv, makeTempDir, type CloudProcess, type TempDir } from './support/cloud.js';
import { recordShortEpisode, waitForIndexed, waitOutboxEmpty } from './support/episodes.js';
import { sample, scrapeMetrics, startReplicas, type ReplicaSet } from './support/replicas.js';
import {
  createEnrollmentToken,
  enrollCli,
  getRobot,
  readStoredCredentials,
  sendCommand,
  startAgentProcess,
  type AgentProcess,
  type StoredCredentials,
  waitForRobot,
} from './support/robots.js';
import { waitFor } from './support/wait.js';

// Two `fleet-cloud serve` replicas on one store, on a cluster of three `fleet-cloud broker-node`
// nodes sharing one Redis: replica A on node 0, replica B on node 1, robots told node 2. Every
// command and every report crosses nodes.
let cluster: BrokerCluster;
let replicas: ReplicaSet;
let a: CloudProcess;
let b: CloudProcess;
let agent: AgentProcess;
let dir: TempDir;

describe('cloud replicas on a broker cluster', () => {
  beforeAll(async () => {
    dir = await makeTempDir('fleet-cluster-e2e-');
    const dataDir = join(dir.path, 'data');
    const db = await databaseEnv(dataDir);
    const storeEnv = Object.keys(db).length > 0 ? db : { FLEET_DATA_DIR: dataDir };
    cluster = await startBrokerCluster({ nodes: 3, storeEnv, dir: join(dir.path, 'cluster') });
    replicas = await startReplicas({
      broker: cluster,
      dataDir,
      mqttUrlFor: (i) => cluster.urls[i % 2]!,
      args: ['--mqtt-broker', 'fleet-cluster', '--mqtt-public-url', cluster.urls[2]!],
    });
    [a, b] = replicas.clouds as [CloudProcess, CloudProcess];
    agent = await startAgentProcess(a);
  }, 180_000);

  afterAll(async () => {
    await Promise.allSettled(clients.map((c) => c.endAsync(true)));
    await agent?.[Symbol.asyncDispose]();
    await replicas?.[Symbol.asyncDispose]();
    await cluster?.[Symbol.asyncDispose]();
    await dir?.[Symbol.asyncDispose]();
  });

  const clients: MqttClient[] = [];
  function connectAs(url: string, creds: StoredCredentials, opts: Partial<IClientOptions> = {}): Promise<MqttClient> {
    return mqtt
      .connectAsync(url, {
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

  async function refusedCode(url: string, creds: StoredCredentials, opts: Partial<IClientOptions> = {}): Promise<number | string> {
    try {
      const c = await connectAs(url, creds, opts);
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

  test('the robot is on node 2, the replicas on nodes 0 and 1, and a command through either replica reaches it', async () => {
    const connected = agent.process.stderrLines.filter((l) => l.includes('mqtt connected'));
    expect(connected.at(-1)).toContain(cluster.urls[2]);
    for (const cloud of [a, b, a, b]) {
      const r = await sendCommand(cloud, agent.robotId, 'stack/status');
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      expect(r.body.status).toBe('ok');
    }
  });

  test('on every node a robot is refused another robot\'s identity and every topic but its own', async () => {
    const mallory = await enrollRaw(b, 'mallory');
    const victim = await readStoredCredentials(agent.dataDir);
    for (const url of cluster.urls) {
      // Its own password under the other robot's id, and the other robot's id with a wrong password.
      expect(await refusedCode(url, mallory, { clientId: victim.robot_id, username: victim.robot_id }), url).toBe(4);
      expect(await refusedCode(url, mallory, { clientId: `${mallory.robot_id}x` }), url).toBe(4);
      const client = await connectAs(url, mallory);
      const refused = [topics.command(agent.robotId), topics.outboxAck(agent.robotId), topics.sync(agent.robotId), 'fleet/v1/robots/+/cmd', '#', '$share/g/fleet/v1/robots/+/outbox', topics.status(agent.robotId)];
      for (const t of refused) expect(await suback(client, t), `${url} ${t}`).toEqual([128]);
      expect(await suback(client, topics.command(mallory.robot_id))).toEqual([1]);
      await client.endAsync(true);
    }
    // The robot it tried to impersonate is unaffected.
    expect((await getRobot(a, agent.robotId)).body.connected).toBe(true);
    expect((await sendCommand(b, agent.robotId, 'stack/status')).status).toBe(200);
  });

  test('a de-enrolled robot is disconnected on whichever node holds it and refused on every node', async () => {
    const eve = await enrollRaw(a, 'eve');
    const client = await connectAs(cluster.urls[2]!, eve);
    const closed = new Promise<void>((resolve) => client.once('close', () => resolve()));
    const res = await b.fetch(`/v1/robots/${eve.robot_id}`, { method: 'DELETE' });
    expect(res.status).toBe(204);
    await closed;
    for (const url of cluster.urls) expect(await refusedCode(url, eve), url).toBe(4);
  });

  test('episode reports are each indexed once, shared between the replicas across nodes', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 8; i++) ids.push(await recordShortEpisode(agent.dataDir));
    const counts = await waitForIndexed(a, ids);
    expect([...counts.values()].every((n) => n === 1)).toBe(true);
    await waitOutboxEmpty(agent.dataDir);
    const [ma, mb] = await Promise.all([scrapeMetrics(a), scrapeMetrics(b)]);
    const inserted = sample(ma, 'fleet_episode_reports_total{result="inserted"}') + sample(mb, 'fleet_episode_reports_total{result="inserted"}');
    expect(inserted).toBe(ids.length);
    expect(sample(ma, 'fleet_episode_reports_total{result="duplicate"}') + sample(mb, 'fleet_episode_reports_total{result="duplicate"}')).toBe(0);
  });

  test('a robot\'s retained statuses and plain reports, published together, all reach a client on another node', async () => {
    // aedes stores a retained message in Redis before it emits it, so it leaves after a plain
    // one taken later; without the node numbering messages as they leave, every other node's
    // clients dropped it as a duplicate (a robot's idle status after its report was lost).
    const creds = await enrollRaw(a, 'interleaved');
    const watcher = await mqtt.connectAsync(cluster.urls[0]!, { protocolVersion: 4, ...cluster.account, clientId: 'cluster-order-watcher', reconnectPeriod: 0 });
    clients.push(watcher);
    const status = topics.status(creds.robot_id);
    const report = topics.outbox(creds.robot_id);
    const seen: string[] = [];
    watcher.on('message', (topic, payload) => {
      if (topic === status || topic === report) seen.push(payload.toString());
    });
    // Not a shared subscription: the watcher gets every message, as each replica gets statuses.
    await watcher.subscribeAsync([status, report], { qos: 1 });
    const robot = await connectAs(cluster.urls[2]!, creds);
    const n = 100;
    await Promise.all(
      Array.from({ length: n }, (_, i) =>
        i % 2 === 0
          ? robot.publishAsync(status, JSON.stringify({ online: true, at: Date.now(), seq: i }), { qos: 1, retain: true })
          : robot.publishAsync(report, JSON.stringify({ seq: i }), { qos: 1 }),
      ),
    );
    await waitFor(() => seen.length >= n || undefined, { timeoutMs: 30_000, description: () => `${n} messages on the watcher (${seen.length} so far)` });
    const seqs = seen.map((p) => (JSON.parse(p) as { seq: number }).seq).sort((x, y) => x - y);
    expect(seqs).toEqual(Array.from({ length: n }, (_, i) => i));
    await robot.endAsync(true);
  });

  test('a robot that leaves is offline on both replicas (the node logs its disconnect for the cluster)', async () => {
    const ghost = await enrollRaw(a, 'ghost');
    const client = await connectAs(cluster.urls[2]!, ghost);
    await client.publishAsync(topics.status(ghost.robot_id), JSON.stringify({ online: true, recording_state: 'idle', at: Date.now() }), { qos: 1, retain: true });
    await waitForRobot(b, ghost.robot_id, (r) => r.connected, { description: 'connected' });
    await client.endAsync();
    await waitForRobot(a, ghost.robot_id, (r) => !r.connected, { description: 'disconnected' });
    expect((await sendCommand(b, ghost.robot_id, 'stack/status')).status).toBe(503);
  });

  test('a node that stalls (SIGSTOP) past three heartbeats drops its connections when it wakes, and its robot is online again', { timeout: 120_000 }, async () => {
    const ghost = await enrollRaw(a, 'ghost-stall');
    const status = () => JSON.stringify({ online: true, recording_state: 'idle', at: Date.now() });
    // A robot that connects again as the agent does: on close, to the same node, status first.
    let connections = 0;
    const client = await connectAs(cluster.urls[2]!, ghost, { reconnectPeriod: 500 });
    client.on('connect', () => {
      connections++;
      client.publish(topics.status(ghost.robot_id), status(), { qos: 1, retain: true });
    });
    await client.publishAsync(topics.status(ghost.robot_id), status(), { qos: 1, retain: true });
    await waitForRobot(b, ghost.robot_id, (r) => r.connected, { description: 'connected' });
    const node = cluster.nodes[2]!.process;
    process.kill(node.pid, 'SIGSTOP');
    try {
      // The others find it dead (three heartbeats), publish the robot's will, show it offline.
      await waitForRobot(a, ghost.robot_id, (r) => !r.connected, { timeoutMs: 60_000, description: 'offline while its node is stopped' });
    } finally {
      process.kill(node.pid, 'SIGCONT');
    }
    // Awake, node 2 learns it was found dead and closes the robot's connection; the robot comes back.
    await node.waitForStderr((l) => l.includes('closing the connections it holds'), { timeoutMs: 60_000 });
    await waitFor(() => (connections > 0 ? true : undefined), { timeoutMs: 30_000, description: 'the robot to connect again' });
    await waitForRobot(a, ghost.robot_id, (r) => r.connected, { timeoutMs: 30_000, description: 'online again on replica A' });
    await waitForRobot(b, ghost.robot_id, (r) => r.connected, { timeoutMs: 30_000, description: 'online again on replica B' });
    await client.endAsync(true);
  });

  test('a node killed with robots on it: they are offline once the cluster finds it dead, and online again on another node', { timeout: 120_000 }, async () => {
    const ghost = await enrollRaw(a, 'ghost2');
    // With a will, as the agent leaves one: node 2 dies before it can publish it.
    const client = await connectAs(cluster.urls[2]!, ghost, {
      will: { topic: topics.status(ghost.robot_id), payload: Buffer.from(JSON.stringify({ online: false, recording_state: 'idle', at: Date.now() })), qos: 1, retain: true },
    });
    await client.publishAsync(topics.status(ghost.robot_id), JSON.stringify({ online: true, recording_state: 'idle', at: Date.now() }), { qos: 1, retain: true });
    await waitForRobot(b, ghost.robot_id, (r) => r.connected, { description: 'connected' });
    await cluster.kill(2);
    // Another node reports its connections ended (three heartbeats) and publishes its will.
    await waitForRobot(a, ghost.robot_id, (r) => !r.connected, { timeoutMs: 60_000, description: 'offline after its node died' });
    // It reconnects to node 0 and is online again.
    const back = await connectAs(cluster.urls[0]!, ghost);
    await back.publishAsync(topics.status(ghost.robot_id), JSON.stringify({ online: true, recording_state: 'idle', at: Date.now() }), { qos: 1, retain: true });
    await waitForRobot(b, ghost.robot_id, (r) => r.connected, { description: 'online again on node 0' }).catch((err) => {
      console.log([...a.stderrLines, ...b.stderrLines].filter((l) => l.includes(ghost.robot_id)).join('\n'));
      console.log(cluster.nodes.map((n) => n.process.stderrLines.slice(-20).join('\n')).join('\n----\n'));
      throw err;
    });
    // The stale will of its dead connection does not take it offline later.
    await waitFor(async () => ((await sendCommand(a, ghost.robot_id, 'stack/status')).status === 504 ? true : undefined), { timeoutMs: 30_000, description: 'a command to the raw client to time out (it does not answer)' });
    expect((await getRobot(b, ghost.robot_id)).body.connected).toBe(true);
    await cluster.start(2);
  });
});
