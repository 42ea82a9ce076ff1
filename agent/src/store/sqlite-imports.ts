import type Database from 'better-sqlite3';
import type { ImportSourceRow, ImportStore } from './types.js';

type Db = Database.Database;

interface ImportDbRow {
  episode_id: string;
  name: string;
  kind: 'file' | 'directory';
  ino: number;
  size_at_begin: number;
  mtime_ms: number;
  created_at: number;
}

function fromDb(r: ImportDbRow): ImportSourceRow {
  return { episodeId: r.episode_id, name: r.name, kind: r.kind, ino: r.ino, sizeAtBegin: r.size_at_begin, mtimeMs: r.mtime_ms, createdAt: r.created_at };
}

/** Inside the recording's begin transaction (sqlite-recording.ts). */
export function insertImportSource(db: Db, s: ImportSourceRow): void {
  db.prepare(`INSERT INTO imports (episode_id, name, kind, ino, size_at_begin, mtime_ms, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)`).run(
    s.episodeId,
    s.name,
    s.kind,
    s.ino,
    s.sizeAtBegin,
    Math.floor(s.mtimeMs),
    s.createdAt,
  );
}

export class SqliteImports implements ImportStore {
  constructor(private readonly db: Db) {}

  async byEpisode(episodeId: string): Promise<ImportSourceRow | undefined> {
    const r = this.db.prepare('SELECT * FROM imports WHERE episode_id = ?').get(episodeId) as ImportDbRow | undefined;
    return r ? fromDb(r) : undefined;
  }

  async bySource(name: string, ino: number): Promise<ImportSourceRow | undefined> {
    const r = this.db.prepare('SELECT * FROM imports WHERE name = ? AND ino = ? ORDER BY created_at DESC LIMIT 1').get(name, ino) as ImportDbRow | undefined;
    return r ? fromDb(r) : undefined;
  }

  async withSize(sizeBytes: number): Promise<ImportSourceRow[]> {
    // Asked only when a closed entry is about to be imported, so a scan of the episodes is fine.
    const rows = this.db
      .prepare(
        `SELECT i.* FROM imports i JOIN episodes e ON e.id = i.episode_id
         WHERE json_extract(e.manifest, '$.total_bytes') = ? ORDER BY i.created_at DESC, i.episode_id DESC`,
      )
      .all(sizeBytes) as ImportDbRow[];
    return rows.map(fromDb);
  }
}
