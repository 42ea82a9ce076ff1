import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EpisodeReport } from '@fleet/protocol';
import { openSqliteStore, type SqliteStore } from './store.js';
import { REAL_TIME } from '../test-store.js';
import type { SqliteEpisodes } from './episodes.js';
import { buildListQuery } from './list-plan.js';
import { ListPlanner, type IndexCondition, type ListDriver } from './list-plan.js';
import type { EpisodeEqColumn, EpisodeFilter, EpisodeRow } from '../shared/types.js';

const T0 = Date.parse('2026-01-01T00:00:00Z');
const ORG = 'org_a';
const OTHER = 'org_b';

/** A small fleet with correlated values, so some pairs of filters never meet. */
function report(i: number): EpisodeReport {
  return {
    id: `ep_${i.toString(36).padStart(12, '0')}`,
    recording_session_id: 'rs_1',
    episode_seq: i + 1,
    session_name: null,
    task_id: `task-${i % 4}`,
    task_name: null,
    subtask_id: i % 5 === 0 ? null : `sub-${i % 2}`,
    operator_id: `op-${i % 6}`,
    operator_name: null,
    control_mode: i % 3 === 0 ? 'autonomous' : 'teleop',
    policy_version_id: null,
    eval_id: i % 7 === 0 ? 'eval-1' : null,
    outcome: i % 10 === 0 ? 'failure' : 'success',
    started_at: new Date(T0 + i * 1000).toISOString(),
    ended_at: null,
    duration_s: null,
    message_count: null,
    bag_size_bytes: null,
    metadata: { site: `site-${i % 3}`, shift: i % 2, ...(i % 5 === 1 ? { arm: 'left' } : {}) },
    segments: [],
    manifest: { files: [], total_bytes: 0 },
  };
}

const N = 240;
let store: SqliteStore;
let all: EpisodeRow[];

beforeAll(async () => {
  store = openSqliteStore(':memory:', REAL_TIME);
  const items = [];
  for (let i = 0; i < N; i++) items.push({ orgId: i % 8 === 7 ? OTHER : ORG, robotId: `rbt_${i % 5}`, report: report(i), reportedAt: T0 });
  await store.episodes.ingest(items);
  for (let i = 0; i < N; i += 9) await store.episodes.patchAnnotations(i % 8 === 7 ? OTHER : ORG, report(i).id, { label: `l-${i % 2}` });
  // Labels taken off again (deleted with null: the key is absent), and another key on some.
  for (let i = 0; i < N; i += 27) await store.episodes.patchAnnotations(i % 8 === 7 ? OTHER : ORG, report(i).id, { label: null, seen: true });
  all = await store.episodes.list(ORG, { eq: {}, metadata: {}, annotation: {} }, 0, 10_000);
});
afterAll(async () => {
  await store.close();
});

/** What a filter means, written plainly over every row of the organization. */
function matches(row: EpisodeRow, f: EpisodeFilter): boolean {
  const r = row.report;
  for (const [col, v] of Object.entries(f.eq)) {
    const actual = col === 'robot_id' ? row.robotId : col === 'outcome' ? row.outcome : (r as unknown as Record<string, unknown>)[col];
    if (actual !== v) return false;
  }
  for (const [k, v] of Object.entries(f.metadata)) if (!(k in row.metadata) || String(row.metadata[k]) !== v) return false;
  for (const [k, v] of Object.entries(f.annotation)) if (!(k in row.annotations) || String(row.annotations[k]) !== v) return false;
  for (const [k, present] of Object.entries(f.hasMetadata ?? {})) if (k in row.metadata !== present) return false;
  for (const [k, present] of Object.entries(f.hasAnnotation ?? {})) if (k in row.annotations !== present) return false;
  const started = Date.parse(r.started_at);
  if (f.from !== undefined && started < f.from) return false;
  if (f.to !== undefined && started > f.to) return false;
  return true;
}

const condition = fc.oneof(
  fc.record({ k: fc.constant('robot_id'), v: fc.constantFrom('rbt_0', 'rbt_1', 'rbt_4', 'rbt_9') }),
  fc.record({ k: fc.constant('task_id'), v: fc.constantFrom('task-0', 'task-1', 'task-3', 'task-7') }),
  fc.record({ k: fc.constant('subtask_id'), v: fc.constantFrom('sub-0', 'sub-1') }),
  fc.record({ k: fc.constant('operator_id'), v: fc.constantFrom('op-0', 'op-1', 'op-5') }),
  fc.record({ k: fc.constant('control_mode'), v: fc.constantFrom('teleop', 'autonomous') }),
  fc.record({ k: fc.constant('eval_id'), v: fc.constantFrom('eval-1', 'eval-2') }),
  fc.record({ k: fc.constant('outcome'), v: fc.constantFrom('success', 'failure', 'discarded') }),
  fc.record({ k: fc.constant('metadata.site'), v: fc.constantFrom('site-0', 'site-2', 'site-9') }),
  fc.record({ k: fc.constant('metadata.shift'), v: fc.constantFrom('0', '1') }),
  fc.record({ k: fc.constant('annotation.label'), v: fc.constantFrom('l-0', 'l-1') }),
  fc.record({ k: fc.constantFrom('has_metadata.arm', 'has_metadata.site', 'has_annotation.label', 'has_annotation.seen'), v: fc.constantFrom('true', 'false') }),
);

function toFilter(conds: { k: string; v: string }[], from?: number, to?: number): EpisodeFilter {
  const f: EpisodeFilter = { eq: {}, metadata: {}, annotation: {} };
  for (const { k, v } of conds) {
    if (k.startsWith('metadata.')) f.metadata[k.slice(9)] = v;
    else if (k.startsWith('annotation.')) f.annotation[k.slice(11)] = v;
    else if (k.startsWith('has_metadata.')) (f.hasMetadata ??= {})[k.slice(13)] = v === 'true';
    else if (k.startsWith('has_annotation.')) (f.hasAnnotation ??= {})[k.slice(15)] = v === 'true';
    else (f.eq as Record<string, string>)[k] = v;
  }
  if (from !== undefined) f.from = from;
  if (to !== undefined) f.to = to;
  return f;
}

describe('planned list queries', () => {
  it('return exactly the rows the filter means, page by page, whichever index drives (property)', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.uniqueArray(condition, { minLength: 1, maxLength: 4, selector: (c) => c.k }),
        fc.option(fc.integer({ min: 0, max: N }), { nil: undefined }),
        fc.integer({ min: 1, max: 40 }),
        fc.option(fc.integer({ min: 1, max: N + 5 }), { nil: undefined }),
        async (conds, fromI, pageSize, maxSeq) => {
          const f = toFilter(conds, fromI === undefined ? undefined : T0 + fromI * 1000);
          const expected = all.filter((r) => matches(r, f) && (maxSeq === undefined || r.seq <= maxSeq)).map((r) => r.seq);
          const got: number[] = [];
          let after = 0;
          for (;;) {
            const page = await store.episodes.list(ORG, f, after, pageSize, maxSeq);
            got.push(...page.map((r) => r.seq));
            if (page.length < pageSize) break;
            after = page[page.length - 1]!.seq;
          }
          expect(got).toEqual(expected);
          const lines = await (store.episodes as SqliteEpisodes).listLines(ORG, f, 0, 10_000, maxSeq);
          expect(lines.rows.map((r) => r[0])).toEqual(expected);
          if (maxSeq === undefined) expect(await store.episodes.listSeqs(ORG, f, 0, 10_000)).toEqual(expected);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('every driver shape (one index, or two merged) returns the same rows (property)', () => {
    fc.assert(
      fc.property(
        fc.uniqueArray(condition, { minLength: 1, maxLength: 4, selector: (c) => c.k }),
        fc.nat(),
        fc.option(fc.nat(), { nil: undefined }),
        fc.integer({ min: 0, max: N }),
        fc.option(fc.integer({ min: 1, max: N + 5 }), { nil: undefined }),
        (conds, i, j, after, maxSeq) => {
          const f = toFilter(conds);
          const toCond = (c: { k: string }): IndexCondition =>
            c.k.startsWith('metadata.')
              ? { kind: 'attr', layer: 'm', key: c.k.slice(9) }
              : c.k.startsWith('annotation.')
                ? { kind: 'attr', layer: 'a', key: c.k.slice(11) }
                : c.k.startsWith('has_')
                  ? { kind: 'key', layer: c.k.startsWith('has_metadata.') ? 'm' : 'a', key: c.k.slice(c.k.indexOf('.') + 1) }
                  : { kind: 'eq', col: c.k as EpisodeEqColumn };
          // Absence (has_…=false) has no index entries to walk: it is never a driver.
          const drivable = conds.filter((c) => !c.k.startsWith('has_') || c.v === 'true');
          if (drivable.length === 0) return;
          const a = drivable[i % drivable.length]!;
          const b = j === undefined || drivable.length < 2 ? undefined : drivable.filter((c) => c !== a)[j % (drivable.length - 1)]!;
          const driver: ListDriver = { ...toCond(a), ...(b ? { and: toCond(b) } : {}) };
          const expected = all.filter((r) => r.seq > after && matches(r, f) && (maxSeq === undefined || r.seq <= maxSeq)).map((r) => r.seq);
          const { sql, params } = buildListQuery(ORG, f, after, -1, 'e.seq', maxSeq, driver);
          expect(store.db.prepare(sql).pluck().all(...params)).toEqual(expected);
        },
      ),
      { numRuns: 400 },
    );
  });

  it('never returns another organization’s rows', async () => {
    const other = await store.episodes.list(OTHER, toFilter([{ k: 'task_id', v: 'task-3' }, { k: 'metadata.site', v: 'site-0' }]), 0, 1000);
    expect(other.length).toBeGreaterThan(0);
    expect(other.every((r) => r.orgId === OTHER)).toBe(true);
  });
});

describe('ListPlanner', () => {
  it('drives by the condition with the fewest entries after the cursor', () => {
    const planner = new ListPlanner(store.db);
    // eval-1 is on every 7th episode, teleop on two in three.
    expect(planner.plan(ORG, toFilter([{ k: 'control_mode', v: 'teleop' }, { k: 'eval_id', v: 'eval-1' }]), 0)).toEqual({ kind: 'eq', col: 'eval_id' });
    expect(planner.plan(ORG, toFilter([{ k: 'metadata.shift', v: '1' }, { k: 'annotation.label', v: 'l-1' }]), 0)).toEqual({ kind: 'attr', layer: 'a', key: 'label' });
    // A present key walks the key index: `seen` is on every 27th, fewer than any task's episodes.
    expect(planner.plan(ORG, toFilter([{ k: 'task_id', v: 'task-0' }, { k: 'has_annotation.seen', v: 'true' }]), 0)).toEqual({ kind: 'key', layer: 'a', key: 'seen' });
    // An absent key never drives: alone it leaves the plan to SQLite, with another the other drives.
    expect(planner.plan(ORG, toFilter([{ k: 'has_annotation.label', v: 'false' }]), 0)).toBeUndefined();
    expect(planner.plan(ORG, toFilter([{ k: 'has_annotation.label', v: 'false' }, { k: 'eval_id', v: 'eval-1' }]), 0)).toEqual({ kind: 'eq', col: 'eval_id' });
    // A present key nobody has after the cursor answers empty at once.
    expect(planner.plan(ORG, toFilter([{ k: 'task_id', v: 'task-0' }, { k: 'has_annotation.nobody', v: 'true' }]), 0)).toBe('empty');
  });

  it('checks presence on the key index without reading the candidate row (one seek of its primary key)', () => {
    const { sql, params } = buildListQuery(ORG, toFilter([{ k: 'eval_id', v: 'eval-1' }, { k: 'has_annotation.label', v: 'false' }, { k: 'has_metadata.arm', v: 'true' }]), 0, 50, 'e.seq', undefined, { kind: 'eq', col: 'eval_id' });
    const plan = (store.db.prepare(`EXPLAIN QUERY PLAN ${sql}`).all(...params) as { detail: string }[]).map((r) => r.detail);
    // `k`: the key index's alias in the presence checks.
    const keyLookups = plan.filter((d) => /^SEARCH k\b/.test(d));
    expect(keyLookups.length, plan.join('\n')).toBe(2);
    for (const d of keyLookups) expect(d, plan.join('\n')).toMatch(/USING PRIMARY KEY \(org_id=\? AND layer=\? AND key=\? AND seq=\?\)/);
    // The driver needs only seq here: its index covers it, no table row is read.
    expect(plan[0], plan.join('\n')).toMatch(/COVERING INDEX episodes_eval/);
    // Driven by the key index alone: a range of it in seq order, no sort.
    const driven = buildListQuery(ORG, toFilter([{ k: 'has_annotation.seen', v: 'true' }]), 0, 50, 'e.seq', undefined, { kind: 'key', layer: 'a', key: 'seen' });
    const drivenPlan = (store.db.prepare(`EXPLAIN QUERY PLAN ${driven.sql}`).all(...driven.params) as { detail: string }[]).map((r) => r.detail);
    expect(drivenPlan[0], drivenPlan.join('\n')).toMatch(/SEARCH h USING PRIMARY KEY \(org_id=\? AND layer=\? AND key=\? AND seq>\?\)/);
    expect(drivenPlan.join('\n')).not.toMatch(/TEMP B-TREE/);
  });

  it('answers empty when one condition has no entry after the cursor, without a driver for one condition', () => {
    const planner = new ListPlanner(store.db);
    expect(planner.plan(ORG, toFilter([{ k: 'task_id', v: 'task-1' }, { k: 'robot_id', v: 'rbt_9' }]), 0)).toBe('empty');
    const last = all[all.length - 1]!.seq;
    expect(planner.plan(ORG, toFilter([{ k: 'task_id', v: 'task-1' }, { k: 'outcome', v: 'success' }]), last)).toBe('empty');
    expect(planner.plan(ORG, toFilter([{ k: 'robot_id', v: 'rbt_9' }]), 0)).toEqual({ kind: 'eq', col: 'robot_id' });
    expect(planner.plan(ORG, toFilter([]), 0)).toBeUndefined();
  });

  it('past the probe cap, compares densities and merges two dense conditions of similar density', () => {
    // With a cap of 10 both conditions are past it: teleop (2 in 3) is denser than task-1 (1 in 4).
    const planner = new ListPlanner(store.db, 10);
    const merged = { kind: 'eq', col: 'task_id', and: { kind: 'eq', col: 'control_mode' } };
    expect(planner.plan(ORG, toFilter([{ k: 'control_mode', v: 'teleop' }, { k: 'task_id', v: 'task-1' }]), 0)).toEqual(merged);
    expect(planner.plan(ORG, toFilter([{ k: 'task_id', v: 'task-1' }, { k: 'control_mode', v: 'teleop' }]), 0)).toEqual(merged);
    // eval-1 (1 in 7, 30 entries) is past a cap of 10 but teleop is not 20 times denser: merged;
    // with a cap of 40 eval-1 is counted whole and drives alone.
    expect(new ListPlanner(store.db, 40).plan(ORG, toFilter([{ k: 'control_mode', v: 'teleop' }, { k: 'eval_id', v: 'eval-1' }]), 0)).toEqual({ kind: 'eq', col: 'eval_id' });
  });
});
