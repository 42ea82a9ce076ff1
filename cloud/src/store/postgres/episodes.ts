import { safeJsonStringify, type EpisodeOutcome } from '@fleet/protocol';
import { indexedEvent } from '../../rules/events.js';
import { EPISODE_LINE_SELECT, indexedAttrs, indexedKeys, keyChanges, reportedAgain, type EpisodeColumns, type EpisodeLineRow } from '../shared/episode-lines.js';
import type { EpisodeFilter, EpisodeLineBatch, EpisodeRow, EpisodeStore, IngestItem, IngestResult, OutcomeChangeRow, ReplicaRow } from '../shared/types.js';
import { EPISODE_EQ_COLUMNS, presenceOf } from '../shared/types.js';
import { LOCKS, lockOrgs, type PgDb, type Sql } from './db.js';
import { appendEvents } from './events.js';
import { EPISODE_INSERT_COLUMNS, episodeFromDb, episodeInsertValues, replicaFromDb, type ReplicaDbRow } from '../shared/rows.js';
import { mergeAnnotations } from '../../rules/annotations.js';

/**
 * The text an attribute key or value is stored and compared as. PostgreSQL text cannot hold NUL,
 * so a string with a NUL or a backslash is escaped (backslash doubled, NUL as `\0`); the mapping
 * is injective (an escaped string always has a backslash, an unescaped one never), and filters
 * go through it too, so equality means what it means on SQLite.
 */
export function attrText(s: string): string {
  return s.includes('\\') || s.includes('\u0000') ? s.replaceAll('\\', '\\\\').replaceAll('\u0000', '\\0') : s;
}

export interface PgEpisodeDbRow extends EpisodeColumns {
  interrupted: boolean;
}

/** The columns of a full row (no sync bookkeeping), as selected from alias `e`. */
export const EPISODE_ROW_SELECT = [
  'seq', 'id', 'org_id', 'robot_id', 'recording_session_id', 'episode_seq', 'session_name', 'task_id', 'task_name', 'subtask_id',
  'operator_id', 'operator_name', 'control_mode', 'policy_version_id', 'eval_id', 'outcome', 'recorded_outcome', 'started_at',
  'ended_at', 'duration_s', 'message_count', 'bag_size_bytes', 'bag_uri', 'metadata', 'annotations', 'segments', 'manifest',
  'interrupted', 'reported_at',
].map((c) => `e.${c}`).join(', ');


/** The array type of each column an ingest writes (EPISODE_INSERT_COLUMNS), for the unnest below. */
const INSERT_TYPES: Record<(typeof EPISODE_INSERT_COLUMNS)[number], string> = {
  id: 'text', org_id: 'text', robot_id: 'text', recording_session_id: 'text', episode_seq: 'int8', session_name: 'text',
  task_id: 'text', task_name: 'text', subtask_id: 'text', operator_id: 'text', operator_name: 'text', control_mode: 'text',
  policy_version_id: 'text', eval_id: 'text', outcome: 'text', recorded_outcome: 'text', started_at: 'int8', ended_at: 'int8',
  duration_s: 'float8', message_count: 'int8', bag_size_bytes: 'int8', bag_uri: 'text', metadata: 'text', segments: 'text',
  manifest: 'text', interrupted: 'bool', reported_at: 'int8',
};

/**
 * One INSERT for a whole batch: each column goes as one array parameter and `unnest` zips them
 * into rows (in array order, so seqs follow the batch order). The statement text does not depend
 * on the batch size, so PostgreSQL parses and plans it once per connection.
 */
const INSERT_EPISODES = `INSERT INTO episodes (${EPISODE_INSERT_COLUMNS.join(', ')})
  SELECT * FROM unnest(${EPISODE_INSERT_COLUMNS.map((c, i) => `$${i + 1}::${INSERT_TYPES[c]}[]`).join(', ')})
  ON CONFLICT (id) DO NOTHING
  RETURNING seq, id`;

function insertParams(items: readonly IngestItem[]): unknown[][] {
  const cols: unknown[][] = EPISODE_INSERT_COLUMNS.map(() => []);
  for (const item of items) {
    const row = episodeInsertValues(item);
    for (let i = 0; i < row.length; i++) cols[i]!.push(row[i]);
  }
  return cols;
}

/** Attribute index rows (org, layer, key, value, seq) as four parallel arrays plus the org. */
class AttrRows {
  readonly layers: string[] = [];
  readonly keys: string[] = [];
  readonly values: string[] = [];
  readonly seqs: number[] = [];
  readonly orgs: string[] = [];

  add(orgId: string, layer: 'm' | 'a', values: Record<string, unknown>, seq: number): void {
    for (const [key, s] of indexedAttrs(values)) {
      this.orgs.push(orgId);
      this.layers.push(layer);
      this.keys.push(attrText(key));
      this.values.push(attrText(s));
      this.seqs.push(seq);
    }
  }

  get size(): number {
    return this.seqs.length;
  }

  params(): unknown[] {
    return [this.orgs, this.layers, this.keys, this.values, this.seqs];
  }
}

/** Key index rows (org, layer, key, seq) as four parallel arrays. */
class KeyRows {
  readonly orgs: string[] = [];
  readonly layers: string[] = [];
  readonly keys: string[] = [];
  readonly seqs: number[] = [];

  add(orgId: string, layer: 'm' | 'a', keys: Iterable<string>, seq: number): void {
    for (const key of keys) {
      this.orgs.push(orgId);
      this.layers.push(layer);
      this.keys.push(attrText(key));
      this.seqs.push(seq);
    }
  }

  get size(): number {
    return this.seqs.length;
  }

  params(): unknown[] {
    return [this.orgs, this.layers, this.keys, this.seqs];
  }
}

const INSERT_KEYS = `INSERT INTO episode_attr_keys (org_id, layer, key, seq)
  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int8[]) ON CONFLICT DO NOTHING`;
const DELETE_KEYS = `DELETE FROM episode_attr_keys k USING unnest($1::text[], $2::text[], $3::text[], $4::int8[]) AS d(org_id, layer, key, seq)
  WHERE k.org_id = d.org_id AND k.layer = d.layer AND k.key = d.key AND k.seq = d.seq`;

const INSERT_ATTRS = `INSERT INTO episode_attrs (org_id, layer, key, value, seq)
  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int8[]) ON CONFLICT DO NOTHING`;
const DELETE_ATTRS = `DELETE FROM episode_attrs a USING unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int8[]) AS d(org_id, layer, key, value, seq)
  WHERE a.org_id = d.org_id AND a.layer = d.layer AND a.key = d.key AND a.value = d.value AND a.seq = d.seq`;

/** How many seqs of a started_at range are read to bound a list's walk (≤ ~5 ms: a wide range pays it on every page). */
const RANGE_PROBE = 20_000;

/**
 * One SQL text per filter shape (which keys are present), values bound as parameters, every
 * condition in one WHERE: PostgreSQL keeps statistics of how many episodes carry each value, so
 * unlike SQLite (see sqlite/list-plan.ts) its planner can choose the driving index itself: an
 * (org_id, <column>, seq) index, an attribute's (org_id, layer, key, value, seq) range or a key's
 * (org_id, layer, key, seq) range, all in seq order, with the other conditions as index lookups
 * or a merge join on seq.
 */
export function buildPgListQuery(
  orgId: string,
  f: EpisodeFilter,
  afterSeq: number,
  limit: number,
  select: string,
  maxSeq?: number,
): { sql: string; params: unknown[] } {
  const params: unknown[] = [orgId, afterSeq];
  const p = (v: unknown): string => `$${params.push(v)}`;
  const where = ['e.org_id = $1', 'e.seq > $2'];
  if (maxSeq !== undefined) where.push(`e.seq <= ${p(maxSeq)}`);
  for (const col of EPISODE_EQ_COLUMNS) {
    const v = f.eq[col];
    if (v !== undefined) where.push(`e.${col} = ${p(v)}`);
  }
  let withRange = '';
  if (f.from !== undefined || f.to !== undefined) {
    const range: string[] = [];
    if (f.from !== undefined) range.push(`started_at >= ${p(f.from)}`);
    if (f.to !== undefined) range.push(`started_at <= ${p(f.to)}`);
    where.push(...range.map((c) => `e.${c}`));
    // started_at follows seq closely (episodes are reported soon after they start), which the
    // planner cannot know: for a page of a late time range it walked seq from the cursor and
    // dropped every earlier episode one by one (33 ms at 200k, growing with the organization).
    // The range's seqs after the cursor are read first from (org_id, started_at, seq), index
    // only, up to RANGE_PROBE of them: when that is all of them, their first and last seq bound
    // the walk (no seq at all: the page is empty); a denser range leaves the walk unbounded.
    const probe = `SELECT s.seq FROM episodes s WHERE s.org_id = $1 AND ${range.map((c) => `s.${c}`).join(' AND ')} AND s.seq > $2 LIMIT ${RANGE_PROBE}`;
    withRange = `WITH r AS MATERIALIZED (SELECT count(*) AS n, min(seq) AS lo, max(seq) AS hi FROM (${probe}) t) `;
    where.push(
      `e.seq >= (SELECT CASE WHEN n < ${RANGE_PROBE} THEN lo ELSE 0 END FROM r)`,
      `e.seq <= (SELECT CASE WHEN n < ${RANGE_PROBE} THEN hi ELSE ${Number.MAX_SAFE_INTEGER} END FROM r)`,
    );
  }
  const attrs = [
    ...Object.entries(f.metadata).map(([k, v]) => ['m', k, v] as const),
    ...Object.entries(f.annotation).map(([k, v]) => ['a', k, v] as const),
  ];
  // The seq bounds are repeated on the attribute rows: when the planner merge-joins an attribute's
  // range with another index on seq, that range then starts at the cursor instead of at seq 0
  // (a page deep into 200k episodes read 47k attribute entries without it: 12.5 ms -> 1.5 ms).
  const attrBounds = `x.seq > $2${maxSeq === undefined ? '' : ' AND x.seq <= $3'}`;
  for (const [layer, key, value] of attrs) {
    where.push(
      `EXISTS (SELECT 1 FROM episode_attrs x WHERE x.org_id = $1 AND x.layer = '${layer}' AND x.key = ${p(attrText(key))} AND x.value = ${p(attrText(value))} AND ${attrBounds} AND x.seq = e.seq)`,
    );
  }
  // Presence on the key index, (org_id, layer, key, seq) and bounded the same way: `=true` is one
  // more seq-ordered range the planner may drive by or merge, `=false` an anti-join (a lookup per
  // candidate, never a driver: absence has no index entries to walk).
  const keyBounds = `k.seq > $2${maxSeq === undefined ? '' : ' AND k.seq <= $3'}`;
  for (const [layer, key, present] of presenceOf(f)) {
    const exists = `EXISTS (SELECT 1 FROM episode_attr_keys k WHERE k.org_id = $1 AND k.layer = '${layer}' AND k.key = ${p(attrText(key))} AND ${keyBounds} AND k.seq = e.seq)`;
    where.push(present ? exists : `NOT ${exists}`);
  }
  if (f.excludeEval) where.push('e.eval_id IS NULL');
  if (f.excludeDiscarded) where.push("e.outcome <> 'discarded'");
  if (f.syncState) {
    const dest = f.syncState.destinationId;
    const states = f.syncState.state === 'synced' ? "('synced', 'verified')" : "('verified')";
    const exists = `EXISTS (SELECT 1 FROM replicas r WHERE r.episode_seq = e.seq AND r.state IN ${states}${dest === undefined ? '' : ` AND r.destination_id = ${p(dest)}`})`;
    where.push(f.syncState.state === 'unverified' ? `NOT ${exists}` : exists);
  }
  const lim = limit < 0 ? '' : ` LIMIT ${p(limit)}`;
  return { sql: `${withRange}SELECT ${select} FROM episodes e WHERE ${where.join(' AND ')} ORDER BY e.seq${lim}`, params };
}

export class PgEpisodes implements EpisodeStore {
  constructor(private readonly db: PgDb) {}

  /**
   * The batch in one transaction. The 'episodes' lock of each organization in the batch is taken
   * before the existing ids are read and the new rows get their seqs, and held to commit (the
   * transaction's end releases it): an organization's ingests then commit in seq order across
   * every replica. Without it a transaction that took seq N but commits after one that took N+1
   * would be invisible to a reader paging with `seq > N-1` at that moment and skipped for good
   * once the reader moved past N+1 (GET /v1/episodes cursors, the sync router's walk). With it,
   * a reader of an organization that sees its seq N sees every one of its seqs below N; every
   * such reader is scoped to one organization, so two organizations' ingests never wait on each
   * other. Lock order is episodes, then events (appendEvents), each set sorted, in every
   * transaction that takes both, so two ingests never deadlock. Holding the lock also makes the
   * duplicate check below race-free between replicas within an organization; an id reported in
   * two organizations at once meets the UNIQUE on id, and the batch is retried (see the catch).
   */
  async ingest(items: readonly IngestItem[]): Promise<IngestResult[]> {
    if (items.length === 0) return [];
    return this.db.tx(async (sql) => {
      await lockOrgs(sql, LOCKS.episodes, items.map((i) => i.orgId));
      const ids = [...new Set(items.map((i) => i.report.id))];
      const existing = new Map(
        (await sql.query<{ id: string; org_id: string; robot_id: string }>('SELECT id, org_id, robot_id FROM episodes WHERE id = ANY($1::text[])', [ids])).rows.map(
          (r) => [r.id, r],
        ),
      );
      const results: IngestResult[] = [];
      const fresh: IngestItem[] = [];
      const freshAt: number[] = [];
      for (const item of items) {
        const prior = existing.get(item.report.id);
        if (prior) {
          results.push(reportedAgain(prior, item.orgId, item.robotId));
          continue;
        }
        // A second copy inside the batch meets the first as an existing row, like on SQLite.
        existing.set(item.report.id, { id: item.report.id, org_id: item.orgId, robot_id: item.robotId });
        fresh.push(item);
        freshAt.push(results.length);
        results.push('inserted');
      }
      if (fresh.length > 0) {
        // Another organization's ingest of the same id (it holds another organization's lock)
        // may commit first: that row wins and this report is the conflict it would have met.
        const inserted = await this.insert(sql, fresh);
        fresh.forEach((item, i) => {
          if (!inserted.has(item.report.id)) results[freshAt[i]!] = 'conflict';
        });
      }
      return results;
    });
  }

  /** Inserts the rows, their attributes and `episode.finalized` events; the ids inserted. */
  private async insert(sql: Sql, all: readonly IngestItem[]): Promise<Set<string>> {
    const rows = (await sql.query<{ seq: number; id: string }>(INSERT_EPISODES, insertParams(all))).rows;
    const seqOf = new Map(rows.map((r) => [r.id, r.seq]));
    const items = all.filter((i) => seqOf.has(i.report.id));
    const attrs = new AttrRows();
    const keys = new KeyRows();
    for (const { orgId, report } of items) {
      attrs.add(orgId, 'm', report.metadata, seqOf.get(report.id)!);
      keys.add(orgId, 'm', indexedKeys(report.metadata), seqOf.get(report.id)!);
    }
    if (attrs.size > 0) await sql.query(INSERT_ATTRS, attrs.params());
    if (keys.size > 0) await sql.query(INSERT_KEYS, keys.params());
    await appendEvents(
      sql,
      items.map((item) => ({ orgId: item.orgId, event: indexedEvent(item), at: item.reportedAt })),
    );
    return new Set(seqOf.keys());
  }

  async get(orgId: string, id: string): Promise<EpisodeRow | undefined> {
    const r = await this.db.one<PgEpisodeDbRow>(`SELECT ${EPISODE_ROW_SELECT} FROM episodes e WHERE e.org_id = $1 AND e.id = $2`, [orgId, id]);
    return r && (await this.hydrate(this.db, [r]))[0];
  }


  async list(orgId: string, filter: EpisodeFilter, afterSeq: number, limit: number, maxSeq?: number): Promise<EpisodeRow[]> {
    const { sql, params } = buildPgListQuery(orgId, filter, afterSeq, limit, EPISODE_ROW_SELECT, maxSeq);
    return this.hydrate(this.db, await this.db.many<PgEpisodeDbRow>(sql, params));
  }

  async listLines(orgId: string, filter: EpisodeFilter, afterSeq: number, limit: number, maxSeq?: number): Promise<EpisodeLineBatch> {
    const { sql, params } = buildPgListQuery(orgId, filter, afterSeq, limit, EPISODE_LINE_SELECT, maxSeq);
    return this.lineBatch(this.db, await this.lineRows(sql, params));
  }

  async listSeqs(orgId: string, filter: EpisodeFilter, afterSeq: number, limit: number): Promise<number[]> {
    const { sql, params } = buildPgListQuery(orgId, filter, afterSeq, limit, 'e.seq');
    return (await this.db.many<{ seq: number }>(sql, params)).map((r) => r.seq);
  }

  /** Rows as arrays in EPISODE_LINE_COLUMNS order (half the cost of an object per row). */
  async lineRows(sql: string, params: unknown[]): Promise<EpisodeLineRow[]> {
    const res = await this.db.pool.query({ text: sql, values: params, rowMode: 'array' });
    return res.rows as unknown as EpisodeLineRow[];
  }

  /** The replicas of a batch of line rows, in one query. */
  async lineBatch(sql: Sql, rows: EpisodeLineRow[]): Promise<EpisodeLineBatch> {
    return { rows, replicas: await this.replicasOf(sql, rows.map((r) => r[0])) };
  }

  private async replicasOf(sql: Sql, seqs: number[]): Promise<Map<number, ReplicaRow[]>> {
    const bySeq = new Map<number, ReplicaRow[]>();
    if (seqs.length === 0) return bySeq;
    const rows = await sql.query<ReplicaDbRow>(
      `SELECT episode_seq, destination_id, state, grant_id, error, object_key, updated_at FROM replicas
       WHERE episode_seq = ANY($1::int8[]) ORDER BY episode_seq, destination_id`,
      [seqs],
    );
    for (const r of rows.rows) {
      let list = bySeq.get(r.episode_seq);
      if (!list) bySeq.set(r.episode_seq, (list = []));
      list.push(replicaFromDb(r));
    }
    return bySeq;
  }

  async hydrate(sql: Sql, rows: PgEpisodeDbRow[]): Promise<EpisodeRow[]> {
    if (rows.length === 0) return [];
    const bySeq = await this.replicasOf(sql, rows.map((r) => r.seq));
    return rows.map((r) => episodeFromDb(r, bySeq.get(r.seq) ?? []));
  }

  async patchAnnotations(orgId: string, id: string, patch: Record<string, unknown>): Promise<EpisodeRow | undefined> {
    const row = await this.db.tx(async (sql) => {
      // Row lock (NO KEY: foreign-key checks of outcome changes and replicas are not blocked): two
      // patches of one episode apply one after the other, each on the other's result.
      const row = (
        await sql.query<PgEpisodeDbRow>(`SELECT ${EPISODE_ROW_SELECT} FROM episodes e WHERE e.org_id = $1 AND e.id = $2 FOR NO KEY UPDATE`, [orgId, id])
      ).rows[0];
      if (!row) return undefined;
      const before = JSON.parse(row.annotations) as Record<string, unknown>;
      const after = mergeAnnotations(before, patch);
      const removed = new AttrRows();
      removed.add(orgId, 'a', before, row.seq);
      const added = new AttrRows();
      added.add(orgId, 'a', after, row.seq);
      if (removed.size > 0) await sql.query(DELETE_ATTRS, removed.params());
      if (added.size > 0) await sql.query(INSERT_ATTRS, added.params());
      // A key deleted with null leaves the key index: has_annotation.<key>=false finds it again.
      const changes = keyChanges(before, after);
      const keysOut = new KeyRows();
      keysOut.add(orgId, 'a', changes.removed, row.seq);
      const keysIn = new KeyRows();
      keysIn.add(orgId, 'a', changes.added, row.seq);
      if (keysOut.size > 0) await sql.query(DELETE_KEYS, keysOut.params());
      if (keysIn.size > 0) await sql.query(INSERT_KEYS, keysIn.params());
      const annotations = safeJsonStringify(after);
      await sql.query('UPDATE episodes SET annotations = $1 WHERE seq = $2', [annotations, row.seq]);
      return (await this.hydrate(sql, [{ ...row, annotations }]))[0];
    });
    return row;
  }

  async setOutcome(
    orgId: string,
    id: string,
    change: { outcome: EpisodeOutcome; reason: string; actor: string; at: number },
  ): Promise<EpisodeRow | undefined> {
    return this.db.tx(async (sql) => {
      const row = (
        await sql.query<PgEpisodeDbRow>(`SELECT ${EPISODE_ROW_SELECT} FROM episodes e WHERE e.org_id = $1 AND e.id = $2 FOR NO KEY UPDATE`, [orgId, id])
      ).rows[0];
      if (!row) return undefined;
      await sql.query('INSERT INTO outcome_changes (episode_seq, at, actor, from_outcome, to_outcome, reason) VALUES ($1, $2, $3, $4, $5, $6)', [
        row.seq,
        change.at,
        change.actor,
        row.outcome,
        change.outcome,
        change.reason,
      ]);
      await sql.query('UPDATE episodes SET outcome = $1 WHERE seq = $2', [change.outcome, row.seq]);
      return (await this.hydrate(sql, [{ ...row, outcome: change.outcome }]))[0];
    });
  }

  async outcomeHistory(orgId: string, id: string): Promise<OutcomeChangeRow[] | undefined> {
    const row = await this.db.one<{ seq: number }>('SELECT seq FROM episodes WHERE org_id = $1 AND id = $2', [orgId, id]);
    if (!row) return undefined;
    const changes = await this.db.many<{ at: number; actor: string; from_outcome: string; to_outcome: string; reason: string }>(
      'SELECT at, actor, from_outcome, to_outcome, reason FROM outcome_changes WHERE episode_seq = $1 ORDER BY id',
      [row.seq],
    );
    return changes.map((c) => ({ at: c.at, actor: c.actor, from: c.from_outcome as EpisodeOutcome, to: c.to_outcome as EpisodeOutcome, reason: c.reason }));
  }

  async count(orgId: string): Promise<number> {
    return (await this.db.one<{ n: number }>('SELECT COUNT(*) AS n FROM episodes WHERE org_id = $1', [orgId]))!.n;
  }
}
