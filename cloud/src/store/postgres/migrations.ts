import { LOCKS, type PgDb } from './db.js';
import { schemaSql } from '../shared/schema.js';

/** What PostgreSQL's first migration adds to the shared tables: the auth revision's row and triggers, the attributes' statistics. */
const FIRST_AFTER = `
  INSERT INTO auth_revision (id, revision) VALUES (1, 0);
  -- Bumped on every change to what authentication reads (api_keys.last_used_at excluded),
  -- once per statement.
  CREATE FUNCTION bump_auth_revision() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN
    UPDATE auth_revision SET revision = revision + 1 WHERE id = 1;
    RETURN NULL;
  END $$;
  CREATE TRIGGER orgs_auth_revision AFTER INSERT OR UPDATE OR DELETE ON orgs FOR EACH STATEMENT EXECUTE FUNCTION bump_auth_revision();
  CREATE TRIGGER org_features_auth_revision AFTER INSERT OR UPDATE OR DELETE ON org_features FOR EACH STATEMENT EXECUTE FUNCTION bump_auth_revision();
  CREATE TRIGGER org_limits_auth_revision AFTER INSERT OR UPDATE OR DELETE ON org_limits FOR EACH STATEMENT EXECUTE FUNCTION bump_auth_revision();
  CREATE TRIGGER api_keys_auth_revision_write AFTER INSERT OR DELETE ON api_keys FOR EACH STATEMENT EXECUTE FUNCTION bump_auth_revision();
  CREATE TRIGGER api_keys_auth_revision_update AFTER UPDATE OF id, org_id, name, scopes, key_hash, created_by, created_at, expires_at, revoked_at ON api_keys FOR EACH STATEMENT EXECUTE FUNCTION bump_auth_revision();
  -- How many attribute rows one (layer, key, value) has, as a whole: without it the planner
  -- multiplies the selectivity of the key and of the value as if independent (a key with 5
  -- values among keys with 1000 was estimated at a quarter of its rows) and misjudges which
  -- condition to drive by.
  CREATE STATISTICS episode_attrs_key_value (mcv, dependencies) ON layer, key, value FROM episode_attrs;
`;

/**
 * PostgreSQL's numbered schema migrations. Tables, columns and indexes come from the schema both
 * engines share (shared/schema.ts); a step adds here only what is PostgreSQL's own: the trigger
 * function, extended statistics, data carried across, a NOT VALID constraint. Version 1 is
 * everything SQLite's migrations 1-12 arrived at; each later SQLite migration has one here
 * (`postgresVersion`). Never change a step that has shipped: add the next one.
 */
const STEPS: readonly { name: string; after?: string }[] = [
  { name: 'organizations, keys, robots, episodes, datasets, webhooks, sync', after: FIRST_AFTER },
  { name: 'grant forward claims with a lease (SQLite migration 13)' },
  { name: 'idempotency claim tokens (SQLite migration 14)' },
  { name: 'robot list orders: by name and by last seen (SQLite migration 15)' },
  {
    name: 'issued grants: the grants the relay handed to a robot, per episode and destination (SQLite migration 16)',
    after: 'INSERT INTO issued_grants (episode_seq, destination_id, grant_id, issued_at) SELECT episode_seq, destination_id, grant_id, updated_at FROM replicas ON CONFLICT DO NOTHING;',
  },
  { name: 'robot status order: the robot clock of the last status written (SQLite migration 17)' },
  {
    name: 'schema parity with SQLite (found by the schema drift test): a route names an indexed episode (SQLite migration 18)',
    // NOT VALID: rows written from now on are checked; existing rows are not scanned, so the
    // migration takes no time on a large index and cannot fail on it.
    after: 'ALTER TABLE routes ADD CONSTRAINT routes_episode_seq_fkey FOREIGN KEY (episode_seq) REFERENCES episodes (seq) NOT VALID;',
  },
  {
    name: 'enrolled robots counted per organization, kept by a trigger (SQLite migration 19)',
    after: `
  CREATE FUNCTION count_enrolled_robots() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.deenrolled_at IS NULL THEN
      UPDATE robot_counts SET enrolled = enrolled - 1 WHERE org_id = OLD.org_id;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.deenrolled_at IS NULL THEN
      INSERT INTO robot_counts (org_id, enrolled) VALUES (NEW.org_id, 1) ON CONFLICT (org_id) DO UPDATE SET enrolled = robot_counts.enrolled + 1;
    END IF;
    RETURN NULL;
  END $$;
  CREATE TRIGGER robots_count_insert_delete AFTER INSERT OR DELETE ON robots FOR EACH ROW EXECUTE FUNCTION count_enrolled_robots();
  CREATE TRIGGER robots_count_update AFTER UPDATE OF org_id, deenrolled_at ON robots FOR EACH ROW EXECUTE FUNCTION count_enrolled_robots();
  INSERT INTO robot_counts (org_id, enrolled) SELECT org_id, COUNT(*) FROM robots WHERE deenrolled_at IS NULL GROUP BY org_id;`,
  },
];

export const PG_MIGRATIONS: readonly { version: number; name: string; sql: string }[] = STEPS.map((step, i) => ({
  version: i + 1,
  name: step.name,
  sql: [schemaSql('postgres', i + 1), step.after ?? ''].join('\n'),
}));

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
