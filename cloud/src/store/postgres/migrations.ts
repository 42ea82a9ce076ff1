import { LOCKS, type PgDb } from './db.js';
import { ACCOUNTS_SCHEMA } from './schema-accounts.js';
import { EPISODES_SCHEMA } from './schema-episodes.js';
import { GRANT_FORWARD_CLAIMS_SCHEMA, SYNC_SCHEMA } from './schema-sync.js';
import { WEBHOOKS_SCHEMA } from './schema-webhooks.js';

/**
 * PostgreSQL schema migrations, numbered like the SQLite ones but separate from them (the two
 * engines' schemas differ in types and indexes). Never edit a migration that has shipped: add the
 * next number. Version 1 is the schema the SQLite migrations 1-10 arrived at.
 */
export const PG_MIGRATIONS: readonly { version: number; name: string; sql: string }[] = [
  {
    version: 1,
    name: 'organizations, keys, robots, episodes, datasets, webhooks, sync',
    sql: [ACCOUNTS_SCHEMA, EPISODES_SCHEMA, WEBHOOKS_SCHEMA, SYNC_SCHEMA].join('\n'),
  },
  {
    version: 2,
    name: 'grant forward claims with a lease (SQLite migration 13)',
    sql: GRANT_FORWARD_CLAIMS_SCHEMA,
  },
  {
    version: 3,
    name: 'idempotency claim tokens (SQLite migration 14)',
    sql: 'ALTER TABLE idempotency_keys ADD COLUMN claim_token TEXT;',
  },
  {
    version: 4,
    name: 'robot list orders: by name and by last seen (SQLite migration 15)',
    sql: `CREATE INDEX robots_by_name ON robots (org_id, name COLLATE "C", id);
      CREATE INDEX robots_by_last_seen ON robots (org_id, (COALESCE(last_seen_at, 0)), id);`,
  },
  {
    version: 5,
    name: 'issued grants: the grants the relay handed to a robot, per episode and destination (SQLite migration 16)',
    sql: `CREATE TABLE issued_grants (
        episode_seq BIGINT NOT NULL,
        destination_id TEXT NOT NULL,
        grant_id TEXT NOT NULL,
        issued_at BIGINT NOT NULL,
        PRIMARY KEY (episode_seq, destination_id, grant_id)
      );
      INSERT INTO issued_grants (episode_seq, destination_id, grant_id, issued_at)
        SELECT episode_seq, destination_id, grant_id, updated_at FROM replicas ON CONFLICT DO NOTHING;`,
  },
  {
    version: 6,
    name: 'robot status order: the robot clock of the last status written (SQLite migration 17)',
    sql: 'ALTER TABLE robots ADD COLUMN status_at BIGINT',
  },
  {
    version: 7,
    name: 'schema parity with SQLite (found by the schema drift test): a route names an indexed episode (SQLite migration 18)',
    // NOT VALID: rows written from now on are checked; existing rows are not scanned, so the
    // migration takes no time on a large index and cannot fail on it.
    sql: 'ALTER TABLE routes ADD CONSTRAINT routes_episode_seq_fkey FOREIGN KEY (episode_seq) REFERENCES episodes (seq) NOT VALID',
  },
];

/**
 * Applies pending migrations, each in its own transaction, under an advisory lock: replicas that
 * start together wait for the first one and then find nothing left to do.
 */
export async function migratePg(db: PgDb): Promise<void> {
  const client = await db.pool.connect();
  try {
    await client.query('SELECT pg_advisory_lock($1)', [LOCKS.migrations]);
    try {
      await client.query('CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)');
      const applied = new Set((await client.query<{ version: number }>('SELECT version FROM schema_migrations')).rows.map((r) => r.version));
      for (const m of PG_MIGRATIONS) {
        if (applied.has(m.version)) continue;
        await client.query('BEGIN');
        try {
          await client.query(m.sql);
          // The database's own clock: the record of when a migration ran, not a time the cloud acts on.
          await client.query('INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)', [m.version, m.name]);
          await client.query('COMMIT');
        } catch (err) {
          await client.query('ROLLBACK');
          throw err;
        }
      }
    } finally {
      await client.query('SELECT pg_advisory_unlock($1)', [LOCKS.migrations]);
    }
  } finally {
    client.release();
  }
}

/** The newest migration this build knows; a database ahead of it was migrated by a newer build. */
export const PG_SCHEMA_VERSION = PG_MIGRATIONS[PG_MIGRATIONS.length - 1]!.version;
