import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { HOUR, ManualClock } from '@fleet/protocol';
import { hashSecret } from '../ids.js';
import { createEnrollmentToken, enrollRobot } from '../robots/enrollment.js';
import { ROBOT_SORTS, robotSortValue, type RobotListPosition, type RobotListQuery, type RobotSort } from './shared/robot-list-query.js';
import { describeStore, sqliteDb, type TestStore } from './test-store.js';
import { SqliteWebhooks } from './sqlite/webhooks.js';
import { ATTEMPTS_KEPT_PER_SUBSCRIPTION, type EnrollmentTokenRow, type NewRobotRow, type RobotStore } from './shared/types.js';

const T0 = Date.parse('2026-01-01T00:00:00Z');

describeStore('fleet administration in the store', (open, engine) => {
let store: TestStore;
let clock: ManualClock;

beforeEach(async () => {
  clock = new ManualClock(T0);
  store = await open();
  for (const id of ['org_a', 'org_b']) await store.orgs.create({ id, name: id, tier: 'enterprise', createdAt: T0 });
});
afterEach(async () => {
  await store.close();
});

const orgA = async () => (await store.orgs.get('org_a'))!;
const orgB = async () => (await store.orgs.get('org_b'))!;

describe('enrollment tokens: list and revoke', () => {
  it('pages an organization\'s tokens by id, with their prefix and never their hash in the wire form', async () => {
    const made = [];
    for (let i = 0; i < 3; i++) made.push(await createEnrollmentToken(store, clock, { org: await orgA(), createdBy: 'test' }));
    await createEnrollmentToken(store, clock, { org: await orgB(), createdBy: 'test' });
    const ids = made.map((t) => t.id).sort();
    const first = await store.robots.listEnrollmentTokens('org_a', null, 2);
    const rest = await store.robots.listEnrollmentTokens('org_a', first[first.length - 1]!.id, 2);
    expect([...first, ...rest].map((t) => t.id)).toEqual(ids);
    for (const t of first) {
      const plain = made.find((m) => m.id === t.id)!.token;
      expect(plain.startsWith(t.tokenPrefix!)).toBe(true);
      expect(t.tokenPrefix!.length).toBe(12);
      expect(t.revokedAt).toBeNull();
    }
  });

  it('revokes once, only within the organization, and a revoked token enrolls no robot', async () => {
    const t = await createEnrollmentToken(store, clock, { org: await orgA(), createdBy: 'test', maxUses: 5 });
    expect(await store.robots.revokeEnrollmentToken('org_b', t.id, T0 + 1)).toBeUndefined();
    expect((await store.robots.revokeEnrollmentToken('org_a', t.id, T0 + 1))?.revokedAt).toBe(T0 + 1);
    expect((await store.robots.revokeEnrollmentToken('org_a', t.id, T0 + 2))?.revokedAt).toBe(T0 + 1);
    expect(await store.robots.revokeEnrollmentToken('org_a', 'ret_unknown', T0)).toBeUndefined();
    await expect(enrollRobot(store, clock, { token: t.token }, ['mqtt://x'])).rejects.toMatchObject({ code: 'unauthenticated', message: 'enrollment token revoked' });
    expect((await store.robots.listEnrollmentTokens('org_a', null, 10))[0]!.uses).toBe(0);
  });
});

describe('enrollment in the store: createEnrollmentToken and enroll', () => {
  const EXPIRES = T0 + HOUR;

  async function token(over: Partial<Omit<EnrollmentTokenRow, 'uses' | 'revokedAt'>> = {}): Promise<Omit<EnrollmentTokenRow, 'uses' | 'revokedAt'>> {
    const row = { id: 'ret_1', orgId: 'org_a', tokenHash: 'hash-1', tokenPrefix: 'ret_abcdefgh', namePrefix: 'arm', maxUses: 2, expiresAt: EXPIRES, createdBy: 'test', createdAt: T0, ...over };
    await store.robots.createEnrollmentToken(row);
    return row;
  }

  /** What `build` was handed, per call. */
  let built: { token: EnrollmentTokenRow; ordinal: number }[];
  /** Organizations `robotLimit` was asked about. */
  let asked: string[];
  beforeEach(() => {
    built = [];
    asked = [];
  });

  function enroll(tokenHash: string, opts: { now?: number; limit?: number | Promise<number> } = {}) {
    const args: Parameters<RobotStore['enroll']>[0] = {
      tokenHash,
      now: opts.now ?? T0 + 1,
      robotLimit: (orgId) => {
        asked.push(orgId);
        return opts.limit;
      },
      build: (t, ordinal): NewRobotRow => {
        built.push({ token: t, ordinal });
        return {
          id: `rbt_${t.id}_${ordinal}`,
          name: `${t.namePrefix ?? 'robot'}-${ordinal}`,
          platform: 'linux-arm64',
          runtimeVersion: '1.2.3',
          capabilities: ['camera', 'gripper'],
          mqttPasswordHash: `pw-${ordinal}`,
          connected: false,
          recordingState: null,
          lastSeenAt: null,
          createdAt: T0 + 2,
        };
      },
    };
    return store.robots.enroll(args);
  }

  const uses = async (orgId = 'org_a') => (await store.robots.listEnrollmentTokens(orgId, null, 10)).map((t) => `${t.id}:${t.uses}`);
  const robotIds = async (orgId = 'org_a') => (await store.robots.list(orgId, null, 100, { includeDeenrolled: true })).map((r) => r.id);

  it('createEnrollmentToken stores the row as given, unused and not revoked, in its organization only', async () => {
    const row = await token({ namePrefix: null });
    expect(await store.robots.listEnrollmentTokens('org_a', null, 10)).toEqual([{ ...row, uses: 0, revokedAt: null }]);
    expect(await store.robots.listEnrollmentTokens('org_b', null, 10)).toEqual([]);
    // A token hash names one token.
    await expect(token({ id: 'ret_2', orgId: 'org_b' })).rejects.toThrow();
    expect(await store.robots.listEnrollmentTokens('org_b', null, 10)).toEqual([]);
  });

  it('enroll takes one use per robot, hands build the token and the ordinal, and inserts the robot it built', async () => {
    await token();
    const first = await enroll('hash-1');
    const robot = {
      id: 'rbt_ret_1_1',
      orgId: 'org_a',
      name: 'arm-1',
      platform: 'linux-arm64',
      runtimeVersion: '1.2.3',
      capabilities: ['camera', 'gripper'],
      mqttPasswordHash: 'pw-1',
      enrollmentTokenId: 'ret_1',
      connected: false,
      recordingState: null,
      lastSeenAt: null,
      createdAt: T0 + 2,
      deenrolledAt: null,
      rotationRequestedAt: null,
      pendingPasswordHash: null,
      pendingSecretSealed: null,
      rotatedAt: null,
    };
    expect(first).toEqual({ kind: 'enrolled', robot });
    expect(await store.robots.get('org_a', robot.id)).toEqual(robot);
    expect(await uses()).toEqual(['ret_1:1']);

    expect(await enroll('hash-1')).toMatchObject({ kind: 'enrolled', robot: { id: 'rbt_ret_1_2', name: 'arm-2', orgId: 'org_a' } });
    expect(built.map((b) => [b.token.id, b.token.uses, b.ordinal])).toEqual([
      ['ret_1', 0, 1],
      ['ret_1', 1, 2],
    ]);
    expect(asked).toEqual(['org_a', 'org_a']);
    // Both uses are taken: a third is refused, nothing is built or inserted.
    expect(await enroll('hash-1')).toEqual({ kind: 'token_used_up' });
    expect(built).toHaveLength(2);
    expect(await uses()).toEqual(['ret_1:2']);
    expect(await robotIds()).toEqual(['rbt_ret_1_1', 'rbt_ret_1_2']);
    expect(await robotIds('org_b')).toEqual([]);
  });

  it('enroll refuses an unknown, a revoked and an expired token, taking no use and inserting no robot', async () => {
    await token();
    await token({ id: 'ret_2', tokenHash: 'hash-2' });
    expect(await enroll('hash-unknown')).toEqual({ kind: 'token_invalid' });
    // Expired at its expiry time; enrolls up to the millisecond before.
    expect(await enroll('hash-1', { now: EXPIRES })).toEqual({ kind: 'token_expired' });
    expect(await enroll('hash-1', { now: EXPIRES + HOUR })).toEqual({ kind: 'token_expired' });
    expect(await store.robots.revokeEnrollmentToken('org_a', 'ret_2', T0 + 1)).toMatchObject({ revokedAt: T0 + 1 });
    expect(await enroll('hash-2')).toEqual({ kind: 'token_revoked' });
    expect(built).toEqual([]);
    expect(await uses()).toEqual(['ret_1:0', 'ret_2:0']);
    expect(await robotIds()).toEqual([]);
    expect(await enroll('hash-1', { now: EXPIRES - 1 })).toMatchObject({ kind: 'enrolled', robot: { id: 'rbt_ret_1_1' } });
    expect(await uses()).toEqual(['ret_1:1', 'ret_2:0']);
  });

  it("enroll refuses at the organization's robot limit, counting its enrolled robots only", async () => {
    await token({ maxUses: 10 });
    await token({ id: 'ret_b', orgId: 'org_b', tokenHash: 'hash-b', maxUses: 10 });
    expect(await enroll('hash-1', { limit: 1 })).toMatchObject({ kind: 'enrolled', robot: { id: 'rbt_ret_1_1' } });
    expect(await enroll('hash-1', { limit: 1 })).toEqual({ kind: 'robot_limit', limit: 1 });
    // The limit may come from an async lookup.
    expect(await enroll('hash-1', { limit: Promise.resolve(1) })).toEqual({ kind: 'robot_limit', limit: 1 });
    expect(built).toHaveLength(1);
    expect(await uses()).toEqual(['ret_1:1']);
    expect(await robotIds()).toEqual(['rbt_ret_1_1']);
    // Another organization's robots do not count.
    expect(await enroll('hash-b', { limit: 1 })).toMatchObject({ kind: 'enrolled', robot: { id: 'rbt_ret_b_1', orgId: 'org_b' } });
    expect(asked).toEqual(['org_a', 'org_a', 'org_a', 'org_b']);
    // Nor does a de-enrolled robot.
    await store.robots.deenroll('org_a', 'rbt_ret_1_1', T0 + 3);
    expect(await enroll('hash-1', { limit: Promise.resolve(1) })).toMatchObject({ kind: 'enrolled', robot: { id: 'rbt_ret_1_2' } });
    expect(await enroll('hash-1', { limit: 1 })).toEqual({ kind: 'robot_limit', limit: 1 });
    // A limit of 0 refuses the first robot; no limit (undefined) refuses none.
    await token({ id: 'ret_3', tokenHash: 'hash-3' });
    expect(await enroll('hash-3', { limit: 0 })).toEqual({ kind: 'robot_limit', limit: 0 });
    expect(await enroll('hash-3')).toMatchObject({ kind: 'enrolled', robot: { id: 'rbt_ret_3_1' } });
    expect(await enroll('hash-3')).toMatchObject({ kind: 'enrolled', robot: { id: 'rbt_ret_3_2' } });
    expect(await uses()).toEqual(['ret_1:2', 'ret_3:2']);
    expect(await robotIds()).toEqual(['rbt_ret_1_1', 'rbt_ret_1_2', 'rbt_ret_3_1', 'rbt_ret_3_2']);
  });
});

describe('gauges: connected robots', () => {
  it('connectedRobots counts the robots whose connection is up, in every organization', async () => {
    const enrolled = async (org: 'org_a' | 'org_b', count: number): Promise<string[]> => {
      const t = await createEnrollmentToken(store, clock, { org: org === 'org_a' ? await orgA() : await orgB(), createdBy: 'test', maxUses: count });
      const ids = [];
      for (let i = 0; i < count; i++) ids.push((await enrollRobot(store, clock, { token: t.token }, ['mqtt://x'])).robot_id);
      return ids;
    };
    const [a1, a2, a3] = (await enrolled('org_a', 3)) as [string, string, string];
    const [b1] = (await enrolled('org_b', 1)) as [string];
    expect(await store.gauges.connectedRobots()).toBe(0);
    for (const id of [a1, a2, b1]) await store.robots.updateStatus(id, { connected: true, seenAt: T0 + 1 });
    await store.robots.updateStatus(a3, { connected: false, recordingState: 'idle', seenAt: T0 + 1 });
    expect(await store.gauges.connectedRobots()).toBe(3);
    await store.robots.updateStatus(a2, { connected: false, seenAt: T0 + 2 });
    expect(await store.gauges.connectedRobots()).toBe(2);
    // A de-enrolled robot is disconnected, and a late status does not count it again.
    await store.robots.deenroll('org_b', b1, T0 + 3);
    await store.robots.updateStatus(b1, { connected: true, seenAt: T0 + 4 });
    expect(await store.gauges.connectedRobots()).toBe(1);
    await store.robots.markAllDisconnected();
    expect(await store.gauges.connectedRobots()).toBe(0);
  });
});

describe('de-enrollment', () => {
  async function enrolled(count = 1): Promise<string[]> {
    const t = await createEnrollmentToken(store, clock, { org: await orgA(), createdBy: 'test', maxUses: count });
    const ids = [];
    for (let i = 0; i < count; i++) ids.push((await enrollRobot(store, clock, { token: t.token }, ['mqtt://x'])).robot_id);
    return ids;
  }

  it('marks the robot once, disconnected, out of the default list, out of the robot limit, and ignores its later statuses', async () => {
    const [a, b] = (await enrolled(2)) as [string, string];
    await store.robots.updateStatus(a, { connected: true, seenAt: T0 });
    expect(await store.robots.deenroll('org_b', a, T0 + 1)).toBeUndefined();
    const gone = await store.robots.deenroll('org_a', a, T0 + 1);
    expect(gone).toMatchObject({ id: a, deenrolledAt: T0 + 1, connected: false });
    expect((await store.robots.deenroll('org_a', a, T0 + 2))?.deenrolledAt).toBe(T0 + 1);
    expect((await store.robots.list('org_a', null, 10)).map((r) => r.id)).toEqual([b]);
    expect((await store.robots.list('org_a', null, 10, { includeDeenrolled: true })).map((r) => r.id).sort()).toEqual([a, b].sort());
    // A late status (its will, a retained message) does not show it connected again.
    await store.robots.updateStatus(a, { connected: true, seenAt: T0 + 3 });
    expect((await store.robots.get('org_a', a))?.connected).toBe(false);
    // It no longer counts against the robots limit.
    await store.orgs.setLimit('org_a', 'robots', 2);
    const t = await createEnrollmentToken(store, clock, { org: await orgA(), createdBy: 'test' });
    expect((await enrollRobot(store, clock, { token: t.token }, ['mqtt://x'])).robot_id).toMatch(/^rbt_/);
  });

  it('drops a running rotation', async () => {
    const [a] = (await enrolled()) as [string];
    await store.robots.requestRotation('org_a', a, T0);
    expect(await store.robots.setPendingPassword(a, 'h1', 'sealed1')).toBe(true);
    await store.robots.deenroll('org_a', a, T0 + 1);
    expect(await store.robots.getById(a)).toMatchObject({ rotationRequestedAt: null, pendingPasswordHash: null, pendingSecretSealed: null });
    expect(await store.robots.completeRotation(a, 'h1', T0 + 2)).toBe(false);
    expect(await store.robots.requestRotation('org_a', a, T0 + 3)).toMatchObject({ rotationRequestedAt: null });
  });
});

describe('robot list: filters, orders and keyset pages both ways', () => {
  const NAMES = ['arm-b', 'Arm-a', 'cart_1', 'cart%2', 'dock', 'dock', 'arm-c', 'ARMORY'];
  let robots: { id: string; name: string; lastSeenAt: number | null }[];

  beforeEach(async () => {
    const t = await createEnrollmentToken(store, clock, { org: await orgA(), createdBy: 'test', maxUses: NAMES.length });
    robots = [];
    for (const name of NAMES) robots.push({ id: (await enrollRobot(store, clock, { token: t.token, name }, ['mqtt://x'])).robot_id, name, lastSeenAt: null });
    // Statuses: connected or not, recording states, last seen (two never seen; two seen at the same time).
    const seen = [T0 + 5, T0 + 1, null, T0 + 3, T0 + 3, T0 + 9, null, T0 + 2];
    for (const [i, r] of robots.entries()) {
      const at = seen[i];
      if (at === null || at === undefined) continue;
      await store.robots.updateStatus(r.id, { connected: i % 2 === 0, recordingState: i === 0 || i === 5 ? 'recording' : 'idle', seenAt: at });
      r.lastSeenAt = at;
    }
    const other = await createEnrollmentToken(store, clock, { org: await orgB(), createdBy: 'test' });
    await enrollRobot(store, clock, { token: other.token, name: 'arm-other' }, ['mqtt://x']);
    await store.robots.deenroll('org_a', robots[6]!.id, T0 + 10);
  });

  const ids = (rows: { id: string }[]) => rows.map((r) => r.id);
  const live = () => robots.filter((_, i) => i !== 6);
  const byKey = (sort: RobotSort, order: 'asc' | 'desc') => (a: (typeof robots)[number], b: (typeof robots)[number]) => {
    const [x, y] = [robotSortValue(sort, a), robotSortValue(sort, b)];
    const c = x < y ? -1 : x > y ? 1 : a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
    return order === 'asc' ? c : -c;
  };

  async function walk(q: RobotListQuery, limit: number): Promise<string[]> {
    const out: string[] = [];
    let position: RobotListPosition | undefined;
    for (;;) {
      const rows = await store.robots.find('org_a', { ...q, ...(position ? { position } : {}) }, limit);
      out.push(...ids(rows));
      const last = rows[rows.length - 1];
      if (rows.length < limit || !last) return out;
      position = { value: robotSortValue(q.sort ?? 'id', last), id: last.id, direction: 'after' };
    }
  }

  it('filters by name (ASCII case folded, wildcards literal), connection, recording state and disk pressure', async () => {
    const find = async (q: RobotListQuery) => ids(await store.robots.find('org_a', q, 100)).sort();
    const named = (...i: number[]) => i.map((n) => robots[n]!.id).sort();
    expect(await find({ nameContains: 'ARM' })).toEqual(named(0, 1, 7));
    expect(await find({ nameContains: 'arm', includeDeenrolled: true })).toEqual(named(0, 1, 6, 7));
    expect(await find({ nameContains: '%' })).toEqual(named(3));
    expect(await find({ nameContains: '_' })).toEqual(named(2));
    expect(await find({ nameContains: 'nothing' })).toEqual([]);
    expect(await find({ connected: true })).toEqual(named(0, 4));
    expect(await find({ connected: false })).toEqual(named(1, 2, 3, 5, 7));
    expect(await find({ recordingState: 'recording' })).toEqual(named(0, 5));
    expect(await find({ recordingState: 'recording', connected: true, nameContains: 'b' })).toEqual(named(0));
    await store.sync.notePressure(robots[1]!.id, { free_bytes: 1, backlog_bytes: 9, hours_to_full: 3.5 }, T0);
    await store.sync.notePressure(robots[2]!.id, { free_bytes: 1, backlog_bytes: 9, hours_to_full: 24 }, T0);
    await store.sync.notePressure(robots[3]!.id, { free_bytes: 1, backlog_bytes: 0, hours_to_full: null }, T0);
    expect(await find({ hoursToFullBelow: 24 })).toEqual(named(1));
    expect(await find({ hoursToFullBelow: 25 })).toEqual(named(1, 2));
  });

  it('pages every order forwards and backwards without skipping or repeating a robot', async () => {
    for (const sort of ROBOT_SORTS) {
      for (const order of ['asc', 'desc'] as const) {
        const expected = ids([...live()].sort(byKey(sort, order)));
        const label = `${sort} ${order}`;
        expect(await walk({ sort, order }, 3), label).toEqual(expected);
        expect(await walk({ sort, order }, 100), label).toEqual(expected);
        // Backwards from each row: the rows just before it, in page order.
        for (let i = 1; i < expected.length; i++) {
          const at = live().find((r) => r.id === expected[i])!;
          const rows = await store.robots.find('org_a', { sort, order, position: { value: robotSortValue(sort, at), id: at.id, direction: 'before' } }, 2);
          expect(ids(rows), `${label} before ${i}`).toEqual(expected.slice(Math.max(0, i - 2), i));
        }
      }
    }
    // Never-seen robots sort as the earliest; ties on the value are broken by id.
    const bySeen = ids(await store.robots.find('org_a', { sort: 'last_seen_at' }, 100));
    expect(bySeen[0]).toBe(robots[2]!.id);
    expect(await walk({ sort: 'name', order: 'desc', connected: false }, 2)).toEqual(ids(live().filter((_, i) => [1, 2, 3, 5, 6].includes(i)).sort(byKey('name', 'desc'))));
  });
});

describe('credential rotation', () => {
  async function robot(): Promise<{ id: string; password: string }> {
    const t = await createEnrollmentToken(store, clock, { org: await orgA(), createdBy: 'test' });
    const r = await enrollRobot(store, clock, { token: t.token }, ['mqtt://x']);
    return { id: r.robot_id, password: r.mqtt.password };
  }

  it('keeps the first request time, takes one pending secret, and promotes only that one', async () => {
    const r = await robot();
    expect(await store.robots.setPendingPassword(r.id, 'h1', 's1')).toBe(false); // nothing requested
    expect(await store.robots.requestRotation('org_b', r.id, T0)).toBeUndefined();
    expect((await store.robots.requestRotation('org_a', r.id, T0 + 1))?.rotationRequestedAt).toBe(T0 + 1);
    expect((await store.robots.requestRotation('org_a', r.id, T0 + 2))?.rotationRequestedAt).toBe(T0 + 1);
    expect(await store.robots.setPendingPassword(r.id, 'h1', 's1')).toBe(true);
    // A second secret never replaces the one that may already be on the robot.
    expect(await store.robots.setPendingPassword(r.id, 'h2', 's2')).toBe(false);
    expect(await store.robots.getById(r.id)).toMatchObject({ mqttPasswordHash: hashSecret(r.password), pendingPasswordHash: 'h1', pendingSecretSealed: 's1' });
    expect(await store.robots.completeRotation(r.id, 'h2', T0 + 3)).toBe(false);
    expect(await store.robots.completeRotation(r.id, 'h1', T0 + 3)).toBe(true);
    expect(await store.robots.getById(r.id)).toMatchObject({
      mqttPasswordHash: 'h1',
      pendingPasswordHash: null,
      pendingSecretSealed: null,
      rotationRequestedAt: null,
      rotatedAt: T0 + 3,
    });
    expect(await store.robots.completeRotation(r.id, 'h1', T0 + 4)).toBe(false);
  });
});

describe('webhook attempt log', () => {
  async function subscription(orgId = 'org_a', id = 'wh_1'): Promise<string> {
    await store.webhooks.create({ id, orgId, url: 'https://example.com/hook', events: ['episode.finalized'], secretSealed: 'x', createdAt: T0 }, 5);
    return id;
  }

  it('logs every outcome with its attempt number, status, error and latency, newest first, scoped to the organization', async () => {
    const sub = await subscription();
    const d = await store.webhooks.enqueue(sub, { eventId: 'evt_1', eventType: 'episode.finalized', payload: '{}' }, T0);
    await store.webhooks.record(d, { kind: 'retry', status: 503, error: 'HTTP 503', at: T0 + 10, nextAttemptAt: T0 + 60_000, latencyMs: 10 });
    await store.webhooks.record(d, { kind: 'retry', status: null, error: 'timeout: no answer', at: T0 + 70_000, nextAttemptAt: T0 + 400_000, latencyMs: 10_000 });
    await store.webhooks.record(d, { kind: 'delivered', status: 200, at: T0 + 400_020, latencyMs: 20 });
    const log = await store.webhooks.attempts('org_a', sub, null, 10);
    expect(log?.map((a) => [a.attempt, a.outcome, a.statusCode, a.error, a.latencyMs, a.eventId])).toEqual([
      [3, 'delivered', 200, null, 20, 'evt_1'],
      [2, 'retry', null, 'timeout: no answer', 10_000, 'evt_1'],
      [1, 'retry', 503, 'HTTP 503', 10, 'evt_1'],
    ]);
    const page = await store.webhooks.attempts('org_a', sub, log![0]!.id, 1);
    expect(page?.map((a) => a.attempt)).toEqual([2]);
    expect(await store.webhooks.attempts('org_b', sub, null, 10)).toBeUndefined();
  });

  it(`keeps the newest ${ATTEMPTS_KEPT_PER_SUBSCRIPTION} attempts of each subscription, and drops them with the subscription`, async () => {
    const sub = await subscription();
    const other = await subscription('org_a', 'wh_2');
    const d2 = await store.webhooks.enqueue(other, { eventId: 'evt_other', eventType: 'episode.finalized', payload: '{}' }, T0);
    await store.webhooks.record(d2, { kind: 'delivered', status: 200, at: T0 });
    for (let i = 0; i < ATTEMPTS_KEPT_PER_SUBSCRIPTION + 5; i++) {
      const d = await store.webhooks.enqueue(sub, { eventId: `evt_${i}`, eventType: 'episode.finalized', payload: '{}' }, T0);
      await store.webhooks.record(d, { kind: 'delivered', status: 200, at: T0 + i });
    }
    const kept = await store.webhooks.attempts('org_a', sub, null, 1000);
    expect(kept).toHaveLength(ATTEMPTS_KEPT_PER_SUBSCRIPTION);
    expect(kept![0]!.eventId).toBe(`evt_${ATTEMPTS_KEPT_PER_SUBSCRIPTION + 4}`);
    expect(kept![kept!.length - 1]!.eventId).toBe('evt_5');
    expect(kept![0]!.latencyMs).toBeNull();
    // Another subscription's log is not trimmed by this one's.
    expect(await store.webhooks.attempts('org_a', other, null, 10)).toHaveLength(1);
    await store.webhooks.delete('org_a', sub);
    if (engine === 'sqlite') expect(sqliteDb(store).prepare('SELECT COUNT(*) AS n FROM webhook_attempts WHERE subscription_id = ?').get(sub)).toEqual({ n: 0 });
  });

  it('trims the attempt log on disk in batches: never far past the bound, and pages never show the rows past it', async () => {
    const sub = await subscription();
    const rows = () => (sqliteDb(store).prepare('SELECT COUNT(*) AS n FROM webhook_attempts WHERE subscription_id = ?').get(sub) as { n: number }).n;
    let most = 0;
    for (let i = 0; i < ATTEMPTS_KEPT_PER_SUBSCRIPTION * 2; i++) {
      const d = await store.webhooks.enqueue(sub, { eventId: `evt_${i}`, eventType: 'episode.finalized', payload: '{}' }, T0);
      await store.webhooks.record(d, { kind: 'delivered', status: 200, at: T0 + i });
      if (engine === 'sqlite') most = Math.max(most, rows());
    }
    // SQLite trims every 64 attempts of a subscription (PostgreSQL at each).
    if (engine === 'sqlite') expect(most).toBeLessThanOrEqual(ATTEMPTS_KEPT_PER_SUBSCRIPTION + 64);
    const pages: string[] = [];
    let before: number | null = null;
    for (;;) {
      const page: { id: number; eventId: string }[] = (await store.webhooks.attempts('org_a', sub, before, 150))!;
      if (page.length === 0) break;
      pages.push(...page.map((a) => a.eventId));
      before = page[page.length - 1]!.id;
    }
    expect(pages).toHaveLength(ATTEMPTS_KEPT_PER_SUBSCRIPTION);
    expect(pages[0]).toBe(`evt_${ATTEMPTS_KEPT_PER_SUBSCRIPTION * 2 - 1}`);
    expect(pages[pages.length - 1]).toBe(`evt_${ATTEMPTS_KEPT_PER_SUBSCRIPTION}`);
  });

  it.skipIf(engine !== 'sqlite')("trims at a subscription's first attempt in a process: rows an earlier process left past the bound go", async () => {
    const sub = await subscription();
    const db = sqliteDb(store);
    const d0 = await store.webhooks.enqueue(sub, { eventId: 'evt_0', eventType: 'episode.finalized', payload: '{}' }, T0);
    await store.webhooks.record(d0, { kind: 'delivered', status: 200, at: T0 });
    // An earlier process stopped with its rows untrimmed: the bound and 63 more.
    const columns = Object.keys(db.prepare('SELECT * FROM webhook_attempts WHERE subscription_id = ?').get(sub) as object).filter((c) => c !== 'id');
    const copy = db.prepare(`INSERT INTO webhook_attempts (${columns.join(', ')}) SELECT ${columns.join(', ')} FROM webhook_attempts WHERE subscription_id = ? LIMIT 1`);
    for (let i = 0; i < ATTEMPTS_KEPT_PER_SUBSCRIPTION + 63; i++) copy.run(sub);
    const rows = () => (db.prepare('SELECT COUNT(*) AS n FROM webhook_attempts WHERE subscription_id = ?').get(sub) as { n: number }).n;
    expect(rows()).toBe(ATTEMPTS_KEPT_PER_SUBSCRIPTION + 64);
    // This process (a new store on the same database) trims at its first attempt.
    const next = new SqliteWebhooks(db);
    const d1 = await next.enqueue(sub, { eventId: 'evt_1', eventType: 'episode.finalized', payload: '{}' }, T0);
    await next.record(d1, { kind: 'delivered', status: 200, at: T0 + 1 });
    expect(rows()).toBe(ATTEMPTS_KEPT_PER_SUBSCRIPTION);
  });
});
});
