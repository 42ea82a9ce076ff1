import mqtt from 'mqtt';
import { pino } from 'pino';
import { afterEach, expect, test } from 'vitest';
import { ManualClock, topics, type RobotStatus } from '@fleet/protocol';
import { startEmbeddedBroker, type EmbeddedBroker } from '../mqtt/broker.js';
import type { Store } from '../store/index.js';
import type { RobotStatusUpdate } from '../store/types.js';
import { storeWithRobots } from '../test-support.js';
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
      return async (id: string, u: RobotStatusUpdate) => {
        if (calls++ !== 0) return target.updateStatus(id, u);
        started();
        await gate;
        await target.updateStatus(id, u);
        done();
      };
    },
  });
  const slow = new Proxy(store, { get: (target, prop, receiver) => (prop === 'robots' ? robots : (Reflect.get(target, prop, receiver) as unknown)) });
  return { store: slow, release, firstStarted, firstDone, calls: () => calls };
}

test("a robot's statuses are written in the order they came, also when an earlier write is slower", async () => {
  const clock = new ManualClock();
  const { store, robots } = await storeWithRobots(clock, 1);
  cleanups.push(() => store.close());
  const robotId = robots[0]!.id;
  const broker: EmbeddedBroker = await startEmbeddedBroker({ host: '127.0.0.1', port: 0, hooks: { authenticate: (_c, _u, _p, done) => done(null, true) } });
  cleanups.push(() => broker.close());
  const slow = withSlowFirstStatus(store);
  const link = new RobotLink({ url: broker.url, store: slow.store, clock, logger: pino({ level: 'silent' }), commandTimeoutMs: 5_000 });
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
      return (id: string, u: RobotStatusUpdate) => (failures-- > 0 ? Promise.reject(new Error('database unavailable')) : target.updateStatus(id, u));
    },
  });
  const failing = new Proxy(store, { get: (target, prop, receiver) => (prop === 'robots' ? robotsProxy : (Reflect.get(target, prop, receiver) as unknown)) });
  const logged: string[] = [];
  const logger = pino({ level: 'error' }, { write: (line: string) => void logged.push(line) });
  const link = new RobotLink({ url: broker.url, store: failing, clock, logger, commandTimeoutMs: 5_000 });
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
