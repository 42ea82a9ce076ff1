import { join } from 'node:path';
import mqtt, { type IClientOptions, type MqttClient } from 'mqtt';
import { topics } from '@fleet/protocol';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { makeTempDir, startCloud, type CloudProcess, type TempDir } from './support/cloud.js';
import {
  createEnrollmentToken,
  enrollCli,
  getRobot,
  readStoredCredentials,
  sendCommand,
  startAgentProcess,
  type AgentProcess,
  type StoredCredentials,
} from './support/robots.js';
import { waitFor } from './support/wait.js';

// One cloud for the file. `other` is a running agent; `mallory` is an enrolled robot whose
// credentials the tests use with a raw mqtt.js client (no agent runs with them, so the raw
// client does not take over a live connection with the same client id).
let cloud: CloudProcess;
let other: AgentProcess;
let dir: TempDir;
let mallory: StoredCredentials;
let malloryDir: string;
beforeAll(async () => {
  // The embedded broker's own checks (how it refuses, what it logs): one process with it, also
  // when the suites run on replicas (mosquitto's ACL is test/robots-replicas.test.ts's).
  cloud = await startCloud({ topology: 'single' });
  dir = await makeTempDir('fa-e2e-');
  malloryDir = join(dir.path, 'mallory');
  const [agent, enrolled] = await Promise.all([
    startAgentProcess(cloud),
    createEnrollmentToken(cloud).then((t) => enrollCli(cloud, { token: t.token, dataDir: malloryDir })),
  ]);
  other = agent;
  if (enrolled.code !== 0) throw new Error(`enroll failed: ${enrolled.stderr}`);
  mallory = await readStoredCredentials(malloryDir);
});
afterAll(async () => {
  await other?.[Symbol.asyncDispose]();
  await cloud?.[Symbol.asyncDispose]();
  await dir?.[Symbol.asyncDispose]();
});

const clients: MqttClient[] = [];
function connect(opts: Partial<IClientOptions> = {}): Promise<MqttClient> {
  return mqtt.connectAsync(cloud.mqtt, {
    protocolVersion: 4,
    clientId: mallory.mqtt.client_id,
    username: mallory.mqtt.username,
    password: mallory.mqtt.password,
    reconnectPeriod: 0,
    connectTimeout: 15_000,
    ...opts,
  }).then((c) => {
    clients.push(c);
    return c;
  });
}

afterAll(async () => {
  await Promise.allSettled(clients.map((c) => c.endAsync(true)));
});

/** The SUBACK return codes for `topic` (mqtt.js rejects on a failure code; its packet has them). */
async function suback(client: MqttClient, topic: string): Promise<number[]> {
  try {
    return (await client.subscribeAsync(topic, { qos: 1 })).map((g) => g.qos);
  } catch (err) {
    const granted = (err as { packet?: { granted?: (number | { qos: number })[] } }).packet?.granted;
    if (!granted) throw err;
    return granted.map((g) => (typeof g === 'number' ? g : g.qos));
  }
}

/** Resolves when the broker closes the client's connection. */
function closed(client: MqttClient): Promise<void> {
  if (!client.connected) return Promise.resolve();
  return new Promise((resolve) => client.once('close', () => resolve()));
}

function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} did not happen within ${ms} ms`)), ms);
    }),
  ]);
}

describe('broker ACL through the real cloud process', () => {
  test("a robot cannot subscribe to another robot's commands: SUBACK 0x80, its connection stays, nothing leaks", async () => {
    const client = await connect();
    const received: string[] = [];
    client.on('message', (topic) => received.push(topic));
    const refusedTopics = [topics.command(other.robotId), topics.outboxAck(other.robotId), 'fleet/v1/robots/+/cmd', '#', topics.commandReply(other.robotId), topics.status(other.robotId)];
    for (const t of refusedTopics) expect(await suback(client, t), t).toEqual([128]);
    // Its own command topic is granted (so the refusals above are the ACL, not a broken client).
    expect(await suback(client, topics.command(mallory.robot_id))).toEqual([1]);
    expect(client.connected).toBe(true);

    // A command to the other robot goes through and is not seen by this client.
    const cmd = await sendCommand(cloud, other.robotId, 'stack/status');
    expect(cmd.status).toBe(200);
    expect(received).toEqual([]);
    await client.endAsync();
  });

  test("a robot cannot publish another robot's status: the broker closes its connection and the other robot is unaffected", async () => {
    const before = (await getRobot(cloud, other.robotId)).body;
    expect(before.connected).toBe(true);
    const client = await connect();
    const gone = closed(client);
    // QoS 0: MQTT 3.1.1 has no negative PUBACK, the refusal is the closed connection.
    client.publish(topics.status(other.robotId), JSON.stringify({ online: false, at: Date.now() }), { qos: 0, retain: true });
    await within(gone, 15_000, 'the broker closing the connection');

    // Nothing reached the cloud: still connected, last seen unchanged, and it answers commands.
    const after = (await getRobot(cloud, other.robotId)).body;
    expect(after).toMatchObject({ connected: true, last_seen_at: before.last_seen_at });
    expect((await sendCommand(cloud, other.robotId, 'stack/status')).status).toBe(200);
    await cloud.process.waitForStderr((l) => l.includes('mqtt publish refused'), { description: 'the refusal log line' });
  });

  test("a robot cannot answer in another robot's name or write to its outbox", async () => {
    for (const t of [topics.commandReply(other.robotId), topics.outbox(other.robotId), topics.command(mallory.robot_id)]) {
      const client = await connect();
      const gone = closed(client);
      client.publish(t, JSON.stringify({ cmd_id: 'forged', ok: true, result: {} }), { qos: 1 });
      await within(gone, 15_000, `the broker closing the connection after a publish on ${t}`);
    }
    expect((await getRobot(cloud, other.robotId)).body.connected).toBe(true);
  });

  test('wrong credentials are refused', async () => {
    const attempts: [string, Partial<IClientOptions>][] = [
      ['wrong password', { password: 'rsec_wrong' }],
      ["another robot's id with this robot's password", { clientId: other.robotId, username: other.robotId }],
      ['client id different from the username', { clientId: `${mallory.robot_id}-x` }],
      ['unknown robot', { clientId: 'rbt_aaaaaaaaaaaaaaaaaaaaaaaaaa', username: 'rbt_aaaaaaaaaaaaaaaaaaaaaaaaaa' }],
      ['no credentials', { username: undefined, password: undefined }],
      ['the cloud username with a guess', { clientId: 'cloud-guess', username: '$cloud', password: 'guess' }],
    ];
    for (const [what, opts] of attempts) {
      await expect(connect(opts), what).rejects.toThrow(/Not authorized|Bad username or password|Connection refused/i);
    }
    // The other robot's live connection was not taken over by the attempt with its id.
    expect((await getRobot(cloud, other.robotId)).body.connected).toBe(true);
    expect((await sendCommand(cloud, other.robotId, 'stack/status')).status).toBe(200);
  });
});

describe('malformed MQTT payloads', () => {
  test("garbage on a robot's own status, cmd/reply and outbox topics is logged and dropped; the cloud and the robots keep working", async () => {
    const client = await connect();
    const acks: string[] = [];
    await client.subscribeAsync(topics.outboxAck(mallory.robot_id), { qos: 1 });
    client.on('message', (_t, payload) => acks.push(payload.toString('utf8')));
    const garbage: [string, string | Buffer][] = [
      [topics.status(mallory.robot_id), Buffer.from([0x00, 0xff, 0xfe, 0x7b])],
      [topics.status(mallory.robot_id), '{"online":"yes"}'],
      [topics.status(mallory.robot_id), '[1,2,3]'],
      [topics.status(mallory.robot_id), 'null'],
      [topics.status(mallory.robot_id), Buffer.alloc(300 * 1024, 0x7b)],
      [topics.commandReply(mallory.robot_id), '{"cmd_id":'],
      [topics.commandReply(mallory.robot_id), '{"cmd_id":5,"ok":"maybe"}'],
      [topics.commandReply(mallory.robot_id), JSON.stringify({ cmd_id: 'never-sent', ok: true, result: {} })],
      [topics.commandReply(mallory.robot_id), `{"cmd_id":"deep","ok":true,"result":{"x":${'['.repeat(5000)}${']'.repeat(5000)}}}`],
      [topics.outbox(mallory.robot_id), 'not json'],
      [topics.outbox(mallory.robot_id), JSON.stringify({ msg_id: 'm1', kind: 'episode.report', body: { nonsense: true } })],
    ];
    // QoS 1: the broker's PUBACK says each one reached it (and the connection stays up).
    for (const [t, p] of garbage) await client.publishAsync(t, p, { qos: 1 });
    expect(client.connected).toBe(true);

    // The cloud answered the one it could name (msg_id) with a refusal, and logged the rest.
    await waitFor(() => (acks.some((a) => a.includes('"m1"')) ? true : undefined), { description: 'the outbox refusal for m1' });
    expect(JSON.parse(acks.find((a) => a.includes('"m1"'))!)).toMatchObject({ msg_id: 'm1', ok: false });
    // The log lines come through the cloud's stderr, not the MQTT connection the ack came on:
    // wait for each.
    for (const line of [
      'dropped oversized robot message',
      'dropped malformed robot message (not JSON)',
      'dropped malformed robot status',
      'dropped malformed command reply',
      'dropped outbox message that is not JSON',
      'dropped robot message beyond the JSON bounds',
    ]) {
      await cloud.process.waitForStderr((l) => l.includes(line), { description: `the log line "${line}"` });
    }
    await client.endAsync();

    // None of it became presence: the robot never announced itself.
    expect((await getRobot(cloud, mallory.robot_id)).body).toMatchObject({ connected: false, last_seen_at: null });
    // The cloud process is alive and serving; the other robot answers commands.
    expect(cloud.process.exit).toBeNull();
    expect((await sendCommand(cloud, other.robotId, 'stack/status')).status).toBe(200);

    // The robot whose topics carried the garbage starts its agent normally and works.
    await using agent = await startAgentProcess(cloud, { dataDir: malloryDir, enroll: false });
    expect(agent.robotId).toBe(mallory.robot_id);
    const cmd = await sendCommand(cloud, mallory.robot_id, 'stack/status');
    expect(cmd.status).toBe(200);
    expect((await getRobot(cloud, mallory.robot_id)).body).toMatchObject({ connected: true, capabilities: ['episodes.v1'] });
    await agent.kill('SIGTERM');
  });
});
