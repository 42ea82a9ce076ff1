/**
 * The webhook store on both engines: the active-subscription limit, queues, claims with a lease
 * (several processes on one database), the attempt log, dead letters and redelivery. Behaviour
 * only, through the WebhookStore interface: no SQL.
 */
import { afterEach, beforeEach, expect, it } from 'vitest';
import { describeStore, openTwin, type TestStore } from './test-store.js';
import { ATTEMPTS_KEPT_PER_SUBSCRIPTION, type ClaimedDelivery, type Store } from './shared/types.js';

const T0 = Date.parse('2026-01-01T00:00:00Z');
const LEASE = 60_000;

describeStore('webhook store', (open, engine) => {
  let store: TestStore;
  /** A second process on the same data (PostgreSQL), or the same store (SQLite in memory). */
  let other: Store;
  const opened: Store[] = [];

  beforeEach(async () => {
    store = await open();
    other = engine === 'postgres' ? await openTwin(store) : store;
    if (other !== store) opened.push(other);
    for (const id of ['org_a', 'org_b']) await store.orgs.create({ id, name: id, tier: 'enterprise', createdAt: T0 });
  });
  afterEach(async () => {
    for (const s of opened.splice(0)) await s.close();
    await store.close();
  });

  let n = 0;
  async function subscription(orgId = 'org_a', events = ['episode.finalized']): Promise<string> {
    const id = `whk_${++n}`;
    expect(await store.webhooks.create({ id, orgId, url: `https://hooks.test/${id}`, events, secretSealed: `sealed-${id}`, createdAt: T0 }, 100)).toBe('ok');
    return id;
  }
  const enqueue = (s: Store, sub: string, i: number, at = T0) => s.webhooks.enqueue(sub, { eventId: `evt_${sub}_${i}`, eventType: 'episode.finalized', payload: `{"i":${i}}` }, at);

  it('refuses a subscription over the active limit, also when two processes create at once', async () => {
    const made = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        (i % 2 ? other : store).webhooks.create({ id: `whk_l${i}`, orgId: 'org_a', url: 'https://hooks.test/x', events: ['episode.finalized'], secretSealed: 's', createdAt: T0 }, 3),
      ),
    );
    expect(made.filter((r) => r === 'ok')).toHaveLength(3);
    // Another organization has its own limit; a disabled subscription frees a place.
    expect(await store.webhooks.create({ id: 'whk_b', orgId: 'org_b', url: 'https://hooks.test/b', events: ['episode.finalized'], secretSealed: 's', createdAt: T0 }, 3)).toBe('ok');
    const active = (await store.webhooks.list('org_a')).filter((w) => w.status === 'active');
    expect(active).toHaveLength(3);
    await store.webhooks.disable(active[0]!.id, 'test');
    expect(await store.webhooks.create({ id: 'whk_new', orgId: 'org_a', url: 'https://hooks.test/n', events: ['episode.finalized'], secretSealed: 's', createdAt: T0 }, 3)).toBe('ok');
    expect(await store.webhooks.enable('org_a', active[0]!.id, 3)).toBe('limit');
    await store.webhooks.disable('whk_new', 'test');
    expect(await store.webhooks.enable('org_a', active[0]!.id, 3)).toMatchObject({ status: 'active', disabledReason: null });
    expect(await store.webhooks.enable('org_b', active[0]!.id, 3)).toBeUndefined();
  });

  it('claims a due head once: the lease keeps every other claimer out until it is recorded or runs out', async () => {
    const a = await subscription();
    const b = await subscription();
    for (let i = 0; i < 3; i++) await enqueue(store, a, i);
    await enqueue(store, b, 0, T0 + 10_000);

    const first = await store.webhooks.claimDue(T0, 10, LEASE);
    expect(first.map((d) => [d.subscriptionId, d.eventId])).toEqual([[a, `evt_${a}_0`]]);
    expect(await other.webhooks.claimDue(T0 + 1, 10, LEASE)).toEqual([]);
    expect(await other.webhooks.dueHead(a, T0 + 1, LEASE)).toBeUndefined();
    // b's head comes due; a is still held.
    expect((await other.webhooks.claimDue(T0 + 10_000, 10, LEASE)).map((d) => d.subscriptionId)).toEqual([b]);

    // Recording releases: the holder goes on with the next head.
    await store.webhooks.record(first[0]!.id, { kind: 'delivered', status: 200, at: T0 + 5 }, first[0]!.claim);
    const next = await store.webhooks.dueHead(a, T0 + 6, LEASE);
    expect(next?.eventId).toBe(`evt_${a}_1`);

    // Given up without an attempt (released): claimable again at once.
    await store.webhooks.release(a, next!.claim);
    const taken = await other.webhooks.claimDue(T0 + 7, 10, LEASE);
    expect(taken.map((d) => d.eventId)).toEqual([`evt_${a}_1`]);
  });

  it('a holder whose lease ran out is taken over; its late outcome is logged but decides nothing', async () => {
    const a = await subscription();
    await enqueue(store, a, 0);
    await enqueue(store, a, 1);
    const [dead] = await store.webhooks.claimDue(T0, 1, LEASE);
    expect(await other.webhooks.claimDue(T0 + LEASE - 1, 1, LEASE)).toEqual([]);
    const [taker] = await other.webhooks.claimDue(T0 + LEASE, 1, LEASE);
    expect(taker?.id).toBe(dead!.id);
    // The first holder comes back late with a failure: the head stays the taker's.
    await store.webhooks.record(dead!.id, { kind: 'retry', status: 503, error: 'HTTP 503', at: T0 + LEASE + 1, nextAttemptAt: T0 + 10 * LEASE }, dead!.claim);
    expect(await store.webhooks.claimDue(T0 + 2 * LEASE - 1, 1, LEASE)).toEqual([]);
    await other.webhooks.record(taker!.id, { kind: 'delivered', status: 200, at: T0 + LEASE + 2 }, taker!.claim);
    const log = await store.webhooks.attempts('org_a', a, null, 10);
    expect(log?.map((l) => l.outcome)).toEqual(['delivered', 'retry']);
    const next = await store.webhooks.claimDue(T0 + LEASE + 3, 1, LEASE);
    expect(next.map((d) => d.eventId)).toEqual([`evt_${a}_1`]);
    expect((await store.webhooks.get('org_a', a))?.pendingDeliveries).toBe(1);
  });

  it('records an outcome and claims the next due head in one step, only when the queue may go on', async () => {
    const a = await subscription();
    for (let i = 0; i < 4; i++) await enqueue(store, a, i);
    await enqueue(store, a, 4, T0 + 10_000);
    const [first] = await store.webhooks.claimDue(T0, 1, LEASE);
    // Delivered: the next head comes back claimed, and nobody else can claim it.
    const second = await store.webhooks.recordAndClaimNext(first!, { kind: 'delivered', status: 200, at: T0 + 1 }, T0 + 1, LEASE);
    expect(second).toMatchObject({ subscriptionId: a, eventId: `evt_${a}_1` });
    expect(second!.claim).not.toBe(first!.claim);
    expect(await other.webhooks.claimDue(T0 + 2, 10, LEASE)).toEqual([]);
    // Dead-lettered: the queue goes on too.
    const third = await store.webhooks.recordAndClaimNext(second!, { kind: 'dead', status: 410, error: 'HTTP 410', at: T0 + 3 }, T0 + 3, LEASE);
    expect(third?.eventId).toBe(`evt_${a}_2`);
    // A retry holds the queue: nothing is claimed, the head waits for its next attempt.
    expect(await store.webhooks.recordAndClaimNext(third!, { kind: 'retry', status: 503, error: 'HTTP 503', at: T0 + 4, nextAttemptAt: T0 + 1000 }, T0 + 4, LEASE)).toBeUndefined();
    expect(await other.webhooks.claimDue(T0 + 999, 10, LEASE)).toEqual([]);
    const [again] = await other.webhooks.claimDue(T0 + 1000, 10, LEASE);
    expect(again?.eventId).toBe(`evt_${a}_2`);
    // A claim that was taken over only logs its attempt and claims nothing.
    const [taker] = await store.webhooks.claimDue(T0 + 1000 + LEASE, 1, LEASE);
    expect(taker?.id).toBe(again!.id);
    expect(await other.webhooks.recordAndClaimNext(again!, { kind: 'delivered', status: 200, at: T0 + 1000 + LEASE + 1 }, T0 + 1000 + LEASE + 1, LEASE)).toBeUndefined();
    expect((await store.webhooks.get('org_a', a))?.pendingDeliveries).toBe(3);
    // The next head not due yet: the outcome is recorded, the queue released unclaimed.
    const fourth = await store.webhooks.recordAndClaimNext(taker!, { kind: 'delivered', status: 200, at: T0 + 1000 + LEASE + 2 }, T0 + 1000 + LEASE + 2, LEASE);
    expect(fourth?.eventId).toBe(`evt_${a}_3`);
    expect(await store.webhooks.recordAndClaimNext(fourth!, { kind: 'delivered', status: 200, at: T0 + 5000 }, T0 + 5000, LEASE)).toBeUndefined();
    expect((await other.webhooks.claimDue(T0 + 10_000, 10, LEASE)).map((d) => d.eventId)).toEqual([`evt_${a}_4`]);
    const log = await store.webhooks.attempts('org_a', a, null, 10);
    expect(log?.map((l) => l.outcome)).toEqual(['delivered', 'delivered', 'delivered', 'retry', 'dead', 'delivered']);
  });

  it('a disabled subscription is not claimed by the next step of its queue', async () => {
    const a = await subscription();
    await enqueue(store, a, 0);
    await enqueue(store, a, 1);
    const [first] = await store.webhooks.claimDue(T0, 1, LEASE);
    await other.webhooks.disable(a, 'test');
    expect(await store.webhooks.recordAndClaimNext(first!, { kind: 'delivered', status: 200, at: T0 + 1 }, T0 + 1, LEASE)).toBeUndefined();
    expect((await store.webhooks.get('org_a', a))?.pendingDeliveries).toBe(1);
  });

  it('two processes working the same queues deliver each delivery once, in queue order per subscription', async () => {
    const subs = await Promise.all(Array.from({ length: 6 }, () => subscription()));
    const perSub = 15;
    for (let i = 0; i < perSub; i++) for (const s of subs) await enqueue(store, s, i);
    const delivered = new Map<string, string[]>(subs.map((s) => [s, []]));
    const held = new Set<string>();
    let overlap = 0;
    async function worker(s: Store): Promise<void> {
      for (let idle = 0; idle < 3; ) {
        const claimed = await s.webhooks.claimDue(T0, 2, LEASE);
        if (claimed.length === 0) {
          idle++;
          await new Promise((r) => setTimeout(r, 5));
          continue;
        }
        idle = 0;
        await Promise.all(
          claimed.map(async (first) => {
            let d: ClaimedDelivery | undefined = first;
            while (d) {
              if (held.has(d.subscriptionId)) overlap++;
              held.add(d.subscriptionId);
              delivered.get(d.subscriptionId)!.push(d.eventId);
              await new Promise((r) => setImmediate(r));
              held.delete(d.subscriptionId);
              // Half the steps in one (recordAndClaimNext), half in two (record, then dueHead).
              if (d.id % 2 === 0) {
                d = await s.webhooks.recordAndClaimNext(d, { kind: 'delivered', status: 200, at: T0 }, T0, LEASE);
              } else {
                await s.webhooks.record(d.id, { kind: 'delivered', status: 200, at: T0 }, d.claim);
                d = await s.webhooks.dueHead(d.subscriptionId, T0, LEASE);
              }
            }
          }),
        );
      }
    }
    await Promise.all([worker(store), worker(other), worker(store), worker(other)]);
    expect(overlap).toBe(0);
    for (const s of subs) expect(delivered.get(s)).toEqual(Array.from({ length: perSub }, (_, i) => `evt_${s}_${i}`));
    expect(await store.webhooks.nextDueAt()).toBeNull();
  });

  it('keeps the newest attempts of a subscription, dead-letters and redelivers at the end of the queue', async () => {
    const a = await subscription();
    const b = await subscription();
    const d = await enqueue(store, a, 0);
    for (let i = 0; i < ATTEMPTS_KEPT_PER_SUBSCRIPTION + 3; i++) {
      await store.webhooks.record(d, { kind: 'retry', status: 500, error: `HTTP 500 #${i}`, at: T0 + i, nextAttemptAt: T0 + i + 1 });
    }
    await store.webhooks.record(d, { kind: 'dead', status: 410, error: 'HTTP 410', at: T0 + 1000 });
    const log = (await store.webhooks.attempts('org_a', a, null, 1000))!;
    expect(log).toHaveLength(ATTEMPTS_KEPT_PER_SUBSCRIPTION);
    expect(log[0]).toMatchObject({ outcome: 'dead', statusCode: 410, attempt: ATTEMPTS_KEPT_PER_SUBSCRIPTION + 4 });
    expect(await store.webhooks.attempts('org_b', a, null, 10)).toBeUndefined();

    const dead = (await store.webhooks.deadLetters('org_a', a))!;
    expect(dead.map((x) => [x.id, x.state, x.lastStatus])).toEqual([[d, 'dead', 410]]);
    expect(await store.webhooks.redeliver('org_b', a, d, T0 + 2000)).toBeUndefined();
    expect(await store.webhooks.redeliver('org_a', b, d, T0 + 2000)).toBeUndefined();
    const again = await store.webhooks.redeliver('org_a', a, d, T0 + 2000);
    expect(again).toMatchObject({ subscriptionId: a, eventId: `evt_${a}_0`, state: 'pending', attempts: 0, nextAttemptAt: T0 + 2000 });
    expect(again!.id).toBeGreaterThan(d);
    expect(await store.webhooks.redeliver('org_a', a, d, T0 + 2000)).toBeUndefined();
    expect(await store.webhooks.deadLetters('org_a', a)).toEqual([]);
    expect(await store.gauges.pendingDeliveries()).toBe(1);
  });

  it('rotates a secret keeping the previous one, and deletes a subscription with its queue', async () => {
    const a = await subscription();
    await enqueue(store, a, 0);
    const rotated = await store.webhooks.rotateSecret('org_a', a, 'sealed-new', T0 + 86_400_000);
    expect(rotated).toMatchObject({ secretSealed: 'sealed-new', previousSecretSealed: `sealed-${a}`, previousSecretUntil: T0 + 86_400_000 });
    expect(await store.webhooks.rotateSecret('org_b', a, 'x', T0)).toBeUndefined();
    expect(await store.webhooks.deliveryTarget(a)).toMatchObject({ id: a, status: 'active', secretSealed: 'sealed-new' });
    expect(await store.webhooks.delete('org_b', a)).toBe(false);
    expect(await store.webhooks.delete('org_a', a)).toBe(true);
    expect(await store.webhooks.getById(a)).toBeUndefined();
    expect(await store.webhooks.claimDue(T0, 10, LEASE)).toEqual([]);
    expect(await store.gauges.pendingDeliveries()).toBe(0);
  });
});
