import { createServer, type AddressInfo, type Server } from 'node:net';
import { Aedes, type Client } from 'aedes';
import mqtt, { type MqttClient } from 'mqtt';
import { CommandReplySchema, RobotStatusSchema, topics, type CommandReply, type RobotCommand, type RobotStatus } from '@fleet/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import type { Agent } from '../daemon.js';
import { AGENT_RUNTIME_VERSION } from '../config.js';
import { readCredentials, writeCredentials } from '../credentials.js';
import { makeTempDir, removeTempDirs, startTestAgent, testCredentials, type TestAgent } from '../test-support.js';
import { systemScheduler } from '../time.js';

const PASSWORD = 'robot-secret';

interface TestBroker {
  url: string;
  port: number;
  /** Broker-side connections by client id. */
  clients: Map<string, Client>;
  authAttempts: string[];
  /** The robots' passwords the broker accepts (PASSWORD unless a test changes it). */
  accepted: Set<string>;
  /** Each robot login: whether the broker accepted its password. */
  logins: boolean[];
  /** Each robot login's password, in order. */
  passwords: string[];
  close(): Promise<void>;
}

/** A real aedes broker on a TCP port that admits robots with the right password and the observer. */
async function startBroker(port = 0): Promise<TestBroker> {
  const clients = new Map<string, Client>();
  const authAttempts: string[] = [];
  const accepted = new Set([PASSWORD]);
  const logins: boolean[] = [];
  const passwords: string[] = [];
  const broker = await Aedes.createBroker({
    authenticate: (client, username, password, done) => {
      authAttempts.push(client.id);
      if (username === 'observer') return done(null, true);
      const ok = username === client.id && password !== undefined && accepted.has(password.toString());
      logins.push(ok);
      passwords.push(password?.toString() ?? '');
      if (ok) done(null, true);
      else done(Object.assign(new Error('bad credentials'), { returnCode: 4 as const }), false);
    },
  });
  broker.on('client', (c) => clients.set(c.id, c));
  const server: Server = createServer(broker.handle);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve());
  });
  const actual = (server.address() as AddressInfo).port;
  return {
    url: `mqtt://127.0.0.1:${actual}`,
    port: actual,
    clients,
    authAttempts,
    accepted,
    logins,
    passwords,
    async close() {
      await new Promise<void>((resolve) => broker.close(() => resolve()));
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

interface Seen {
  topic: string;
  json: unknown;
  retain: boolean;
}

/** A cloud-side MQTT client that records what it receives on a robot's status and reply topics. */
async function observe(url: string, robotId: string): Promise<{ client: MqttClient; seen: Seen[]; statuses: () => RobotStatus[]; replies: () => CommandReply[] }> {
  const client = await mqtt.connectAsync(url, { protocolVersion: 4, clientId: `observer_${Math.random().toString(36).slice(2)}`, username: 'observer', reconnectPeriod: 0 });
  const seen: Seen[] = [];
  client.on('message', (topic, payload, packet) => seen.push({ topic, json: JSON.parse(payload.toString()) as unknown, retain: packet.retain }));
  await client.subscribeAsync([topics.status(robotId), topics.commandReply(robotId)], { qos: 1 });
  return {
    client,
    seen,
    statuses: () => seen.filter((s) => s.topic === topics.status(robotId)).map((s) => RobotStatusSchema.parse(s.json)),
    replies: () => seen.filter((s) => s.topic === topics.commandReply(robotId)).map((s) => CommandReplySchema.parse(s.json)),
  };
}

const brokers: TestBroker[] = [];
const observers: MqttClient[] = [];
const agents: Agent[] = [];

async function linkedAgent(broker: TestBroker, opts: { legacy?: boolean; password?: string; previousPassword?: string; dataDir?: string } = {}): Promise<TestAgent> {
  const base = testCredentials(undefined, broker.url, opts.password ?? PASSWORD);
  const credentials = opts.previousPassword ? { ...base, mqtt: { ...base.mqtt, previous_password: opts.previousPassword } } : base;
  if (opts.dataDir) await writeCredentials(opts.dataDir, credentials);
  const t = await startTestAgent({ credentials, link: true, ...(opts.dataDir ? { dataDir: opts.dataDir } : {}), scheduler: systemScheduler, config: { legacyRuntime: opts.legacy ?? false, platform: 'test-arm' } });
  agents.push(t.agent);
  return t;
}

async function watch(broker: TestBroker, robotId: string) {
  const o = await observe(broker.url, robotId);
  observers.push(o.client);
  return o;
}

afterEach(async () => {
  for (const a of agents.splice(0)) await a.stop();
  for (const o of observers.splice(0)) await o.endAsync(true);
  for (const b of brokers.splice(0)) await b.close();
  await removeTempDirs();
});

describe('MQTT link against a real broker', () => {
  it('announces a retained online status with version, platform, capabilities and recording state', async () => {
    const broker = await startBroker();
    brokers.push(broker);
    const t = await linkedAgent(broker);
    await t.agent.whenConnected();
    const o = await watch(broker, t.credentials.robot_id);
    await expect.poll(() => o.seen.length).toBeGreaterThan(0);
    expect(o.seen[0]!.retain).toBe(true);
    expect(o.statuses()[0]).toMatchObject({ online: true, runtime_version: AGENT_RUNTIME_VERSION, platform: 'test-arm', capabilities: ['episodes.v1'], recording_state: 'idle' });

    await t.agent.episode('start');
    await expect.poll(() => o.statuses().at(-1)?.recording_state).toBe('recording');
    await t.agent.episode('finish');
    await expect.poll(() => o.statuses().at(-1)?.recording_state).toBe('idle');
    expect(o.statuses().map((s) => s.recording_state)).toContain('finalizing');
  });

  it('a legacy runtime announces no episodes.v1', async () => {
    const broker = await startBroker();
    brokers.push(broker);
    const t = await linkedAgent(broker, { legacy: true });
    await t.agent.whenConnected();
    const o = await watch(broker, t.credentials.robot_id);
    await expect.poll(() => o.statuses().length).toBeGreaterThan(0);
    expect(o.statuses()[0]!.capabilities).toEqual([]);
  });

  it('the last will marks the robot offline when its connection dies, and it comes back by itself', async () => {
    const broker = await startBroker();
    brokers.push(broker);
    const t = await linkedAgent(broker);
    await t.agent.whenConnected();
    const o = await watch(broker, t.credentials.robot_id);
    await expect.poll(() => o.statuses().length).toBe(1);
    const reconnected = new Promise<void>((resolve) => t.agent.once('connected', resolve));
    broker.clients.get(t.credentials.robot_id)!.conn.destroy();
    await expect.poll(() => o.statuses().some((s) => !s.online)).toBe(true);
    await reconnected;
    await expect.poll(() => o.statuses().at(-1)?.online).toBe(true);
  });

  it('answers a command sent over MQTT, and a repeat of its cmd_id with the same reply', async () => {
    const broker = await startBroker();
    brokers.push(broker);
    const t = await linkedAgent(broker);
    await t.agent.whenConnected();
    const o = await watch(broker, t.credentials.robot_id);
    const id = t.credentials.robot_id;
    await o.client.publishAsync(topics.command(id), 'garbage', { qos: 1 });
    const cmd: RobotCommand = { cmd_id: 'rt-1', command: 'episodes.start', sent_at: t.clock.now() };
    await o.client.publishAsync(topics.command(id), JSON.stringify(cmd), { qos: 1 });
    await expect.poll(() => o.replies().length).toBe(1);
    const reply = o.replies()[0]!;
    expect(reply).toMatchObject({ cmd_id: 'rt-1', ok: true, result: { command: 'episodes.start', robot_id: id, recording_state: 'recording' } });
    await o.client.publishAsync(topics.command(id), JSON.stringify(cmd), { qos: 1 });
    await expect.poll(() => o.replies().length).toBe(2);
    expect(o.replies()[1]).toEqual(reply);
    expect(t.agent.machine.state).toBe('recording');
    expect(t.logs.messages()).toContain('dropped malformed command (not JSON)');
  });

  it('reconnects after the broker restarts and announces itself again', async () => {
    const first = await startBroker();
    const t = await linkedAgent(first);
    await t.agent.whenConnected();
    const lost = new Promise<void>((resolve) => t.agent.once('disconnected', resolve));
    await first.close();
    await lost;
    expect(t.agent.link?.connected).toBe(false);
    const second = await startBroker(first.port);
    brokers.push(second);
    await t.agent.whenConnected();
    // The new broker has no retained messages of its own: the agent's reconnect republished it.
    const o = await watch(second, t.credentials.robot_id);
    await expect.poll(() => o.statuses().length).toBeGreaterThan(0);
    expect(o.statuses()[0]).toMatchObject({ online: true, recording_state: 'idle' });
    expect(o.seen[0]!.retain).toBe(true);
    // And commands work on the new connection.
    await o.client.publishAsync(topics.command(t.credentials.robot_id), JSON.stringify({ cmd_id: 'after', command: 'stack.status', sent_at: t.clock.now() }), { qos: 1 });
    await expect.poll(() => o.replies().length).toBe(1);
    expect(o.replies()[0]).toMatchObject({ ok: true, result: { stack: 'running' } });
  });

  it('a clean stop leaves a retained offline status', async () => {
    const broker = await startBroker();
    brokers.push(broker);
    const t = await linkedAgent(broker);
    await t.agent.whenConnected();
    await t.agent.stop();
    agents.splice(agents.indexOf(t.agent), 1);
    const o = await watch(broker, t.credentials.robot_id);
    await expect.poll(() => o.statuses().length).toBe(1);
    expect(o.statuses()[0]).toMatchObject({ online: false });
    expect(o.seen[0]!.retain).toBe(true);
  });

  it('keeps retrying with backoff when the broker refuses its credentials', async () => {
    const broker = await startBroker();
    brokers.push(broker);
    const t = await linkedAgent(broker, { password: 'wrong' });
    await expect.poll(() => broker.authAttempts.filter((id) => id === t.credentials.robot_id).length, { timeout: 15_000 }).toBeGreaterThanOrEqual(3);
    expect(t.agent.link?.connected).toBe(false);
  });

  describe("a cluster's nodes", () => {
    /** A port nothing listens on: a broker's, once it closed. */
    async function deadUrl(): Promise<string> {
      const b = await startBroker();
      await b.close();
      return b.url;
    }

    async function clusterAgent(urls: string[]): Promise<TestAgent> {
      const base = testCredentials(undefined, urls[0], PASSWORD);
      const credentials = { ...base, mqtt: { ...base.mqtt, urls } };
      const t = await startTestAgent({ credentials, link: true, scheduler: systemScheduler, config: { platform: 'test-arm' } });
      agents.push(t.agent);
      return t;
    }

    it('tries the next address when the first refuses the connection', async () => {
      const b = await startBroker();
      brokers.push(b);
      const t = await clusterAgent([await deadUrl(), b.url]);
      await t.agent.whenConnected();
      expect(t.agent.link?.url).toBe(b.url);
      expect(b.clients.has(t.credentials.robot_id)).toBe(true);
      const o = await watch(b, t.credentials.robot_id);
      await expect.poll(() => o.statuses().at(-1)?.online).toBe(true);
    });

    it('moves to the next node when its node goes away, announces itself there, and wraps round to the first', async () => {
      const a = await startBroker();
      const b = await startBroker();
      brokers.push(b);
      const t = await clusterAgent([a.url, b.url]);
      await t.agent.whenConnected();
      expect(t.agent.link?.url).toBe(a.url);
      const id = t.credentials.robot_id;

      const onB = new Promise<void>((resolve) => t.agent.once('connected', resolve));
      await a.close();
      await onB;
      expect(t.agent.link?.url).toBe(b.url);
      const o = await watch(b, id);
      await expect.poll(() => o.statuses().at(-1)?.online).toBe(true);
      // Commands reach it on the node it is on now.
      await o.client.publishAsync(topics.command(id), JSON.stringify({ cmd_id: 'on-b', command: 'episodes.start', sent_at: t.clock.now() } satisfies RobotCommand), { qos: 1 });
      await expect.poll(() => o.replies().length).toBe(1);

      // The first node back, the second gone: the list wraps round.
      const again = await startBroker(a.port);
      brokers.push(again);
      const onA = new Promise<void>((resolve) => t.agent.once('connected', resolve));
      brokers.splice(brokers.indexOf(b), 1);
      await b.close();
      await onA;
      expect(t.agent.link?.url).toBe(again.url);
      expect(again.clients.has(id)).toBe(true);
    });

    it('an address given at start overrides the stored list', async () => {
      const b = await startBroker();
      brokers.push(b);
      const base = testCredentials(undefined, await deadUrl(), PASSWORD);
      const credentials = { ...base, mqtt: { ...base.mqtt, urls: [base.mqtt.url] } };
      const t = await startTestAgent({ credentials, link: true, scheduler: systemScheduler, config: { mqttUrl: b.url } });
      agents.push(t.agent);
      await t.agent.whenConnected();
      expect(t.agent.link?.url).toBe(b.url);
    });
  });

  describe('after a rotation whose answer the cloud never read', () => {
    const NEW = 'rsec_new_secret_0123456789abcdefghijklmnopq';

    it('falls back on the previous password the broker still has, keeps it when the same secret comes again, and drops it once the new one works', async () => {
      const broker = await startBroker();
      brokers.push(broker);
      // The broker (mosquitto, one password per client) still has the old password only.
      const t = await linkedAgent(broker, { password: NEW, previousPassword: PASSWORD, dataDir: await makeTempDir() });
      await t.agent.whenConnected();
      // The new password first, refused; then the previous one.
      expect(broker.logins.slice(0, 2)).toEqual([false, true]);
      expect(t.agent.link?.acceptedPassword).toBe(PASSWORD);
      expect(t.logs.messages()).toContain('the broker refused the current password; connecting with the previous one');
      expect((await readCredentials(t.dataDir))?.mqtt).toMatchObject({ password: NEW, previous_password: PASSWORD });

      // The cloud sends the same secret again on this connection: the previous password stays.
      const o = await watch(broker, t.credentials.robot_id);
      const id = t.credentials.robot_id;
      await o.client.publishAsync(topics.command(id), JSON.stringify({ cmd_id: 'rot-again', command: 'credentials.rotate', args: { password: NEW }, sent_at: t.clock.now() }), { qos: 1 });
      await expect.poll(() => o.replies().length).toBe(1);
      expect(o.replies()[0]).toMatchObject({ ok: true });
      expect((await readCredentials(t.dataDir))?.mqtt).toMatchObject({ password: NEW, previous_password: PASSWORD });

      // The cloud read the answer: the broker has the new password only and closes the connection.
      broker.accepted.clear();
      broker.accepted.add(NEW);
      const loginsBefore = broker.logins.length;
      const reconnected = new Promise<void>((resolve) => t.agent.once('connected', resolve));
      broker.clients.get(id)!.conn.destroy();
      await reconnected;
      // The current password first, accepted at once.
      expect(broker.logins.slice(loginsBefore)).toEqual([true]);
      expect(t.agent.link?.acceptedPassword).toBe(NEW);
      await expect.poll(async () => (await readCredentials(t.dataDir))?.mqtt.previous_password ?? 'dropped').toBe('dropped');
      expect((await readCredentials(t.dataDir))?.mqtt.password).toBe(NEW);
      expect(t.agent.credentials.mqtt.previous_password).toBeUndefined();
      const logged = JSON.stringify(t.logs.records);
      expect(logged).not.toContain(NEW);
      expect(logged).not.toContain(PASSWORD);

      // With the previous one gone, a refusal of the current password is not answered with it.
      broker.accepted.clear();
      broker.accepted.add(PASSWORD);
      const refusedBefore = broker.logins.length;
      broker.clients.get(id)!.conn.destroy();
      await expect.poll(() => broker.logins.length - refusedBefore, { timeout: 15_000 }).toBeGreaterThanOrEqual(2);
      expect(broker.logins.slice(refusedBefore).every((ok) => !ok)).toBe(true);
      expect(t.agent.link?.connected).toBe(false);
    });

    it('every reconnect tries the current password first, then the previous one, with backoff between rounds', async () => {
      const broker = await startBroker();
      brokers.push(broker);
      const t = await linkedAgent(broker, { password: NEW, previousPassword: PASSWORD, dataDir: await makeTempDir() });
      await t.agent.whenConnected();
      const id = t.credentials.robot_id;
      // The connection is lost while the broker still has the old password: current, then previous.
      const from = broker.passwords.length;
      const reconnected = new Promise<void>((resolve) => t.agent.once('connected', resolve));
      broker.clients.get(id)!.conn.destroy();
      await reconnected;
      expect(broker.passwords.slice(from)).toEqual([NEW, PASSWORD]);
      // Refused both (de-enrolled, say): each round starts with the current one again.
      broker.accepted.clear();
      const refusedFrom = broker.passwords.length;
      broker.clients.get(id)!.conn.destroy();
      await expect.poll(() => broker.passwords.length - refusedFrom, { timeout: 15_000 }).toBeGreaterThanOrEqual(6);
      expect(broker.passwords.slice(refusedFrom, refusedFrom + 6)).toEqual([NEW, PASSWORD, NEW, PASSWORD, NEW, PASSWORD]);
      expect(t.agent.link?.connected).toBe(false);
      // Nothing was forgotten: the current password never worked.
      expect((await readCredentials(t.dataDir))?.mqtt).toMatchObject({ password: NEW, previous_password: PASSWORD });
    });

    it('a robot whose current password works never tries the previous one', async () => {
      const broker = await startBroker();
      brokers.push(broker);
      broker.accepted.add(NEW);
      const t = await linkedAgent(broker, { password: NEW, previousPassword: PASSWORD, dataDir: await makeTempDir() });
      await t.agent.whenConnected();
      expect(broker.logins).toEqual([true]);
      expect(t.agent.link?.acceptedPassword).toBe(NEW);
      await expect.poll(async () => (await readCredentials(t.dataDir))?.mqtt.previous_password ?? 'dropped').toBe('dropped');
    });
  });
});
