import Database from 'better-sqlite3';
import type { Clock } from '@fleet/protocol';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { MIGRATIONS } from './migrations.js';
import { SqliteCommandResults, SqliteEpisodes } from './sqlite-episodes.js';
import { SqliteImports } from './sqlite-imports.js';
import { SqliteOutbox } from './sqlite-outbox.js';
import { SqliteSync } from './sqlite-sync.js';
import { SqliteOperatorContext, SqliteRecording, SqliteRecordingSessions } from './sqlite-recording.js';
import type { AgentStore, CommandResultStore, EpisodeStore, ImportStore, OperatorContextStore, OutboxStore, RecordingSessionStore, RecordingStore, SyncStore } from './types.js';

export const AGENT_DATABASE_FILE = 'agent.sqlite';

/**
 * Opens (creating if needed) `<dataDir>/agent.sqlite` and applies pending migrations. WAL with
 * synchronous=FULL: a commit the agent has acted on (a reply sent, a recorder started) must
 * survive a power cut, and the write rate is a few rows per episode.
 * `dataDir` ':memory:' gives a private in-memory database. `clock` stamps each migration applied.
 */
export function openAgentStore(dataDir: string, clock: Clock): SqliteAgentStore {
  const inMemory = dataDir === ':memory:';
  if (!inMemory) mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const db = new Database(inMemory ? ':memory:' : join(dataDir, AGENT_DATABASE_FILE));
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = FULL');
  db.pragma('foreign_keys = ON');
  db.pragma('busy_timeout = 5000');
  migrate(db, clock);
  return new SqliteAgentStore(db);
}

function migrate(db: Database.Database, clock: Clock): void {
  db.exec('CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL) STRICT');
  const applied = new Set(db.prepare('SELECT version FROM schema_migrations').pluck().all() as number[]);
  for (const m of MIGRATIONS) {
    if (applied.has(m.version)) continue;
    db.transaction(() => {
      if (db.prepare('SELECT 1 FROM schema_migrations WHERE version = ?').get(m.version)) return;
      db.exec(m.sql);
      db.prepare('INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)').run(m.version, m.name, clock.now());
    }).immediate();
  }
}

export class SqliteAgentStore implements AgentStore {
  readonly recording: RecordingStore;
  readonly episodes: EpisodeStore;
  readonly commandResults: CommandResultStore;
  readonly context: OperatorContextStore;
  readonly sessions: RecordingSessionStore;
  readonly outbox: OutboxStore;
  readonly sync: SyncStore;
  readonly imports: ImportStore;

  constructor(private readonly db: Database.Database) {
    this.recording = new SqliteRecording(db);
    this.episodes = new SqliteEpisodes(db);
    this.commandResults = new SqliteCommandResults(db);
    this.context = new SqliteOperatorContext(db);
    this.sessions = new SqliteRecordingSessions(db);
    this.outbox = new SqliteOutbox(db);
    this.sync = new SqliteSync(db);
    this.imports = new SqliteImports(db);
  }

  async close(): Promise<void> {
    if (this.db.open) this.db.close();
  }
}
