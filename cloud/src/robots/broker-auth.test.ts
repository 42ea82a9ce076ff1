import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import mqtt, { type MqttClient } from 'mqtt';
import { ManualClock, topics } from '@fleet/protocol';
import { startEmbeddedBroker, type EmbeddedBroker } from '../mqtt/broker.js';
import type { SqliteStore } from '../store/index.js';
import { CLOUD_MQTT_USERNAME, robotBrokerHooks } from './broker-auth.js';
import { storeWithRobots } from '../test-support.js';

const CLOUD_PASSWORD = 'cloud-secret-for-this-test';

describe('embedded broker ACL (real aedes, real mqtt.js clients)', () => {
  let store: SqliteStore;
  let broker: EmbeddedBroker;
  const clients: MqttClient[] = [];
  let robots: { id: string; password: string }[];

  beforeEach(async () => {
    const clock = new ManualClock(Date.now());
    ({ store, robots } = await storeWithRobots(clock, 2));
    broker = await startEmbeddedBroker({ host: '127.0.0.1', port: 0, hooks: robotBrokerHooks(store, CLOUD_PASSWORD, () => undefined) });
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
});
