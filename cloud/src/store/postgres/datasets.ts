import type { DatasetRow, DatasetStore, EpisodeFilter, EpisodeLineBatch, EpisodeRow } from '../shared/types.js';
import { datasetFromDb, type DatasetDbRow } from '../shared/rows.js';
import type { PgDb } from './db.js';
import { EPISODE_LINE_SELECT } from '../shared/episode-lines.js';
import { buildPgListQuery, EPISODE_ROW_SELECT, type PgEpisodeDbRow, type PgEpisodes } from './episodes.js';


const DATASET_COLUMNS = 'id, org_id, name, description, filter, snapshot_at, episode_count, created_by, created_at';


/**
 * A page of members, then their episodes. Positions are 1..n without gaps, so the page is bounded
 * on both sides (not only by LIMIT): right after a snapshot dataset_members has no statistics for
 * the new rows, and with `position > after ... LIMIT` alone a 180k-member dataset was read whole
 * and sorted (a bitmap scan), or joined by hash to every episode: 370 ms for a 500-line manifest
 * page at 200k episodes.
 */
const MEMBERS_FROM = `FROM (SELECT position, episode_seq FROM dataset_members
    WHERE dataset_id = $1 AND position > $2 AND position <= $2::bigint + $3::bigint ORDER BY position LIMIT $3) m
  JOIN episodes e ON e.seq = m.episode_seq ORDER BY m.position`;

export class PgDatasets implements DatasetStore {
  constructor(
    private readonly db: PgDb,
    private readonly episodes: PgEpisodes,
  ) {}

  async create(row: Omit<DatasetRow, 'snapshotAt' | 'episodeCount'>): Promise<void> {
    await this.db.query('INSERT INTO datasets (id, org_id, name, description, filter, created_by, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)', [
      row.id,
      row.orgId,
      row.name,
      row.description,
      JSON.stringify(row.filter),
      row.createdBy,
      row.createdAt,
    ]);
  }

  async get(orgId: string, id: string): Promise<DatasetRow | undefined> {
    const r = await this.db.one<DatasetDbRow>(`SELECT ${DATASET_COLUMNS} FROM datasets WHERE org_id = $1 AND id = $2`, [orgId, id]);
    return r && datasetFromDb(r);
  }

  async list(orgId: string, after: string | null, limit: number): Promise<DatasetRow[]> {
    const rows = await this.db.many<DatasetDbRow>(
      `SELECT ${DATASET_COLUMNS} FROM datasets WHERE org_id = $1 AND id > $2 ORDER BY id LIMIT $3`,
      [orgId, after ?? '', limit],
    );
    return rows.map(datasetFromDb);
  }

  /**
   * One transaction: the dataset row is locked (FOR UPDATE), then the members are written by one
   * INSERT ... SELECT, which reads the episodes as of one instant (MVCC: ingest, annotation and
   * sync writers are never blocked by it), numbered in seq order, and the count is pinned. A
   * second snapshot of the same dataset (another replica) waits on the row lock; READ COMMITTED
   * then re-reads the row as committed, finds snapshot_at set and answers 'already'.
   */
  async snapshot(orgId: string, id: string, filter: EpisodeFilter, at: number): Promise<DatasetRow | 'already' | null> {
    return this.db.tx(async (sql) => {
      const ds = (await sql.query<DatasetDbRow>(`SELECT ${DATASET_COLUMNS} FROM datasets WHERE org_id = $1 AND id = $2 FOR UPDATE`, [orgId, id])).rows[0];
      if (!ds) return null;
      if (ds.snapshot_at !== null) return 'already';
      const { sql: members, params } = buildPgListQuery(orgId, filter, 0, -1, 'e.seq');
      const n = params.length;
      const inserted = await sql.query(
        `INSERT INTO dataset_members (dataset_id, position, episode_seq)
         SELECT $${n + 1}, ROW_NUMBER() OVER (ORDER BY q.seq), q.seq FROM (${members}) q`,
        [...params, id],
      );
      const count = inserted.rowCount ?? 0;
      await sql.query('UPDATE datasets SET snapshot_at = $1, episode_count = $2 WHERE id = $3', [at, count, id]);
      return datasetFromDb({ ...ds, snapshot_at: at, episode_count: count });
    });
  }

  async memberLineRows(datasetId: string, afterPos: number, limit: number): Promise<EpisodeLineBatch> {
    return this.episodes.lineBatch(this.db, await this.episodes.lineRows(`SELECT ${EPISODE_LINE_SELECT} ${MEMBERS_FROM}`, [datasetId, afterPos, limit]));
  }

  async members(datasetId: string, afterPos: number, limit: number): Promise<EpisodeRow[]> {
    return this.episodes.hydrate(this.db, await this.db.many<PgEpisodeDbRow>(`SELECT ${EPISODE_ROW_SELECT} ${MEMBERS_FROM}`, [datasetId, afterPos, limit]));
  }
}
