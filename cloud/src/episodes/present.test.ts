import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { safeJsonStringify } from '@fleet/protocol';
import { testReport } from '../test-support.js';
import type { EpisodeFilter, EpisodeLineBatch } from '../store/index.js';
import { openTestStore, type TestStore } from '../store/test-store.js';
import { episodeLines, LINES_CHUNK_CHARS, toEpisodeWithLocations } from './present.js';

const T0 = Date.parse('2026-01-01T00:00:00Z');
const ORG = 'org_a';
let store: TestStore;

beforeEach(async () => {
  store = await openTestStore();
  await store.orgs.create({ id: ORG, name: 'a', tier: 'enterprise', createdAt: T0 });
});
afterEach(async () => {
  await store.close();
});

/** The export's line rows (every engine offers them). */
function lines(filter: EpisodeFilter, afterSeq: number, limit: number): Promise<EpisodeLineBatch> {
  return store.episodes.listLines(ORG, filter, afterSeq, limit);
}

describe('episodeLines', () => {
  it('is byte for byte the JSON of toEpisodeWithLocations, one line per row', async () => {
    const reports = [
      testReport(),
      testReport({
        session_name: 'séance "1"\n\u2028',
        task_id: 't\u0001', task_name: 'T', subtask_id: 's', operator_id: 'o', operator_name: '😀',
        control_mode: 'teleop', policy_version_id: 'p', eval_id: 'e', outcome: 'failure',
        started_at: '2026-03-04T05:06:07.089+02:00', ended_at: '2026-03-04T05:07:00Z', duration_s: 52.911, message_count: 0,
        bag_size_bytes: 9007199254740991, bag_uri: 's3://b/k',
        metadata: { '2': 'two', a: [1, { b: null }], n: -0.000001, t: true, __proto__x: 'p' },
        manifest: { files: [{ path: 'a.mcap', size_bytes: 3, sha256: 'ab' }, { path: 'b', size_bytes: 0, sha256: 'cd' }], total_bytes: 3 },
      }),
      testReport({ started_at: '1969-12-31T23:59:59.999Z', metadata: { deep: { x: { y: [[[]]] } } } }),
    ];
    await store.episodes.ingest(reports.map((r) => ({ orgId: ORG, robotId: 'rbt_1', report: r, reportedAt: T0 + 17 })));
    await store.episodes.patchAnnotations(ORG, reports[1]!.id, { label: 'ok', score: 0.5 });
    const seq = (await store.episodes.get(ORG, reports[1]!.id))!.seq;
    expect(seq).toEqual(expect.any(Number));
    for (const id of ['dst_a', 'dst_b']) {
      await store.sync.createDestination({ id, orgId: ORG, type: 'external', url: 'https://grants.example.com', secretSealed: 'x', retention: 'keep', createdAt: T0 });
    }
    const replica = { episode_id: reports[1]!.id, note: null, at: T0 };
    await store.sync.applyReplicaReport('rbt_1', { ...replica, destination_id: 'dst_b', state: 'verified', grant_id: 'g1', error: null, object_key: 'k/1' }, T0 + 1);
    await store.sync.applyReplicaReport('rbt_1', { ...replica, destination_id: 'dst_a', state: 'syncing', grant_id: 'g2', error: 'slow', object_key: null }, T0 + 2);
    const filter = { eq: {}, metadata: {}, annotation: {} };
    const rows = await store.episodes.list(ORG, filter, 0, 10);
    const want = rows.map((r) => `${safeJsonStringify(toEpisodeWithLocations(r))}\n`).join('');
    const batch = await lines(filter, 0, 10);
    expect([...episodeLines(batch)].join('')).toBe(want);
    expect(want).toContain('"locations":[{"destination_id":"dst_a"');
  });
});

describe('episodeLines with stored metadata and annotations passed through', () => {
  it('equals the JSON of toEpisodeWithLocations for any JSON metadata and annotations (property)', async () => {
    let n = 0;
    await fc.assert(
      fc.asyncProperty(fc.dictionary(fc.string(), fc.jsonValue()), fc.dictionary(fc.string({ minLength: 1 }), fc.jsonValue()), async (metadata, annotations) => {
        const report = testReport({ id: `ep_prop${(n++).toString(36).padStart(8, '0')}`, metadata });
        await store.episodes.ingest([{ orgId: ORG, robotId: 'rbt_1', report, reportedAt: T0 }]);
        await store.episodes.patchAnnotations(ORG, report.id, annotations);
        const row = (await store.episodes.get(ORG, report.id))!;
        const filter = { eq: {}, metadata: {}, annotation: {} };
        const batch = await lines(filter, row.seq - 1, 1);
        expect([...episodeLines(batch)].join('')).toBe(`${safeJsonStringify(toEpisodeWithLocations(row))}\n`);
      }),
      { numRuns: 200 },
    );
  });
});

describe('export timestamps', () => {
  it('match Date#toISOString across days, years and the edges of the fast path', async () => {
    const samples = [0, 1, 999, 86_399_999, 86_400_000, T0, T0 + 3_723_004, 951_782_400_000, 253_402_300_799_999, 253_402_300_800_000, -1, -86_400_001];
    for (let i = 0; i < 2000; i++) samples.push(Math.floor(Math.random() * 4_102_444_800_000));
    for (const ms of samples) {
      const report = testReport({ started_at: new Date(ms).toISOString(), ended_at: null });
      await store.episodes.ingest([{ orgId: ORG, robotId: 'rbt_1', report, reportedAt: ms }]);
    }
    const filter = { eq: {}, metadata: {}, annotation: {} };
    const rows = await store.episodes.list(ORG, filter, 0, 5000);
    const want = rows.map((r) => `${safeJsonStringify(toEpisodeWithLocations(r))}\n`).join('');
    const chunks = [...episodeLines(await lines(filter, 0, 5000))];
    expect(chunks.join('')).toBe(want);
    // Thousands of rows: several chunks, each whole lines, none much past the chunk size (no
    // string for V8's large-object space).
    expect(chunks.length).toBeGreaterThan(10);
    for (const c of chunks) {
      expect(c.endsWith('\n')).toBe(true);
      const lastLine = c.slice(c.lastIndexOf('\n', c.length - 2) + 1).length;
      expect(c.length).toBeLessThan(LINES_CHUNK_CHARS + lastLine + 1);
    }
  });
});
