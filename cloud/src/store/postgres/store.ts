import { StoreOfParts, type Store } from '../shared/types.js';
import { PgApiKeys, PgOrgs } from './accounts.js';
import { PgDb } from './db.js';
import { PgDatasets } from './datasets.js';
import { PgEpisodes } from './episodes.js';
import { PgEvents } from './events.js';
import { PgGauges } from './gauges.js';
import { migratePg } from './migrations.js';
import { PgIdempotency } from './idempotency.js';
import { PgCounters, PgMeters } from './meters.js';
import { PgRobots } from './robots.js';
import { PgSync } from './sync.js';
import { PgWebhooks } from './webhooks.js';

/**
 * The store on PostgreSQL: the same interface as the SQLite store, for several cloud replicas
 * sharing one database. Each replica holds a small pool; every cross-replica guarantee (claims,
 * cursors, idempotency, caches) lives in the database, never in one process's memory.
 */
export class PgStore extends StoreOfParts implements Store {
  constructor(readonly db: PgDb) {
    const episodes = new PgEpisodes(db);
    super({
      orgs: new PgOrgs(db), apiKeys: new PgApiKeys(db), idempotency: new PgIdempotency(db), meters: new PgMeters(db),
      robots: new PgRobots(db), episodes, datasets: new PgDatasets(db, episodes),
      webhooks: new PgWebhooks(db), events: new PgEvents(db), sync: new PgSync(db), gauges: new PgGauges(db),
      sharedCounters: new PgCounters(db),
    });
  }

  async checkSecretKey(fingerprint: string): Promise<'recorded' | 'same' | 'different'> {
    // The first replica's insert wins; every other one compares with what it wrote.
    const inserted = await this.db.query("INSERT INTO cloud_settings (name, value) VALUES ('secret_key_fingerprint', $1) ON CONFLICT (name) DO NOTHING", [fingerprint]);
    if (inserted.rowCount) return 'recorded';
    const row = await this.db.one<{ value: string }>("SELECT value FROM cloud_settings WHERE name = 'secret_key_fingerprint'");
    return row?.value === fingerprint ? 'same' : 'different';
  }

  async ping(): Promise<void> {
    await this.db.query('SELECT 1');
  }

  async close(): Promise<void> {
    await this.db.close();
  }
}

/** The database has no fleet schema and the caller asked not to create one. */
export class MissingPgSchemaError extends Error {
  constructor(readonly where: string) {
    super(`no fleet schema in the PostgreSQL database ${where}; check --database-url, or run \`fleet-cloud serve --database-url ...\` once to create it`);
    this.name = 'MissingPgSchemaError';
  }
}

/** The URL without its password, for messages and logs. */
export function redactDatabaseUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return 'postgres://(unparsable url)';
  }
}

/** Connects and applies pending migrations (only `create: false` refuses a database without the schema). */
export async function openPgStore(url: string, opts: { create?: boolean; poolSize?: number } = {}): Promise<PgStore> {
  const db = new PgDb(url, { max: opts.poolSize });
  try {
    if (opts.create === false) {
      const exists = await db.one<{ t: string | null }>("SELECT to_regclass('schema_migrations')::text AS t");
      if (!exists?.t) throw new MissingPgSchemaError(redactDatabaseUrl(url));
    }
    await migratePg(db);
  } catch (err) {
    await db.close();
    throw err;
  }
  return new PgStore(db);
}
