import Database from 'better-sqlite3';
import type { Clock, TimeSource } from '@fleet/protocol';
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { MIGRATIONS } from './migrations.js';
import { SqliteApiKeys, SqliteOrgs } from './accounts.js';
import type { Db } from './db.js';
import { SqliteIdempotency } from './idempotency.js';
import { SqliteMeters } from './meters.js';
import { SqliteRobots } from './robots.js';
import { SqliteEpisodes } from './episodes.js';
import { SqliteEvents } from './events.js';
import { SqliteDatasets } from './datasets.js';
import { BackgroundThread } from './background-thread.js';
import { SqliteWebhooks } from './webhooks.js';
import { SqliteSync } from './sync.js';
import { SqliteGauges } from './gauges.js';
import { StoreOfParts, type Store } from '../shared/types.js';

export const DATABASE_FILE = 'cloud.sqlite';
/** How often the background thread checkpoints the WAL of a serving process. */
const CHECKPOINT_EVERY_MS = 200;
/** SQLite's own `wal_autocheckpoint`, in WAL pages. */
const SQLITE_DEFAULT_CHECKPOINT_PAGES = 1000;

/**
 * Opens (creating if needed) the cloud database under `dataDir` and applies pending migrations.
 * WAL lets the CLI (`fleet-cloud orgs ...`) write while `serve` runs; busy_timeout makes the
 * second writer wait instead of failing.
 */
/** `dataDir` ':memory:' gives a private in-memory database (tests, OpenAPI generation). */
export function openSqliteStore(dataDir: string, opts: TimeSource & { create?: boolean }): SqliteStore {
  const inMemory = dataDir === ':memory:';
  const file = join(dataDir, DATABASE_FILE);
  // Only `serve` creates a database: an administration command pointed at the wrong directory
  // must say so instead of writing an organization into a fresh, empty index nobody serves.
  if (!inMemory && opts.create === false && !existsSync(file)) throw new MissingDatabaseError(dataDir, file);
  if (!inMemory) mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const db = new Database(inMemory ? ':memory:' : file, { fileMustExist: !inMemory && opts.create === false });
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.pragma('foreign_keys = ON');
  db.pragma('busy_timeout = 5000');
  migrate(db, opts.clock);
  return new SqliteStore(db, { clock: opts.clock, scheduler: opts.scheduler });
}

/** `openSqliteStore(dir, { create: false, … })` on a directory without a database. */
export class MissingDatabaseError extends Error {
  constructor(
    readonly dataDir: string,
    readonly file: string,
  ) {
    super(`no database in ${dataDir} (${file} does not exist); check --data-dir, or run \`fleet-cloud serve --data-dir ${dataDir}\` once to create it`);
    this.name = 'MissingDatabaseError';
  }
}

function migrate(db: Db, clock: Clock): void {
  db.exec('CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL) STRICT');
  const applied = new Set(
    db.prepare('SELECT version FROM schema_migrations').pluck().all() as number[],
  );
  for (const m of MIGRATIONS) {
    if (applied.has(m.version)) continue;
    // IMMEDIATE: two processes starting on one data dir must not both apply a migration.
    db.transaction(() => {
      const again = db.prepare('SELECT 1 FROM schema_migrations WHERE version = ?').get(m.version);
      if (again) return;
      db.exec(m.sql);
      m.backfill?.(db);
      db.prepare('INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)').run(m.version, m.name, clock.now());
    }).immediate();
  }
}

export class SqliteStore extends StoreOfParts implements Store {
  constructor(
    readonly db: Db,
    time: TimeSource,
  ) {
    const episodes = new SqliteEpisodes(db);
    const thread = db.memory ? null : new BackgroundThread(db.name);
    super({
      orgs: new SqliteOrgs(db), apiKeys: new SqliteApiKeys(db), idempotency: new SqliteIdempotency(db), meters: new SqliteMeters(db),
      robots: new SqliteRobots(db), episodes, datasets: new SqliteDatasets(db, episodes, time.clock, time.scheduler, thread),
      webhooks: new SqliteWebhooks(db), events: new SqliteEvents(db), sync: new SqliteSync(db), gauges: new SqliteGauges(db),
    });
    this.thread = thread;
  }

  private readonly thread: BackgroundThread | null;

  /**
   * Starts the background thread: a snapshot's first read then waits for no thread's start, and
   * the thread checkpoints the WAL (PASSIVE, every CHECKPOINT_EVERY_MS) so this connection's
   * commits do not, on the event loop (a snapshot of 1M members leaves ~100 MB of WAL, which no
   * checkpoint can pass while its read transaction is open: a size threshold here would copy it
   * all inside the next commit). Should the thread stop unasked, this connection checkpoints
   * again as SQLite does by default.
   */
  startBackground(): void {
    if (!this.thread) return;
    this.db.pragma('wal_autocheckpoint = 0');
    this.thread.warm({
      checkpointEveryMs: CHECKPOINT_EVERY_MS,
      onCheckpointsStopped: () => {
        if (this.db.open) this.db.pragma(`wal_autocheckpoint = ${SQLITE_DEFAULT_CHECKPOINT_PAGES}`);
      },
    });
  }

  async checkSecretKey(fingerprint: string): Promise<'recorded' | 'same' | 'different'> {
    return this.db
      .transaction((): 'recorded' | 'same' | 'different' => {
        const row = this.db.prepare<[], { value: string }>("SELECT value FROM cloud_settings WHERE name = 'secret_key_fingerprint'").get();
        if (row) return row.value === fingerprint ? 'same' : 'different';
        this.db.prepare("INSERT INTO cloud_settings (name, value) VALUES ('secret_key_fingerprint', ?)").run(fingerprint);
        return 'recorded';
      })
      .immediate();
  }

  async ping(): Promise<void> {
    this.db.prepare('SELECT 1').get();
  }

  async close(): Promise<void> {
    await (this.datasets as SqliteDatasets).close();
    if (this.db.open) this.db.close();
  }
}
