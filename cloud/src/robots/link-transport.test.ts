import mqtt from 'mqtt';
import { pino } from 'pino';
import { afterEach, describe, expect, test } from 'vitest';
import { ManualClock, ManualScheduler, topics, type CommandReply, type OutboxAck, type RobotCommand, type RobotStatus } from '@fleet/protocol';
import { startEmbeddedBroker, type EmbeddedBroker } from '../mqtt/broker.js';
import { storeWithRobots } from '../test-support.js';
import { robotBrokerHooks } from './broker-auth.js';
import { RobotLink } from './link.js';

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** Resolves once aedes has handed a message on `topic` to every subscriber (or refused it). */
function published(broker: EmbeddedBroker, topic: string): Promise<void> {
  return new Promise((resolve) => {
    const on = (packet: { topic: string }) => {
      if (packet.topic !== topic) return;
      broker.aedes.off('publish', on);
      resolve();
    };
    broker.aedes.on('publish', on);
  });
}

describe('the robot link inside the embedded broker (no connection of its own)', () => {
  /** Two enrolled robots, the embedded broker with the robots' credentials and ACL, and a link working inside it. */
  async function fleet() {
    const clock = new ManualClock();
    const { store, robots } = await storeWithRobots(clock, 2);
    cleanups.push(() => store.close());
    const broker = await startEmbeddedBroker({ host: '127.0.0.1', port: 0, hooks: robotBrokerHooks(store, 'the cloud account, unused here', () => undefined, { clock }) });
    cleanups.push(() => broker.close());
    const newLink = () => new RobotLink({ urls: [broker.url], inProcess: broker.aedes, store, clock, scheduler: new ManualScheduler(clock), logger: pino({ level: 'silent' }), commandTimeoutMs: 5_000, sessions: broker });
    const robot = async (i: number) => {
      const { id, password } = robots[i]!;
      const c = await mqtt.connectAsync(broker.url, { protocolVersion: 4, clientId: id, username: id, password, reconnectPeriod: 0 });
      cleanups.push(() => c.endAsync(true));
      return c;
    };
    const status = (c: mqtt.MqttClient, robotId: string, s: Omit<RobotStatus, 'at'>) =>
      c.publishAsync(topics.status(robotId), JSON.stringify({ ...s, at: clock.now() }), { qos: 1, retain: true });
    return { clock, store, robots, broker, newLink, robot, status };
  }

  test('an outbox message reaches the handler and its acknowledgment reaches the robot; the broker sees no cloud client', async () => {
    const f = await fleet();
    const link = f.newLink();
    const received: [string, string][] = [];
    link.onOutbox = async (robotId, payload) => {
      received.push([robotId, payload.toString('utf8')]);
      const { msg_id } = JSON.parse(payload.toString('utf8')) as { msg_id: string };
      await link.publishAck(robotId, { msg_id, ok: true });
    };
    await link.start();
    cleanups.push(() => link.stop());
    expect(link.connected).toBe(true);

    const robotId = f.robots[0]!.id;
    const robot = await f.robot(0);
    await robot.subscribeAsync(topics.outboxAck(robotId), { qos: 1 });
    const ack = new Promise<[string, Buffer]>((resolve) => robot.once('message', (topic, payload) => resolve([topic, payload])));
    const message = JSON.stringify({ msg_id: 'm1', kind: 'episode.report', body: {} });
    await robot.publishAsync(topics.outbox(robotId), message, { qos: 1 });
    const [topic, payload] = await ack;
    expect(topic).toBe(topics.outboxAck(robotId));
    expect(JSON.parse(payload.toString('utf8'))).toEqual({ msg_id: 'm1', ok: true } satisfies OutboxAck);
    expect(received).toEqual([[robotId, message]]);
    // Only the robot is connected: the link subscribes and publishes inside aedes.
    expect(Object.keys((f.broker.aedes as unknown as { clients: Record<string, unknown> }).clients)).toEqual([robotId]);
  });

  test("a robot still cannot publish on another robot's topics: the broker refuses it before the link", async () => {
    const f = await fleet();
    const link = f.newLink();
    const received: string[] = [];
    link.onOutbox = async (robotId) => void received.push(robotId);
    await link.start();
    cleanups.push(() => link.stop());
    const robot = await f.robot(0);
    const closed = new Promise<void>((resolve) => robot.once('close', () => resolve()));
    // aedes closes an MQTT 3.1.1 connection whose publish is refused; the message is never delivered.
    robot.publish(topics.outbox(f.robots[1]!.id), JSON.stringify({ msg_id: 'm1', kind: 'episode.report', body: {} }), { qos: 1 });
    await closed;
    expect(f.broker.isConnected(f.robots[0]!.id)).toBe(false);
    expect(received).toEqual([]);
  });

  test('the retained status of a robot that connected before the link is read when it starts; later statuses are written in order', async () => {
    const f = await fleet();
    const robotId = f.robots[0]!.id;
    const robot = await f.robot(0);
    await f.status(robot, robotId, { online: true, recording_state: 'recording', runtime_version: '1.0.0' });
    const link = f.newLink();
    await link.start();
    cleanups.push(() => link.stop());
    // aedes hands a starting in-process subscription no retained message: the link reads them.
    await expect.poll(async () => (await f.store.robots.getById(robotId))?.recordingState).toBe('recording');
    expect((await f.store.robots.getById(robotId))?.connected).toBe(true);

    // Statuses of one instant (the robot's clock): only their order decides which one stands.
    const states = ['idle', 'recording', 'idle', 'recording', 'idle', 'recording', 'idle'] as const;
    await Promise.all(states.map((s, i) => f.status(robot, robotId, { online: true, recording_state: s, runtime_version: `1.0.${i + 1}` })));
    await expect.poll(async () => (await f.store.robots.getById(robotId))?.runtimeVersion).toBe(`1.0.${states.length}`);
    expect((await f.store.robots.getById(robotId))?.recordingState).toBe('idle');
  });

  test('a command goes to the robot and its reply comes back', async () => {
    const f = await fleet();
    const link = f.newLink();
    await link.start();
    cleanups.push(() => link.stop());
    const robotId = f.robots[0]!.id;
    const robot = await f.robot(0);
    await robot.subscribeAsync(topics.command(robotId), { qos: 1 });
    const replies: Promise<unknown>[] = [];
    robot.on('message', (_topic, payload) => {
      const cmd = JSON.parse(payload.toString('utf8')) as RobotCommand;
      const reply: CommandReply = { cmd_id: cmd.cmd_id, ok: true, result: { command: cmd.command } };
      replies.push(robot.publishAsync(topics.commandReply(robotId), JSON.stringify(reply), { qos: 1 }));
    });
    expect(await link.send(robotId, 'stack.status', 'cmd_1')).toMatchObject({ cmd_id: 'cmd_1', ok: true, result: { command: 'stack.status' } });
    await Promise.all(replies);
  });

  test('a backlog aedes held behind busy deliveries is handed over whole, in order', async () => {
    const f = await fleet();
    const link = f.newLink();
    const received: string[] = [];
    link.onOutbox = async (_robotId, payload) => void received.push(payload.toString('utf8'));
    await link.start();
    cleanups.push(() => link.stop());
    // Deliveries that do not finish (robots whose connections do not drain) fill aedes' slots
    // (100 by default); the messages after them wait in its queue.
    const held: (() => void)[] = [];
    const slow = (_packet: unknown, done: () => void) => void held.push(done);
    await new Promise<void>((resolve) => f.broker.aedes.subscribe('slow/+', slow, resolve));
    const publish = (topic: string, payload: string) =>
      new Promise<void>((resolve, reject) => f.broker.aedes.publish({ cmd: 'publish', topic, payload: Buffer.from(payload), qos: 0, retain: false, dup: false }, (err) => (err ? reject(err) : resolve())));
    const busy = Array.from({ length: 100 }, () => publish('slow/x', ''));
    const n = 20_000;
    const queued = Array.from({ length: n }, (_v, i) => publish(topics.outbox(f.robots[0]!.id), String(i)));
    expect(held).toHaveLength(100);
    // Released at once, the whole queue is delivered from within the first release.
    for (const done of held.splice(0)) done();
    await Promise.all([...busy, ...queued]);
    expect(received).toEqual(Array.from({ length: n }, (_v, i) => String(i)));
  });

  test('a stopped link hands nothing over and publishes nothing; a closed broker is no connection', async () => {
    const f = await fleet();
    const link = f.newLink();
    const received: string[] = [];
    link.onOutbox = async (robotId) => void received.push(robotId);
    await link.start();
    const robotId = f.robots[0]!.id;
    const robot = await f.robot(0);
    await link.stop();
    expect(link.connected).toBe(false);
    await expect(link.publishAck(robotId, { msg_id: 'm1', ok: true })).rejects.toThrow('robot link stopped');
    const delivered = published(f.broker, topics.outbox(robotId));
    await robot.publishAsync(topics.outbox(robotId), JSON.stringify({ msg_id: 'm1', kind: 'episode.report', body: {} }), { qos: 1 });
    await delivered;
    expect(received).toEqual([]);

    const again = f.newLink();
    await again.start();
    cleanups.push(() => again.stop());
    expect(again.connected).toBe(true);
    await f.broker.close();
    expect(again.connected).toBe(false);
    await expect(again.send(robotId, 'stack.status', 'cmd_2')).rejects.toMatchObject({ code: 'robot_offline' });
  });
});
