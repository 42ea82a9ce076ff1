import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import mqtt, { type MqttClient } from 'mqtt';
import type { Client } from 'aedes';
import { ManualClock, ManualScheduler, topics } from '@fleet/protocol';
import { startEmbeddedBroker, type EmbeddedBroker } from '../mqtt/broker.js';
import { PublishThrottle } from '../mqtt/throttle.js';
import type { Store } from '../store/index.js';
import { CLOUD_MQTT_USERNAME, robotBrokerHooks } from './broker-auth.js';
import { storeWithRobots } from '../test-support.js';

const CLOUD_PASSWORD = 'cloud-secret-for-this-test';
// Small numbers on a clock that only moves by hand: the bucket holds 2 s x 5/s = 10 messages.
const RATE = 5;
const BURST = 2 * RATE;

/** Polls until `cond` holds; the bound is only a failure bound, never an assertion on time. */
async function waitUntil(cond: () => boolean, opts: { description: string; timeoutMs?: number }): Promise<void> {
  const deadline = Date.now() + (opts.timeoutMs ?? 10_000);
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${opts.description}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('embedded broker publish throttle (real aedes, real mqtt.js clients, injected clock)', () => {
  let store: Store;
  let broker: EmbeddedBroker;
  let clock: ManualClock;
  let scheduler: ManualScheduler;
  /** Moves the clock in one jump, then fires the throttle's timers that fell due: one refill for the whole jump. */
  const pass = (ms: number) => {
    clock.advance(ms);
    scheduler.advance(0);
  };
  let throttle: PublishThrottle<Client>;
  const clients: MqttClient[] = [];
  let robots: { id: string; password: string }[];

  beforeEach(async () => {
    clock = new ManualClock(Date.now());
    ({ store, robots } = await storeWithRobots(clock, 2));
    scheduler = new ManualScheduler(clock);
    throttle = new PublishThrottle<Client>({ messagesPerSecond: RATE, bytesPerSecond: 1024 * 1024, clock, scheduler, isClosed: (c) => c.closed });
    broker = await startEmbeddedBroker({ host: '127.0.0.1', port: 0, hooks: robotBrokerHooks(store, CLOUD_PASSWORD, () => undefined, { throttle, clock }) });
  });

  afterEach(async () => {
    await Promise.all(clients.splice(0).map((c) => c.endAsync(true)));
    await broker.close();
    await store.close();
  });

  function connect(clientId: string, username: string, password: string, extra: mqtt.IClientOptions = {}): Promise<MqttClient> {
    return new Promise((resolve, reject) => {
      const c = mqtt.connect(broker.url, { protocolVersion: 4, clientId, username, password, reconnectPeriod: 0, connectTimeout: 5000, ...extra });
      clients.push(c);
      c.once('connect', () => resolve(c));
      c.once('error', reject);
    });
  }

  it('holds a flooding robot to its bucket, in order and without loss, while another robot and the cloud pass at once', async () => {
    const [flooder, quiet] = robots as [{ id: string; password: string }, { id: string; password: string }];
    const cloud = await connect('cloud_test', CLOUD_MQTT_USERNAME, CLOUD_PASSWORD);
    const received: { robot: string; n: number }[] = [];
    cloud.on('message', (topic, payload) => {
      received.push({ robot: robots.find((r) => topic.includes(r.id))?.id ?? topic, n: Number(payload.toString()) });
    });
    await cloud.subscribeAsync(topics.allStatus, { qos: 1 });

    const f = await connect(flooder.id, flooder.id, flooder.password);
    const q = await connect(quiet.id, quiet.id, quiet.password);
    const fromFlooder = () => received.filter((r) => r.robot === flooder.id).map((r) => r.n);
    let quietN = 0;
    // The quiet robot publishes one message and it reaches the cloud: proof the broker kept
    // working while the flooder's packets were held.
    const quietRoundTrip = async () => {
      const n = ++quietN;
      await q.publishAsync(topics.status(quiet.id), String(n), { qos: 1 });
      await waitUntil(() => received.some((r) => r.robot === quiet.id && r.n === n), { description: `quiet robot message ${n}` });
    };
    const flooderClient = () => (broker.aedes as unknown as { clients: Record<string, Client> }).clients[flooder.id]!;

    const TOTAL = 60;
    // QoS 0: the flooder waits for nothing and writes it all at once.
    for (let n = 0; n < TOTAL; n++) f.publish(topics.status(flooder.id), String(n), { qos: 0 });

    // The bucket lets its burst through; the rest is held while the clock stands still.
    await waitUntil(() => fromFlooder().length >= BURST, { description: 'the flooder burst to arrive' });
    await quietRoundTrip();
    await quietRoundTrip();
    // The cloud's own client is never throttled: more than a bucket's worth passes at once.
    for (let n = 0; n < 3 * BURST; n++) await cloud.publishAsync(topics.command(quiet.id), String(n), { qos: 1 });
    expect(fromFlooder()).toEqual([...Array(BURST).keys()]);
    expect(throttle.held(flooderClient())).toBeGreaterThan(0);

    // One second refills RATE tokens: RATE more pass, and no more.
    pass(1000);
    await waitUntil(() => fromFlooder().length >= BURST + RATE, { description: 'one second of refill to pass' });
    await quietRoundTrip();
    expect(fromFlooder()).toEqual([...Array(BURST + RATE).keys()]);

    // A long pause refills no more than the bucket holds.
    pass(60_000);
    await waitUntil(() => fromFlooder().length >= 2 * BURST + RATE, { description: 'a full bucket to pass' });
    await quietRoundTrip();
    expect(fromFlooder()).toHaveLength(2 * BURST + RATE);

    // Second by second, the rest: everything arrives, in order, nothing lost.
    while (fromFlooder().length < TOTAL) {
      const before = fromFlooder().length;
      pass(1000);
      await waitUntil(() => fromFlooder().length >= Math.min(TOTAL, before + RATE), { description: 'the next second of the flood' });
    }
    await quietRoundTrip();
    expect(fromFlooder()).toEqual([...Array(TOTAL).keys()]);
    expect(throttle.held(flooderClient())).toBe(0);
  });

  it('drops what it holds for a robot that disconnects: its will passes at once and nothing it sent before lands after it', async () => {
    const [flooder, quiet] = robots as [{ id: string; password: string }, { id: string; password: string }];
    const cloud = await connect('cloud_test', CLOUD_MQTT_USERNAME, CLOUD_PASSWORD);
    const fromFlooder: string[] = [];
    const fromQuiet: string[] = [];
    cloud.on('message', (topic, payload) => {
      if (topic.includes(flooder.id)) fromFlooder.push(payload.toString());
      if (topic.includes(quiet.id)) fromQuiet.push(payload.toString());
    });
    await cloud.subscribeAsync(topics.allStatus, { qos: 1 });
    const f = await connect(flooder.id, flooder.id, flooder.password, { will: { topic: topics.status(flooder.id), payload: Buffer.from('will'), qos: 1, retain: false } });
    const q = await connect(quiet.id, quiet.id, quiet.password);
    for (let n = 0; n < 40; n++) f.publish(topics.status(flooder.id), String(n), { qos: 0 });
    await waitUntil(() => fromFlooder.length >= BURST, { description: 'the flooder burst to arrive' });
    const aedesClients = () => (broker.aedes as unknown as { clients: Record<string, Client> }).clients;
    const held = aedesClients()[flooder.id]!;
    await waitUntil(() => throttle.held(held) > 0, { description: 'packets held for the flooder' });

    // The robot dies: its connection drops without DISCONNECT, so the broker publishes its will.
    f.stream.destroy();
    await waitUntil(() => aedesClients()[flooder.id] === undefined, { description: 'the broker to see the flooder gone' });
    await waitUntil(() => fromFlooder.includes('will'), { description: 'the will, although the bucket is empty' });
    // Time passes until nothing is held any more (dropped, or, wrongly, released).
    const deadline = Date.now() + 10_000;
    while (throttle.held(held) > 0 && Date.now() < deadline) {
      pass(60_000);
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(throttle.held(held)).toBe(0);
    await q.publishAsync(topics.status(quiet.id), 'after', { qos: 1 });
    await waitUntil(() => fromQuiet.includes('after'), { description: 'the quiet robot message' });
    expect(fromFlooder).toEqual([...[...Array(BURST).keys()].map(String), 'will']);
  });
});
