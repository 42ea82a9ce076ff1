import type { Db } from './sqlite-db.js';
import { buildListQuery, type EpisodeDbRow, type SqliteEpisodes } from './sqlite-episodes.js';
import type { DatasetRow, DatasetStore, EpisodeFilter, EpisodeRow } from './types.js';

interface DatasetDbRow {
  id: string;
  org_id: string;
  name: string;
  description: string | null;
  filter: string;
  snapshot_at: number | null;
  episode_count: number | null;
  created_by: string;
  created_at: number;
}

function fromDb(r: DatasetDbRow): DatasetRow {
  return {
    id: r.id,
    orgId: r.org_id,
    name: r.name,
    description: r.description,
    filter: JSON.parse(r.filter) as Record<string, string>,
    snapshotAt: r.snapshot_at,
    episodeCount: r.episode_count,
    createdBy: r.created_by,
    createdAt: r.created_at,
  };
}

export class SqliteDatasets implements DatasetStore {
  private readonly insert;
  private readonly byId;
  private readonly page;
  private readonly pin;
  private readonly memberRows;

  constructor(
    private readonly db: Db,
    private readonly episodes: SqliteEpisodes,
  ) {
    this.insert = db.prepare(
      'INSERT INTO datasets (id, org_id, name, description, filter, created_by, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)',
    );
    this.byId = db.prepare<[string, string], DatasetDbRow>('SELECT * FROM datasets WHERE org_id = ? AND id = ?');
    this.page = db.prepare<[string, string, number], DatasetDbRow>('SELECT * FROM datasets WHERE org_id = ? AND id > ? ORDER BY id LIMIT ?');
    this.pin = db.prepare('UPDATE datasets SET snapshot_at = ?, episode_count = ? WHERE id = ? AND snapshot_at IS NULL');
    this.memberRows = db.prepare<[string, number, number], EpisodeDbRow>(
      `SELECT e.* FROM dataset_members m CROSS JOIN episodes e ON e.seq = m.episode_seq
       WHERE m.dataset_id = ? AND m.position > ? ORDER BY m.position LIMIT ?`,
    );
  }

  async create(row: Omit<DatasetRow, 'snapshotAt' | 'episodeCount'>): Promise<void> {
    this.insert.run(row.id, row.orgId, row.name, row.description, JSON.stringify(row.filter), row.createdBy, row.createdAt);
  }

  async get(orgId: string, id: string): Promise<DatasetRow | undefined> {
    const r = this.byId.get(orgId, id);
    return r && fromDb(r);
  }

  async list(orgId: string, after: string | null, limit: number): Promise<DatasetRow[]> {
    return this.page.all(orgId, after ?? '', limit).map(fromDb);
  }

  async snapshot(orgId: string, id: string, filter: EpisodeFilter, at: number): Promise<DatasetRow | 'already' | null> {
    const { sql, params } = buildListQuery(orgId, filter, 0, -1, 'e.seq');
    // One IMMEDIATE transaction: membership is exactly the matching episodes at this instant,
    // numbered in index order, and a concurrent second snapshot sees `already`.
    return this.db
      .transaction((): DatasetRow | 'already' | null => {
        const ds = this.byId.get(orgId, id);
        if (!ds) return null;
        if (ds.snapshot_at !== null) return 'already';
        const inserted = this.db
          .prepare(`INSERT INTO dataset_members (dataset_id, position, episode_seq) SELECT ?, ROW_NUMBER() OVER (ORDER BY seq), seq FROM (${sql})`)
          .run(id, ...params).changes;
        this.pin.run(at, inserted, id);
        return fromDb({ ...ds, snapshot_at: at, episode_count: inserted });
      })
      .immediate();
  }

  async members(datasetId: string, afterPos: number, limit: number): Promise<EpisodeRow[]> {
    return this.episodes.hydrate(this.memberRows.all(datasetId, afterPos, limit));
  }
}
