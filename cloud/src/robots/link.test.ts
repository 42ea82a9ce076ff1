import mqtt from 'mqtt';
import { pino } from 'pino';
import { afterEach, describe, expect, test } from 'vitest';
import { ManualClock, ManualScheduler, topics, WEBHOOK_EVENTS, type RobotStatus, type RobotStatusPayload } from '@fleet/protocol';
import { startEmbeddedBroker, type EmbeddedBroker } from '../mqtt/broker.js';
import type { Store } from '../store/index.js';
import type { RobotStatusUpdate } from '../store/shared/types.js';
import { openTwin } from '../store/test-store.js';
import { errorCode, startTestCloud, storeWithRobots } from '../test-support.js';
import { CLOUD_MQTT_USERNAME, robotBrokerHooks } from './broker-auth.js';
import { createEnrollmentToken, enrollRobot } from './enrollment.js';
import { RobotLink } from './link.js';

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/**
 * A store whose first `updateStatus` waits until released: what a pooled database connection
 * that is slower for one write than for the next looks like to the link.
 */
function withSlowFirstStatus(store: Store): { store: Store; release(): void; firstStarted: Promise<void>; firstDone: Promise<void>; calls(): number } {
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  let started!: () => void;
  const firstStarted = new Promise<void>((r) => (started = r));
  let calls = 0;
  let done!: () => void;
  const firstDone = new Promise<void>((r) => (done = r));
  const robots = new Proxy(store.robots, {
    get(target, prop, receiver) {
      if (prop !== 'updateStatus') return Reflect.get(target, prop, receiver) as unknown;
      return async (id: string, u: RobotStatusUpdate, ...log: [Parameters<Store['robots']['updateStatus']>[2]?]) => {
        if (calls++ !== 0) return target.updateStatus(id, u, ...log);
        started();
        await gate;
        const changed = await target.updateStatus(id, u, ...log);
        done();
        return changed;
      };
    },
  });
  const slow = new Proxy(store, { get: (target, prop, receiver) => (prop === 'robots' ? robots : (Reflect.get(target, prop, receiver) as unknown)) });
  return { store: slow, release, firstStarted, firstDone, calls: () => calls };
}

test('a command the robot does not answer times out on the injected scheduler, not before', async () => {
  const clock = new ManualClock();
  const scheduler = new ManualScheduler(clock);
  const { store, robots } = await storeWithRobots(clock, 1);
  cleanups.push(() => store.close());
  const broker: EmbeddedBroker = await startEmbeddedBroker({ host: '127.0.0.1', port: 0, hooks: { authenticate: (_c, _u, _p, done) => done(null, true) } });
  cleanups.push(() => broker.close());
  const link = new RobotLink({ urls: [broker.url], store, clock, scheduler, logger: pino({ level: 'silent' }), commandTimeoutMs: 5_000 });
  await link.start();
  cleanups.push(() => link.stop());
  // The robot is there and hears the command, but never answers.
  const robot = await mqtt.connectAsync(broker.url, { protocolVersion: 4, clientId: robots[0]!.id, reconnectPeriod: 0 });
  cleanups.push(() => robot.endAsync(true));
  await robot.subscribeAsync(topics.command(robots[0]!.id), { qos: 1 });
  const heard = new Promise<void>((resolve) => robot.once('message', () => resolve()));
  let outcome: unknown = 'waiting';
  const sent = link.send(robots[0]!.id, 'stack.status', 'cmd_1').then(
    () => 'answered',
    (err: unknown) => err,
  );
  void sent.then((o) => (outcome = o));
  await heard;
  scheduler.advance(4_999);
  await new Promise((resolve) => setImmediate(resolve));
  expect(outcome).toBe('waiting');
  scheduler.advance(1);
  expect(await sent).toMatchObject({ code: 'command_timeout' });
});

test("a robot's statuses are written in the order they came, also when an earlier write is slower", async () => {
  const clock = new ManualClock();
  const { store, robots } = await storeWithRobots(clock, 1);
  cleanups.push(() => store.close());
  const robotId = robots[0]!.id;
  const broker: EmbeddedBroker = await startEmbeddedBroker({ host: '127.0.0.1', port: 0, hooks: { authenticate: (_c, _u, _p, done) => done(null, true) } });
  cleanups.push(() => broker.close());
  const slow = withSlowFirstStatus(store);
  const link = new RobotLink({ urls: [broker.url], store: slow.store, clock, scheduler: new ManualScheduler(clock), logger: pino({ level: 'silent' }), commandTimeoutMs: 5_000 });
  await link.start();
  cleanups.push(() => link.stop());

  const robot = await mqtt.connectAsync(broker.url, { protocolVersion: 4, clientId: robotId, reconnectPeriod: 0 });
  cleanups.push(() => robot.endAsync(true));
  const status = (s: Omit<RobotStatus, 'at'>) => robot.publishAsync(topics.status(robotId), JSON.stringify({ ...s, at: clock.now() }), { qos: 1 });
  await status({ online: true, recording_state: 'recording' });
  await slow.firstStarted;
  // The second status arrives while the first is still being written.
  await status({ online: true, recording_state: 'idle' });
  // Out of order, the idle write would start now, while the first waits. In order it does not
  // start, so this wait runs out (it ends early only where the test is bound to fail).
  const deadline = Date.now() + 1_000;
  while (slow.calls() < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  slow.release();
  await slow.firstDone;
  // The recording status is written; idle, which came after it, must end up on top.
  await expect.poll(async () => (await store.robots.getById(robotId))?.recordingState).toBe('idle');
});

test('a status the store cannot write is reported to the caller, and the next one is written', async () => {
  const clock = new ManualClock();
  const { store, robots } = await storeWithRobots(clock, 1);
  cleanups.push(() => store.close());
  const robotId = robots[0]!.id;
  const broker: EmbeddedBroker = await startEmbeddedBroker({ host: '127.0.0.1', port: 0, hooks: { authenticate: (_c, _u, _p, done) => done(null, true) } });
  cleanups.push(() => broker.close());
  let failures = 1;
  const robotsProxy = new Proxy(store.robots, {
    get(target, prop, receiver) {
      if (prop !== 'updateStatus') return Reflect.get(target, prop, receiver) as unknown;
      return (id: string, u: RobotStatusUpdate, ...log: [Parameters<Store['robots']['updateStatus']>[2]?]) =>
        failures-- > 0 ? Promise.reject(new Error('database unavailable')) : target.updateStatus(id, u, ...log);
    },
  });
  const failing = new Proxy(store, { get: (target, prop, receiver) => (prop === 'robots' ? robotsProxy : (Reflect.get(target, prop, receiver) as unknown)) });
  const logged: string[] = [];
  const logger = pino({ level: 'error' }, { write: (line: string) => void logged.push(line) });
  const link = new RobotLink({ urls: [broker.url], store: failing, clock, scheduler: new ManualScheduler(clock), logger, commandTimeoutMs: 5_000 });
  await link.start();
  cleanups.push(() => link.stop());

  const robot = await mqtt.connectAsync(broker.url, { protocolVersion: 4, clientId: robotId, reconnectPeriod: 0 });
  cleanups.push(() => robot.endAsync(true));
  const status = (s: Omit<RobotStatus, 'at'>) => robot.publishAsync(topics.status(robotId), JSON.stringify({ ...s, at: clock.now() }), { qos: 1 });
  // The first write fails (logged, no unhandled rejection: vitest fails the run on one), the
  // second is written after it.
  await status({ online: true, recording_state: 'recording' });
  await expect.poll(() => logged.some((l) => l.includes('database unavailable'))).toBe(true);
  await status({ online: true, recording_state: 'idle' });
  await expect.poll(async () => (await store.robots.getById(robotId))?.recordingState).toBe('idle');
});

/** Counts the `updateStatus` calls of one link that have finished. */
function countingStatuses(store: Store): { store: Store; done(): number } {
  let done = 0;
  const robots = new Proxy(store.robots, {
    get(target, prop, receiver) {
      if (prop !== 'updateStatus') return Reflect.get(target, prop, receiver) as unknown;
      return async (...args: Parameters<Store['robots']['updateStatus']>) => {
        try {
          return await target.updateStatus(...args);
        } finally {
          done++;
        }
      };
    },
  });
  return { store: new Proxy(store, { get: (target, prop, receiver) => (prop === 'robots' ? robots : (Reflect.get(target, prop, receiver) as unknown)) }), done: () => done };
}

test('two replicas write every status; each change of presence or recording state is logged once as robot.status', async () => {
  const clock = new ManualClock();
  const { store, robots } = await storeWithRobots(clock, 1);
  cleanups.push(() => store.close());
  // On PostgreSQL the second link has a pool of its own, as a second replica would.
  const twin = store.engine === 'postgres' ? await openTwin(store) : store;
  if (twin !== store) cleanups.push(() => twin.close());
  const robotId = robots[0]!.id;
  const broker: EmbeddedBroker = await startEmbeddedBroker({ host: '127.0.0.1', port: 0, hooks: { authenticate: (_c, _u, _p, done) => done(null, true) } });
  cleanups.push(() => broker.close());
  const replicas = [countingStatuses(store), countingStatuses(twin)];
  const logged: string[] = [];
  for (const r of replicas) {
    const link = new RobotLink({ urls: [broker.url], store: r.store, clock, scheduler: new ManualScheduler(clock), logger: pino({ level: 'silent' }), commandTimeoutMs: 5_000 });
    link.on('statusLogged', (orgId) => logged.push(orgId));
    await link.start();
    cleanups.push(() => link.stop());
  }

  // A subscription to every webhook event, made before the changes.
  await store.webhooks.create({ id: 'wh_all', orgId: 'org_a', url: 'https://example.com/hook', events: [...WEBHOOK_EVENTS], secretSealed: 'sealed', createdAt: clock.now() }, 5);

  const robot = await mqtt.connectAsync(broker.url, { protocolVersion: 4, clientId: robotId, reconnectPeriod: 0 });
  cleanups.push(() => robot.endAsync(true));
  const statuses: Omit<RobotStatus, 'at'>[] = [
    { online: true, recording_state: 'idle', runtime_version: '1.0.0' },
    { online: true, recording_state: 'idle', runtime_version: '1.0.1' },
    { online: true, recording_state: 'recording' },
    { online: true, recording_state: 'recording' },
    { online: true, recording_state: 'idle' },
    { online: false },
  ];
  for (const s of statuses) {
    clock.advance(1000);
    await robot.publishAsync(topics.status(robotId), JSON.stringify({ ...s, at: clock.now() }), { qos: 1 });
  }
  await expect.poll(() => replicas.map((r) => r.done())).toEqual([statuses.length, statuses.length]);
  const events = await store.events.listAfter('org_a', 0, { limit: 100 });
  expect(events.map((e) => e.type)).toEqual(['robot.status', 'robot.status', 'robot.status', 'robot.status']);
  expect(events.map((e) => JSON.parse(e.payload) as RobotStatusPayload).map((p) => [p.online, p.recording_state])).toEqual([
    [true, 'idle'],
    [true, 'recording'],
    [true, 'idle'],
    [false, 'idle'],
  ]);
  expect(JSON.parse(events[0]!.payload)).toEqual({ schema_version: 1, robot_id: robotId, online: true, recording_state: 'idle', last_seen_at: expect.stringMatching(/^2026-/) as unknown });
  expect(logged).toEqual(['org_a', 'org_a', 'org_a', 'org_a']);
  // Webhook subscriptions never get robot.status: the fan-out copies only the types they list.
  expect(await store.webhooks.fanOut(clock.now())).toBe(0);
  expect((await store.webhooks.get('org_a', 'wh_all'))?.pendingDeliveries).toBe(0);
});

describe('presence follows the robot connection the cloud saw (embedded broker, real robot credentials)', () => {
  const CLOUD_PASSWORD = 'cloud-secret-for-this-test';

  async function fleet() {
    const t = await startTestCloud({ deps: { robots: { send: (...args) => link.send(...args) } } });
    cleanups.push(() => t.close());
    const tenant = await t.createTenant();
    const token = await createEnrollmentToken(t.store, t.clock, { org: tenant.org, createdBy: 'test', maxUses: 1 });
    const enrolled = await enrollRobot(t.store, t.clock, { token: token.token }, ['mqtt://unused']);
    const broker = await startEmbeddedBroker({ host: '127.0.0.1', port: 0, hooks: robotBrokerHooks(t.store, CLOUD_PASSWORD, () => undefined, { clock: t.clock }) });
    cleanups.push(() => broker.close());
    const counted = countingStatuses(t.store);
    const newLink = () =>
      new RobotLink({ urls: [broker.url], username: CLOUD_MQTT_USERNAME, password: CLOUD_PASSWORD, store: counted.store, clock: t.clock, scheduler: t.scheduler, logger: pino({ level: 'silent' }), commandTimeoutMs: 2_000, sessions: broker });
    const link = newLink();
    await link.start();
    cleanups.push(() => link.stop());
    const robotId = enrolled.robot_id;
    const robot = () => mqtt.connectAsync(broker.url, { protocolVersion: 4, clientId: robotId, username: robotId, password: enrolled.mqtt.password, reconnectPeriod: 0 });
    // A status that says online, retained, from a client that set no will.
    const online = (c: mqtt.MqttClient) => c.publishAsync(topics.status(robotId), JSON.stringify({ online: true, recording_state: 'idle', capabilities: ['episodes.v1'], at: t.clock.now() }), { qos: 1, retain: true });
    const connected = async () => (await t.store.robots.getById(robotId))?.connected;
    const command = () => t.app.inject({ method: 'POST', url: `/v1/robots/${robotId}/go-home`, headers: tenant.auth });
    return { t, robotId, robot, online, connected, command, counted, newLink };
  }

  test('a robot that leaves without a will is offline: a command answers 503 robot_offline, not a 504 timeout', async () => {
    const f = await fleet();
    const r = await f.robot();
    await f.online(r);
    await expect.poll(f.connected).toBe(true);
    await r.endAsync();
    await expect.poll(f.connected).toBe(false);
    const res = await f.command();
    expect(res.statusCode).toBe(503);
    expect(errorCode(res)).toBe('robot_offline');

    // A connection that drops without DISCONNECT (and, again, no will) ends the same way.
    const again = await f.robot();
    await f.online(again);
    await expect.poll(f.connected).toBe(true);
    again.stream.destroy();
    await expect.poll(f.connected).toBe(false);
    expect((await f.t.store.events.listAfter((await f.t.store.robots.getById(f.robotId))!.orgId, 0, { limit: 10 })).map((e) => JSON.parse(e.payload) as RobotStatusPayload).map((p) => p.online)).toEqual([true, false, true, false]);
  });

  test('the retained online status of a robot that is gone does not bring it back', async () => {
    const f = await fleet();
    const r = await f.robot();
    await f.online(r);
    await expect.poll(f.connected).toBe(true);
    await r.endAsync();
    await expect.poll(f.connected).toBe(false);
    // Another link (a reconnect) subscribes and is handed the retained `online: true`.
    const before = f.counted.done();
    const second = f.newLink();
    await second.start();
    cleanups.push(() => second.stop());
    await expect.poll(() => f.counted.done()).toBeGreaterThan(before);
    expect(await f.connected()).toBe(false);
    // While the robot is connected, the same status counts.
    const back = await f.robot();
    cleanups.push(() => back.endAsync(true));
    await f.online(back);
    await expect.poll(f.connected).toBe(true);
  });
});
