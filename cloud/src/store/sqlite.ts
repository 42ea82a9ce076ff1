import Database from 'better-sqlite3';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Feature, Scope } from '@fleet/protocol';
import { MIGRATIONS } from './migrations.js';
import type {
  ApiKeyRow,
  ApiKeyStore,
  IdempotencyBegin,
  IdempotencyStore,
  MeterStore,
  OrgRow,
  OrgStore,
  Store,
  UsageRow,
} from './types.js';

type Db = Database.Database;

export const DATABASE_FILE = 'cloud.sqlite';

/**
 * Opens (creating if needed) the cloud database under `dataDir` and applies pending migrations.
 * WAL lets the CLI (`fleet-cloud orgs ...`) write while `serve` runs; busy_timeout makes the
 * second writer wait instead of failing.
 */
/** `dataDir` ':memory:' gives a private in-memory database (tests, OpenAPI generation). */
export function openSqliteStore(dataDir: string): SqliteStore {
  const inMemory = dataDir === ':memory:';
  if (!inMemory) mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const db = new Database(inMemory ? ':memory:' : join(dataDir, DATABASE_FILE));
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.pragma('foreign_keys = ON');
  db.pragma('busy_timeout = 5000');
  migrate(db);
  return new SqliteStore(db);
}

function migrate(db: Db): void {
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
      db.prepare('INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)').run(m.version, m.name, Date.now());
    }).immediate();
  }
}

export class SqliteStore implements Store {
  readonly orgs: OrgStore;
  readonly apiKeys: ApiKeyStore;
  readonly idempotency: IdempotencyStore;
  readonly meters: MeterStore;

  constructor(readonly db: Db) {
    this.orgs = new SqliteOrgs(db);
    this.apiKeys = new SqliteApiKeys(db);
    this.idempotency = new SqliteIdempotency(db);
    this.meters = new SqliteMeters(db);
  }

  async ping(): Promise<void> {
    this.db.prepare('SELECT 1').get();
  }

  async close(): Promise<void> {
    if (this.db.open) this.db.close();
  }
}

interface OrgDbRow {
  id: string;
  name: string;
  tier: string;
  created_at: number;
}

class SqliteOrgs implements OrgStore {
  private readonly insert;
  private readonly byId;
  private readonly all;
  private readonly features;
  private readonly limits;
  private readonly updateTier;
  private readonly upsertFeature;
  private readonly deleteFeature;
  private readonly upsertLimit;
  private readonly deleteLimit;

  constructor(private readonly db: Db) {
    this.insert = db.prepare('INSERT INTO orgs (id, name, tier, created_at) VALUES (?, ?, ?, ?)');
    this.byId = db.prepare<[string], OrgDbRow>('SELECT * FROM orgs WHERE id = ?');
    this.all = db.prepare<[], OrgDbRow>('SELECT * FROM orgs ORDER BY created_at, id');
    this.features = db.prepare<[string], { feature: string; enabled: number }>('SELECT feature, enabled FROM org_features WHERE org_id = ?');
    this.limits = db.prepare<[string], { name: string; value: number }>('SELECT name, value FROM org_limits WHERE org_id = ?');
    this.updateTier = db.prepare('UPDATE orgs SET tier = ? WHERE id = ?');
    this.upsertFeature = db.prepare('INSERT INTO org_features (org_id, feature, enabled) VALUES (?, ?, ?) ON CONFLICT (org_id, feature) DO UPDATE SET enabled = excluded.enabled');
    this.deleteFeature = db.prepare('DELETE FROM org_features WHERE org_id = ? AND feature = ?');
    this.upsertLimit = db.prepare('INSERT INTO org_limits (org_id, name, value) VALUES (?, ?, ?) ON CONFLICT (org_id, name) DO UPDATE SET value = excluded.value');
    this.deleteLimit = db.prepare('DELETE FROM org_limits WHERE org_id = ? AND name = ?');
  }

  async create(org: { id: string; name: string; tier: string; createdAt: number }): Promise<void> {
    this.insert.run(org.id, org.name, org.tier, org.createdAt);
  }

  async get(id: string): Promise<OrgRow | undefined> {
    const row = this.byId.get(id);
    return row && this.hydrate(row);
  }

  async list(): Promise<OrgRow[]> {
    return this.all.all().map((r) => this.hydrate(r));
  }

  async setTier(id: string, tier: string): Promise<boolean> {
    return this.updateTier.run(tier, id).changes > 0;
  }

  async setFeature(id: string, feature: Feature, enabled: boolean | null): Promise<boolean> {
    if (!this.byId.get(id)) return false;
    if (enabled === null) this.deleteFeature.run(id, feature);
    else this.upsertFeature.run(id, feature, enabled ? 1 : 0);
    return true;
  }

  async setLimit(id: string, name: string, value: number | null): Promise<boolean> {
    if (!this.byId.get(id)) return false;
    if (value === null) this.deleteLimit.run(id, name);
    else this.upsertLimit.run(id, name, value);
    return true;
  }

  private hydrate(row: OrgDbRow): OrgRow {
    const featureOverrides: Partial<Record<Feature, boolean>> = {};
    for (const f of this.features.all(row.id)) featureOverrides[f.feature as Feature] = f.enabled === 1;
    const limitOverrides: Record<string, number> = {};
    for (const l of this.limits.all(row.id)) limitOverrides[l.name] = l.value;
    return { id: row.id, name: row.name, tier: row.tier, createdAt: row.created_at, featureOverrides, limitOverrides };
  }
}

interface ApiKeyDbRow {
  id: string;
  org_id: string;
  name: string;
  scopes: string;
  key_hash: string;
  created_by: string;
  created_at: number;
  expires_at: number | null;
  revoked_at: number | null;
  last_used_at: number | null;
}

function apiKeyFromDb(r: ApiKeyDbRow): ApiKeyRow {
  return {
    id: r.id,
    orgId: r.org_id,
    name: r.name,
    scopes: JSON.parse(r.scopes) as Scope[],
    keyHash: r.key_hash,
    createdBy: r.created_by,
    createdAt: r.created_at,
    expiresAt: r.expires_at,
    revokedAt: r.revoked_at,
    lastUsedAt: r.last_used_at,
  };
}

class SqliteApiKeys implements ApiKeyStore {
  private readonly insert;
  private readonly byHash;
  private readonly byOrg;
  private readonly byId;
  private readonly revokeStmt;
  private readonly touchStmt;

  constructor(private readonly db: Db) {
    this.insert = db.prepare(
      'INSERT INTO api_keys (id, org_id, name, scopes, key_hash, created_by, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
    );
    this.byHash = db.prepare<[string], ApiKeyDbRow>('SELECT * FROM api_keys WHERE key_hash = ?');
    this.byOrg = db.prepare<[string], ApiKeyDbRow>('SELECT * FROM api_keys WHERE org_id = ? ORDER BY created_at, id');
    this.byId = db.prepare<[string, string], ApiKeyDbRow>('SELECT * FROM api_keys WHERE org_id = ? AND id = ?');
    this.revokeStmt = db.prepare('UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE org_id = ? AND id = ?');
    this.touchStmt = db.prepare('UPDATE api_keys SET last_used_at = MAX(COALESCE(last_used_at, 0), ?) WHERE id = ?');
  }

  async create(row: Omit<ApiKeyRow, 'revokedAt' | 'lastUsedAt'>): Promise<void> {
    this.insert.run(row.id, row.orgId, row.name, JSON.stringify(row.scopes), row.keyHash, row.createdBy, row.createdAt, row.expiresAt);
  }

  async findByHash(keyHash: string): Promise<ApiKeyRow | undefined> {
    const r = this.byHash.get(keyHash);
    return r && apiKeyFromDb(r);
  }

  async list(orgId: string): Promise<ApiKeyRow[]> {
    return this.byOrg.all(orgId).map(apiKeyFromDb);
  }

  async get(orgId: string, id: string): Promise<ApiKeyRow | undefined> {
    const r = this.byId.get(orgId, id);
    return r && apiKeyFromDb(r);
  }

  async revoke(orgId: string, id: string, at: number): Promise<boolean> {
    return this.revokeStmt.run(at, orgId, id).changes > 0;
  }

  async touch(uses: ReadonlyMap<string, number>): Promise<void> {
    if (uses.size === 0) return;
    this.db.transaction(() => {
      for (const [id, at] of uses) this.touchStmt.run(at, id);
    })();
  }
}

interface IdemDbRow {
  fingerprint: string;
  state: 'in_flight' | 'completed';
  status: number | null;
  content_type: string | null;
  body: string | null;
  lease_until: number | null;
  expires_at: number | null;
}

class SqliteIdempotency implements IdempotencyStore {
  private readonly select;
  private readonly claim;
  private readonly completeStmt;
  private readonly releaseStmt;
  private readonly purge;

  constructor(private readonly db: Db) {
    this.select = db.prepare<[string, string], IdemDbRow>('SELECT * FROM idempotency_keys WHERE org_id = ? AND key = ?');
    this.claim = db.prepare(
      `INSERT INTO idempotency_keys (org_id, key, fingerprint, state, lease_until, created_at)
       VALUES (?, ?, ?, 'in_flight', ?, ?)
       ON CONFLICT (org_id, key) DO UPDATE SET fingerprint = excluded.fingerprint, state = 'in_flight',
         status = NULL, content_type = NULL, body = NULL, lease_until = excluded.lease_until,
         expires_at = NULL, created_at = excluded.created_at`,
    );
    this.completeStmt = db.prepare(
      `UPDATE idempotency_keys SET state = 'completed', status = ?, content_type = ?, body = ?, lease_until = NULL, expires_at = ?
       WHERE org_id = ? AND key = ?`,
    );
    this.releaseStmt = db.prepare(`DELETE FROM idempotency_keys WHERE org_id = ? AND key = ? AND state = 'in_flight'`);
    this.purge = db.prepare(
      `DELETE FROM idempotency_keys WHERE (state = 'completed' AND expires_at <= ?) OR (state = 'in_flight' AND lease_until <= ?)`,
    );
  }

  async begin(args: { orgId: string; key: string; fingerprint: string; now: number; leaseMs: number }): Promise<IdempotencyBegin> {
    const { orgId, key, fingerprint, now, leaseMs } = args;
    // One IMMEDIATE transaction: the read and the claim happen under the write lock, so two
    // concurrent requests with one key (even from two processes) cannot both start.
    return this.db
      .transaction((): IdempotencyBegin => {
        const row = this.select.get(orgId, key);
        const live =
          row &&
          ((row.state === 'completed' && (row.expires_at ?? 0) > now) ||
            (row.state === 'in_flight' && (row.lease_until ?? 0) > now));
        if (row && live) {
          if (row.fingerprint !== fingerprint) return { kind: 'mismatch' };
          if (row.state === 'in_flight') return { kind: 'in_flight' };
          return {
            kind: 'replay',
            response: { status: row.status ?? 200, contentType: row.content_type, body: row.body ?? '' },
          };
        }
        this.claim.run(orgId, key, fingerprint, now + leaseMs, now);
        return { kind: 'started' };
      })
      .immediate();
  }

  async complete(args: { orgId: string; key: string; response: { status: number; contentType: string | null; body: string }; now: number; ttlMs: number }): Promise<void> {
    const { orgId, key, response, now, ttlMs } = args;
    this.completeStmt.run(response.status, response.contentType, response.body, now + ttlMs, orgId, key);
  }

  async release(orgId: string, key: string): Promise<void> {
    this.releaseStmt.run(orgId, key);
  }

  async purgeExpired(now: number): Promise<number> {
    return this.purge.run(now, now).changes;
  }
}

class SqliteMeters implements MeterStore {
  private readonly inc;
  private readonly range;

  constructor(db: Db) {
    this.inc = db.prepare(
      'INSERT INTO meters (org_id, meter, day, count) VALUES (?, ?, ?, ?) ON CONFLICT (org_id, day, meter) DO UPDATE SET count = count + excluded.count',
    );
    this.range = db.prepare<[string, string, string], UsageRow>(
      'SELECT meter, day, count FROM meters WHERE org_id = ? AND day >= ? AND day <= ? ORDER BY day, meter',
    );
  }

  async increment(orgId: string, meter: string, day: string, by = 1): Promise<void> {
    this.inc.run(orgId, meter, day, by);
  }

  async list(orgId: string, fromDay: string, toDay: string): Promise<UsageRow[]> {
    return this.range.all(orgId, fromDay, toDay);
  }
}
