import type { Statement } from 'better-sqlite3';
import { LRUCache } from 'lru-cache';
import { safeJsonStringify, type EpisodeOutcome } from '@fleet/protocol';
import { indexedEvent } from '../../rules/events.js';
import type { Db } from './db.js';
import { eventAppender } from './events.js';
import { buildListQuery, ListPlanner } from './list-plan.js';
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
import { EPISODE_LINE_SELECT, indexedAttrs, indexedKeys, keyChanges, reportedAgain, type EpisodeColumns, type EpisodeLineRow } from '../shared/episode-lines.js';
import { EPISODE_INSERT_COLUMNS, episodeFromDb, episodeInsertValues, replicaFromDb, type ReplicaDbRow } from '../shared/rows.js';
import { mergeAnnotations } from '../../rules/annotations.js';

export interface EpisodeDbRow extends EpisodeColumns {
  interrupted: number;
}

export class SqliteEpisodes implements EpisodeStore {
  private readonly byId;
  private readonly byOrgId;
  private readonly insert;
  private readonly insertAttr;
  private readonly deleteAttrs;
  private readonly insertKey;
  private readonly deleteKey;
  private readonly appendEvent;
  private readonly updateAnnotations;
  private readonly updateOutcome;
  private readonly insertChange;
  private readonly changes;
  private readonly replicasOf;
  private readonly countStmt;
  private readonly planner: ListPlanner;
  // Filter shapes are few (which keys are present), so the caches stay small; bounded anyway.
  private readonly listCache = new LRUCache<string, Statement<unknown[]>>({ max: 500 });
  private readonly rawCache = new LRUCache<string, Statement<unknown[]>>({ max: 500 });

  constructor(private readonly db: Db) {
    this.byId = db.prepare<[string], { seq: number; org_id: string; robot_id: string }>('SELECT seq, org_id, robot_id FROM episodes WHERE id = ?');
    this.byOrgId = db.prepare<[string, string], EpisodeDbRow>('SELECT * FROM episodes WHERE org_id = ? AND id = ?');
    this.insert = db.prepare(`INSERT INTO episodes (${EPISODE_INSERT_COLUMNS.join(', ')}) VALUES (${EPISODE_INSERT_COLUMNS.map(() => '?').join(', ')})`);
    this.insertAttr = db.prepare('INSERT OR IGNORE INTO episode_attrs (org_id, layer, key, value, seq) VALUES (?, ?, ?, ?, ?)');
    this.deleteAttrs = db.prepare('DELETE FROM episode_attrs WHERE org_id = ? AND layer = ? AND key = ? AND value = ? AND seq = ?');
    this.insertKey = db.prepare('INSERT OR IGNORE INTO episode_attr_keys (org_id, layer, key, seq) VALUES (?, ?, ?, ?)');
    this.deleteKey = db.prepare('DELETE FROM episode_attr_keys WHERE org_id = ? AND layer = ? AND key = ? AND seq = ?');
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
    return this.db.transaction(() => items.map((item) => this.ingestOne(item))).immediate();
  }

  private ingestOne(item: IngestItem): IngestResult {
    const { orgId, robotId, report: r, reportedAt } = item;
    const existing = this.byId.get(r.id);
    if (existing) return reportedAgain(existing, orgId, robotId);
    const info = this.insert.run(...episodeInsertValues(item));
    const seq = Number(info.lastInsertRowid);
    this.indexAttrs(orgId, 'm', r.metadata, seq);
    for (const key of indexedKeys(r.metadata)) this.insertKey.run(orgId, 'm', key, seq);
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
      this.rawCache.set(sql, stmt);
    }
    return stmt;
  }

  private prepared(sql: string): Statement<unknown[]> {
    let stmt = this.listCache.get(sql);
    if (!stmt) {
      stmt = this.db.prepare<unknown[]>(sql);
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
        // A key deleted with null leaves the key index: has_annotation.<key>=false finds it again.
        const keys = keyChanges(before, after);
        for (const key of keys.removed) this.deleteKey.run(orgId, 'a', key, row.seq);
        for (const key of keys.added) this.insertKey.run(orgId, 'a', key, row.seq);
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
