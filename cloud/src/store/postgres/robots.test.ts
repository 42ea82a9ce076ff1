/**
 * PostgreSQL only: robots' statuses are written in group commits (PgRobots.updateStatus), so a
 * fleet connecting costs a replica one pooled connection for presence, not one per status; two
 * replicas writing the same robots' statuses at once neither deadlock nor log a change twice; a
 * transaction that fails is tried again, and its callers hear a failure only after the last try.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock, type RobotStatusPayload } from '@fleet/protocol';
import { robotStatusEvent } from '../../rules/events.js';
import { createEnrollmentToken, enrollRobot } from '../../robots/enrollment.js';
import type { Store } from '../shared/types.js';
import { pgTwinsPerTest, postgresAvailable } from '../test-store.js';
import type { PgStore } from './store.js';

const T0 = Date.parse('2026-01-01T00:00:00Z');

(postgresAvailable() ? describe : describe.skip)('PgRobots status group commit', () => {
  const clock = new ManualClock(T0);
  const twins = pgTwinsPerTest(async (first) => {
    await first.orgs.create({ id: 'org_a', name: 'org_a', tier: 'enterprise', createdAt: T0 });
  });

  async function robots(store: Store, count: number): Promise<string[]> {
    const org = (await store.orgs.get('org_a'))!;
    const t = await createEnrollmentToken(store, clock, { org, createdBy: 'test', maxUses: count });
    const ids: string[] = [];
    for (let i = 0; i < count; i++) ids.push((await enrollRobot(store, clock, { token: t.token }, ['mqtt://x'])).robot_id);
    return ids;
  }

  /** Counts the transactions `store` begins; the first `failures` of them throw before they start. */
  function countTx(store: PgStore, failures = 0): { readonly count: number } {
    const db = store.db;
    const tx = db.tx.bind(db);
    const seen = { count: 0 };
    db.tx = ((fn, opts) => {
      seen.count++;
      return failures-- > 0 ? Promise.reject(new Error('timeout exceeded when trying to connect')) : tx(fn, opts);
    });
    return seen;
  }

  const online = (id: string, at: number) => ({ connected: true, recordingState: 'idle' as const, seenAt: at, status: { at, online: true } });

  it('statuses queued while a transaction runs are written together: 300 statuses in a few transactions, each reported', async () => {
    const ids = await robots(twins.first, 300);
    const txs = countTx(twins.first);
    const changed = await Promise.all(ids.map((id) => twins.first.robots.updateStatus(id, online(id, T0 + 10), robotStatusEvent)));
    expect(changed).toEqual(ids.map(() => true));
    // The first status goes alone (the store was idle); the rest queue behind it in batches of at most 500.
    expect(txs.count).toBeLessThanOrEqual(3);
    expect(await twins.first.events.listAfter('org_a', 0, { limit: 1000 })).toHaveLength(300);
    const shown = await twins.first.db.one<{ n: number }>("SELECT count(*)::int AS n FROM robots WHERE org_id = 'org_a' AND connected");
    expect(shown?.n).toBe(300);
  });

  it('two replicas writing the same statuses of the same robots at once: no deadlock, each change logged once', async () => {
    const ids = await robots(twins.first, 200);
    // Opposite orders, so that without the id-ordered row locks the two would deadlock.
    const a = ids.map((id) => twins.first.robots.updateStatus(id, online(id, T0 + 10), robotStatusEvent));
    const b = [...ids].reverse().map((id) => twins.second.robots.updateStatus(id, online(id, T0 + 10), robotStatusEvent));
    const [fromA, fromB] = await Promise.all([Promise.all(a), Promise.all([...b].reverse())]);
    // Each robot's change was made by exactly one of the two replicas.
    expect(ids.map((_, i) => Number(fromA[i]) + Number(fromB[i]))).toEqual(ids.map(() => 1));
    const events = (await twins.first.events.listAfter('org_a', 0, { limit: 1000 })).map((e) => (JSON.parse(e.payload) as RobotStatusPayload).robot_id);
    expect(events.sort()).toEqual([...ids].sort());
  });

  it("one robot's many statuses queued at once are written one per transaction, in order, behind other robots' ones", async () => {
    const [r, other] = await robots(twins.first, 2);
    const states = Array.from({ length: 900 }, (_, i) => (i % 2 === 0 ? 'recording' : 'idle'));
    const writes = states.map((recordingState, i) =>
      twins.first.robots.updateStatus(r!, { connected: true, recordingState, seenAt: T0 + i, status: { at: T0 + i, online: true } }, robotStatusEvent),
    );
    const elsewhere = twins.first.robots.updateStatus(other!, online(other!, T0 + 10), robotStatusEvent);
    expect(await Promise.all(writes)).toEqual(states.map(() => true));
    expect(await elsewhere).toBe(true);
    const logged = (await twins.first.events.listAfter('org_a', 0, { limit: 1000 }))
      .map((e) => JSON.parse(e.payload) as RobotStatusPayload)
      .filter((p) => p.robot_id === r);
    expect(logged.map((p) => p.recording_state)).toEqual(states);
    expect(await twins.first.robots.get('org_a', r!)).toMatchObject({ recordingState: 'idle', lastSeenAt: T0 + 899 });
  });

  it('a transaction that fails is tried again; after three failed tries its callers hear the error and nothing was written', async () => {
    const [r1, r2] = await robots(twins.first, 2);
    countTx(twins.first, 2);
    expect(await twins.first.robots.updateStatus(r1!, online(r1!, T0 + 10), robotStatusEvent)).toBe(true);
    expect(await twins.first.robots.get('org_a', r1!)).toMatchObject({ connected: true });

    countTx(twins.first, 3);
    await expect(twins.first.robots.updateStatus(r2!, online(r2!, T0 + 10), robotStatusEvent)).rejects.toThrow(/timeout exceeded/);
    expect(await twins.first.robots.get('org_a', r2!)).toMatchObject({ connected: false });
    // The store goes on: the next status is written.
    expect(await twins.first.robots.updateStatus(r2!, online(r2!, T0 + 20), robotStatusEvent)).toBe(true);
  });
});
