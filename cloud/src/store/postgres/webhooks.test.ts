/**
 * PostgreSQL only: the webhook fan-out against events appended concurrently by two replicas.
 * It reads the tables directly and appends through the store's own appendEvents, because what
 * it checks (commit order of event ids, one fan-out at a time) has no SQLite counterpart: SQLite
 * has one writer.
 */
import { describe, expect, it } from 'vitest';
import { finalizedEvent, prunedEvent } from '../../rules/events.js';
import { testReport } from '../../test-support.js';
import { pgTwinsPerTest, postgresAvailable } from '../test-store.js';
import type { PgDb } from './db.js';
import { appendEvents } from './events.js';
import type { PgStore } from './store.js';

const T0 = Date.parse('2026-01-01T00:00:00Z');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

(postgresAvailable() ? describe : describe.skip)('webhook fan-out on PostgreSQL, two replicas', () => {
  const twins = pgTwinsPerTest(async (first) => {
    for (const org of ['org_a', 'org_b']) await first.db.query("INSERT INTO orgs (id, name, tier, created_at) VALUES ($1, $1, 'enterprise', $2)", [org, T0]);
  });

  const ref = (i: number) => ({ episode_id: `ep_${i}`, robot_id: 'rbt_1', recording_session_id: 'rs_1', episode_seq: i });

  /** One event per transaction, held open a moment after its insert: a later id may try to commit first. */
  async function appendSlowly(db: PgDb, from: number, count: number): Promise<void> {
    for (let i = from; i < from + count; i++) {
      await db.tx(async (sql) => {
        const org = i % 3 === 0 ? 'org_b' : 'org_a';
        await appendEvents(sql, [{ orgId: org, event: i % 2 ? prunedEvent(ref(i)) : finalizedEvent(ref(i)), at: T0 + i }]);
        await sleep(Math.random() * 4);
      });
    }
  }

  it('every event reaches every matching subscription once, in id order, while both replicas append and fan out', async () => {
    const { first: a, second: b } = twins;
    const subs = [
      { id: 'whk_all', org: 'org_a', events: ['episode.finalized', 'episode.pruned'] },
      { id: 'whk_fin', org: 'org_a', events: ['episode.finalized'] },
      { id: 'whk_b', org: 'org_b', events: ['episode.finalized', 'episode.pruned'] },
    ];
    for (const s of subs) expect(await a.webhooks.create({ id: s.id, orgId: s.org, url: 'https://hooks.test/x', events: s.events, secretSealed: 's', createdAt: T0 }, 10)).toBe('ok');

    let appending = true;
    const fanning = async (s: PgStore) => {
      while (appending) {
        await s.webhooks.fanOut(T0);
        await sleep(Math.random() * 3);
      }
    };
    const appenders = Promise.all([appendSlowly(a.db, 0, 60), appendSlowly(b.db, 1000, 60), appendSlowly(a.db, 2000, 60), appendSlowly(b.db, 3000, 60)]);
    const fanners = Promise.all([fanning(a), fanning(b), fanning(a), fanning(b)]);
    await appenders;
    appending = false;
    await fanners;
    await a.webhooks.fanOut(T0);

    const events = await a.db.many<{ id: number; org_id: string; type: string }>('SELECT id, org_id, type FROM events ORDER BY id');
    expect(events).toHaveLength(240);
    for (const s of subs) {
      const want = events.filter((e) => e.org_id === s.org && s.events.includes(e.type)).map((e) => `evt_${e.id}`);
      const got = await a.db.many<{ event_id: string }>('SELECT event_id FROM webhook_deliveries WHERE subscription_id = $1 ORDER BY id', [s.id]);
      expect(got.map((g) => g.event_id)).toEqual(want);
    }
  });

  it('events appended by store writes on both replicas (replica reports, prunes) reach each subscription once, in id order', async () => {
    const { first: a, second: b } = twins;
    const reports = Array.from({ length: 40 }, () => testReport());
    await a.episodes.ingest(reports.map((report) => ({ orgId: 'org_a', robotId: 'rbt_1', report, reportedAt: T0 })));
    await a.sync.createDestination({ id: 'dst_1', orgId: 'org_a', type: 'external', url: 'https://grants.test/x', secretSealed: 's', retention: 'keep', createdAt: T0 });
    const events = ['episode.synced', 'episode.verified', 'episode.pruned'];
    expect(await a.webhooks.create({ id: 'whk_s', orgId: 'org_a', url: 'https://hooks.test/x', events, secretSealed: 's', createdAt: T0 }, 10)).toBe('ok');
    expect(await b.webhooks.create({ id: 'whk_p', orgId: 'org_a', url: 'https://hooks.test/y', events: ['episode.pruned'], secretSealed: 's', createdAt: T0 }, 10)).toBe('ok');

    let writing = true;
    const fanning = async (s: PgStore) => {
      while (writing) {
        await s.webhooks.fanOut(T0);
        await sleep(Math.random() * 2);
      }
    };
    const write = async (s: PgStore, part: number) => {
      for (const [i, r] of reports.entries()) {
        if (i % 2 !== part) continue;
        const rep = { episode_id: r.id, destination_id: 'dst_1', grant_id: 'gr_1', error: null, object_key: 'k', at: 1 };
        await s.sync.applyReplicaReport('rbt_1', { ...rep, state: 'synced' }, T0);
        await s.sync.markPruned('rbt_1', r.id, T0, T0);
        await s.sync.applyReplicaReport('rbt_1', { ...rep, state: 'verified', at: 2 }, T0);
      }
    };
    const fanners = Promise.all([fanning(a), fanning(b)]);
    await Promise.all([write(a, 0), write(b, 1), write(a, 1), write(b, 0)]);
    writing = false;
    await fanners;
    await b.webhooks.fanOut(T0);

    const log = await a.db.many<{ id: number; type: string }>(`SELECT id, type FROM events WHERE type != 'episode.finalized' ORDER BY id`);
    // Each report and prune applied once, whichever replica won.
    expect(log).toHaveLength(3 * reports.length);
    for (const [sub, types] of [['whk_s', events], ['whk_p', ['episode.pruned']]] as const) {
      const want = log.filter((e) => (types as readonly string[]).includes(e.type)).map((e) => `evt_${e.id}`);
      const got = await a.db.many<{ event_id: string }>('SELECT event_id FROM webhook_deliveries WHERE subscription_id = $1 ORDER BY id', [sub]);
      expect(got.map((g) => g.event_id)).toEqual(want);
    }
  });

  it('a queue head delivered and released while another replica claims is never handed out again', async () => {
    const { first: a, second: b } = twins;
    // Replica B's claim sorts many due queues before it locks the first; while it does, replica A
    // claims, delivers and releases the first queue's head again and again. B must lock that queue
    // only with its current head, never the one its statement saw when it started.
    const fillers = 1500;
    for (let i = 0; i < fillers; i++) await b.webhooks.create({ id: `whk_f${i}`, orgId: 'org_b', url: 'https://hooks.test/x', events: ['episode.pruned'], secretSealed: 's', createdAt: T0 }, 1e9);
    expect(await a.webhooks.create({ id: 'whk_race', orgId: 'org_a', url: 'https://hooks.test/x', events: ['episode.finalized'], secretSealed: 's', createdAt: T0 }, 10)).toBe('ok');
    const total = 60;
    await a.db.tx(async (sql) => appendEvents(sql, Array.from({ length: total }, (_, i) => ({ orgId: 'org_a', event: finalizedEvent(ref(i)), at: T0 }))));
    await a.webhooks.fanOut(T0);
    await a.db.tx(async (sql) => appendEvents(sql, [{ orgId: 'org_b', event: prunedEvent(ref(9999)), at: T0 }]));
    await a.webhooks.fanOut(T0 + 1);
    const now = T0 + 1;
    const handedOut: number[] = [];
    let done = false;
    const holderA = async () => {
      while (!done) {
        const d = await a.webhooks.dueHead('whk_race', now, 60_000);
        if (!d) {
          if ((await a.db.many("SELECT 1 FROM webhook_deliveries WHERE subscription_id = 'whk_race' AND state = 'pending'")).length === 0) done = true;
          continue;
        }
        handedOut.push(d.id);
        await a.webhooks.record(d.id, { kind: 'delivered', status: 200, at: now }, d.claim);
      }
    };
    const claimerB = async () => {
      while (!done) {
        for (const d of await b.webhooks.claimDue(now, 1, 60_000)) {
          if (d.subscriptionId === 'whk_race') {
            handedOut.push(d.id);
            await b.webhooks.record(d.id, { kind: 'delivered', status: 200, at: now }, d.claim);
          } else await b.webhooks.release(d.subscriptionId, d.claim);
        }
      }
    };
    await Promise.all([holderA(), claimerB(), claimerB()]);
    expect(handedOut.length - new Set(handedOut).size, 'deliveries handed out twice').toBe(0);
    expect(new Set(handedOut).size).toBe(total);
  }, 120_000);
});
