import { ManualClock, OutboxMessageSchema, outboxBatchPayload } from '@fleet/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import { MqttLink } from './link/mqtt-link.js';
import { OutboxSender, outboxPayload } from './outbox.js';
import { openAgentStore, type SqliteAgentStore } from './store/sqlite.js';
import type { OutboxStore } from './store/types.js';
import {
  captureLogs,
  FakeCloud,
  makeTempDir,
  removeTempDirs,
  startTestBroker,
  testCredentials,
  type LogCapture,
  type TestBroker,
} from './test-support.js';
import { ManualScheduler, systemScheduler } from './time.js';

const ACK_TIMEOUT_MS = 30_000;

interface Rig {
  robotId: string;
  store: SqliteAgentStore;
  link: MqttLink;
  sender: OutboxSender;
  cloud: FakeCloud;
  broker: TestBroker;
  /** Drives the sender's ack timeouts only; the link reconnects in real time. */
  scheduler: ManualScheduler;
  clock: ManualClock;
  logs: LogCapture;
  enqueue(...ids: string[]): Promise<void>;
  state(id: string): Promise<string | undefined>;
  reconnected(): Promise<void>;
}

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  await removeTempDirs();
});

/** A store, a real MQTT link to a real aedes broker, the sender between them and a fake cloud. */
async function rig(opts: { maxInFlight?: number; broker?: TestBroker; connect?: boolean } = {}): Promise<Rig> {
  const broker = opts.broker ?? (await startTestBroker());
  if (!opts.broker) cleanups.push(() => broker.close());
  const cloud = await FakeCloud.connect(broker.url);
  cleanups.push(() => cloud.close());
  const dataDir = await makeTempDir();
  const clock = new ManualClock();
  const store = openAgentStore(dataDir, clock);
  const scheduler = new ManualScheduler(clock);
  const logs = captureLogs();
  const credentials = testCredentials(undefined, broker.url);
  const holder: { sender?: OutboxSender } = {};
  const link = new MqttLink({
    credentials,
    clock,
    scheduler: systemScheduler,
    logger: logs.logger,
    reconnectMinMs: 20,
    reconnectMaxMs: 100,
    keepaliveSeconds: 30,
    status: () => ({ runtime_version: '0.1.0', platform: 'test', capabilities: [], recording_state: 'idle' }),
    onCommand: () => undefined,
    onOutboxAck: (payload) => holder.sender?.handleAck(payload),
  });
  const sender = new OutboxSender({ store: store.outbox, transport: link, clock, scheduler, logger: logs.logger, ackTimeoutMs: ACK_TIMEOUT_MS, ...(opts.maxInFlight ? { maxInFlight: opts.maxInFlight } : {}) });
  holder.sender = sender;
  link.on('connected', () => sender.connected());
  link.on('disconnected', () => sender.disconnected());
  await sender.start();
  cleanups.push(async () => {
    await sender.stop();
    await link.stop();
    await store.close();
  });
  const r: Rig = {
    robotId: credentials.robot_id,
    store,
    link,
    sender,
    cloud,
    broker,
    scheduler,
    clock,
    logs,
    async enqueue(...ids) {
      for (const id of ids) await store.outbox.enqueue({ msgId: id, kind: 'episode.report', body: { id }, createdAt: clock.now() });
      sender.notify();
    },
    async state(id) {
      return (await store.outbox.get(id))?.state;
    },
    reconnected: () => new Promise<void>((resolve) => link.once('connected', () => resolve())),
  };
  if (opts.connect ?? true) {
    link.start();
    await link.whenConnected();
  }
  return r;
}

const ids = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix}-${String(i).padStart(4, '0')}`);

describe('OutboxSender against a real broker', () => {
  it('publishes pending messages in creation order at connect, msg_id first, and settles them on ack', async () => {
    const r = await rig({ connect: false });
    // Ids sort the other way round: creation order is what counts.
    const order = ['m-5', 'm-4', 'm-3', 'm-2', 'm-1'];
    await r.enqueue(...order);
    expect(r.sender.status).toEqual({ pending: 5, refused: 0 });
    r.link.start();
    await expect.poll(() => r.sender.status.pending).toBe(0);
    expect(r.cloud.ids()).toEqual(order);
    for (const m of r.cloud.received) {
      expect(m.raw.startsWith(`{"msg_id":"${m.message.msg_id}",`)).toBe(true);
      expect(OutboxMessageSchema.parse(JSON.parse(m.raw))).toEqual({ msg_id: m.message.msg_id, kind: 'episode.report', body: { id: m.message.msg_id } });
      expect(m.robotId).toBe(r.robotId);
    }
    expect(await r.store.outbox.counts()).toEqual({ pending: 0, acked: 5, refused: 0 });
    expect((await r.store.outbox.get('m-3'))?.attempts).toBe(1);
    expect(r.sender.inFlightCount).toBe(0);
  });

  it('sends a message enqueued while connected at once', async () => {
    const r = await rig();
    await r.enqueue('late');

    await expect.poll(() => r.state('late')).toBe('acked');
    expect(r.cloud.ids()).toEqual(['late']);
  });

  it('resends a message not acknowledged within the timeout, but not an acknowledged one', async () => {
    const r = await rig();
    r.cloud.policy = 'silent';
    await r.enqueue('a', 'b');
    await expect.poll(() => r.cloud.ids()).toEqual(['a', 'b']);
    await r.cloud.send(r.robotId, { msg_id: 'a', ok: true });
    await expect.poll(() => r.state('a')).toBe('acked');
    await expect.poll(() => r.sender.inFlightCount).toBe(1);

    r.scheduler.advance(ACK_TIMEOUT_MS - 1);
    r.scheduler.advance(1);
    // `b` again; an `a` resend would have been published before it on the same connection.
    await expect.poll(() => r.cloud.ids()).toEqual(['a', 'b', 'b']);
    expect(r.logs.messages()).toContain('outbox message not acknowledged in time; sending it again');
    r.scheduler.advance(ACK_TIMEOUT_MS);
    await expect.poll(() => r.cloud.ids()).toEqual(['a', 'b', 'b', 'b']);
    expect((await r.store.outbox.get('b'))?.attempts).toBe(3);

    r.cloud.policy = 'ack';
    r.scheduler.advance(ACK_TIMEOUT_MS);
    await expect.poll(() => r.state('b')).toBe('acked');
    expect(r.sender.status).toEqual({ pending: 0, refused: 0 });
  });

  it('resends everything pending after a reconnect, in order; an ack from before the drop still counts', async () => {
    const r = await rig();
    r.cloud.policy = 'silent';
    await r.enqueue('a', 'b', 'c');
    await expect.poll(() => r.cloud.ids()).toEqual(['a', 'b', 'c']);
    // The connection dies; the ack for `b` arrives while the robot is away.
    const back = r.reconnected();
    r.broker.clients.get(r.robotId)!.conn.destroy();
    await back;
    await expect.poll(() => r.cloud.ids().slice(3)).toEqual(['a', 'b', 'c']);
    await r.cloud.send(r.robotId, { msg_id: 'b', ok: true });
    await expect.poll(() => r.state('b')).toBe('acked');

    const again = r.reconnected();
    r.broker.clients.get(r.robotId)!.conn.destroy();
    await again;
    await expect.poll(() => r.cloud.ids().slice(6)).toEqual(['a', 'c']);
    r.cloud.policy = 'ack';
    await r.enqueue('d');
    await expect.poll(() => r.state('d')).toBe('acked');
    // `a` and `c` are still waiting: the next timeout sends them again and they are acked.
    r.scheduler.advance(ACK_TIMEOUT_MS);
    await expect.poll(() => r.sender.status.pending).toBe(0);
  });

  it('resends after the broker itself restarts', async () => {
    const broker = await startTestBroker();
    const r = await rig({ broker });
    r.cloud.policy = 'silent';
    await r.enqueue('a', 'b');
    await expect.poll(() => r.cloud.ids()).toEqual(['a', 'b']);
    const lost = new Promise<void>((resolve) => r.link.once('disconnected', () => resolve()));
    await broker.close();
    await lost;
    const back = r.reconnected();
    const second = await startTestBroker(broker.port);
    // Closed last, after the link has stopped cleanly on it.
    cleanups.unshift(() => second.close());
    r.cloud.policy = 'ack';
    await back;
    // Whether the reconnect's resend found the cloud subscribed or not (a fresh broker forgets
    // subscriptions and drops what nobody listens to), the ack timeout covers it.
    await expect.poll(() => r.cloud.subscriptions).toBe(2);
    r.scheduler.advance(ACK_TIMEOUT_MS);
    await expect.poll(() => r.sender.status.pending).toBe(0);
    expect(r.cloud.count('a')).toBeGreaterThanOrEqual(2);
    expect(r.cloud.count('b')).toBeGreaterThanOrEqual(2);
  });

  it('a refusal settles the message with its reason; it is never sent again and later messages go on', async () => {
    const r = await rig();
    r.cloud.policy = (m) =>
      m.message.msg_id === 'bad' ? { msg_id: 'bad', ok: false, error: { code: 'validation_failed', message: 'id: not an episode id' } } : { msg_id: m.message.msg_id, ok: true };
    await r.enqueue('first', 'bad', 'after');
    await expect.poll(() => r.sender.status).toEqual({ pending: 0, refused: 1 });
    expect(await r.store.outbox.get('bad')).toMatchObject({ state: 'refused', refusal: { code: 'validation_failed', message: 'id: not an episode id' } });
    expect(await r.state('after')).toBe('acked');
    const warn = r.logs.records.find((x) => x.msg === 'the cloud refused an outbox message; it is kept and never sent again');
    expect(warn).toMatchObject({ msg_id: 'bad', code: 'validation_failed', reason: 'id: not an episode id' });

    // Neither a timeout nor a reconnect sends it again.
    r.scheduler.advance(ACK_TIMEOUT_MS * 3);
    const back = r.reconnected();
    r.broker.clients.get(r.robotId)!.conn.destroy();
    await back;
    await r.enqueue('next');
    await expect.poll(() => r.state('next')).toBe('acked');
    expect(r.cloud.ids()).toEqual(['first', 'bad', 'after', 'next']);
  });

  it('"retry later" (ok: false with retry_after_s) keeps the message pending and sends it again after the delay', async () => {
    const r = await rig();
    let later = 0;
    r.cloud.policy = (m) => {
      if (m.message.msg_id === 'replica' && later < 2) {
        later += 1;
        return { msg_id: 'replica', ok: false, error: { code: 'not_indexed_yet', message: 'episode not indexed yet' }, retry_after_s: 60 };
      }
      return { msg_id: m.message.msg_id, ok: true };
    };
    await r.enqueue('replica', 'after');
    await expect.poll(() => r.state('after')).toBe('acked');
    await expect.poll(() => r.cloud.count('replica')).toBe(1);
    expect(await r.state('replica')).toBe('pending');
    expect(r.sender.status).toEqual({ pending: 1, refused: 0 });
    // Its slot is free while it waits; the ack timeout does not resend it early.
    expect(r.sender.inFlightCount).toBe(0);
    r.scheduler.advance(59_000);
    // A barrier instead of a window: a message enqueued now is sent after anything the advance set
    // going (the sender takes pending messages in order), so once it is acked an early resend of
    // the held message would have reached the cloud.
    await r.enqueue('barrier-1');
    await expect.poll(() => r.state('barrier-1')).toBe('acked');
    expect(r.cloud.count('replica')).toBe(1);
    r.scheduler.advance(1_000);
    await expect.poll(() => r.cloud.count('replica')).toBe(2);
    // A reconnect while it is held back does not send it early either.
    const back = r.reconnected();
    r.broker.clients.get(r.robotId)!.conn.destroy();
    await back;
    await r.enqueue('barrier-2');
    await expect.poll(() => r.state('barrier-2')).toBe('acked');
    expect(r.cloud.count('replica')).toBe(2);
    r.scheduler.advance(60_000);
    await expect.poll(() => r.state('replica')).toBe('acked');
    expect(r.cloud.count('replica')).toBe(3);
    expect(r.logs.records.some((x) => x.msg === 'the cloud asked to send an outbox message again later' && x.retry_after_s === 60)).toBe(true);
  });

  it('ignores acks for unknown ids and drops malformed acks with a log line', async () => {
    const r = await rig();
    r.cloud.policy = 'silent';
    await r.enqueue('a');
    await expect.poll(() => r.cloud.ids()).toEqual(['a']);
    await r.cloud.send(r.robotId, 'not json');
    await r.cloud.send(r.robotId, JSON.stringify({ msg_id: 'a', ok: 'yes' }));
    await r.cloud.send(r.robotId, JSON.stringify({ msg_id: 'a', ok: false }));
    await r.cloud.send(r.robotId, { msg_id: 'unknown', ok: true });
    await r.cloud.send(r.robotId, { msg_id: 'a', ok: true });
    await expect.poll(() => r.state('a')).toBe('acked');
    expect(r.logs.messages().filter((m) => m.startsWith('dropped malformed outbox ack'))).toHaveLength(3);
    expect(await r.store.outbox.get('unknown')).toBeUndefined();
    expect(await r.store.outbox.counts()).toEqual({ pending: 0, acked: 1, refused: 0 });
  });

  it('drains a backlog of 500 in order with never more than maxInFlight unacknowledged', async () => {
    const r = await rig({ connect: false, maxInFlight: 32 });
    const all = ids('m', 500);
    for (const id of all) await r.store.outbox.enqueue({ msgId: id, kind: 'episode.report', body: { id }, createdAt: r.clock.now() });
    await r.sender.start();
    // The cloud answers only once the window is full (or nothing more can come): a sender that
    // kept fewer in flight would stall here, one that sent more would show it in `maxOutstanding`.
    const outstanding = new Set<string>();
    let acked = 0;
    let maxOutstanding = 0;
    r.cloud.policy = (m) => {
      outstanding.add(m.message.msg_id);
      maxOutstanding = Math.max(maxOutstanding, outstanding.size);
      if (outstanding.size === 32 || acked + outstanding.size === all.length) {
        for (const id of outstanding) void r.cloud.send(r.robotId, { msg_id: id, ok: true });
        acked += outstanding.size;
        outstanding.clear();
      }
      return null;
    };
    r.link.start();
    await expect.poll(() => r.sender.status.pending, { timeout: 20_000 }).toBe(0);
    expect(maxOutstanding).toBe(32);
    expect(r.cloud.ids()).toEqual(all);
    expect(await r.store.outbox.counts()).toEqual({ pending: 0, acked: 500, refused: 0 });
  });

  it('to a cloud that takes batches: the first message goes alone, then batches of up to half the window, each message settled', async () => {
    const r = await rig({ maxInFlight: 32 });
    r.cloud.batchMax = 64;
    await r.enqueue('first');
    await expect.poll(() => r.state('first')).toBe('acked');
    expect(r.cloud.publishes).toEqual([1]);
    const rest = ids('b', 200);
    for (const id of rest) await r.store.outbox.enqueue({ msgId: id, kind: 'episode.report', body: { id }, createdAt: r.clock.now() });
    r.sender.notify();
    await expect.poll(() => r.sender.status.pending, { timeout: 20_000 }).toBe(0);
    // Creation order across batches; no message twice; every one acked.
    expect(r.cloud.ids()).toEqual(['first', ...rest]);
    expect(await r.store.outbox.counts()).toEqual({ pending: 0, acked: 201, refused: 0 });
    const later = r.cloud.publishes.slice(1);
    expect(Math.max(...later)).toBe(16);
    expect(later.reduce((a, b) => a + b, 0)).toBe(200);
    expect(later.length).toBeLessThanOrEqual(200 / 4);
    expect(r.sender.sendCounts).toEqual({ messages: 201, publishes: r.cloud.publishes.length });
    for (const m of r.cloud.received) expect(m.message).toEqual({ msg_id: m.message.msg_id, kind: 'episode.report', body: { id: m.message.msg_id } });
  });

  it('a batch not acknowledged in time is sent again message by message', async () => {
    const r = await rig();
    r.cloud.batchMax = 64;
    await r.enqueue('learn');
    await expect.poll(() => r.state('learn')).toBe('acked');
    r.cloud.policy = 'silent';
    await r.enqueue('a', 'b', 'c');
    await expect.poll(() => r.cloud.ids()).toEqual(['learn', 'a', 'b', 'c']);
    expect(r.cloud.publishes).toEqual([1, 3]);
    r.cloud.policy = 'ack';
    r.scheduler.advance(ACK_TIMEOUT_MS);
    await expect.poll(() => r.sender.status.pending).toBe(0);
    expect(r.cloud.publishes).toEqual([1, 3, 1, 1, 1]);
    expect(r.cloud.ids().slice(4).sort()).toEqual(['a', 'b', 'c']);
  });

  it('an acknowledgment without batch_max (an older cloud or replica answered) sends one message per publish again', async () => {
    const r = await rig();
    r.cloud.batchMax = 64;
    await r.enqueue('learn');
    await expect.poll(() => r.state('learn')).toBe('acked');
    r.cloud.policy = 'silent';
    await r.enqueue('a', 'b');
    await expect.poll(() => r.cloud.publishes).toEqual([1, 2]);
    await r.cloud.send(r.robotId, { msg_id: 'a', ok: true });
    await r.cloud.send(r.robotId, { msg_id: 'b', ok: true });
    await expect.poll(() => r.sender.status.pending).toBe(0);
    await r.enqueue('c', 'd');
    await expect.poll(() => r.cloud.ids()).toEqual(['learn', 'a', 'b', 'c', 'd']);
    expect(r.cloud.publishes).toEqual([1, 2, 1, 1]);
  });

  it('a batch of acknowledgments settles each message, refusals and "later" included', async () => {
    const r = await rig();
    r.cloud.batchMax = 64;
    await r.enqueue('learn');
    await expect.poll(() => r.state('learn')).toBe('acked');
    r.cloud.policy = 'silent';
    await r.enqueue('ok', 'no', 'wait');
    await expect.poll(() => r.cloud.publishes).toEqual([1, 3]);
    await r.cloud.send(
      r.robotId,
      JSON.stringify({
        acks: [
          { msg_id: 'ok', ok: true, batch_max: 64 },
          { msg_id: 'no', ok: false, error: { code: 'validation_failed', message: 'bad' }, batch_max: 64 },
          { msg_id: 'wait', ok: false, error: { code: 'unknown_kind', message: 'later' }, retry_after_s: 60, batch_max: 64 },
        ],
      }),
    );
    await expect.poll(() => r.state('ok')).toBe('acked');
    await expect.poll(() => r.state('no')).toBe('refused');
    expect(await r.state('wait')).toBe('pending');
    expect(r.sender.inFlightCount).toBe(0);
    r.cloud.policy = 'ack';
    r.scheduler.advance(60_000);
    await expect.poll(() => r.state('wait')).toBe('acked');
  });

  it('the payload of a batch splices each message in whole', () => {
    const one = outboxPayload({ msgId: 'm1', kind: 'episode.report', bodyJson: '{"b":1}' });
    const two = outboxPayload({ msgId: 'm2', kind: 'episode.report', bodyJson: '{"a":[2]}' });
    expect(outboxBatchPayload([one, two])).toBe(`{"batch":[${one},${two}]}`);
  });

  it('stop() leaves pending messages in the store', async () => {
    const r = await rig();
    r.cloud.policy = 'silent';
    await r.enqueue('a', 'b');
    await expect.poll(() => r.cloud.ids()).toEqual(['a', 'b']);
    await r.sender.stop();
    await r.cloud.send(r.robotId, { msg_id: 'a', ok: true });
    r.scheduler.advance(ACK_TIMEOUT_MS * 2);
    expect(r.scheduler.pending).toBe(0);
    expect(await r.store.outbox.counts()).toEqual({ pending: 2, acked: 0, refused: 0 });
  });

  it('the payload splices the stored body in verbatim after msg_id and kind', () => {
    expect(outboxPayload({ msgId: 'episode.report:ep_1', kind: 'episode.report', bodyJson: '{"b":1,"a":[2]}' })).toBe(
      '{"msg_id":"episode.report:ep_1","kind":"episode.report","body":{"b":1,"a":[2]}}',
    );
  });

  it('a store failure while sending is retried by itself', async () => {
    const dataDir = await makeTempDir();
    const store = openAgentStore(dataDir, new ManualClock());
    cleanups.push(() => store.close());
    await store.outbox.enqueue({ msgId: 'a', kind: 'episode.report', body: {}, createdAt: 0 });
    let failures = 1;
    const real = store.outbox;
    const flaky: OutboxStore = {
      enqueue: (m) => real.enqueue(m),
      get: (id) => real.get(id),
      pending: (o) => (failures-- > 0 ? Promise.reject(new Error('disk I/O error')) : real.pending(o)),
      markSent: (ids, at) => real.markSent(ids, at),
      settle: (id, outcome, at) => real.settle(id, outcome, at),
      counts: () => real.counts(),
      countsByKind: () => real.countsByKind(),
      prune: (before) => real.prune(before),
    };
    const published: string[] = [];
    const clock = new ManualClock();
    const scheduler = new ManualScheduler(clock);
    const logs = captureLogs();
    const sender = new OutboxSender({
      store: flaky,
      transport: { connected: true, publishOutbox: async (p) => void published.push(p) },
      clock,
      scheduler,
      logger: logs.logger,
    });
    cleanups.push(() => sender.stop());
    await sender.start();
    sender.connected();
    await expect.poll(() => logs.messages()).toContain('outbox pump failed; retrying');
    expect(published).toEqual([]);
    scheduler.advance(5_000);
    await expect.poll(() => published).toEqual(['{"msg_id":"a","kind":"episode.report","body":{}}']);
  });
});
