import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { testReport } from '../test-support.js';
import { LOCKS } from './postgres/db.js';
import { describeStore, openTestStore, openTwin, postgresAvailable, type TestEngine, type TestStore } from './test-store.js';
import type { IngestItem, Store } from './shared/types.js';

const T0 = Date.parse('2026-01-01T00:00:00Z');
const ORGS = ['org_a', 'org_b', 'org_c'] as const;

/** A store on a data directory (SQLite) or its own database (PostgreSQL), so that twins share it. */
async function openShared(engine: TestEngine): Promise<{ store: TestStore; cleanup(): void }> {
  if (engine === 'postgres') return { store: await openTestStore('postgres'), cleanup: () => undefined };
  const dir = mkdtempSync(join(tmpdir(), 'fleet-ordering-'));
  return { store: await openTestStore('sqlite', { dataDir: dir }), cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** Walks an organization's episodes and events by their cursors, again and again, collecting what it sees. */
class CursorWalker {
  readonly episodes: string[] = [];
  readonly events: number[] = [];
  private seq = 0;
  private eventId = 0;

  constructor(
    private readonly store: Store,
    readonly orgId: string,
  ) {}

  /** One pass: every page after the cursors as they stand, each cursor moved past what was read. */
  async pass(): Promise<void> {
    for (;;) {
      const page = await this.store.episodes.list(this.orgId, { eq: {}, metadata: {}, annotation: {} }, this.seq, 7);
      for (const e of page) this.episodes.push(e.id);
      if (page.length === 0) break;
      this.seq = page[page.length - 1]!.seq;
    }
    // As the event stream reads: up to the newest id first, then the pages below it.
    const upTo = await this.store.events.latestId(this.orgId);
    for (;;) {
      const rows = await this.store.events.listAfter(this.orgId, this.eventId, { limit: 7, upTo, types: ['episode.finalized'] });
      for (const r of rows) this.events.push(r.id);
      if (rows.length === 0) break;
      this.eventId = rows[rows.length - 1]!.id;
    }
    if (this.eventId < upTo) this.eventId = upTo;
  }
}

/**
 * Episode seqs and event ids are ordered within an organization: a reader that walks one
 * organization's cursors while writers on several connections ingest for several organizations
 * at once sees every row exactly once, never skipping one that committed after a higher one it
 * had already passed. Run on both engines; on PostgreSQL the writers are separate pools (as
 * replicas are) and commit in any order the server lets them.
 */
describeStore('ordering per organization', (_open, engine) => {
  it('concurrent writers, a reader walking every cursor: no row skipped or repeated', async () => {
    await fc.assert(
      fc.asyncProperty(
        // Per writer, its batches: each an organization and a size.
        fc.array(fc.array(fc.record({ org: fc.constantFrom(...ORGS), size: fc.integer({ min: 1, max: 6 }) }), { minLength: 3, maxLength: 12 }), { minLength: 3, maxLength: 4 }),
        async (writers) => {
          const shared = await openShared(engine);
          const store = shared.store;
          const twins: Store[] = [];
          try {
            for (const id of ORGS) await store.orgs.create({ id, name: id, tier: 'enterprise', createdAt: T0 });
            for (let i = 1; i < writers.length; i++) twins.push(await openTwin(store));
            const connections: Store[] = [store, ...twins];
            const written = new Map<string, string[]>(ORGS.map((o) => [o, []]));
            const walkers = ORGS.map((o) => new CursorWalker(connections[0]!, o));
            let writing = true;
            const reading = (async () => {
              while (writing) for (const w of walkers) await w.pass();
            })();
            await Promise.all(
              writers.map(async (batches, w) => {
                for (const b of batches) {
                  const items: IngestItem[] = Array.from({ length: b.size }, () => ({ orgId: b.org, robotId: `rbt_${b.org}`, report: testReport(), reportedAt: T0 }));
                  expect(await connections[w]!.episodes.ingest(items)).toEqual(items.map(() => 'inserted'));
                  written.get(b.org)!.push(...items.map((i) => i.report.id));
                }
              }),
            );
            writing = false;
            await reading;
            // One last pass after every writer is done: the cursors continue from where they were.
            for (const w of walkers) await w.pass();
            for (const w of walkers) {
              const expected = written.get(w.orgId)!;
              expect(new Set(w.episodes).size).toBe(w.episodes.length);
              expect([...w.episodes].sort()).toEqual([...expected].sort());
              expect(new Set(w.events).size).toBe(w.events.length);
              expect(w.events).toHaveLength(expected.length);
              expect([...w.events]).toEqual([...w.events].sort((x, y) => x - y));
            }
          } finally {
            for (const t of twins) await t.close();
            await store.close();
            shared.cleanup();
          }
        },
      ),
      { numRuns: 4 },
    );
  });
});

const onPostgres = postgresAvailable() && process.env.FLEET_TEST_DATABASE !== 'sqlite' ? describe : describe.skip;

onPostgres('ordering per organization on PostgreSQL: two organizations never wait on each other', () => {
  it("an ingest whose organization's lock is held waits; another organization's goes through meanwhile", async () => {
    const store = await openTestStore('postgres');
    const holder = new pg.Client({ connectionString: store.url });
    await holder.connect();
    try {
      for (const id of ['org_a', 'org_b']) await store.orgs.create({ id, name: id, tier: 'enterprise', createdAt: T0 });
      const item = (orgId: string): IngestItem => ({ orgId, robotId: 'rbt_1', report: testReport(), reportedAt: T0 });
      // Another transaction (a replica mid-ingest) holds org_a's ordering lock.
      await holder.query('BEGIN');
      await holder.query('SELECT pg_advisory_xact_lock($1, hashtext($2))', [LOCKS.episodes, 'org_a']);
      let aDone = false;
      const a = store.episodes.ingest([item('org_a')]).then((r) => {
        aDone = true;
        return r;
      });
      // org_b's ingest does not wait for it.
      expect(await store.episodes.ingest([item('org_b')])).toEqual(['inserted']);
      expect(await store.episodes.count('org_b')).toBe(1);
      // org_a's is still waiting (it is seen waiting on the lock), and goes through once released.
      await expect
        .poll(async () => (await holder.query<{ n: number }>("SELECT COUNT(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")).rows[0]!.n)
        .toBe(1);
      expect(aDone).toBe(false);
      await holder.query('COMMIT');
      expect(await a).toEqual(['inserted']);
    } finally {
      await holder.end();
      await store.close();
    }
  });

  it("a writer held between taking its seq and committing: the organization's next writer waits, and no cursor passes the held row", async () => {
    const store = await openTestStore('postgres');
    const twin = await openTwin(store);
    const holder = new pg.Client({ connectionString: store.url });
    await holder.connect();
    try {
      await store.orgs.create({ id: 'org_a', name: 'a', tier: 'enterprise', createdAt: T0 });
      const walker = new CursorWalker(store, 'org_a');
      // Attribute rows cannot be written meanwhile: the first writer (its report has metadata)
      // takes its seq, then stops at its attribute rows, its transaction open.
      await holder.query('BEGIN');
      await holder.query('LOCK TABLE episode_attrs IN EXCLUSIVE MODE');
      const first = testReport({ metadata: { site: 'lab' } });
      const second = testReport({ metadata: {} });
      const held = store.episodes.ingest([{ orgId: 'org_a', robotId: 'rbt_1', report: first, reportedAt: T0 }]);
      const blockedOn = async (type: string) =>
        (await holder.query<{ n: number }>("SELECT COUNT(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event = $1", [type])).rows[0]!.n;
      await expect.poll(() => blockedOn('relation')).toBe(1);
      // The second writer (no metadata, so no attribute rows) waits for the first: the
      // organization's ordering lock, not the table.
      let secondDone = false;
      const next = twin.episodes.ingest([{ orgId: 'org_a', robotId: 'rbt_1', report: second, reportedAt: T0 }]).then((r) => ((secondDone = true), r));
      await expect.poll(() => blockedOn('advisory')).toBe(1);
      await walker.pass();
      expect(secondDone).toBe(false);
      expect(walker.episodes).toEqual([]);
      await holder.query('COMMIT');
      expect(await held).toEqual(['inserted']);
      expect(await next).toEqual(['inserted']);
      await walker.pass();
      expect(walker.episodes).toEqual([first.id, second.id]);
      expect(walker.events).toHaveLength(2);
    } finally {
      await holder.query('ROLLBACK').catch(() => undefined);
      await holder.end();
      await twin.close();
      await store.close();
    }
  });

  it('the same episode id reported in two organizations at once: one row, the other a conflict', async () => {
    const store = await openTestStore('postgres');
    const twin = await openTwin(store);
    try {
      for (const id of ['org_a', 'org_b']) await store.orgs.create({ id, name: id, tier: 'enterprise', createdAt: T0 });
      const report = testReport();
      const results = await Promise.all([
        store.episodes.ingest([{ orgId: 'org_a', robotId: 'rbt_a', report, reportedAt: T0 }]),
        twin.episodes.ingest([{ orgId: 'org_b', robotId: 'rbt_b', report, reportedAt: T0 }]),
      ]);
      expect(results.flat().sort()).toEqual(['conflict', 'inserted']);
      expect((await store.episodes.count('org_a')) + (await store.episodes.count('org_b'))).toBe(1);
    } finally {
      await twin.close();
      await store.close();
    }
  });
});
