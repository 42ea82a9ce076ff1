import { LOCKS, type PgDb, type Sql } from './db.js';
import { attrText } from './episodes.js';
import { storedKeys } from '../shared/episode-lines.js';
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
const STEPS: readonly { name: string; after?: string; backfill?: (sql: Sql) => Promise<void> }[] = [
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
  {
    name: 'the key index: which top-level metadata and annotation keys each episode has (SQLite migration 20)',
    // As for the attributes: how many rows one (layer, key) has, as a whole.
    after: 'CREATE STATISTICS episode_attr_keys_layer_key (mcv, dependencies) ON layer, key FROM episode_attr_keys;',
    backfill: backfillAttrKeys,
  },
];

/** Episodes read per page of the key index's backfill. */
const BACKFILL_PAGE = 1_000;

/**
 * The keys of the episodes indexed before the key index, computed by the same code the writes
 * use. Not in SQL: PostgreSQL's JSON functions refuse a text holding `\u0000` anywhere (a value's
 * NUL would fail the whole migration), and keys are stored escaped (attrText) as the writes store them.
 */
async function backfillAttrKeys(sql: Sql): Promise<void> {
  for (let after = 0; ; ) {
    const rows = (
      await sql.query<{ seq: number; org_id: string; metadata: string; annotations: string }>(
        'SELECT seq, org_id, metadata, annotations FROM episodes WHERE seq > $1 ORDER BY seq LIMIT $2',
        [after, BACKFILL_PAGE],
      )
    ).rows;
    const cols: [string[], string[], string[], number[]] = [[], [], [], []];
    for (const r of rows) {
      for (const [layer, key] of storedKeys(r.metadata, r.annotations)) {
        cols[0].push(r.org_id);
        cols[1].push(layer);
        cols[2].push(attrText(key));
        cols[3].push(Number(r.seq));
      }
    }
    if (cols[3].length > 0) {
      await sql.query(
        'INSERT INTO episode_attr_keys (org_id, layer, key, seq) SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int8[]) ON CONFLICT DO NOTHING',
        cols,
      );
    }
    if (rows.length < BACKFILL_PAGE) return;
    after = Number(rows[rows.length - 1]!.seq);
  }
}

/** `backfill` runs after `sql`, in the same transaction: data a statement cannot carry across. */
export const PG_MIGRATIONS: readonly { version: number; name: string; sql: string; backfill?: (sql: Sql) => Promise<void> }[] = STEPS.map((step, i) => ({
  version: i + 1,
  name: step.name,
  sql: [schemaSql('postgres', i + 1), step.after ?? ''].join('\n'),
  ...(step.backfill ? { backfill: step.backfill } : {}),
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
          await m.backfill?.(client);
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
