import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ManualClock, ManualScheduler, type EpisodeReport } from '@fleet/protocol';
import { snapshotFilter } from '../routes/v1/datasets.js';
import { testReport } from '../test-support.js';
import { openSqliteStore, type SqliteStore } from './sqlite/store.js';
import { REAL_TIME } from './test-store.js';
import type { SqliteDatasets } from './sqlite/datasets.js';
import type { IngestItem } from './shared/types.js';

// A snapshot of a file database is written in chunks from a consistent read view (the in-memory
// databases of the other tests take the one-transaction path).
const T0 = Date.parse('2026-01-01T00:00:00Z');
const ORG = 'org_a';
const OTHER = 'org_b';

let dir: string;
let store: SqliteStore;

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'fleet-snapshot-chunks-'));
  store = openSqliteStore(dir, REAL_TIME);
  await store.orgs.create({ id: ORG, name: 'a', tier: 'enterprise', createdAt: T0 });
  await store.orgs.create({ id: OTHER, name: 'b', tier: 'enterprise', createdAt: T0 });
  // Tiny chunks, so a handful of episodes spans many transactions.
  (store.datasets as SqliteDatasets).snapshotWindow = { initial: 3, min: 3, max: 3 };
});
afterEach(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

async function ingest(orgId: string, reports: EpisodeReport[]): Promise<string[]> {
  const items: IngestItem[] = reports.map((r) => ({ orgId, robotId: 'rbt_1', report: r, reportedAt: T0 }));
  await store.episodes.ingest(items);
  return reports.map((r) => r.id);
}

async function members(id: string): Promise<string[]> {
  const out: string[] = [];
  for (let after = 0; ; after += 7) {
    const rows = await store.datasets.members(id, after, 7);
    out.push(...rows.map((r) => r.id));
    if (rows.length < 7) return out;
  }
}

async function matching(filter: Record<string, string>): Promise<string[]> {
  return (await store.episodes.list(ORG, snapshotFilter(filter), 0, 1_000_000)).map((r) => r.id);
}

async function createDataset(id: string, filter: Record<string, string>): Promise<void> {
  await store.datasets.create({ id, orgId: ORG, name: id, description: null, filter, createdBy: 'key_1', createdAt: T0 });
}

describe('chunked dataset snapshots', () => {
  it('equal the filter set at snapshot time while episodes are ingested, re-annotated and overridden meanwhile', async () => {
    const reports = Array.from({ length: 60 }, (_, i) =>
      testReport({ task_id: i % 2 === 0 ? 't1' : 't2', metadata: { site: i % 3 === 0 ? 'lab' : 'field' }, eval_id: i % 11 === 0 ? 'ev' : null }),
    );
    const ids = await ingest(ORG, reports);
    await ingest(OTHER, Array.from({ length: 10 }, () => testReport({ task_id: 't1', metadata: { site: 'lab' } })));
    for (const [n, filter] of [
      [1, {}],
      [2, { task_id: 't1' }],
      [3, { 'metadata.site': 'lab' }],
      [4, { 'metadata.site': 'lab', task_id: 't1' }],
    ] as const) {
      const id = `ds_${n}`;
      await createDataset(id, filter);
      const want = await matching(filter);
      const pending = store.datasets.snapshot(ORG, id, snapshotFilter(filter), T0 + 5000);
      // Meanwhile: new matching episodes, a member discarded, a late member's task changed is impossible
      // (recorded facts), so its annotation and outcome change instead.
      await ingest(ORG, [testReport({ task_id: 't1', metadata: { site: 'lab' } })]);
      await store.episodes.setOutcome(ORG, ids[58]!, { outcome: 'discarded', reason: 'bad', actor: 'k', at: T0 });
      await store.episodes.patchAnnotations(ORG, ids[57]!, { note: 'x' });
      expect((await store.datasets.get(ORG, id))?.snapshotAt).toBeNull();
      const row = await pending;
      expect(row).toMatchObject({ id, snapshotAt: T0 + 5000, episodeCount: want.length });
      expect(await members(id), JSON.stringify(filter)).toEqual(want);
      await store.episodes.setOutcome(ORG, ids[58]!, { outcome: 'success', reason: 'ok', actor: 'k', at: T0 });
    }
  });

  it('a second snapshot of the same dataset waits for the first and sees already; members appear only once pinned', async () => {
    await ingest(ORG, Array.from({ length: 40 }, () => testReport()));
    await createDataset('ds_x', {});
    const first = store.datasets.snapshot(ORG, 'ds_x', snapshotFilter({}), T0 + 1);
    const second = store.datasets.snapshot(ORG, 'ds_x', snapshotFilter({}), T0 + 2);
    expect(await store.datasets.get(ORG, 'ds_x')).toMatchObject({ snapshotAt: null, episodeCount: null });
    expect(await first).toMatchObject({ snapshotAt: T0 + 1, episodeCount: 40 });
    expect(await second).toBe('already');
    expect(await members('ds_x')).toHaveLength(40);
  });

  it('takes over the expired claim of a snapshot whose process died, dropping its half-written members', async () => {
    const ids = await ingest(ORG, Array.from({ length: 10 }, () => testReport()));
    await createDataset('ds_dead', {});
    const db = store.db;
    db.prepare("UPDATE datasets SET snapshot_claim = 'dead', snapshot_lease_until = ? WHERE id = 'ds_dead'").run(Date.now() - 1);
    db.prepare("INSERT INTO dataset_members (dataset_id, position, episode_seq) VALUES ('ds_dead', 1, 999), ('ds_dead', 2, 998)").run();
    expect(await store.datasets.snapshot(ORG, 'ds_dead', snapshotFilter({}), T0)).toMatchObject({ episodeCount: 10 });
    expect(await members('ds_dead')).toEqual(ids);
  });

  it("waits behind another process's live claim, on the store's clock, and takes it over once the lease has run out", async () => {
    const ids = await ingest(ORG, Array.from({ length: 5 }, () => testReport()));
    await createDataset('ds_held', {});
    // Another process holds the claim, its lease 30 s from now on the store's clock.
    const clock = new ManualClock(T0);
    const scheduler = new ManualScheduler(clock);
    const timed = openSqliteStore(dir, { create: false, clock, scheduler });
    try {
      store.db.prepare("UPDATE datasets SET snapshot_claim = 'other', snapshot_lease_until = ? WHERE id = 'ds_held'").run(T0 + 30_000);
      let settled = false;
      const snapshot = timed.datasets.snapshot(ORG, 'ds_held', snapshotFilter({}), T0).finally(() => (settled = true));
      // Busy: it waits for its next look on the scheduler, and looks again with the lease alive.
      await expect.poll(() => scheduler.pending).toBe(1);
      clock.set(T0 + 29_000);
      scheduler.advance(500);
      await expect.poll(() => scheduler.pending).toBe(1);
      expect(settled).toBe(false);
      expect(await store.datasets.get(ORG, 'ds_held')).toMatchObject({ snapshotAt: null });
      // The lease has run out: the next look takes the claim over and the snapshot completes.
      scheduler.advance(501);
      expect(await snapshot).toMatchObject({ episodeCount: 5, snapshotAt: T0 });
      expect(await members('ds_held')).toEqual(ids);
    } finally {
      await timed.close();
    }
  });

  it("keeps ingest, annotation and outcome writes working between the windows the background thread reads and this connection writes", async () => {
    const ids = await ingest(ORG, Array.from({ length: 300 }, (_, i) => testReport({ task_id: i % 2 === 0 ? 't1' : 't2' })));
    await createDataset('ds_busy', { task_id: 't1' });
    const want = await matching({ task_id: 't1' });
    let settled = false;
    const snapshot = store.datasets.snapshot(ORG, 'ds_busy', snapshotFilter({ task_id: 't1' }), T0).finally(() => (settled = true));
    // Every write below reads before it writes, interleaved with the members' transactions while
    // the thread's read transaction stays open.
    let writes = 0;
    while (!settled || writes < 20) {
      await ingest(ORG, [testReport({ task_id: 't1' })]);
      await store.episodes.patchAnnotations(ORG, ids[writes % 300]!, { n: writes });
      await store.episodes.setOutcome(ORG, ids[(writes + 1) % 300]!, { outcome: 'success', reason: 'ok', actor: 'k', at: T0 });
      writes++;
      // The store's calls settle without a turn of the event loop; the thread's reports need one.
      await new Promise((resolve) => setImmediate(resolve));
    }
    expect(await snapshot).toMatchObject({ episodeCount: want.length });
    expect(await members('ds_busy')).toEqual(want);
  });

  it('a store closed during a snapshot fails it without pinning or leaving members; the dataset is snapshotted later', async () => {
    // Enough windows (3 seqs each) that the thread is still writing when the store closes.
    const ids = await ingest(ORG, Array.from({ length: 3000 }, () => testReport()));
    await createDataset('ds_closed', {});
    const snapshot = store.datasets.snapshot(ORG, 'ds_closed', snapshotFilter({}), T0);
    const closing = store.close();
    await expect(snapshot).rejects.toThrow(/closed/);
    await closing;
    store = openSqliteStore(dir, { create: false, ...REAL_TIME });
    expect(await store.datasets.get(ORG, 'ds_closed')).toMatchObject({ snapshotAt: null, episodeCount: null });
    expect(await members('ds_closed')).toEqual([]);
    expect(await store.datasets.snapshot(ORG, 'ds_closed', snapshotFilter({}), T0)).toMatchObject({ episodeCount: 3000 });
    expect(await members('ds_closed')).toEqual(ids);
  });

  it('an empty membership pins count 0', async () => {
    await ingest(ORG, [testReport({ task_id: 't1' })]);
    await createDataset('ds_empty', { task_id: 'none' });
    expect(await store.datasets.snapshot(ORG, 'ds_empty', snapshotFilter({ task_id: 'none' }), T0)).toMatchObject({ episodeCount: 0 });
    expect(await members('ds_empty')).toEqual([]);
    expect(await store.datasets.snapshot(ORG, 'ds_empty', snapshotFilter({}), T0)).toBe('already');
  });
});
