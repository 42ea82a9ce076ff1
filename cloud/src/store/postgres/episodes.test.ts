/**
 * PostgreSQL-only checks of the episode store: what only a second replica can show (seqs commit
 * in order), and what the shared suite reads on SQLite only (the event log, replicas as the sync
 * store writes them), here with the rows written directly.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { testReport } from '../../test-support.js';
import { openTestStore, openTwin, postgresAvailable, type TestStore } from '../test-store.js';
import type { EpisodeFilter, IngestItem, Store } from '../shared/types.js';
import type { PgStore } from './store.js';

const T0 = Date.parse('2026-01-01T00:00:00Z');
const ORG = 'org_a';
const ROBOT = 'rbt_1';
const all: EpisodeFilter = { eq: {}, metadata: {}, annotation: {} };

const item = (over: Parameters<typeof testReport>[0] = {}, orgId = ORG): IngestItem => ({ orgId, robotId: ROBOT, report: testReport(over), reportedAt: T0 + 1000 });

(postgresAvailable() ? describe : describe.skip)('PgEpisodes [postgres]', () => {
  let store: TestStore & PgStore;
  const twins: Store[] = [];

  beforeEach(async () => {
    store = (await openTestStore('postgres')) as TestStore & PgStore;
  });
  afterEach(async () => {
    for (const t of twins.splice(0)) await t.close();
    await store.close();
  });

  it('seqs commit in order: a pager walking seq while two replicas ingest sees every episode exactly once', async () => {
    const a = await openTwin(store);
    const b = await openTwin(store);
    const reader = await openTwin(store);
    twins.push(a, b, reader);
    const BATCHES = 60;
    const written = new Set<string>();
    let writing = true;
    const writer = async (s: Store, name: string) => {
      for (let i = 0; i < BATCHES; i++) {
        // Batches of different sizes, so that a short transaction often overtakes a longer one.
        const items = Array.from({ length: 1 + ((i * 7) % 5) }, () => item({ metadata: { w: name } }));
        await s.episodes.ingest(items);
        for (const it of items) written.add(it.report.id);
      }
    };
    const seen: string[] = [];
    const pager = async () => {
      let after = 0;
      for (;;) {
        const done = !writing;
        const rows = await reader.episodes.list(ORG, all, after, 7);
        for (const r of rows) seen.push(r.id);
        if (rows.length > 0) after = rows[rows.length - 1]!.seq;
        else if (done) return;
      }
    };
    const paging = pager();
    await Promise.all([writer(a, 'a'), writer(b, 'b')]);
    writing = false;
    await paging;
    expect(seen.length).toBe(written.size);
    expect(new Set(seen)).toEqual(written);
  });

  it('two replicas ingesting the same reports at once insert each once; the other sees a duplicate', async () => {
    const twin = await openTwin(store);
    twins.push(twin);
    const items = Array.from({ length: 30 }, () => item());
    const rounds = await Promise.all(
      Array.from({ length: 6 }, (_, i) => (i % 2 ? twin : store).episodes.ingest(i % 3 === 0 ? items : [...items].reverse())),
    );
    for (const [k, it] of items.entries()) {
      const results = rounds.map((r, i) => r[i % 3 === 0 ? k : items.length - 1 - k]);
      expect(results.filter((x) => x === 'inserted'), it.report.id).toHaveLength(1);
      expect(results.filter((x) => x === 'duplicate')).toHaveLength(5);
    }
    expect(await store.episodes.count(ORG)).toBe(30);
    expect((await store.db.one<{ n: number }>("SELECT COUNT(*) AS n FROM events WHERE type = 'episode.finalized'"))!.n).toBe(30);
  });

  it('annotation patches and outcome changes from two replicas at once are never lost', async () => {
    const twin = await openTwin(store);
    twins.push(twin);
    const it0 = item();
    await store.episodes.ingest([it0]);
    const id = it0.report.id;
    await Promise.all(
      Array.from({ length: 20 }, (_, i) => {
        const s = i % 2 ? twin : store;
        return i % 4 < 2
          ? s.episodes.patchAnnotations(ORG, id, { [`k${i}`]: i })
          : s.episodes.setOutcome(ORG, id, { outcome: 'failure', reason: `r${i}`, actor: 'key_1', at: T0 + i });
      }),
    );
    const row = (await store.episodes.get(ORG, id))!;
    expect(Object.keys(row.annotations).sort()).toEqual(['k0', 'k1', 'k12', 'k13', 'k16', 'k17', 'k4', 'k5', 'k8', 'k9']);
    for (const k of Object.keys(row.annotations)) {
      expect((await store.episodes.list(ORG, { ...all, annotation: { [k]: k.slice(1) } }, 0, 10)).map((r) => r.id)).toEqual([id]);
    }
    expect(await store.episodes.outcomeHistory(ORG, id)).toHaveLength(10);
  });

  it('appends one episode.finalized event per inserted episode, in the ingest transaction', async () => {
    const first = item({ recording_session_id: 'rs_9', episode_seq: 4 });
    expect(await store.episodes.ingest([first, first, item()])).toEqual(['inserted', 'duplicate', 'inserted']);
    expect(await store.episodes.ingest([first])).toEqual(['duplicate']);
    const events = await store.db.many<{ org_id: string; type: string; episode_id: string; payload: string; created_at: number }>(
      'SELECT org_id, type, episode_id, payload, created_at FROM events ORDER BY id',
    );
    expect(events).toHaveLength(2);
    expect(events[0]).toMatchObject({ org_id: ORG, type: 'episode.finalized', episode_id: first.report.id, created_at: T0 + 1000 });
    expect(JSON.parse(events[0]!.payload)).toEqual({
      schema_version: 1,
      episode_id: first.report.id,
      robot_id: ROBOT,
      recording_session_id: 'rs_9',
      episode_seq: 4,
      state: 'reported',
    });
  });

  it('sync_state reads the replicas table; replicas ride along with the rows', async () => {
    const items = [item(), item(), item()];
    await store.episodes.ingest(items);
    const [a, b, c] = (await store.episodes.list(ORG, all, 0, 10)).map((r) => r);
    const put = (seq: number, dest: string, state: string) =>
      store.db.query(
        `INSERT INTO replicas (episode_seq, destination_id, state, grant_id, error, object_key, updated_at) VALUES ($1, $2, $3, $4, NULL, $5, $6)
         ON CONFLICT (episode_seq, destination_id) DO UPDATE SET state = excluded.state`,
        [seq, dest, state, `grt_${dest}`, `objects/${seq}`, T0 + 5000],
      );
    const ids = async (f: Partial<EpisodeFilter>) => (await store.episodes.list(ORG, { ...all, ...f }, 0, 100)).map((r) => r.id);
    await put(a!.seq, 'dst_1', 'synced');
    expect(await ids({ syncState: { state: 'synced' } })).toEqual([a!.id]);
    expect(await ids({ syncState: { state: 'verified' } })).toEqual([]);
    await put(a!.seq, 'dst_1', 'verified');
    await put(b!.seq, 'dst_2', 'verified');
    expect(await ids({ syncState: { state: 'synced' } })).toEqual([a!.id, b!.id]);
    expect(await ids({ syncState: { state: 'verified', destinationId: 'dst_2' } })).toEqual([b!.id]);
    expect(await ids({ syncState: { state: 'unverified' } })).toEqual([c!.id]);
    expect(await ids({ syncState: { state: 'unverified', destinationId: 'dst_1' } })).toEqual([b!.id, c!.id]);
    expect(await store.episodes.listSeqs(ORG, { ...all, syncState: { state: 'unverified', destinationId: 'dst_1' } }, 0, 100)).toEqual([b!.seq, c!.seq]);
    expect((await store.episodes.get(ORG, a!.id))!.replicas).toEqual([
      { destinationId: 'dst_1', state: 'verified', grantId: 'grt_dst_1', error: null, objectKey: `objects/${a!.seq}`, updatedAt: T0 + 5000 },
    ]);
  });

  it('indexes attribute keys and values with a NUL or a backslash (text cannot hold NUL) and tells them apart', async () => {
    const values = ['a\u0000b', 'a\\0b', 'a\\\\0b', 'a\\b', 'ab'];
    const items = values.map((v) => item({ metadata: { [`k\u0000${v}`]: v, k: v } }));
    await store.episodes.ingest(items);
    for (const [i, v] of values.entries()) {
      const want = [items[i]!.report.id];
      expect((await store.episodes.list(ORG, { ...all, metadata: { k: v } }, 0, 10)).map((r) => r.id)).toEqual(want);
      expect((await store.episodes.list(ORG, { ...all, metadata: { [`k\u0000${v}`]: v } }, 0, 10)).map((r) => r.id)).toEqual(want);
    }
    expect((await store.episodes.get(ORG, items[0]!.report.id))!.metadata).toEqual({ 'k\u0000a\u0000b': 'a\u0000b', k: 'a\u0000b' });
  });
});
