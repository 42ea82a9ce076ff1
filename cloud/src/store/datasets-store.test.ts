import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { EpisodeReport } from '@fleet/protocol';
import { snapshotFilter } from '../routes/v1/datasets.js';
import { testReport } from '../test-support.js';
import { describeStore, lineByColumn, lineOf, openTestStore, openTwin, postgresAvailable, type TestEngine, type TestStore } from './test-store.js';
import type { DatasetRow, EpisodeFilter, IngestItem, Store } from './shared/types.js';

const T0 = Date.parse('2026-01-01T00:00:00Z');
const ORG = 'org_a';
const OTHER_ORG = 'org_b';
const ROBOT = 'rbt_1';

let store: TestStore;

async function withOrgs(s: TestStore): Promise<TestStore> {
  await s.orgs.create({ id: ORG, name: 'a', tier: 'enterprise', createdAt: T0 });
  await s.orgs.create({ id: OTHER_ORG, name: 'b', tier: 'enterprise', createdAt: T0 });
  return s;
}

const report = testReport;

async function ingest(orgId: string, ...reports: EpisodeReport[]): Promise<string[]> {
  const items: IngestItem[] = reports.map((r) => ({ orgId, robotId: ROBOT, report: r, reportedAt: T0 + 1000 }));
  expect(await store.episodes.ingest(items)).toEqual(reports.map(() => 'inserted'));
  return reports.map((r) => r.id);
}

let dsCounter = 0;
async function createDataset(orgId: string, filter: Record<string, string> = {}): Promise<string> {
  dsCounter += 1;
  const id = `ds_${dsCounter.toString().padStart(6, '0')}`;
  await store.datasets.create({ id, orgId, name: `ds ${dsCounter}`, description: null, filter, createdBy: 'key_1', createdAt: T0 });
  return id;
}

async function snap(orgId: string, id: string, filter: EpisodeFilter, at = T0 + 5000): Promise<DatasetRow> {
  const result = await store.datasets.snapshot(orgId, id, filter, at);
  if (result === null || result === 'already') throw new Error(`snapshot gave ${String(result)}`);
  return result;
}

async function allMembers(id: string, pageSize = 1000): Promise<string[]> {
  const out: string[] = [];
  for (let after = 0; ; after += pageSize) {
    const rows = await store.datasets.members(id, after, pageSize);
    out.push(...rows.map((r) => r.id));
    if (rows.length < pageSize) return out;
  }
}

describeStore('dataset store', (open) => {
  beforeEach(async () => {
    store = await withOrgs(await open());
  });
  afterEach(async () => {
    await store.close();
  });

  it('creates, gets (per organization) and lists in id order with a keyset cursor', async () => {
    const ids = [await createDataset(ORG, { task_id: 't' }), await createDataset(ORG), await createDataset(ORG)];
    const theirs = await createDataset(OTHER_ORG);
    const got = await store.datasets.get(ORG, ids[0]!);
    expect(got?.name).toMatch(/^ds \d+$/);
    expect(got).toEqual({
      id: ids[0],
      orgId: ORG,
      name: got?.name,
      description: null,
      filter: { task_id: 't' },
      snapshotAt: null,
      episodeCount: null,
      createdBy: 'key_1',
      createdAt: T0,
    });
    expect(await store.datasets.get(OTHER_ORG, ids[0]!)).toBeUndefined();
    expect(await store.datasets.get(ORG, theirs)).toBeUndefined();
    expect((await store.datasets.list(ORG, null, 10)).map((d) => d.id)).toEqual(ids);
    expect((await store.datasets.list(ORG, null, 2)).map((d) => d.id)).toEqual(ids.slice(0, 2));
    expect((await store.datasets.list(ORG, ids[1]!, 2)).map((d) => d.id)).toEqual(ids.slice(2));
    expect((await store.datasets.list(OTHER_ORG, null, 10)).map((d) => d.id)).toEqual([theirs]);
  });

  it("never includes another organization's episodes, on every query path", async () => {
    const mine = await ingest(ORG, report({ task_id: 't1', metadata: { site: 'lab' } }), report({ task_id: 't1' }));
    await ingest(OTHER_ORG, report({ task_id: 't1', metadata: { site: 'lab' } }), report({ task_id: 't1' }));
    const more = await ingest(ORG, report({ task_id: 't1', metadata: { site: 'lab' } }));
    const cases: [Record<string, string>, string[]][] = [
      [{}, [...mine, ...more]],
      [{ task_id: 't1' }, [...mine, ...more]],
      [{ 'metadata.site': 'lab' }, [mine[0]!, more[0]!]],
      [{ 'metadata.site': 'lab', task_id: 't1' }, [mine[0]!, more[0]!]],
      [{ sync_state: 'unverified' }, [...mine, ...more]],
    ];
    for (const [filter, want] of cases) {
      const id = await createDataset(ORG, filter);
      const row = await snap(ORG, id, snapshotFilter(filter));
      expect(row.episodeCount, JSON.stringify(filter)).toBe(want.length);
      expect(await allMembers(id), JSON.stringify(filter)).toEqual(want);
    }
  });

  it('returns null for an unknown dataset or one of another organization, and leaves it live', async () => {
    const id = await createDataset(ORG);
    await ingest(ORG, report());
    expect(await store.datasets.snapshot(ORG, 'ds_nope', snapshotFilter({}), T0)).toBeNull();
    expect(await store.datasets.snapshot(OTHER_ORG, id, snapshotFilter({}), T0)).toBeNull();
    const row = await store.datasets.get(ORG, id);
    expect(row?.snapshotAt).toBeNull();
    expect(row?.episodeCount).toBeNull();
    expect(await store.datasets.members(id, 0, 10)).toEqual([]);
  });

  it('snapshots an empty membership: count 0, no members, and it is still one-shot', async () => {
    await ingest(ORG, report({ task_id: 't1' }));
    const id = await createDataset(ORG, { task_id: 'none' });
    const row = await snap(ORG, id, snapshotFilter({ task_id: 'none' }), T0 + 7000);
    expect(row).toMatchObject({ id, snapshotAt: T0 + 7000, episodeCount: 0 });
    expect(await store.datasets.get(ORG, id)).toMatchObject({ snapshotAt: T0 + 7000, episodeCount: 0 });
    expect(await store.datasets.members(id, 0, 10)).toEqual([]);
    expect(await store.datasets.snapshot(ORG, id, snapshotFilter({}), T0 + 8000)).toBe('already');
    expect(await store.datasets.get(ORG, id)).toMatchObject({ snapshotAt: T0 + 7000, episodeCount: 0 });
  });

  it('a second snapshot is `already` and never adds members', async () => {
    const first = await ingest(ORG, report(), report());
    const id = await createDataset(ORG);
    expect((await snap(ORG, id, snapshotFilter({}))).episodeCount).toBe(2);
    await ingest(ORG, report());
    expect(await store.datasets.snapshot(ORG, id, snapshotFilter({}), T0 + 9000)).toBe('already');
    expect(await allMembers(id)).toEqual(first);
    expect((await store.datasets.get(ORG, id))?.episodeCount).toBe(2);
  });

  it('numbers members 1..n in ingest order: pages by position never overlap or skip', async () => {
    const ids = await ingest(ORG, ...Array.from({ length: 11 }, () => report()));
    const id = await createDataset(ORG);
    expect((await snap(ORG, id, snapshotFilter({}))).episodeCount).toBe(11);
    expect(await allMembers(id, 3)).toEqual(ids);
    expect((await store.datasets.members(id, 10, 5)).map((r) => r.id)).toEqual([ids[10]]);
    expect(await store.datasets.members(id, 11, 5)).toEqual([]);
    // Members of one dataset never leak into another's pages.
    const other = await createDataset(ORG, { task_id: 'none' });
    await snap(ORG, other, snapshotFilter({ task_id: 'none' }));
    expect(await store.datasets.members(other, 0, 100)).toEqual([]);
  });

  it('memberLineRows gives what members gives, page by page, as line rows with the episodes\' current data and replicas', async () => {
    const ids = await ingest(
      ORG,
      ...Array.from({ length: 9 }, (_, i) =>
        report({
          task_id: i % 2 === 0 ? 'even' : 'odd',
          metadata: { i },
          ...(i === 4 ? { operator_id: 'op_1', ended_at: '2026-01-01T00:01:00.000Z', duration_s: 60, bag_size_bytes: 4096, bag_uri: 's3://b/k' } : {}),
        }),
      ),
    );
    const even = ids.filter((_, i) => i % 2 === 0);
    const id = await createDataset(ORG, { task_id: 'even' });
    expect((await snap(ORG, id, snapshotFilter({ task_id: 'even' }))).episodeCount).toBe(5);
    // Changes after the snapshot: members carry the episodes' data as it is now.
    await store.episodes.patchAnnotations(ORG, even[1]!, { qa: 'pass', score: 3 });
    await store.episodes.setOutcome(ORG, even[2]!, { outcome: 'failure', reason: 'r', actor: 'k', at: T0 });
    for (const d of ['dst_a', 'dst_b']) {
      await store.sync.createDestination({ id: d, orgId: ORG, type: 'external', url: 'https://grants.example.com', secretSealed: 's', retention: 'keep', createdAt: T0 });
    }
    const replica = (episodeId: string, destinationId: string, state: 'syncing' | 'verified') =>
      store.sync.applyReplicaReport(ROBOT, { episode_id: episodeId, destination_id: destinationId, grant_id: 'g1', state, error: null, object_key: 'k/1', at: 1 }, T0 + 2);
    expect(await replica(even[0]!, 'dst_a', 'syncing')).toBe('applied');
    expect(await replica(even[0]!, 'dst_b', 'verified')).toBe('applied');
    expect(await replica(even[3]!, 'dst_a', 'verified')).toBe('applied');
    // An episode outside the dataset is not in its rows.
    expect(await replica(ids[1]!, 'dst_a', 'verified')).toBe('applied');

    for (const [after, limit] of [[0, 10], [0, 2], [2, 2], [1, 3], [4, 5], [5, 5], [0, 1]] as const) {
      const label = `after ${after} limit ${limit}`;
      const members = await store.datasets.members(id, after, limit);
      const lines = await store.datasets.memberLineRows(id, after, limit);
      expect(lines.rows.map(lineByColumn), label).toEqual(members.map(lineOf));
      expect(lines.replicas, label).toEqual(new Map(members.filter((m) => m.replicas.length > 0).map((m) => [m.seq, m.replicas])));
    }
    const whole = await store.datasets.memberLineRows(id, 0, 10);
    expect(whole.rows.map((r) => r[1])).toEqual(even);
    expect(whole.rows.map((r) => lineByColumn(r).annotations)).toEqual(['{}', '{"qa":"pass","score":3}', '{}', '{}', '{}']);
    expect(whole.rows.map((r) => lineByColumn(r).outcome)).toEqual(['success', 'success', 'failure', 'success', 'success']);
    expect([...whole.replicas.values()].map((r) => r.map((x) => `${x.destinationId}:${x.state}`))).toEqual([['dst_a:syncing', 'dst_b:verified'], ['dst_a:verified']]);
    // An unknown dataset, and one not snapshotted yet, have no rows.
    expect(await store.datasets.memberLineRows('ds_nope', 0, 10)).toEqual({ rows: [], replicas: new Map() });
    expect(await store.datasets.memberLineRows(await createDataset(ORG), 0, 10)).toEqual({ rows: [], replicas: new Map() });
  });

  it('applies the eval and discarded exclusions given in the filter', async () => {
    const [plain, ev, disc] = await ingest(ORG, report(), report({ eval_id: 'ev1' }), report({ outcome: 'discarded' }));
    const cases: [EpisodeFilter, string[]][] = [
      [{ eq: {}, metadata: {}, annotation: {} }, [plain!, ev!, disc!]],
      [{ eq: {}, metadata: {}, annotation: {}, excludeEval: true }, [plain!, disc!]],
      [{ eq: {}, metadata: {}, annotation: {}, excludeDiscarded: true }, [plain!, ev!]],
      [{ eq: {}, metadata: {}, annotation: {}, excludeEval: true, excludeDiscarded: true }, [plain!]],
    ];
    for (const [filter, want] of cases) {
      const id = await createDataset(ORG);
      await snap(ORG, id, filter);
      expect(await allMembers(id), JSON.stringify(filter)).toEqual(want);
    }
  });
});

const engines: TestEngine[] = postgresAvailable() ? ['sqlite', 'postgres'] : ['sqlite'];

describe.each(engines)('dataset snapshot across processes [%s]', (engine) => {
  let dir: string;
  let twin: Store;

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'fleet-datasets-'));
    store = await withOrgs(await openTestStore(engine, { dataDir: dir }));
    twin = await openTwin(store);
  });
  afterEach(async () => {
    await twin.close();
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('two replicas snapshotting one dataset at once make one snapshot; the other gets `already`', async () => {
    const ids = await ingest(ORG, ...Array.from({ length: 40 }, () => report()));
    for (let round = 0; round < 5; round++) {
      const id = await createDataset(ORG);
      const results = await Promise.all([
        store.datasets.snapshot(ORG, id, snapshotFilter({}), T0 + 1),
        twin.datasets.snapshot(ORG, id, snapshotFilter({}), T0 + 2),
      ]);
      const made = results.filter((r): r is DatasetRow => r !== null && r !== 'already');
      expect(made).toHaveLength(1);
      expect(results.filter((r) => r === 'already')).toHaveLength(1);
      expect(await store.datasets.get(ORG, id)).toMatchObject({ snapshotAt: made[0]!.snapshotAt, episodeCount: 40 });
      expect(await allMembers(id, 7)).toEqual(ids);
    }
  });
});
