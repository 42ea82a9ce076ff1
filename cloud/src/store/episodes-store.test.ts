import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { EpisodeReport } from '@fleet/protocol';
import { describeStore, lineByColumn, lineOf, sqliteDb, type TestStore } from './test-store.js';
import type { EpisodeLineRow } from './shared/episode-lines.js';
import type { EpisodeFilter, EpisodeLineBatch, EpisodeRow, IngestItem } from './shared/types.js';

const T0 = Date.parse('2026-01-01T00:00:00Z');
const ORG = 'org_a';
const OTHER_ORG = 'org_b';
const ROBOT = 'rbt_1';

let store: TestStore;
let counter = 0;

function episodeId(): string {
  counter += 1;
  return `ep_${counter.toString(36).padStart(12, '0')}`;
}

function report(over: Partial<EpisodeReport> = {}): EpisodeReport {
  return {
    id: episodeId(),
    recording_session_id: 'rs_1',
    episode_seq: 1,
    session_name: null,
    task_id: null,
    task_name: null,
    subtask_id: null,
    operator_id: null,
    operator_name: null,
    control_mode: null,
    policy_version_id: null,
    eval_id: null,
    outcome: 'success',
    started_at: new Date(T0).toISOString(),
    ended_at: null,
    duration_s: null,
    message_count: null,
    bag_size_bytes: null,
    metadata: {},
    segments: [],
    manifest: { files: [], total_bytes: 0 },
    ...over,
  };
}

function item(r: EpisodeReport, over: Partial<Omit<IngestItem, 'report'>> = {}): IngestItem {
  return { orgId: ORG, robotId: ROBOT, report: r, reportedAt: T0 + 1000, ...over };
}

async function ingest(...reports: EpisodeReport[]): Promise<EpisodeReport[]> {
  const results = await store.episodes.ingest(reports.map((r) => item(r)));
  expect(results).toEqual(reports.map(() => 'inserted'));
  return reports;
}

function filter(over: Partial<EpisodeFilter> = {}): EpisodeFilter {
  return { eq: {}, metadata: {}, annotation: {}, ...over };
}

async function ids(f: Partial<EpisodeFilter> = {}, orgId = ORG): Promise<string[]> {
  return (await store.episodes.list(orgId, filter(f), 0, 1000)).map((r) => r.id);
}

/** SQLite only: the event log has no public read in this interface (webhook fan-out reads it). */
function count(sql: string, ...params: unknown[]): number {
  return (sqliteDb(store).prepare(sql).get(...params) as { n: number }).n;
}

/** SQLite only: replicas are written by the sync store (pg/episodes.test.ts covers PostgreSQL). */
function addReplica(row: EpisodeRow, destinationId: string, state: 'granted' | 'syncing' | 'synced' | 'verified'): void {
  sqliteDb(store)
    .prepare(
      `INSERT INTO replicas (episode_seq, destination_id, state, grant_id, error, object_key, updated_at) VALUES (?, ?, ?, ?, NULL, ?, ?)
       ON CONFLICT (episode_seq, destination_id) DO UPDATE SET state = excluded.state`,
    )
    .run(row.seq, destinationId, state, `grt_${destinationId}`, `objects/${row.id}`, T0 + 5000);
}

/** Checks that a batch of line rows is `rows` as lines, with each row's replicas (none: not in the map). */
function expectLinesOf(batch: EpisodeLineBatch, rows: EpisodeRow[], label: string): void {
  expect(batch.rows.map(lineByColumn), label).toEqual(rows.map(lineOf));
  expect(batch.replicas, label).toEqual(new Map(rows.filter((r) => r.replicas.length > 0).map((r) => [r.seq, r.replicas])));
}

describeStore('episode store', (open, engine) => {
  const sqlite = engine === 'sqlite';
  beforeEach(async () => {
    store = await open();
  });
  afterEach(async () => {
    await store.close();
  });

  describe('ingest', () => {
    it('is idempotent on the episode id: a resend is a duplicate, one row, one episode.finalized event', async () => {
      const r = report({ metadata: { site: 'lab' } });
      expect(await store.episodes.ingest([item(r)])).toEqual(['inserted']);
      expect(await store.episodes.ingest([item(r, { reportedAt: T0 + 99_000 })])).toEqual(['duplicate']);
      // A resend inside one batch, too.
      expect(await store.episodes.ingest([item(r), item(r)])).toEqual(['duplicate', 'duplicate']);

      expect(await store.episodes.count(ORG)).toBe(1);
      expect(await ids()).toEqual([r.id]);
      if (sqlite) expect(count("SELECT COUNT(*) AS n FROM events WHERE type = 'episode.finalized' AND episode_id = ?", r.id)).toBe(1);
      // The metadata index is not doubled either.
      expect(await ids({ metadata: { site: 'lab' } })).toEqual([r.id]);
      // The first report's reported_at stays.
      expect((await store.episodes.get(ORG, r.id))!.reportedAt).toBe(T0 + 1000);
    });

    it('dedupes two copies inside one batch', async () => {
      const r = report();
      expect(await store.episodes.ingest([item(r), item(r)])).toEqual(['inserted', 'duplicate']);
      expect(await ids()).toEqual([r.id]);
      if (sqlite) expect(count("SELECT COUNT(*) AS n FROM events WHERE type = 'episode.finalized'")).toBe(1);
    });

    // The event log has no read in the store interface: pg/episodes.test.ts checks it on PostgreSQL.
    it.runIf(sqlite)('writes the episode.finalized event with the spec payload, in the organization', async () => {
      const r = report({ recording_session_id: 'rs_9', episode_seq: 4 });
      await ingest(r);
      const ev = sqliteDb(store).prepare('SELECT org_id, type, episode_id, payload, created_at FROM events').all() as {
        org_id: string;
        type: string;
        episode_id: string;
        payload: string;
        created_at: number;
      }[];
      expect(ev).toHaveLength(1);
      expect(ev[0]).toMatchObject({ org_id: ORG, type: 'episode.finalized', episode_id: r.id, created_at: T0 + 1000 });
      expect(JSON.parse(ev[0]!.payload)).toEqual({
        schema_version: 1,
        episode_id: r.id,
        robot_id: ROBOT,
        recording_session_id: 'rs_9',
        episode_seq: 4,
        state: 'reported',
      });
    });

    it('refuses an id another robot reported as a conflict and leaves the original row untouched', async () => {
      const r = report({ task_id: 'original', metadata: { k: 'v1' } });
      await ingest(r);
      const before = await store.episodes.get(ORG, r.id);
      const forged = { ...r, task_id: 'forged', metadata: { k: 'v2' }, outcome: 'failure' as const };
      expect(await store.episodes.ingest([item(forged, { robotId: 'rbt_2' })])).toEqual(['conflict']);
      // Same robot id in another organization is another robot too.
      expect(await store.episodes.ingest([item(forged, { orgId: OTHER_ORG })])).toEqual(['conflict']);

      expect(await store.episodes.get(ORG, r.id)).toEqual(before);
      expect(await store.episodes.get(OTHER_ORG, r.id)).toBeUndefined();
      if (sqlite) expect(count('SELECT COUNT(*) AS n FROM events')).toBe(1);
      expect(await ids({ metadata: { k: 'v2' } })).toEqual([]);
      expect(await ids({ metadata: { k: 'v1' } })).toEqual([r.id]);
    });

    it('writes a batch in order, and a conflict does not stop the rest of the batch', async () => {
      const taken = report();
      await ingest(taken);
      const a = report();
      const b = report();
      expect(await store.episodes.ingest([item(a), item(taken, { robotId: 'rbt_x' }), item(b)])).toEqual(['inserted', 'conflict', 'inserted']);
      expect(await ids()).toEqual([taken.id, a.id, b.id]);
    });

    it('stores recorded facts, metadata, segments and manifest exactly', async () => {
      const r = report({
        recording_session_id: 'rs_full',
        episode_seq: 7,
        session_name: 'morning shift',
        task_id: 'task_fold',
        task_name: 'Fold towel',
        subtask_id: 'sub_grasp',
        operator_id: 'op_1',
        operator_name: 'Ada',
        control_mode: 'teleop',
        policy_version_id: 'pol_3',
        eval_id: 'eval_2',
        outcome: 'failure',
        started_at: '2026-01-02T03:04:05.678Z',
        ended_at: '2026-01-02T03:05:06.789Z',
        duration_s: 61.111,
        message_count: 123_456,
        bag_size_bytes: 9_876_543_210,
        bag_uri: 'file:///data/ep/bag.mcap',
        metadata: { n: 3, flag: true, s: 'text', nested: { a: [1, 'two', null] }, f: 1.5, nil: null },
        segments: [
          { segment_index: 0, subtask_id: 'sub_reach', subtask_name: 'Reach', start_offset_s: 0, end_offset_s: 12.5 },
          { segment_index: 1, subtask_id: null, subtask_name: null, start_offset_s: 12.5, end_offset_s: 61.111 },
        ],
        manifest: {
          files: [
            { path: 'bag.mcap', size_bytes: 9_876_543_000, sha256: 'a'.repeat(64) },
            { path: 'video/cam0.mp4', size_bytes: 210, sha256: '0123456789abcdef'.repeat(4) },
          ],
          total_bytes: 9_876_543_210,
        },
        interrupted: true,
      });
      await ingest(r);
      const row = (await store.episodes.get(ORG, r.id))!;
      const { metadata, segments, manifest, outcome, interrupted, ...facts } = r;
      expect(row).toMatchObject({
        id: r.id,
        orgId: ORG,
        robotId: ROBOT,
        outcome,
        recordedOutcome: outcome,
        annotations: {},
        interrupted: true,
        reportedAt: T0 + 1000,
        replicas: [],
      });
      expect(row.report).toEqual({ ...facts, interrupted });
      expect(row.metadata).toEqual(metadata);
      expect(row.segments).toEqual(segments);
      expect(row.manifest).toEqual(manifest);
      expect(row.seq).toEqual(expect.any(Number));
    });

    it('keeps nulls as nulls and an absent bag_uri as null', async () => {
      const r = report();
      await ingest(r);
      const row = (await store.episodes.get(ORG, r.id))!;
      expect(row.report).toMatchObject({
        session_name: null,
        task_id: null,
        ended_at: null,
        duration_s: null,
        message_count: null,
        bag_size_bytes: null,
        bag_uri: null,
        interrupted: false,
      });
      expect(row.metadata).toEqual({});
    });

    it('keeps the instant of a started_at given with an offset', async () => {
      const r = report({ started_at: '2026-03-01T10:00:00.250+02:00', ended_at: '2026-03-01T08:30:00Z' });
      await ingest(r);
      const row = (await store.episodes.get(ORG, r.id))!;
      expect(Date.parse(row.report.started_at)).toBe(Date.parse(r.started_at));
      expect(row.report.started_at).toBe('2026-03-01T08:00:00.250Z');
      expect(row.report.ended_at).toBe('2026-03-01T08:30:00.000Z');
    });
  });

  describe('outcome', () => {
    it('recorded_outcome equals the reported outcome and never changes on setOutcome', async () => {
      const r = report({ outcome: 'success' });
      await ingest(r);
      const first = await store.episodes.setOutcome(ORG, r.id, { outcome: 'failure', reason: 'dropped it', actor: 'key_1', at: T0 + 10 });
      expect(first).toMatchObject({ outcome: 'failure', recordedOutcome: 'success' });
      const second = await store.episodes.setOutcome(ORG, r.id, { outcome: 'discarded', reason: 'bad camera', actor: 'key_2', at: T0 + 20 });
      expect(second).toMatchObject({ outcome: 'discarded', recordedOutcome: 'success' });
      expect(await store.episodes.get(ORG, r.id)).toMatchObject({ outcome: 'discarded', recordedOutcome: 'success' });
      expect((await store.episodes.list(ORG, filter(), 0, 10)).map((e) => e.recordedOutcome)).toEqual(['success']);
    });

    it('appends outcome history rows in order', async () => {
      const r = report({ outcome: 'failure' });
      await ingest(r);
      expect(await store.episodes.outcomeHistory(ORG, r.id)).toEqual([]);
      await store.episodes.setOutcome(ORG, r.id, { outcome: 'success', reason: 'r1', actor: 'key_1', at: T0 + 30 });
      await store.episodes.setOutcome(ORG, r.id, { outcome: 'discarded', reason: 'r2', actor: 'key_2', at: T0 + 20 });
      await store.episodes.setOutcome(ORG, r.id, { outcome: 'discarded', reason: 'r3', actor: 'key_1', at: T0 + 40 });
      expect(await store.episodes.outcomeHistory(ORG, r.id)).toEqual([
        { at: T0 + 30, actor: 'key_1', from: 'failure', to: 'success', reason: 'r1' },
        { at: T0 + 20, actor: 'key_2', from: 'success', to: 'discarded', reason: 'r2' },
        { at: T0 + 40, actor: 'key_1', from: 'discarded', to: 'discarded', reason: 'r3' },
      ]);
    });

    it('is undefined for an unknown episode or one of another organization, and writes nothing', async () => {
      const r = report();
      await ingest(r);
      const change = { outcome: 'failure' as const, reason: 'x', actor: 'key_1', at: T0 };
      expect(await store.episodes.setOutcome(ORG, 'ep_missing000000', change)).toBeUndefined();
      expect(await store.episodes.setOutcome(OTHER_ORG, r.id, change)).toBeUndefined();
      expect(await store.episodes.outcomeHistory(OTHER_ORG, r.id)).toBeUndefined();
      expect(await store.episodes.outcomeHistory(ORG, 'ep_missing000000')).toBeUndefined();
      expect(await store.episodes.get(ORG, r.id)).toMatchObject({ outcome: 'success' });
      expect(await store.episodes.outcomeHistory(ORG, r.id)).toEqual([]);
    });

    it('filters by the effective outcome', async () => {
      const [a, b] = await ingest(report({ outcome: 'success' }), report({ outcome: 'success' }));
      await store.episodes.setOutcome(ORG, b!.id, { outcome: 'failure', reason: 'r', actor: 'k', at: T0 });
      expect(await ids({ eq: { outcome: 'success' } })).toEqual([a!.id]);
      expect(await ids({ eq: { outcome: 'failure' } })).toEqual([b!.id]);
    });
  });

  describe('patchAnnotations', () => {
    it('merges shallowly, deletes on null, and never touches recorded facts or metadata', async () => {
      const r = report({ metadata: { qa: 'recorded' }, task_id: 'task_1' });
      await ingest(r);
      const before = (await store.episodes.get(ORG, r.id))!;
      const a1 = await store.episodes.patchAnnotations(ORG, r.id, { qa: 'pass', tags: ['x', 'y'], obj: { a: 1, b: 2 } });
      expect(a1!.annotations).toEqual({ qa: 'pass', tags: ['x', 'y'], obj: { a: 1, b: 2 } });
      // Shallow: obj is replaced whole, not merged.
      const a2 = await store.episodes.patchAnnotations(ORG, r.id, { obj: { c: 3 }, tags: null, missing: null, n: 0 });
      expect(a2!.annotations).toEqual({ qa: 'pass', obj: { c: 3 }, n: 0 });
      const after = (await store.episodes.get(ORG, r.id))!;
      expect(after.annotations).toEqual({ qa: 'pass', obj: { c: 3 }, n: 0 });
      expect(after.report).toEqual(before.report);
      expect(after.metadata).toEqual({ qa: 'recorded' });
      expect(after.outcome).toBe(before.outcome);
      expect(after.recordedOutcome).toBe(before.recordedOutcome);
      expect(after.segments).toEqual(before.segments);
      expect(after.manifest).toEqual(before.manifest);
    });

    it('is undefined for an unknown episode or one of another organization', async () => {
      const r = report();
      await ingest(r);
      expect(await store.episodes.patchAnnotations(ORG, 'ep_missing000000', { a: 1 })).toBeUndefined();
      expect(await store.episodes.patchAnnotations(OTHER_ORG, r.id, { a: 1 })).toBeUndefined();
      expect((await store.episodes.get(ORG, r.id))!.annotations).toEqual({});
    });

    it('keeps the annotation index in step with the layer', async () => {
      const [a, b] = await ingest(report(), report());
      expect(await ids({ annotation: { qa: 'pass' } })).toEqual([]);
      await store.episodes.patchAnnotations(ORG, a!.id, { qa: 'pass', score: 7, ok: false });
      await store.episodes.patchAnnotations(ORG, b!.id, { qa: 'pass' });
      expect(await ids({ annotation: { qa: 'pass' } })).toEqual([a!.id, b!.id]);
      expect(await ids({ annotation: { score: '7' } })).toEqual([a!.id]);
      expect(await ids({ annotation: { ok: 'false' } })).toEqual([a!.id]);

      // A changed value moves the row to the new value.
      await store.episodes.patchAnnotations(ORG, a!.id, { qa: 'fail' });
      expect(await ids({ annotation: { qa: 'pass' } })).toEqual([b!.id]);
      expect(await ids({ annotation: { qa: 'fail' } })).toEqual([a!.id]);
      // Untouched keys stay indexed.
      expect(await ids({ annotation: { score: '7' } })).toEqual([a!.id]);

      // A deleted key drops out of the index.
      await store.episodes.patchAnnotations(ORG, a!.id, { qa: null, score: null });
      expect(await ids({ annotation: { qa: 'fail' } })).toEqual([]);
      expect(await ids({ annotation: { score: '7' } })).toEqual([]);
      // Only the untouched key is left indexed.
      expect(await ids({ annotation: { ok: 'false' } })).toEqual([a!.id]);
      expect((await store.episodes.get(ORG, a!.id))!.annotations).toEqual({ ok: false });

      // The annotation layer and the metadata layer are separate indexes.
      expect(await ids({ metadata: { qa: 'pass' } })).toEqual([]);
    });
  });

  describe('list filters', () => {
    const EQ = ['robot_id', 'task_id', 'subtask_id', 'operator_id', 'control_mode', 'policy_version_id', 'eval_id'] as const;

    it.each(EQ)('filters by %s', async (col) => {
      const value = `${col}-wanted`;
      const wantedItem = (r: EpisodeReport): IngestItem => (col === 'robot_id' ? item(r, { robotId: value }) : item({ ...r, [col]: value }));
      const wanted1 = report();
      const other = report(col === 'robot_id' ? {} : { [col]: `${col}-other` });
      const none = report();
      const wanted2 = report();
      expect(await store.episodes.ingest([wantedItem(wanted1), item(other), item(none), wantedItem(wanted2)])).toEqual([
        'inserted',
        'inserted',
        'inserted',
        'inserted',
      ]);
      expect(await ids({ eq: { [col]: value } })).toEqual([wanted1.id, wanted2.id]);
      expect(await ids({ eq: { [col]: 'nothing-has-this' } })).toEqual([]);
      // Another organization with the same value sees only its own.
      expect(await ids({ eq: { [col]: value } }, OTHER_ORG)).toEqual([]);
    });

    it('filters by outcome', async () => {
      const [s, f, d] = await ingest(report({ outcome: 'success' }), report({ outcome: 'failure' }), report({ outcome: 'discarded' }));
      expect(await ids({ eq: { outcome: 'success' } })).toEqual([s!.id]);
      expect(await ids({ eq: { outcome: 'failure' } })).toEqual([f!.id]);
      expect(await ids({ eq: { outcome: 'discarded' } })).toEqual([d!.id]);
    });

    it('bounds started_at with from and to, both inclusive', async () => {
      const at = (s: number) => new Date(T0 + s * 1000).toISOString();
      const [e0, e1, e2, e3] = await ingest(
        report({ started_at: at(0) }),
        report({ started_at: at(10) }),
        report({ started_at: at(20) }),
        report({ started_at: at(30) }),
      );
      expect(await ids({ from: T0 + 10_000 })).toEqual([e1!.id, e2!.id, e3!.id]);
      expect(await ids({ to: T0 + 20_000 })).toEqual([e0!.id, e1!.id, e2!.id]);
      expect(await ids({ from: T0 + 10_000, to: T0 + 20_000 })).toEqual([e1!.id, e2!.id]);
      expect(await ids({ from: T0 + 10_001, to: T0 + 19_999 })).toEqual([]);
      expect(await ids({ from: T0 + 20_000, to: T0 + 20_000 })).toEqual([e2!.id]);
    });

    it('filters by metadata.<key> on the string form of string, number and boolean values', async () => {
      const [a, b, c, d] = await ingest(
        report({ metadata: { s: 'red', n: 3, flag: true, f: 2.5 } }),
        report({ metadata: { s: 'blue', n: 4, flag: false } }),
        report({ metadata: { s: '3', n: '3' } }),
        report({ metadata: { obj: { x: 1 }, arr: [1, 2], nil: null } }),
      );
      expect(await ids({ metadata: { s: 'red' } })).toEqual([a!.id]);
      expect(await ids({ metadata: { n: '3' } })).toEqual([a!.id, c!.id]);
      expect(await ids({ metadata: { n: '4' } })).toEqual([b!.id]);
      expect(await ids({ metadata: { flag: 'true' } })).toEqual([a!.id]);
      expect(await ids({ metadata: { flag: 'false' } })).toEqual([b!.id]);
      expect(await ids({ metadata: { f: '2.5' } })).toEqual([a!.id]);
      expect(await ids({ metadata: { obj: '{"x":1}' } })).toEqual([d!.id]);
      expect(await ids({ metadata: { arr: '[1,2]' } })).toEqual([d!.id]);
      expect(await ids({ metadata: { nil: 'null' } })).toEqual([d!.id]);
      expect(await ids({ metadata: { s: 'green' } })).toEqual([]);
      expect(await ids({ metadata: { absent: 'red' } })).toEqual([]);
      // metadata and annotation layers do not mix.
      expect(await ids({ annotation: { s: 'red' } })).toEqual([]);
    });

    it('filters by annotation.<key>', async () => {
      const [a, b] = await ingest(report(), report());
      await store.episodes.patchAnnotations(ORG, a!.id, { qa: 'pass' });
      await store.episodes.patchAnnotations(ORG, b!.id, { qa: 'fail' });
      expect(await ids({ annotation: { qa: 'pass' } })).toEqual([a!.id]);
      expect(await ids({ annotation: { qa: 'fail' } })).toEqual([b!.id]);
    });

    it('combines two attribute filters', async () => {
      const [a, b, c] = await ingest(
        report({ metadata: { site: 'lab', arm: 'left' } }),
        report({ metadata: { site: 'lab', arm: 'right' } }),
        report({ metadata: { site: 'field', arm: 'left' } }),
      );
      expect(await ids({ metadata: { site: 'lab', arm: 'left' } })).toEqual([a!.id]);
      expect(await ids({ metadata: { arm: 'left', site: 'lab' } })).toEqual([a!.id]);
      await store.episodes.patchAnnotations(ORG, b!.id, { qa: 'pass' });
      await store.episodes.patchAnnotations(ORG, c!.id, { qa: 'pass' });
      expect(await ids({ metadata: { site: 'lab' }, annotation: { qa: 'pass' } })).toEqual([b!.id]);
      expect(await ids({ metadata: { arm: 'left' }, annotation: { qa: 'pass' } })).toEqual([c!.id]);
      expect(await ids({ metadata: { site: 'lab', arm: 'right' }, annotation: { qa: 'pass' } })).toEqual([b!.id]);
    });

    it('combines an attribute filter with equality, outcome and time filters', async () => {
      const [a, , c] = await ingest(
        report({ task_id: 't1', metadata: { site: 'lab' } }),
        report({ task_id: 't2', metadata: { site: 'lab' } }),
        report({ task_id: 't1', metadata: { site: 'lab' }, outcome: 'failure', started_at: new Date(T0 + 60_000).toISOString() }),
        report({ task_id: 't1', metadata: { site: 'field' } }),
      );
      expect(await ids({ eq: { task_id: 't1' }, metadata: { site: 'lab' } })).toEqual([a!.id, c!.id]);
      expect(await ids({ eq: { task_id: 't1', outcome: 'failure' }, metadata: { site: 'lab' } })).toEqual([c!.id]);
      expect(await ids({ eq: { task_id: 't1' }, metadata: { site: 'lab' }, from: T0 + 1 })).toEqual([c!.id]);
      expect(await ids({ eq: { task_id: 't1' }, metadata: { site: 'lab' }, to: T0 })).toEqual([a!.id]);
    });

    // Replicas are written by the sync store; pg/episodes.test.ts covers sync_state on PostgreSQL.
    it.runIf(sqlite)('sync_state: every episode is unverified until a replica is verified, at any or the given destination', async () => {
      const [a, b, c] = await ingest(report(), report(), report());
      const all = [a!.id, b!.id, c!.id];
      expect(await ids({ syncState: { state: 'unverified' } })).toEqual(all);
      expect(await ids({ syncState: { state: 'synced' } })).toEqual([]);
      expect(await ids({ syncState: { state: 'verified' } })).toEqual([]);
      expect(await ids({ syncState: { state: 'unverified', destinationId: 'dst_1' } })).toEqual(all);

      const rowA = (await store.episodes.get(ORG, a!.id))!;
      const rowB = (await store.episodes.get(ORG, b!.id))!;
      addReplica(rowA, 'dst_1', 'syncing');
      expect(await ids({ syncState: { state: 'synced' } })).toEqual([]);
      expect(await ids({ syncState: { state: 'unverified' } })).toEqual(all);

      addReplica(rowA, 'dst_1', 'synced');
      expect(await ids({ syncState: { state: 'synced' } })).toEqual([a!.id]);
      expect(await ids({ syncState: { state: 'synced', destinationId: 'dst_1' } })).toEqual([a!.id]);
      expect(await ids({ syncState: { state: 'synced', destinationId: 'dst_2' } })).toEqual([]);
      expect(await ids({ syncState: { state: 'verified' } })).toEqual([]);
      expect(await ids({ syncState: { state: 'unverified' } })).toEqual(all);

      addReplica(rowA, 'dst_1', 'verified');
      addReplica(rowB, 'dst_2', 'verified');
      expect(await ids({ syncState: { state: 'verified' } })).toEqual([a!.id, b!.id]);
      // A verified replica is also synced.
      expect(await ids({ syncState: { state: 'synced' } })).toEqual([a!.id, b!.id]);
      expect(await ids({ syncState: { state: 'verified', destinationId: 'dst_1' } })).toEqual([a!.id]);
      expect(await ids({ syncState: { state: 'verified', destinationId: 'dst_2' } })).toEqual([b!.id]);
      expect(await ids({ syncState: { state: 'unverified' } })).toEqual([c!.id]);
      expect(await ids({ syncState: { state: 'unverified', destinationId: 'dst_1' } })).toEqual([b!.id, c!.id]);
      expect(await ids({ syncState: { state: 'unverified', destinationId: 'dst_2' } })).toEqual([a!.id, c!.id]);
      // Combined with another filter.
      expect(await ids({ syncState: { state: 'verified' }, eq: { robot_id: ROBOT } })).toEqual([a!.id, b!.id]);
      expect(await ids({ syncState: { state: 'verified' }, eq: { robot_id: 'rbt_other' } })).toEqual([]);

      // The replicas ride along with the rows.
      expect((await store.episodes.get(ORG, a!.id))!.replicas).toEqual([
        { destinationId: 'dst_1', state: 'verified', grantId: 'grt_dst_1', error: null, objectKey: `objects/${a!.id}`, updatedAt: T0 + 5000 },
      ]);
      const listed = await store.episodes.list(ORG, filter(), 0, 10);
      expect(listed.map((r) => r.replicas.map((x) => x.destinationId))).toEqual([['dst_1'], ['dst_2'], []]);
    });

    it('an empty filter lists everything of the organization in seq order', async () => {
      const reports = await ingest(report(), report(), report());
      const rows = await store.episodes.list(ORG, filter(), 0, 10);
      expect(rows.map((r) => r.id)).toEqual(reports.map((r) => r.id));
      const seqs = rows.map((r) => r.seq);
      expect([...seqs].sort((x, y) => x - y)).toEqual(seqs);
    });
  });

  describe('keyset pagination', () => {
    async function walk(f: Partial<EpisodeFilter>, k: number, between?: (page: number) => Promise<void>): Promise<EpisodeRow[]> {
      const seen: EpisodeRow[] = [];
      let after = 0;
      for (let page = 0; page < 1000; page++) {
        const rows = await store.episodes.list(ORG, filter(f), after, k);
        expect(rows.length).toBeLessThanOrEqual(k);
        seen.push(...rows);
        if (rows.length < k) return seen;
        after = rows[rows.length - 1]!.seq;
        await between?.(page);
      }
      throw new Error('pagination did not end');
    }

    it('walking pages of size k returns every row exactly once in seq order', async () => {
      const reports = Array.from({ length: 23 }, (_, i) => report({ metadata: { parity: i % 2 } }));
      await ingest(...reports);
      for (const k of [1, 4, 5, 23, 50]) {
        const rows = await walk({}, k);
        expect(rows.map((r) => r.id)).toEqual(reports.map((r) => r.id));
      }
      const even = reports.filter((_, i) => i % 2 === 0).map((r) => r.id);
      for (const k of [1, 3, 12]) {
        expect((await walk({ metadata: { parity: '0' } }, k)).map((r) => r.id)).toEqual(even);
      }
    });

    it('neither skips nor repeats a row while new rows arrive between pages; the new ones come at the end', async () => {
      const first = Array.from({ length: 10 }, () => report({ task_id: 'walk', metadata: { site: 'lab' } }));
      await ingest(...first);
      const added: EpisodeReport[] = [];
      const addTwo = async () => {
        const more = [report({ task_id: 'walk', metadata: { site: 'lab' } }), report({ task_id: 'other', metadata: { site: 'lab' } })];
        await ingest(...more);
        added.push(...more);
      };
      const rows = await walk({}, 3, async (page) => {
        if (page < 4) await addTwo();
      });
      const expected = [...first, ...added].map((r) => r.id);
      expect(rows.map((r) => r.id)).toEqual(expected);
      expect(new Set(rows.map((r) => r.id)).size).toBe(rows.length);

      // The same with a filter, driven by the attribute index.
      added.length = 0;
      const base = (await ids({ eq: { task_id: 'walk' }, metadata: { site: 'lab' } })).length;
      const filtered = await walk({ eq: { task_id: 'walk' }, metadata: { site: 'lab' } }, 4, async (page) => {
        if (page < 3) await addTwo();
      });
      expect(filtered.length).toBe(base + 3);
      expect(new Set(filtered.map((r) => r.id)).size).toBe(filtered.length);
      const seqs = filtered.map((r) => r.seq);
      expect([...seqs].sort((x, y) => x - y)).toEqual(seqs);
      expect(filtered.slice(base).map((r) => r.id)).toEqual(added.filter((r) => r.task_id === 'walk').map((r) => r.id));
    });

    it('orders by ingest, not by started_at, with and without an attribute filter', async () => {
      const reports = [30, 10, 20, 0].map((s) => report({ started_at: new Date(T0 + s * 1000).toISOString(), metadata: { site: 'lab' } }));
      await ingest(...reports);
      const expected = reports.map((r) => r.id);
      expect((await walk({}, 1)).map((r) => r.id)).toEqual(expected);
      expect((await walk({ metadata: { site: 'lab' } }, 2)).map((r) => r.id)).toEqual(expected);
      expect((await walk({ from: T0 }, 3)).map((r) => r.id)).toEqual(expected);
    });

    it('list honours maxSeq', async () => {
      await ingest(...Array.from({ length: 6 }, () => report()));
      const all = await store.episodes.list(ORG, filter(), 0, 100);
      const upTo = all[3]!.seq;
      expect((await store.episodes.list(ORG, filter(), all[0]!.seq, 100, upTo)).map((r) => r.seq)).toEqual(all.slice(1, 4).map((r) => r.seq));
    });

    it('listSeqs returns the seqs list would return', async () => {
      const reports = Array.from({ length: 12 }, (_, i) => report({ task_id: i % 3 === 0 ? 'x' : 'y', metadata: { m: i % 2 } }));
      await ingest(...reports);
      await store.episodes.patchAnnotations(ORG, reports[3]!.id, { qa: 'pass' });
      await store.episodes.patchAnnotations(ORG, reports[6]!.id, { qa: 'pass' });
      const filters: Partial<EpisodeFilter>[] = [
        {},
        { eq: { task_id: 'x' } },
        { metadata: { m: '0' } },
        { metadata: { m: '0' }, eq: { task_id: 'x' } },
        { annotation: { qa: 'pass' } },
        { syncState: { state: 'unverified' } },
      ];
      for (const f of filters) {
        for (const [after, limit] of [
          [0, 100],
          [0, 2],
          [3, 3],
        ] as const) {
          const listed = (await store.episodes.list(ORG, filter(f), after, limit)).map((r) => r.seq);
          expect(await store.episodes.listSeqs(ORG, filter(f), after, limit)).toEqual(listed);
        }
      }
    });
  });

  describe('line rows', () => {
    it('listLines returns the rows list returns, in the same order and chunks, as line rows with their replicas', async () => {
      await store.orgs.create({ id: ORG, name: 'a', tier: 'enterprise', createdAt: T0 });
      const reports = Array.from({ length: 9 }, (_, i) =>
        report({
          task_id: i % 3 === 0 ? 'x' : 'y',
          metadata: { m: i % 2, site: 'lab' },
          started_at: new Date(T0 + (9 - i) * 1000).toISOString(),
          ...(i === 2
            ? {
                session_name: 'morning',
                task_name: 'Fold',
                subtask_id: 'sub_1',
                operator_id: 'op_1',
                operator_name: 'Ada',
                control_mode: 'teleop',
                policy_version_id: 'pol_1',
                eval_id: 'ev_1',
                ended_at: new Date(T0 + 60_000).toISOString(),
                duration_s: 52.5,
                message_count: 10,
                bag_size_bytes: 123_456_789_012,
                bag_uri: 's3://bucket/ep',
                manifest: { files: [{ path: 'a.mcap', size_bytes: 3, sha256: 'ab' }], total_bytes: 3 },
              }
            : {}),
        }),
      );
      await ingest(...reports);
      const theirs = report({ task_id: 'x' });
      expect(await store.episodes.ingest([item(theirs, { orgId: OTHER_ORG, robotId: 'rbt_b' })])).toEqual(['inserted']);
      await store.episodes.patchAnnotations(ORG, reports[3]!.id, { qa: 'pass', score: 7 });
      await store.episodes.patchAnnotations(ORG, reports[6]!.id, { qa: 'pass' });
      await store.episodes.setOutcome(ORG, reports[4]!.id, { outcome: 'failure', reason: 'r', actor: 'k', at: T0 });
      // Replicas through the sync store (both engines): two on one episode, one on another.
      for (const id of ['dst_a', 'dst_b']) {
        await store.sync.createDestination({ id, orgId: ORG, type: 'external', url: 'https://grants.example.com', secretSealed: 's', retention: 'keep', createdAt: T0 });
      }
      const replica = (episodeId: string, destinationId: string, state: 'syncing' | 'synced' | 'verified', error: string | null = null) =>
        store.sync.applyReplicaReport(ROBOT, { episode_id: episodeId, destination_id: destinationId, grant_id: `g_${destinationId}`, state, error, object_key: state === 'syncing' ? null : 'k/1', at: 1 }, T0 + 2);
      expect(await replica(reports[1]!.id, 'dst_b', 'verified')).toBe('applied');
      expect(await replica(reports[1]!.id, 'dst_a', 'syncing', 'upload_failed: 503')).toBe('applied');
      expect(await replica(reports[5]!.id, 'dst_a', 'synced')).toBe('applied');

      const all = await store.episodes.list(ORG, filter(), 0, 100);
      expect(all.map((r) => r.id)).toEqual(reports.map((r) => r.id));
      const seqAt = (i: number) => all[i]!.seq;
      const filters: Partial<EpisodeFilter>[] = [
        {},
        { eq: { task_id: 'x' } },
        { eq: { outcome: 'failure' } },
        { metadata: { m: '0' } },
        { metadata: { m: '0' }, eq: { task_id: 'x' } },
        { annotation: { qa: 'pass' } },
        { syncState: { state: 'unverified' } },
        { syncState: { state: 'synced', destinationId: 'dst_a' } },
        { from: T0 + 3000, to: T0 + 7000 },
        { excludeEval: true },
        { metadata: { m: 'nothing' } },
      ];
      const windows: [after: number, limit: number, maxSeq: number | undefined][] = [
        [0, 100, undefined],
        [0, 2, undefined],
        [seqAt(2), 3, undefined],
        [0, 100, seqAt(5)],
        [seqAt(0), 2, seqAt(6)],
        [seqAt(8), 10, undefined],
      ];
      let withTwoReplicas = 0;
      for (const f of filters) {
        for (const [after, limit, maxSeq] of windows) {
          const label = `${JSON.stringify(f)} after ${after} limit ${limit} max ${String(maxSeq)}`;
          const rows = await store.episodes.list(ORG, filter(f), after, limit, maxSeq);
          const batch = await store.episodes.listLines(ORG, filter(f), after, limit, maxSeq);
          expectLinesOf(batch, rows, label);
          if ([...batch.replicas.values()].some((r) => r.length === 2)) withTwoReplicas += 1;
        }
        // Paging on the last line's seq walks the same rows as list.
        const walked: EpisodeLineRow[] = [];
        for (let after = 0; ; ) {
          const { rows } = await store.episodes.listLines(ORG, filter(f), after, 2);
          walked.push(...rows);
          if (rows.length < 2) break;
          after = rows[rows.length - 1]![0];
        }
        expect(walked.map((r) => r[1]), JSON.stringify(f)).toEqual((await store.episodes.list(ORG, filter(f), 0, 100)).map((r) => r.id));
      }
      // The cases above do carry replicas (the two-replica episode in several windows).
      expect(withTwoReplicas).toBeGreaterThan(5);
      // Another organization sees its own row only.
      expect((await store.episodes.listLines(OTHER_ORG, filter({ eq: { task_id: 'x' } }), 0, 100)).rows.map((r) => r[1])).toEqual([theirs.id]);
    });
  });

  describe('organization isolation', () => {
    it('another organization never sees the rows, whatever the filter', async () => {
      const [a] = await ingest(report({ task_id: 't', metadata: { site: 'lab' } }));
      await store.episodes.patchAnnotations(ORG, a!.id, { qa: 'pass' });
      const theirs = report({ task_id: 't', metadata: { site: 'lab' } });
      expect(await store.episodes.ingest([item(theirs, { orgId: OTHER_ORG, robotId: 'rbt_b' })])).toEqual(['inserted']);

      expect(await store.episodes.get(OTHER_ORG, a!.id)).toBeUndefined();
      expect(await store.episodes.count(OTHER_ORG)).toBe(1);
      expect(await store.episodes.count(ORG)).toBe(1);
      const filters: Partial<EpisodeFilter>[] = [
        {},
        { eq: { task_id: 't' } },
        { metadata: { site: 'lab' } },
        { annotation: { qa: 'pass' } },
        { syncState: { state: 'unverified' } },
        { eq: { robot_id: ROBOT } },
      ];
      for (const f of filters) {
        const mine = await ids(f);
        const other = await ids(f, OTHER_ORG);
        expect(other).not.toContain(a!.id);
        expect(mine).not.toContain(theirs.id);
        expect(await store.episodes.listSeqs(OTHER_ORG, filter(f), 0, 100)).toEqual(
          (await store.episodes.list(OTHER_ORG, filter(f), 0, 100)).map((r) => r.seq),
        );
      }
      expect(await ids({}, OTHER_ORG)).toEqual([theirs.id]);
      expect(await ids({ metadata: { site: 'lab' } }, OTHER_ORG)).toEqual([theirs.id]);
      expect(await ids({ annotation: { qa: 'pass' } }, OTHER_ORG)).toEqual([]);
    });
  });
});
