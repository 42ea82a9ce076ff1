import type { Statement } from 'better-sqlite3';
import { safeJsonStringify, type EpisodeOutcome } from '@fleet/protocol';
import { indexedEvent } from '../../events.js';
import type { Db } from './db.js';
import { eventAppender } from './events.js';
import { EQ_INDEX, ListPlanner, type IndexCondition, type ListDriver } from './list-plan.js';
import type {
  EpisodeFilter,
  EpisodeLineBatch,
  EpisodeRow,
  EpisodeStore,
  IngestItem,
  IngestResult,
  OutcomeChangeRow,
  ReplicaRow,
} from '../shared/types.js';
import { EPISODE_EQ_COLUMNS } from '../shared/types.js';
import { EPISODE_LINE_SELECT, indexedAttrs, reportedAgain, type EpisodeColumns, type EpisodeLineRow } from '../shared/episode-lines.js';
import { EPISODE_INSERT_COLUMNS, episodeFromDb, episodeInsertValues, replicaFromDb, type ReplicaDbRow } from '../shared/rows.js';
import { mergeAnnotations } from '../../episodes/annotations.js';

export interface EpisodeDbRow extends EpisodeColumns {
  interrupted: number;
}

export class SqliteEpisodes implements EpisodeStore {
  private readonly byId;
  private readonly byOrgId;
  private readonly insert;
  private readonly insertAttr;
  private readonly deleteAttrs;
  private readonly appendEvent;
  private readonly updateAnnotations;
  private readonly updateOutcome;
  private readonly insertChange;
  private readonly changes;
  private readonly replicasOf;
  private readonly countStmt;
  private readonly planner: ListPlanner;
  private readonly listCache = new Map<string, Statement<unknown[]>>();
  private readonly rawCache = new Map<string, Statement<unknown[]>>();

  constructor(private readonly db: Db) {
    this.byId = db.prepare<[string], { seq: number; org_id: string; robot_id: string }>('SELECT seq, org_id, robot_id FROM episodes WHERE id = ?');
    this.byOrgId = db.prepare<[string, string], EpisodeDbRow>('SELECT * FROM episodes WHERE org_id = ? AND id = ?');
    this.insert = db.prepare(`INSERT INTO episodes (${EPISODE_INSERT_COLUMNS.join(', ')}) VALUES (${EPISODE_INSERT_COLUMNS.map(() => '?').join(', ')})`);
    this.insertAttr = db.prepare('INSERT OR IGNORE INTO episode_attrs (org_id, layer, key, value, seq) VALUES (?, ?, ?, ?, ?)');
    this.deleteAttrs = db.prepare('DELETE FROM episode_attrs WHERE org_id = ? AND layer = ? AND key = ? AND value = ? AND seq = ?');
    this.appendEvent = eventAppender(db);
    this.updateAnnotations = db.prepare('UPDATE episodes SET annotations = ? WHERE seq = ?');
    this.updateOutcome = db.prepare('UPDATE episodes SET outcome = ? WHERE seq = ?');
    this.insertChange = db.prepare(
      'INSERT INTO outcome_changes (episode_seq, at, actor, from_outcome, to_outcome, reason) VALUES (?, ?, ?, ?, ?, ?)',
    );
    this.changes = db.prepare<[number], { at: number; actor: string; from_outcome: string; to_outcome: string; reason: string }>(
      'SELECT at, actor, from_outcome, to_outcome, reason FROM outcome_changes WHERE episode_seq = ? ORDER BY id',
    );
    this.replicasOf = db.prepare<[string], ReplicaDbRow>(
      'SELECT * FROM replicas WHERE episode_seq IN (SELECT value FROM json_each(?)) ORDER BY episode_seq, destination_id',
    );
    this.countStmt = db.prepare<[string], { n: number }>('SELECT COUNT(*) AS n FROM episodes WHERE org_id = ?');
    this.planner = new ListPlanner(db);
  }

  async ingest(items: readonly IngestItem[]): Promise<IngestResult[]> {
    return this.db.transaction(() => items.map((item) => this.ingestOne(item)))();
  }

  private ingestOne(item: IngestItem): IngestResult {
    const { orgId, robotId, report: r, reportedAt } = item;
    const existing = this.byId.get(r.id);
    if (existing) return reportedAgain(existing, orgId, robotId);
    const info = this.insert.run(...episodeInsertValues(item));
    const seq = Number(info.lastInsertRowid);
    this.indexAttrs(orgId, 'm', r.metadata, seq);
    this.appendEvent(orgId, indexedEvent(item), reportedAt);
    return 'inserted';
  }

  private indexAttrs(orgId: string, layer: 'm' | 'a', values: Record<string, unknown>, seq: number, remove = false): void {
    for (const [key, s] of indexedAttrs(values)) {
      if (remove) this.deleteAttrs.run(orgId, layer, key, s, seq);
      else this.insertAttr.run(orgId, layer, key, s, seq);
    }
  }

  async get(orgId: string, id: string): Promise<EpisodeRow | undefined> {
    const r = this.byOrgId.get(orgId, id);
    return r && this.hydrate([r])[0];
  }

  async list(orgId: string, filter: EpisodeFilter, afterSeq: number, limit: number, maxSeq?: number): Promise<EpisodeRow[]> {
    const driver = this.planner.plan(orgId, filter, afterSeq, maxSeq);
    if (driver === 'empty') return [];
    const { sql, params } = buildListQuery(orgId, filter, afterSeq, limit, 'e.*', maxSeq, driver);
    return this.hydrate(this.prepared(sql).all(...params) as EpisodeDbRow[]);
  }

  async listLines(orgId: string, filter: EpisodeFilter, afterSeq: number, limit: number, maxSeq?: number): Promise<EpisodeLineBatch> {
    const driver = this.planner.plan(orgId, filter, afterSeq, maxSeq);
    if (driver === 'empty') return { rows: [], replicas: new Map() };
    const { sql, params } = buildListQuery(orgId, filter, afterSeq, limit, EPISODE_LINE_SELECT, maxSeq, driver);
    return this.lineBatch(this.preparedRaw(sql).all(...params) as EpisodeLineRow[]);
  }

  async listSeqs(orgId: string, filter: EpisodeFilter, afterSeq: number, limit: number): Promise<number[]> {
    const driver = this.planner.plan(orgId, filter, afterSeq);
    if (driver === 'empty') return [];
    const { sql, params } = buildListQuery(orgId, filter, afterSeq, limit, 'e.seq', undefined, driver);
    return (this.prepared(sql).all(...params) as { seq: number }[]).map((r) => r.seq);
  }

  /** The replicas of a batch of line rows, in one query. */
  lineBatch(rows: EpisodeLineRow[]): EpisodeLineBatch {
    const replicas = new Map<number, ReplicaRow[]>();
    if (rows.length === 0) return { rows, replicas };
    let ids = String(rows[0]![0]);
    for (let i = 1; i < rows.length; i++) ids += `,${rows[i]![0]}`;
    for (const r of this.replicasOf.all(`[${ids}]`)) {
      let list = replicas.get(r.episode_seq);
      if (!list) replicas.set(r.episode_seq, (list = []));
      list.push(replicaFromDb(r));
    }
    return { rows, replicas };
  }

  private preparedRaw(sql: string): Statement<unknown[]> {
    let stmt = this.rawCache.get(sql);
    if (!stmt) {
      stmt = this.db.prepare<unknown[]>(sql).raw(true);
      if (this.rawCache.size > 500) this.rawCache.clear();
      this.rawCache.set(sql, stmt);
    }
    return stmt;
  }

  private prepared(sql: string): Statement<unknown[]> {
    let stmt = this.listCache.get(sql);
    if (!stmt) {
      stmt = this.db.prepare<unknown[]>(sql);
      // Filter shapes are few (which keys are present), so the cache stays small; bound it anyway.
      if (this.listCache.size > 500) this.listCache.clear();
      this.listCache.set(sql, stmt);
    }
    return stmt;
  }

  hydrate(rows: EpisodeDbRow[]): EpisodeRow[] {
    if (rows.length === 0) return [];
    const bySeq = new Map<number, ReplicaRow[]>();
    for (const r of this.replicasOf.all(JSON.stringify(rows.map((x) => x.seq)))) {
      const list = bySeq.get(r.episode_seq) ?? [];
      list.push(replicaFromDb(r));
      bySeq.set(r.episode_seq, list);
    }
    return rows.map((r) => episodeFromDb(r, bySeq.get(r.seq) ?? []));
  }

  async patchAnnotations(orgId: string, id: string, patch: Record<string, unknown>): Promise<EpisodeRow | undefined> {
    const done = this.db
      .transaction(() => {
        const row = this.byOrgId.get(orgId, id);
        if (!row) return false;
        const before = JSON.parse(row.annotations) as Record<string, unknown>;
        const after = mergeAnnotations(before, patch);
        this.indexAttrs(orgId, 'a', before, row.seq, true);
        this.indexAttrs(orgId, 'a', after, row.seq);
        this.updateAnnotations.run(safeJsonStringify(after), row.seq);
        return true;
      })
      .immediate();
    return done ? this.get(orgId, id) : undefined;
  }

  async setOutcome(
    orgId: string,
    id: string,
    change: { outcome: EpisodeOutcome; reason: string; actor: string; at: number },
  ): Promise<EpisodeRow | undefined> {
    const done = this.db
      .transaction(() => {
        const row = this.byOrgId.get(orgId, id);
        if (!row) return false;
        this.insertChange.run(row.seq, change.at, change.actor, row.outcome, change.outcome, change.reason);
        this.updateOutcome.run(change.outcome, row.seq);
        return true;
      })
      .immediate();
    return done ? this.get(orgId, id) : undefined;
  }

  async outcomeHistory(orgId: string, id: string): Promise<OutcomeChangeRow[] | undefined> {
    const row = this.byOrgId.get(orgId, id);
    if (!row) return undefined;
    return this.changes.all(row.seq).map((c) => ({
      at: c.at,
      actor: c.actor,
      from: c.from_outcome as EpisodeOutcome,
      to: c.to_outcome as EpisodeOutcome,
      reason: c.reason,
    }));
  }

  async count(orgId: string): Promise<number> {
    return this.countStmt.get(orgId)!.n;
  }
}

/**
 * One SQL text per filter shape (which keys are present, which one drives), values bound as
 * parameters. Without a driver, an attribute filter drives when there is one (its index is ordered
 * by seq for one (key, value): a page stops after `limit` rows even when most episodes carry the
 * key) and SQLite picks an index otherwise. With a driver (ListPlanner's choice), that index is
 * walked in seq order and every other equality or attribute condition is checked on its own index
 * by seq, so a rejected candidate costs one index seek instead of reading its table row.
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
  const where: string[] = [];
  const params: unknown[] = [];
  let from = 'episodes e';
  let order = 'e.seq';
  const planned = driver !== undefined;
  // Conditions answered by the FROM clause (the driver, or both merged indexes): not checked again.
  const answered = new Set<string>();
  const keyOf = (c: IndexCondition) => (c.kind === 'eq' ? c.col : `${c.layer}.${c.key}`);
  const attrDriver =
    driver === undefined ? attrs[0] : driver.kind === 'attr' && !driver.and ? attrs.find(([l, k]) => l === driver.layer && k === driver.key) : undefined;
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
