import { afterEach, beforeEach, describe, expect, it, test } from 'vitest';
import mqtt, { type MqttClient } from 'mqtt';
import { ManualClock, topics } from '@fleet/protocol';
import { startEmbeddedBroker, type EmbeddedBroker } from '../mqtt/broker.js';
import type { Store } from '../store/index.js';
import { CLOUD_MQTT_USERNAME, robotBrokerHooks } from './broker-auth.js';
import { storeWithRobots } from '../test-support.js';
import { hashSecret } from '../ids.js';
import { FailedLoginLimiter } from '../login-limit.js';

const CLOUD_PASSWORD = 'cloud-secret-for-this-test';

describe('embedded broker ACL (real aedes, real mqtt.js clients)', () => {
  let store: Store;
  let broker: EmbeddedBroker;
  const clients: MqttClient[] = [];
  let robots: { id: string; password: string }[];
  let clock: ManualClock;

  beforeEach(async () => {
    clock = new ManualClock(Date.now());
    ({ store, robots } = await storeWithRobots(clock, 2));
    broker = await startEmbeddedBroker({ host: '127.0.0.1', port: 0, hooks: robotBrokerHooks(store, CLOUD_PASSWORD, () => undefined, { clock }) });
  });

  afterEach(async () => {
    await Promise.all(clients.splice(0).map((c) => c.endAsync(true)));
    await broker.close();
    await store.close();
  });

  function connect(clientId: string, username: string, password: string): Promise<MqttClient> {
    return new Promise((resolve, reject) => {
      const c = mqtt.connect(broker.url, { protocolVersion: 4, clientId, username, password, reconnectPeriod: 0, connectTimeout: 5000 });
      clients.push(c);
      c.once('connect', () => resolve(c));
      c.once('error', reject);
      c.once('close', () => reject(new Error('closed before connect')));
    });
  }

  it('refuses wrong passwords, unknown robots and a client id that is not the robot id', async () => {
    const [a, b] = robots as [{ id: string; password: string }, { id: string; password: string }];
    await expect(connect(a.id, a.id, 'rsec_wrong')).rejects.toThrow();
    await expect(connect('rbt_aaaaaaaaaaaaaaaaaaaaaaaaaa', 'rbt_aaaaaaaaaaaaaaaaaaaaaaaaaa', a.password)).rejects.toThrow();
    await expect(connect(b.id, a.id, a.password)).rejects.toThrow();
    await expect(connect('cloud_x', CLOUD_MQTT_USERNAME, 'not-it')).rejects.toThrow();
    await expect(connect(a.id, a.id, a.password)).resolves.toBeTruthy();
  });

  it('lets a robot subscribe only to its own commands', async () => {
    const [a, b] = robots as [{ id: string; password: string }, { id: string; password: string }];
    const ca = await connect(a.id, a.id, a.password);
    const own = await ca.subscribeAsync(topics.command(a.id), { qos: 1 });
    expect(own[0]?.qos).toBe(1);
    for (const topic of [topics.command(b.id), topics.allStatus, '#', topics.commandReply(a.id)]) {
      await expect(ca.subscribeAsync(topic, { qos: 1 })).rejects.toThrow();
    }
    expect(ca.connected).toBe(true);
  });

  it("never delivers a robot's publish under another robot's prefix or on its own command topic", async () => {
    const [a, b] = robots as [{ id: string; password: string }, { id: string; password: string }];
    const cloud = await connect('cloud_test', CLOUD_MQTT_USERNAME, CLOUD_PASSWORD);
    const seen: string[] = [];
    cloud.on('message', (topic) => seen.push(topic));
    await cloud.subscribeAsync('fleet/v1/robots/#', { qos: 1 });

    // A forged status for robot b: the broker refuses it and drops robot a's connection.
    const ca = await connect(a.id, a.id, a.password);
    const closed = new Promise<void>((resolve) => ca.once('close', () => resolve()));
    ca.publish(topics.status(b.id), JSON.stringify({ online: true, at: 1 }), { qos: 1 });
    await closed;

    const ca2 = await connect(a.id, a.id, a.password);
    const closed2 = new Promise<void>((resolve) => ca2.once('close', () => resolve()));
    ca2.publish(topics.command(a.id), JSON.stringify({ cmd_id: 'x' }), { qos: 1 });
    await closed2;

    // Its own status goes through.
    const ca3 = await connect(a.id, a.id, a.password);
    await ca3.publishAsync(topics.status(a.id), JSON.stringify({ online: true, at: 2 }), { qos: 1 });
    await expect.poll(() => seen).toContain(topics.status(a.id));
    expect(seen).not.toContain(topics.status(b.id));
    expect(seen).not.toContain(topics.command(a.id));
  });

  it('closes a de-enrolled robot\'s live connection on request and refuses its credentials from then on', async () => {
    const [a, b] = robots as [{ id: string; password: string }, { id: string; password: string }];
    const ca = await connect(a.id, a.id, a.password);
    const cb = await connect(b.id, b.id, b.password);
    const closed = new Promise<void>((resolve) => ca.once('close', () => resolve()));
    await store.robots.deenroll('org_a', a.id, clock.now());
    expect(broker.disconnect(a.id)).toBe(true);
    await closed;
    await expect(connect(a.id, a.id, a.password)).rejects.toThrow(/Bad username or password/);
    expect(broker.disconnect('rbt_aaaaaaaaaaaaaaaaaaaaaaaaaa')).toBe(false);
    // The other robot is untouched.
    expect(cb.connected).toBe(true);
  });

  it('accepts the pending secret of a rotation as its acknowledgment: it becomes the only password', async () => {
    const [a] = robots as [{ id: string; password: string }];
    await store.robots.requestRotation('org_a', a.id, clock.now());
    await store.robots.setPendingPassword(a.id, hashSecret('rsec_the_next_secret_for_a'), 'sealed');
    // Both work while the rotation runs.
    await (await connect(a.id, a.id, a.password)).endAsync();
    await connect(a.id, a.id, 'rsec_the_next_secret_for_a');
    expect(await store.robots.getById(a.id)).toMatchObject({ mqttPasswordHash: hashSecret('rsec_the_next_secret_for_a'), pendingPasswordHash: null, rotatedAt: clock.now() });
    await expect(connect(a.id, a.id, a.password)).rejects.toThrow(/Bad username or password/);
  });
});

describe('failed broker logins per client address (real aedes, real mqtt.js clients, injected clock)', () => {
  let store: Store;
  let broker: EmbeddedBroker;
  let clock: ManualClock;
  let robots: { id: string; password: string }[];
  const clients: MqttClient[] = [];

  beforeEach(async () => {
    clock = new ManualClock(Date.now());
    ({ store, robots } = await storeWithRobots(clock, 2));
    const failures = new FailedLoginLimiter({ kind: 'mqtt', maxFailures: 3, windowMs: 60_000, clock });
    broker = await startEmbeddedBroker({ host: '127.0.0.1', port: 0, hooks: robotBrokerHooks(store, CLOUD_PASSWORD, () => undefined, { clock, failures }) });
  });

  afterEach(async () => {
    await Promise.all(clients.splice(0).map((c) => c.endAsync(true)));
    await broker.close();
    await store.close();
  });

  /** 'accepted', or the CONNACK return code of the refusal. */
  async function attempt(clientId: string, username: string, password: string): Promise<'accepted' | number> {
    try {
      const c = await mqtt.connectAsync(broker.url, { protocolVersion: 4, clientId, username, password, reconnectPeriod: 0, connectTimeout: 5000 });
      clients.push(c);
      return 'accepted';
    } catch (err) {
      return (err as { code: number }).code;
    }
  }

  it('refuses an address after N refused logins until the window passes; logins that work are not counted', async () => {
    const [a, b] = robots as [{ id: string; password: string }, { id: string; password: string }];
    for (let i = 0; i < 5; i++) expect(await attempt(a.id, a.id, a.password)).toBe('accepted');
    expect(await attempt(a.id, a.id, 'rsec_wrong')).toBe(4);
    expect(await attempt('rbt_aaaaaaaaaaaaaaaaaaaaaaaaaa', 'rbt_aaaaaaaaaaaaaaaaaaaaaaaaaa', 'x')).toBe(4);
    expect(await attempt('cloud_x', CLOUD_MQTT_USERNAME, 'not-it')).toBe(4);
    // Over the limit: refused before the password is looked at, the right one too (3: server unavailable, retry later).
    expect(await attempt(b.id, b.id, b.password)).toBe(3);
    expect(await attempt(a.id, a.id, 'rsec_wrong')).toBe(3);
    // The cloud's own client still gets in: robots on its host must not lock it out.
    expect(await attempt('cloud_y', CLOUD_MQTT_USERNAME, CLOUD_PASSWORD)).toBe('accepted');
    clock.advance(59_000);
    expect(await attempt(b.id, b.id, b.password)).toBe(3);
    clock.advance(1_000);
    expect(await attempt(b.id, b.id, b.password)).toBe('accepted');
  });
});

test("with no cloud account (the link works inside the broker) nobody logs in as the cloud, whatever the password", async () => {
  const clock = new ManualClock(Date.now());
  const { store } = await storeWithRobots(clock, 1);
  const broker = await startEmbeddedBroker({ host: '127.0.0.1', port: 0, hooks: robotBrokerHooks(store, null, () => undefined, { clock }) });
  try {
    for (const password of ['', 'guess', CLOUD_PASSWORD]) {
      await expect(mqtt.connectAsync(broker.url, { protocolVersion: 4, clientId: 'cloud_x', username: CLOUD_MQTT_USERNAME, password, reconnectPeriod: 0, connectTimeout: 5000 })).rejects.toMatchObject({ code: 4 });
    }
  } finally {
    await broker.close();
    await store.close();
  }
});
