import type { Statement } from 'better-sqlite3';
import type { Db } from './db.js';
import { EPISODE_EQ_COLUMNS, presenceOf, type EpisodeEqColumn, type EpisodeFilter } from '../shared/types.js';

/**
 * The index behind each equality filter: (org_id, column, seq), so one value's episodes come out
 * in seq order and a page can stop after `limit` rows.
 */
export const EQ_INDEX: Readonly<Record<EpisodeEqColumn, string>> = {
  robot_id: 'episodes_robot',
  task_id: 'episodes_task',
  subtask_id: 'episodes_subtask',
  operator_id: 'episodes_operator',
  control_mode: 'episodes_control_mode',
  policy_version_id: 'episodes_policy',
  eval_id: 'episodes_eval',
  outcome: 'episodes_outcome',
};

/**
 * One equality, attribute or presence condition's index, walked in seq order. A `has_…=true`
 * condition (`key`) walks the key index; `has_…=false` has no entries to walk and never drives.
 */
export type IndexCondition = { kind: 'eq'; col: EpisodeEqColumn } | { kind: 'attr' | 'key'; layer: 'm' | 'a'; key: string };

/**
 * Which index a list query walks in seq order; every other condition is checked per candidate.
 * With `and`, both indexes are walked side by side and merged (an INTERSECT of two seq-ordered
 * streams): two dense conditions are intersected at the cost of reading their index entries in
 * order, ~0.1 µs each, instead of one seek into the other index per candidate (~2.6 µs).
 */
export type ListDriver = IndexCondition & { and?: IndexCondition };

/**
 * Merge two conditions when both are past the probe cap and the denser has at most this many
 * times the entries of the sparser: a merge reads both, a seek per candidate costs ~25 entries.
 */
const MERGE_MAX_RATIO = 20;

/** How many index entries a probe counts at most (counting is ~25 ns an entry: ≤ 0.05 ms). */
export const PROBE_CAP = 2_000;

interface Probe {
  n: number;
  last: number | null;
}

/**
 * Chooses the driving index of a filtered list: SQLite has no statistics of how many episodes
 * carry a value, so with two equality filters it may walk the denser index and read a table row
 * for each entry just to reject it (48 ms for an empty intersection at 1M). Each equality or
 * attribute condition is probed instead: its index entries after the cursor are counted up to
 * PROBE_CAP, and the condition with the fewest (or, past the cap, the lowest density) drives. A
 * condition with no entry at all answers the page at once: empty.
 *
 * The probe only chooses a plan; the page itself is one query, so what it returns does not
 * depend on what the probe saw (a row inserted between the two is a row inserted after the page).
 */
export class ListPlanner {
  private readonly probes = new Map<string, Statement<unknown[]>>();
  private readonly top: Statement<[string], number | null>;

  constructor(
    private readonly db: Db,
    private readonly cap: number = PROBE_CAP,
  ) {
    this.top = db.prepare<[string], number | null>('SELECT max(seq) FROM episodes WHERE org_id = ?').pluck();
  }

  plan(orgId: string, f: EpisodeFilter, afterSeq: number, maxSeq?: number): ListDriver | 'empty' | undefined {
    const conds: { driver: ListDriver; value: string }[] = [];
    for (const [col, value] of Object.entries(f.eq) as [EpisodeEqColumn, string | undefined][]) {
      if (value !== undefined) conds.push({ driver: { kind: 'eq', col }, value });
    }
    for (const [key, value] of Object.entries(f.metadata)) conds.push({ driver: { kind: 'attr', layer: 'm', key }, value });
    for (const [key, value] of Object.entries(f.annotation)) conds.push({ driver: { kind: 'attr', layer: 'a', key }, value });
    for (const [layer, key, present] of presenceOf(f)) if (present) conds.push({ driver: { kind: 'key', layer, key }, value: '' });
    if (conds.length === 0) return undefined;
    if (conds.length === 1) return conds[0]!.driver;

    const upTo = maxSeq ?? Number.MAX_SAFE_INTEGER;
    const probed: { driver: IndexCondition; estimate: number; dense: boolean }[] = [];
    let top: number | null | undefined;
    for (const { driver, value } of conds) {
      const p = this.probe(orgId, driver, value, afterSeq, upTo);
      if (p.n === 0) return 'empty';
      let estimate = p.n;
      const dense = p.n >= this.cap && p.last !== null;
      if (dense) {
        // Past the cap: the count over the whole remaining range, at the density seen so far.
        top ??= Math.min(upTo, this.top.get(orgId) ?? p.last!);
        estimate = (this.cap * Math.max(1, top - afterSeq)) / Math.max(1, p.last! - afterSeq);
      }
      probed.push({ driver, estimate, dense });
    }
    // Stable: on a tie the earlier condition (equality, then attribute, then presence) drives.
    probed.sort((a, b) => a.estimate - b.estimate);
    const [first, second] = probed as [(typeof probed)[number], (typeof probed)[number]];
    if (first.dense && second.dense && second.estimate <= MERGE_MAX_RATIO * first.estimate) return { ...first.driver, and: second.driver };
    return first.driver;
  }

  private probe(orgId: string, d: IndexCondition, value: string, afterSeq: number, upTo: number): Probe {
    const sql =
      d.kind === 'eq'
        ? `SELECT count(*) AS n, max(seq) AS last FROM (SELECT seq FROM episodes INDEXED BY ${EQ_INDEX[d.col]}
             WHERE org_id = ? AND ${d.col} = ? AND seq > ? AND seq <= ? ORDER BY seq LIMIT ?)`
        : d.kind === 'attr'
          ? `SELECT count(*) AS n, max(seq) AS last FROM (SELECT seq FROM episode_attrs
             WHERE org_id = ? AND layer = '${d.layer}' AND key = ? AND value = ? AND seq > ? AND seq <= ? ORDER BY seq LIMIT ?)`
          : `SELECT count(*) AS n, max(seq) AS last FROM (SELECT seq FROM episode_attr_keys
             WHERE org_id = ? AND layer = '${d.layer}' AND key = ? AND seq > ? AND seq <= ? ORDER BY seq LIMIT ?)`;
    let stmt = this.probes.get(sql);
    if (!stmt) this.probes.set(sql, (stmt = this.db.prepare<unknown[]>(sql)));
    const params =
      d.kind === 'eq'
        ? [orgId, value, afterSeq, upTo, this.cap]
        : d.kind === 'attr'
          ? [orgId, d.key, value, afterSeq, upTo, this.cap]
          : [orgId, d.key, afterSeq, upTo, this.cap];
    return stmt.get(...params) as Probe;
  }
}

/**
 * One SQL text per filter shape (which keys are present, which one drives), values bound as
 * parameters. Without a driver, an attribute filter drives when there is one (its index is ordered
 * by seq for one (key, value): a page stops after `limit` rows even when most episodes carry the
 * key), else a `has_…=true` one (the key index, ordered by seq for one key), and SQLite picks an
 * index otherwise. With a driver (ListPlanner's choice), that index is walked in seq order and
 * every other equality, attribute or presence condition is checked on its own index by seq, so a
 * rejected candidate costs one index seek instead of reading its table row. `has_…=false` is
 * always such a check (NOT EXISTS on the key index): absence has no index entries to walk.
 */
export function buildListQuery(
  orgId: string,
  f: EpisodeFilter,
  afterSeq: number,
  limit: number,
  select: string = 'e.*',
  maxSeq?: number,
  driver?: ListDriver,
): { sql: string; params: unknown[] } {
  const attrs = [
    ...Object.entries(f.metadata).map(([k, v]) => ['m', k, v] as const),
    ...Object.entries(f.annotation).map(([k, v]) => ['a', k, v] as const),
  ];
  const presence = presenceOf(f);
  const where: string[] = [];
  const params: unknown[] = [];
  let from = 'episodes e';
  let order = 'e.seq';
  const planned = driver !== undefined;
  // Conditions answered by the FROM clause (the driver, or both merged indexes): not checked again.
  const answered = new Set<string>();
  const keyOf = (c: IndexCondition) => (c.kind === 'eq' ? c.col : `${c.kind === 'key' ? 'has:' : ''}${c.layer}.${c.key}`);
  const attrDriver =
    driver === undefined ? attrs[0] : driver.kind === 'attr' && !driver.and ? attrs.find(([l, k]) => l === driver.layer && k === driver.key) : undefined;
  const present = presence.filter(([, , p]) => p);
  const keyDriver =
    driver === undefined
      ? attrDriver === undefined
        ? present[0]
        : undefined
      : driver.kind === 'key' && !driver.and
        ? present.find(([l, k]) => l === driver.layer && k === driver.key)
        : undefined;
  const eqDriver = driver?.kind === 'eq' && !driver.and && f.eq[driver.col] !== undefined ? driver.col : undefined;
  if (driver?.and) {
    // Two seq-ordered index streams merged by INTERSECT (ORDER BY seq lets SQLite merge them as
    // they come, without a temporary table), then each seq's row.
    const stream = (c: IndexCondition): string => {
      const bound = maxSeq === undefined ? '' : ' AND seq <= ?';
      if (c.kind === 'eq') {
        params.push(orgId, f.eq[c.col], afterSeq, ...(maxSeq === undefined ? [] : [maxSeq]));
        return `SELECT seq FROM episodes INDEXED BY ${EQ_INDEX[c.col]} WHERE org_id = ? AND ${c.col} = ? AND seq > ?${bound}`;
      }
      if (c.kind === 'key') {
        params.push(orgId, c.layer, c.key, afterSeq, ...(maxSeq === undefined ? [] : [maxSeq]));
        return `SELECT seq FROM episode_attr_keys WHERE org_id = ? AND layer = ? AND key = ? AND seq > ?${bound}`;
      }
      params.push(orgId, c.layer, c.key, (c.layer === 'm' ? f.metadata : f.annotation)[c.key], afterSeq, ...(maxSeq === undefined ? [] : [maxSeq]));
      return `SELECT seq FROM episode_attrs WHERE org_id = ? AND layer = ? AND key = ? AND value = ? AND seq > ?${bound}`;
    };
    from = `(${stream(driver)} INTERSECT ${stream(driver.and)} ORDER BY 1) m CROSS JOIN episodes e ON e.seq = m.seq`;
    order = 'm.seq';
    answered.add(keyOf(driver)).add(keyOf(driver.and));
  } else if (attrDriver) {
    // CROSS JOIN pins the attribute index as the outer loop, so rows come out in seq order.
    from = 'episode_attrs d CROSS JOIN episodes e ON e.seq = d.seq';
    where.push('d.org_id = ?', 'd.layer = ?', 'd.key = ?', 'd.value = ?', 'd.seq > ?');
    params.push(orgId, attrDriver[0], attrDriver[1], attrDriver[2], afterSeq);
    order = 'd.seq';
    answered.add(`${attrDriver[0]}.${attrDriver[1]}`);
  } else if (keyDriver) {
    // The key index as the outer loop, likewise.
    from = 'episode_attr_keys h CROSS JOIN episodes e ON e.seq = h.seq';
    where.push('h.org_id = ?', 'h.layer = ?', 'h.key = ?', 'h.seq > ?');
    params.push(orgId, keyDriver[0], keyDriver[1], afterSeq);
    order = 'h.seq';
    answered.add(`has:${keyDriver[0]}.${keyDriver[1]}`);
  } else if (eqDriver) {
    from = `episodes e INDEXED BY ${EQ_INDEX[eqDriver]}`;
  }
  where.push('e.org_id = ?', 'e.seq > ?');
  params.push(orgId, afterSeq);
  if (maxSeq !== undefined) {
    where.push('e.seq <= ?');
    params.push(maxSeq);
  }
  for (const col of EPISODE_EQ_COLUMNS) {
    const v = f.eq[col];
    if (v === undefined || answered.has(col)) continue;
    if (planned && col !== eqDriver) {
      where.push(`EXISTS (SELECT 1 FROM episodes x INDEXED BY ${EQ_INDEX[col]} WHERE x.org_id = e.org_id AND x.${col} = ? AND x.seq = e.seq)`);
    } else {
      where.push(`e.${col} = ?`);
    }
    params.push(v);
  }
  if (f.from !== undefined) {
    where.push('e.started_at >= ?');
    params.push(f.from);
  }
  if (f.to !== undefined) {
    where.push('e.started_at <= ?');
    params.push(f.to);
  }
  for (const [layer, key, value] of attrs) {
    if (answered.has(`${layer}.${key}`)) continue;
    where.push('EXISTS (SELECT 1 FROM episode_attrs x WHERE x.org_id = e.org_id AND x.layer = ? AND x.key = ? AND x.value = ? AND x.seq = e.seq)');
    params.push(layer, key, value);
  }
  for (const [layer, key, isPresent] of presence) {
    if (isPresent && answered.has(`has:${layer}.${key}`)) continue;
    // One seek on the key index's whole primary key: the candidate's row is never read for it.
    where.push(`${isPresent ? '' : 'NOT '}EXISTS (SELECT 1 FROM episode_attr_keys k WHERE k.org_id = e.org_id AND k.layer = ? AND k.key = ? AND k.seq = e.seq)`);
    params.push(layer, key);
  }
  if (f.excludeEval) where.push('e.eval_id IS NULL');
  if (f.excludeDiscarded) where.push("e.outcome != 'discarded'");
  if (f.syncState) {
    const dest = f.syncState.destinationId;
    const destSql = dest === undefined ? '' : ' AND r.destination_id = ?';
    const states = f.syncState.state === 'synced' ? "('synced', 'verified')" : "('verified')";
    const exists = `EXISTS (SELECT 1 FROM replicas r WHERE r.episode_seq = e.seq AND r.state IN ${states}${destSql})`;
    where.push(f.syncState.state === 'unverified' ? `NOT ${exists}` : exists);
    if (dest !== undefined) params.push(dest);
  }
  params.push(limit);
  return { sql: `SELECT ${select} FROM ${from} WHERE ${where.join(' AND ')} ORDER BY ${order} LIMIT ?`, params };
}
