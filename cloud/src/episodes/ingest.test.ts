import type { FastifyBaseLogger } from 'fastify';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { JSON_LIMITS, ManualClock, MAX_OUTBOX_MESSAGE_BYTES, OUTBOX_BATCH_MAX, outboxBatchPayload, type EpisodeReport, type OutboxAck } from '@fleet/protocol';
import { createEnrollmentToken, enrollRobot } from '../robots/enrollment.js';
import type { OrgRow } from '../store/index.js';
import { openTestStore, type TestStore } from '../store/test-store.js';
import { OutboxRouter } from '../robots/outbox-router.js';
import { EpisodeIngestor } from './ingest.js';

const T0 = Date.parse('2026-01-01T00:00:00Z');

interface Recorded {
  robotId: string;
  ack: OutboxAck;
  /** Whether the episode of the acked message was already readable when the ack went out. */
  rowExisted: boolean | null;
}

let store: TestStore;
let clock: ManualClock;
let org: OrgRow;
let robotId: string;
let acks: Recorded[];
/** Each acknowledgment publish: how many acknowledgments it carried (a batch's answer carries several). */
let ackPublishes: number[];
let logger: FastifyBaseLogger & { warn: ReturnType<typeof vi.fn>; error: ReturnType<typeof vi.fn> };
let ingestor: EpisodeIngestor;
let router: OutboxRouter;
/** msg_id -> episode id, so the fake ack can look the row up. */
let episodeOfMsg: Map<string, string>;
let counter = 0;

function fakeLogger(): typeof logger {
  const l: Record<string, unknown> = {
    level: 'info',
    silent: vi.fn(),
    trace: vi.fn(),
    debug: vi.fn(),
    info: vi.fn(),
    warn: vi.fn(),
    error: vi.fn(),
    fatal: vi.fn(),
  };
  l.child = () => l;
  return l as unknown as typeof logger;
}

/** Any non-empty reason: acks are checked by code, not by message. */
const aReason = expect.stringMatching(/./) as unknown as string;

async function enroll(o: OrgRow, name: string): Promise<string> {
  const { token } = await createEnrollmentToken(store, clock, { org: o, createdBy: 'test' });
  return (await enrollRobot(store, clock, { token, name }, ['mqtt://localhost:1883'])).robot_id;
}

beforeEach(async () => {
  store = await openTestStore();
  clock = new ManualClock(T0);
  await store.orgs.create({ id: 'org_a', name: 'a', tier: 'enterprise', createdAt: T0 });
  org = (await store.orgs.get('org_a'))!;
  robotId = await enroll(org, 'r1');
  acks = [];
  ackPublishes = [];
  episodeOfMsg = new Map();
  logger = fakeLogger();
  ({ ingestor, router } = pipeline(async (rid, ack) => {
    const episodeId = episodeOfMsg.get(ack.msg_id);
    const robot = await store.robots.getById(rid);
    const rowExisted = episodeId && robot ? (await store.episodes.get(robot.orgId, episodeId)) !== undefined : null;
    acks.push({ robotId: rid, ack, rowExisted });
  }));
});
/** The ingestor behind the outbox router, as the cloud runs it. */
function pipeline(
  ack: (robotId: string, ack: OutboxAck) => Promise<void>,
  maxBatch?: number,
  onIndexed?: (orgIds: ReadonlySet<string>) => void,
): { ingestor: EpisodeIngestor; router: OutboxRouter } {
  const i = new EpisodeIngestor({ store, clock, logger, ...(maxBatch ? { maxBatch } : {}), ...(onIndexed ? { onIndexed } : {}) });
  const each = async (rid: string, published: OutboxAck | { acks: OutboxAck[] }): Promise<void> => {
    const list = 'acks' in published ? published.acks : [published];
    ackPublishes.push(list.length);
    for (const a of list) await ack(rid, a);
  };
  return { ingestor: i, router: new OutboxRouter({ logger, ack: each, handlers: { 'episode.report': i } }) };
}

afterEach(async () => {
  await router.drain();
  await store.close();
});

function report(over: Partial<EpisodeReport> = {}): EpisodeReport {
  counter += 1;
  return {
    id: `ep_${counter.toString(36).padStart(12, '0')}`,
    recording_session_id: 'rs_1',
    episode_seq: counter,
    session_name: null,
    task_id: 'task_1',
    task_name: null,
    subtask_id: null,
    operator_id: null,
    operator_name: null,
    control_mode: 'teleop',
    policy_version_id: null,
    eval_id: null,
    outcome: 'success',
    started_at: '2026-01-01T00:00:00.000Z',
    ended_at: '2026-01-01T00:01:00.000Z',
    duration_s: 60,
    message_count: 10,
    bag_size_bytes: 100,
    metadata: { site: 'lab' },
    segments: [{ segment_index: 0, subtask_id: null, subtask_name: null, start_offset_s: 0, end_offset_s: 60 }],
    manifest: { files: [{ path: 'bag.mcap', size_bytes: 100, sha256: 'b'.repeat(64) }], total_bytes: 100 },
    ...over,
  };
}

let msgCounter = 0;
function message(body: unknown, msgId = `m${++msgCounter}`): { msgId: string; payload: Buffer } {
  const id = (body as { id?: unknown } | null)?.id;
  if (typeof id === 'string') episodeOfMsg.set(msgId, id);
  return { msgId, payload: Buffer.from(JSON.stringify({ msg_id: msgId, kind: 'episode.report', body })) };
}

async function send(body: unknown, rid = robotId, msgId?: string): Promise<string> {
  const m = message(body, msgId);
  await router.submit(rid, m.payload);
  await router.drain();
  return m.msgId;
}

function ackOf(msgId: string): Recorded[] {
  return acks.filter((a) => a.ack.msg_id === msgId);
}

describe('EpisodeIngestor', () => {
  it('tells onIndexed which organizations a batch wrote new episodes to, and not for a resend', async () => {
    await store.orgs.create({ id: 'org_b', name: 'b', tier: 'enterprise', createdAt: T0 });
    const robotB = await enroll((await store.orgs.get('org_b'))!, 'rb');
    const seen: string[][] = [];
    const watched = pipeline(async () => undefined, undefined, (orgIds) => void seen.push([...orgIds].sort())).router;
    // The robots' organizations are looked up once (a round trip on PostgreSQL): looked up
    // already, the two reports below join one batch on either engine.
    await Promise.all([watched.submit(robotId, message(report()).payload), watched.submit(robotB, message(report()).payload)]);
    await watched.drain();
    seen.length = 0;
    const [a, b] = [report(), report()];
    await Promise.all([watched.submit(robotId, message(a).payload), watched.submit(robotB, message(b).payload)]);
    await watched.drain();
    expect(seen).toEqual([['org_a', 'org_b']]);
    await watched.submit(robotId, message(a).payload);
    await watched.drain();
    expect(seen).toHaveLength(1);
  });

  it("indexes a robot's reports in the order they came, however its first lookup is answered", async () => {
    // The robot lookup of a fresh ingestor answers late, later calls sooner (as pooled database
    // connections can): reports that came meanwhile must still queue in their order.
    const getById = store.robots.getById.bind(store.robots);
    let calls = 0;
    const spy = vi.spyOn(store.robots, 'getById').mockImplementation(async (id) => {
      const delay = 60 - 20 * calls++;
      await new Promise((r) => setTimeout(r, Math.max(0, delay)));
      return getById(id);
    });
    const sent = [report(), report(), report()];
    // As the MQTT link hands them over: one after the other, nobody waiting for the previous one.
    await Promise.all(sent.map((r) => router.submit(robotId, message(r).payload)));
    await router.drain();
    spy.mockRestore();
    expect((await store.episodes.list(org.id, { eq: {}, metadata: {}, annotation: {} }, 0, 10)).map((e) => e.id)).toEqual(sent.map((r) => r.id));
  });

  it('indexes a valid report and acks ok only once the row exists', async () => {
    const r = report();
    const msgId = await send(r);
    expect(await store.episodes.get(org.id, r.id)).toMatchObject({ id: r.id, robotId, reportedAt: T0, metadata: { site: 'lab' } });
    expect(ackOf(msgId)).toEqual([{ robotId, ack: { msg_id: msgId, ok: true, batch_max: OUTBOX_BATCH_MAX }, rowExisted: true }]);
    expect(ingestor.indexed).toBe(1);
  });

  it('does not ack before the batch is written', async () => {
    const r = report();
    const m = message(r);
    await router.submit(robotId, m.payload);
    // The batch waits for the next turn of the event loop; nothing may be acked yet.
    expect(acks).toEqual([]);
    await router.drain();
    expect(ackOf(m.msgId)).toHaveLength(1);
    expect(ackOf(m.msgId)[0]!.rowExisted).toBe(true);
  });

  it('acks a resend ok and keeps one row', async () => {
    const r = report();
    const first = await send(r);
    const again = await send(r, robotId, first);
    const otherMsg = await send(r);
    expect(acks.map((a) => a.ack)).toEqual([
      { msg_id: first, ok: true, batch_max: OUTBOX_BATCH_MAX },
      { msg_id: again, ok: true, batch_max: OUTBOX_BATCH_MAX },
      { msg_id: otherMsg, ok: true, batch_max: OUTBOX_BATCH_MAX },
    ]);
    expect(await store.episodes.count(org.id)).toBe(1);
    expect(ingestor.indexed).toBe(1);
  });

  it('refuses an episode id that another robot reported, with conflict', async () => {
    const other = await enroll(org, 'r2');
    const r = report();
    await send(r);
    const msgId = await send({ ...r, task_id: 'forged' }, other);
    expect(ackOf(msgId).map((a) => a.ack)).toEqual([{ msg_id: msgId, ok: false, error: { code: 'conflict', message: aReason }, batch_max: OUTBOX_BATCH_MAX }]);
    expect(ackOf(msgId)[0]!.robotId).toBe(other);
    expect((await store.episodes.get(org.id, r.id))!).toMatchObject({ robotId, report: { task_id: 'task_1' } });
  });

  const malformed: [string, () => unknown][] = [
    [
      'a missing field',
      () => {
        const { outcome: _o, ...rest } = report();
        return rest;
      },
    ],
    ['a bad sha256', () => report({ manifest: { files: [{ path: 'bag.mcap', size_bytes: 1, sha256: 'XYZ' }], total_bytes: 1 } })],
    ['an uppercase sha256', () => report({ manifest: { files: [{ path: 'bag.mcap', size_bytes: 1, sha256: 'B'.repeat(64) }], total_bytes: 1 } })],
    ['a path with ..', () => report({ manifest: { files: [{ path: 'video/../../etc/passwd', size_bytes: 1, sha256: 'c'.repeat(64) }], total_bytes: 1 } })],
    ['an absolute path', () => report({ manifest: { files: [{ path: '/etc/passwd', size_bytes: 1, sha256: 'c'.repeat(64) }], total_bytes: 1 } })],
    ['an episode id of the wrong format', () => report({ id: 'episode-1' })],
    ['an uppercase episode id', () => report({ id: 'ep_ABCDEFGHIJKL' })],
    ['an unknown field', () => ({ ...report(), extra: 1 })],
    ['a bad started_at', () => report({ started_at: 'yesterday' })],
    ['a body that is not an object', () => 'hello'],
  ];

  it.each(malformed)('refuses a report with %s (validation_failed, with a reason), and indexes the next good one', async (_name, make) => {
    const bad = make();
    const badMsg = await send(bad);
    const refused = ackOf(badMsg);
    expect(refused).toHaveLength(1);
    expect(refused[0]!.robotId).toBe(robotId);
    const ack = refused[0]!.ack;
    expect(ack.ok).toBe(false);
    if (ack.ok) return;
    expect(ack.error.code).toBe('validation_failed');
    expect(ack.error.message.length).toBeGreaterThan(0);
    expect(ack.error.message.length).toBeLessThanOrEqual(1024);
    expect(await store.episodes.count(org.id)).toBe(0);
    expect(logger.warn).toHaveBeenCalled();

    const good = report();
    const goodMsg = await send(good);
    expect(ackOf(goodMsg).map((a) => a.ack)).toEqual([{ msg_id: goodMsg, ok: true, batch_max: OUTBOX_BATCH_MAX }]);
    expect(await store.episodes.get(org.id, good.id)).toBeDefined();
    expect(await store.episodes.count(org.id)).toBe(1);
  });

  it('refuses a malformed envelope that still has a msg_id', async () => {
    const payload = Buffer.from(JSON.stringify({ msg_id: 'm_env', kind: 'Not A Kind!', body: report() }));
    await router.submit(robotId, payload);
    await router.drain();
    expect(acks.map((a) => a.ack)).toEqual([{ msg_id: 'm_env', ok: false, error: { code: 'validation_failed', message: aReason }, batch_max: OUTBOX_BATCH_MAX }]);
    expect(await store.episodes.count(org.id)).toBe(0);
  });

  it('answers a kind it has no handler for with "retry later", so the robot keeps it', async () => {
    for (const kind of ['something.newer', 'replica.state']) {
      await router.submit(robotId, Buffer.from(JSON.stringify({ msg_id: `m_${kind}`, kind, body: { x: 1 } })));
    }
    await router.drain();
    expect(acks.map((a) => a.ack)).toEqual([
      { msg_id: 'm_something.newer', ok: false, error: { code: 'unknown_kind', message: aReason }, retry_after_s: 3600, batch_max: OUTBOX_BATCH_MAX },
      { msg_id: 'm_replica.state', ok: false, error: { code: 'unknown_kind', message: aReason }, retry_after_s: 3600, batch_max: OUTBOX_BATCH_MAX },
    ]);
    expect(await store.episodes.count(org.id)).toBe(0);
  });

  it('refuses a report nested beyond the JSON bounds, stores nothing, and still indexes the next one', async () => {
    // 4,100 levels in 8 KB: stored, it would have broken every later read of the episode.
    const deepMeta = `{"a":${'['.repeat(4100)}${']'.repeat(4100)}}`;
    const good = report();
    const text = JSON.stringify({ msg_id: 'm_deep', kind: 'episode.report', body: { ...report(), metadata: '__DEEP__' } }).replace('"__DEEP__"', deepMeta);
    await router.submit(robotId, Buffer.from(text));
    // A wide one too: more keys in one object than the bounds allow.
    const wide = Object.fromEntries(Array.from({ length: 1001 }, (_, i) => [`k${i}`, i]));
    const wideMsg = await send(report({ metadata: wide }));
    await router.drain();
    expect(ackOf('m_deep').map((a) => a.ack)).toEqual([{ msg_id: 'm_deep', ok: false, error: { code: 'validation_failed', message: expect.stringMatching(/deeper than 32/) as unknown }, batch_max: OUTBOX_BATCH_MAX }]);
    expect(ackOf(wideMsg).map((a) => a.ack)).toEqual([{ msg_id: wideMsg, ok: false, error: { code: 'validation_failed', message: expect.stringMatching(/more than 1000 keys/) as unknown }, batch_max: OUTBOX_BATCH_MAX }]);
    expect(await store.episodes.count(org.id)).toBe(0);
    const goodMsg = await send(good);
    expect(ackOf(goodMsg).map((a) => a.ack.ok)).toEqual([true]);
  });

  it('drops a payload that is not JSON, or has no msg_id, without an ack and without throwing', async () => {
    for (const raw of ['not json {', '', 'null', '42', '[]', JSON.stringify({ kind: 'episode.report', body: report() }), JSON.stringify({ msg_id: 7 })]) {
      await expect(router.submit(robotId, Buffer.from(raw))).resolves.toBeUndefined();
    }
    await router.drain();
    expect(acks).toEqual([]);
    expect(await store.episodes.count(org.id)).toBe(0);
    // Still works afterwards.
    const goodMsg = await send(report());
    expect(ackOf(goodMsg).map((a) => a.ack.ok)).toEqual([true]);
  });

  it('refuses an oversized payload with payload_too_large, addressed by the msg_id it starts with', async () => {
    const r = report({ metadata: { pad: 'x'.repeat(MAX_OUTBOX_MESSAGE_BYTES) } });
    const m = message(r, 'm_big');
    expect(m.payload.length).toBeGreaterThan(MAX_OUTBOX_MESSAGE_BYTES);
    expect(m.payload.subarray(0, 10).toString()).toBe('{"msg_id":');
    await router.submit(robotId, m.payload);
    await router.drain();
    expect(acks.map((a) => a.ack)).toEqual([{ msg_id: 'm_big', ok: false, error: { code: 'payload_too_large', message: aReason }, batch_max: OUTBOX_BATCH_MAX }]);
    expect(await store.episodes.get(org.id, r.id)).toBeUndefined();

    // An oversized payload whose msg_id cannot be found is dropped silently.
    acks.length = 0;
    await router.submit(robotId, Buffer.from(JSON.stringify({ kind: 'episode.report', body: r, msg_id: 'late' })));
    await router.drain();
    expect(acks).toEqual([]);

    // A message of exactly the limit is not refused for its size.
    const small = report();
    const base = message({ ...small, metadata: { pad: '' } }, 'm_edge').payload.length;
    const edge = message({ ...small, metadata: { pad: 'y'.repeat(MAX_OUTBOX_MESSAGE_BYTES - base) } }, 'm_edge');
    expect(edge.payload.length).toBe(MAX_OUTBOX_MESSAGE_BYTES);
    await router.submit(robotId, edge.payload);
    await router.drain();
    expect(acks.map((a) => a.ack)).toEqual([{ msg_id: 'm_edge', ok: true, batch_max: OUTBOX_BATCH_MAX }]);
  });

  it('does not index a message from an unknown robot', async () => {
    const r = report();
    const msgId = await send(r, 'rbt_unknown');
    expect(await store.episodes.count(org.id)).toBe(0);
    expect(ackOf(msgId).filter((a) => a.ack.ok)).toEqual([]);
    // In no organization at all.
    for (const o of await store.orgs.list()) expect(await store.episodes.count(o.id)).toBe(0);
    expect(logger.warn).toHaveBeenCalled();
  });

  it('indexes a robot under its own organization', async () => {
    await store.orgs.create({ id: 'org_b', name: 'b', tier: 'enterprise', createdAt: T0 });
    const theirs = await enroll((await store.orgs.get('org_b'))!, 'rb');
    const r = report();
    await send(r, theirs);
    expect(await store.episodes.get('org_b', r.id)).toMatchObject({ robotId: theirs, orgId: 'org_b' });
    expect(await store.episodes.get(org.id, r.id)).toBeUndefined();
  });

  it('writes a burst of 2000 reports in batches and acks all of them', async () => {
    const spy = vi.spyOn(store.episodes, 'ingest');
    const msgs = Array.from({ length: 2000 }, () => message(report()));
    const submitted = msgs.map((m) => router.submit(robotId, m.payload));
    await Promise.all(submitted);
    await router.drain();

    expect(spy.mock.calls.length).toBeGreaterThan(0);
    expect(spy.mock.calls.length).toBeLessThan(10);
    const sizes = spy.mock.calls.map(([items]) => items.length);
    expect(sizes.reduce((a, b) => a + b, 0)).toBe(2000);
    for (const s of sizes) expect(s).toBeLessThanOrEqual(1000);

    expect(await store.episodes.count(org.id)).toBe(2000);
    expect(acks).toHaveLength(2000);
    expect(new Set(acks.map((a) => a.ack.msg_id))).toEqual(new Set(msgs.map((m) => m.msgId)));
    expect(acks.every((a) => a.ack.ok && a.rowExisted === true)).toBe(true);
    expect(ingestor.indexed).toBe(2000);
  });

  it('honours maxBatch', async () => {
    const small = pipeline(async (rid, ack) => void acks.push({ robotId: rid, ack, rowExisted: null }), 7).router;
    // The robot's organization is looked up once (a round trip on PostgreSQL); after that the 20
    // reports below are queued in one tick on either engine.
    await small.submit(robotId, message(report()).payload);
    await small.drain();
    acks.length = 0;
    const spy = vi.spyOn(store.episodes, 'ingest');
    await Promise.all(Array.from({ length: 20 }, () => small.submit(robotId, message(report()).payload)));
    await small.drain();
    expect(spy.mock.calls.map(([items]) => items.length)).toEqual([7, 7, 6]);
    expect(acks).toHaveLength(20);
  });

  it('drain() resolves only after everything submitted is acked', async () => {
    const msgs = Array.from({ length: 50 }, () => message(report()));
    // Submissions not awaited: drain must still cover them.
    const submitted = msgs.map((m) => router.submit(robotId, m.payload));
    await router.drain();
    expect(acks).toHaveLength(50);
    expect(await store.episodes.count(org.id)).toBe(50);
    await Promise.all(submitted);

    // And with nothing pending it resolves at once.
    await expect(router.drain()).resolves.toBeUndefined();
  });

  it('does not ack when the store fails, so the robot resends, and the resend is indexed', async () => {
    const r = report();
    const spy = vi.spyOn(store.episodes, 'ingest').mockRejectedValueOnce(new Error('disk full'));
    const msgId = await send(r);
    expect(ackOf(msgId)).toEqual([]);
    expect(logger.error).toHaveBeenCalled();
    expect(await store.episodes.count(org.id)).toBe(0);
    await send(r, robotId, msgId);
    expect(ackOf(msgId).map((a) => a.ack)).toEqual([{ msg_id: msgId, ok: true, batch_max: OUTBOX_BATCH_MAX }]);
    expect(spy).toHaveBeenCalledTimes(2);
    expect(await store.episodes.count(org.id)).toBe(1);
  });

  it('survives an ack that throws', async () => {
    const failing = pipeline(async () => {
      throw new Error('broker gone');
    }).router;
    const r = report();
    await failing.submit(robotId, message(r).payload);
    await failing.drain();
    expect(await store.episodes.get(org.id, r.id)).toBeDefined();
    expect(logger.warn).toHaveBeenCalled();
  });
});

describe('outbox batches (protocol 2)', () => {
  /** The wire form of one message, as the agent writes it. */
  const wire = (msgId: string, kind: string, body: unknown): string => {
    const id = (body as { id?: unknown } | null)?.id;
    if (typeof id === 'string') episodeOfMsg.set(msgId, id);
    return JSON.stringify({ msg_id: msgId, kind, body });
  };

  it('handles each message of a batch as if it came alone and answers them all in one publish', async () => {
    const good = [report(), report(), report()];
    const deep = JSON.parse(`${'{"a":'.repeat(JSON_LIMITS.maxDepth)}1${'}'.repeat(JSON_LIMITS.maxDepth)}`) as unknown;
    const payload = outboxBatchPayload([
      ...good.map((r, i) => wire(`b_ok${i}`, 'episode.report', r)),
      wire('b_bad', 'episode.report', { id: 'not a report' }),
      wire('b_newer', 'something.newer', {}),
      wire('b_deep', 'episode.report', { ...report(), metadata: deep }),
      // No usable msg_id: not answered, alone or in a batch.
      JSON.stringify({ kind: 'episode.report', body: report() }),
    ]);
    await router.submit(robotId, Buffer.from(payload));
    await router.drain();
    expect(ackPublishes).toEqual([6]);
    const byId = new Map(acks.map((a) => [a.ack.msg_id, a]));
    for (let i = 0; i < good.length; i++) {
      expect(byId.get(`b_ok${i}`)).toEqual({ robotId, ack: { msg_id: `b_ok${i}`, ok: true, batch_max: OUTBOX_BATCH_MAX }, rowExisted: true });
      expect(await store.episodes.get(org.id, good[i]!.id)).toBeDefined();
    }
    expect(byId.get('b_bad')?.ack).toMatchObject({ ok: false, error: { code: 'validation_failed' } });
    expect(byId.get('b_newer')?.ack).toMatchObject({ ok: false, error: { code: 'unknown_kind' }, retry_after_s: 3600 });
    // The same bound as alone: the batch's own two levels do not count against its messages.
    expect(byId.get('b_deep')?.ack).toMatchObject({ ok: false, error: { code: 'validation_failed', message: expect.stringMatching(/deeper than 32/) as unknown } });
    expect(acks).toHaveLength(6);
    expect(ingestor.indexed).toBe(3);
  });

  it('a message as deep as a lone one may be is indexed from a batch too', async () => {
    // metadata nested to the deepest level a lone message passes (its body is level 2, metadata 3).
    const levels = JSON_LIMITS.maxDepth - 3;
    const nested = JSON.parse(`${'{"a":'.repeat(levels)}1${'}'.repeat(levels)}`) as Record<string, unknown>;
    const alone = report({ metadata: nested });
    await send(alone);
    const batched = report({ metadata: nested });
    await router.submit(robotId, Buffer.from(outboxBatchPayload([wire('d1', 'episode.report', batched), wire('d2', 'episode.report', report())])));
    await router.drain();
    expect(acks.map((a) => a.ack.ok)).toEqual([true, true, true]);
    expect(await store.episodes.get(org.id, batched.id)).toBeDefined();
  });

  it('a resent batch is acknowledged again and indexes nothing twice', async () => {
    const rs = [report(), report()];
    const payload = Buffer.from(outboxBatchPayload(rs.map((r, i) => wire(`again${i}`, 'episode.report', r))));
    await router.submit(robotId, payload);
    await router.drain();
    await router.submit(robotId, payload);
    await router.drain();
    expect(ackPublishes).toEqual([2, 2]);
    expect(acks.map((a) => a.ack.ok)).toEqual([true, true, true, true]);
    expect(ingestor.indexed).toBe(2);
    expect((await store.episodes.list(org.id, { eq: {}, metadata: {}, annotation: {} }, 0, 10)).map((e) => e.id)).toEqual(rs.map((r) => r.id));
  });

  it(`refuses a batch of more than ${OUTBOX_BATCH_MAX} messages message by message, indexing none`, async () => {
    const rs = Array.from({ length: OUTBOX_BATCH_MAX + 1 }, () => report());
    await router.submit(robotId, Buffer.from(outboxBatchPayload(rs.map((r, i) => wire(`big${i}`, 'episode.report', r)))));
    await router.drain();
    expect(ackPublishes).toEqual([OUTBOX_BATCH_MAX + 1]);
    expect(new Set(acks.map((a) => a.ack.ok === false && a.ack.retry_after_s === undefined && a.ack.error.code))).toEqual(new Set(['batch_too_large']));
    expect(ingestor.indexed).toBe(0);
  });

  it('answers a huge batch of tiny messages with a bounded number of refusals', async () => {
    const tiny = Array.from({ length: 20_000 }, (_, i) => JSON.stringify({ msg_id: `t${i}` }));
    const payload = outboxBatchPayload(tiny);
    expect(payload.length).toBeLessThan(MAX_OUTBOX_MESSAGE_BYTES);
    await router.submit(robotId, Buffer.from(payload));
    await router.drain();
    expect(ackPublishes).toEqual([4 * OUTBOX_BATCH_MAX]);
    expect(acks.map((a) => a.ack.msg_id)).toEqual(tiny.slice(0, 4 * OUTBOX_BATCH_MAX).map((_t, i) => `t${i}`));
  });

  it('a lone message is answered alone, and every answer says the cloud takes batches', async () => {
    const msgId = await send(report());
    expect(ackPublishes).toEqual([1]);
    expect(ackOf(msgId)[0]?.ack).toEqual({ msg_id: msgId, ok: true, batch_max: OUTBOX_BATCH_MAX });
  });

  it('answers the messages it could name when the store fails for some of them', async () => {
    const failing = pipeline(async (rid, ack) => void acks.push({ robotId: rid, ack, rowExisted: null }));
    const spy = vi.spyOn(store.episodes, 'ingest').mockRejectedValueOnce(new Error('disk full'));
    await failing.router.submit(robotId, Buffer.from(outboxBatchPayload([wire('f1', 'episode.report', report()), wire('f2', 'something.newer', {})])));
    await failing.router.drain();
    spy.mockRestore();
    // The report is not answered (the robot sends it again); the other message still is.
    expect(acks.map((a) => a.ack.msg_id)).toEqual(['f2']);
    expect(ackPublishes).toEqual([1]);
  });
});
