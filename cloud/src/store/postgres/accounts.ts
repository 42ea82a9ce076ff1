import type { Feature } from '@fleet/protocol';
import { apiKeyFromDb, type ApiKeyDbRow } from '../shared/rows.js';
import type { ApiKeyRow, ApiKeyStore, OrgRow, OrgStore } from '../shared/types.js';
import type { PgDb } from './db.js';

interface OrgDbRow {
  id: string;
  name: string;
  tier: string;
  created_at: number;
  features: { feature: string; enabled: boolean }[] | null;
  limits: { name: string; value: number }[] | null;
}

/** An organization with its overrides, in one statement. */
const ORG_SELECT = `
  SELECT o.id, o.name, o.tier, o.created_at,
    (SELECT json_agg(json_build_object('feature', f.feature, 'enabled', f.enabled)) FROM org_features f WHERE f.org_id = o.id) AS features,
    (SELECT json_agg(json_build_object('name', l.name, 'value', l.value)) FROM org_limits l WHERE l.org_id = o.id) AS limits
  FROM orgs o`;

function orgFromDb(row: OrgDbRow): OrgRow {
  const featureOverrides: Partial<Record<Feature, boolean>> = {};
  for (const f of row.features ?? []) featureOverrides[f.feature as Feature] = f.enabled;
  const limitOverrides: Record<string, number> = {};
  for (const l of row.limits ?? []) limitOverrides[l.name] = l.value;
  return { id: row.id, name: row.name, tier: row.tier, createdAt: row.created_at, featureOverrides, limitOverrides };
}

export class PgOrgs implements OrgStore {
  constructor(private readonly db: PgDb) {}

  async create(org: { id: string; name: string; tier: string; createdAt: number }): Promise<void> {
    await this.db.query('INSERT INTO orgs (id, name, tier, created_at) VALUES ($1, $2, $3, $4)', [org.id, org.name, org.tier, org.createdAt]);
  }

  async createFirst(org: { id: string; name: string; tier: string; createdAt: number }): Promise<boolean> {
    // Replicas starting together on an empty database: the table lock makes the check and the
    // insert one step, so exactly one of them creates the first organization.
    return this.db.tx(async (sql) => {
      await sql.query('LOCK TABLE orgs IN SHARE ROW EXCLUSIVE MODE');
      const any = await sql.query('SELECT 1 FROM orgs LIMIT 1');
      if (any.rowCount) return false;
      await sql.query('INSERT INTO orgs (id, name, tier, created_at) VALUES ($1, $2, $3, $4)', [org.id, org.name, org.tier, org.createdAt]);
      return true;
    });
  }

  async get(id: string): Promise<OrgRow | undefined> {
    const row = await this.db.one<OrgDbRow>(`${ORG_SELECT} WHERE o.id = $1`, [id]);
    return row && orgFromDb(row);
  }

  async list(): Promise<OrgRow[]> {
    return (await this.db.many<OrgDbRow>(`${ORG_SELECT} ORDER BY o.created_at, o.id`)).map(orgFromDb);
  }

  async setTier(id: string, tier: string): Promise<boolean> {
    return ((await this.db.query('UPDATE orgs SET tier = $1 WHERE id = $2', [tier, id])).rowCount ?? 0) > 0;
  }

  async setFeature(id: string, feature: Feature, enabled: boolean | null): Promise<boolean> {
    return this.db.tx(async (sql) => {
      if (!(await sql.query('SELECT 1 FROM orgs WHERE id = $1', [id])).rowCount) return false;
      if (enabled === null) await sql.query('DELETE FROM org_features WHERE org_id = $1 AND feature = $2', [id, feature]);
      else
        await sql.query(
          'INSERT INTO org_features (org_id, feature, enabled) VALUES ($1, $2, $3) ON CONFLICT (org_id, feature) DO UPDATE SET enabled = excluded.enabled',
          [id, feature, enabled],
        );
      return true;
    });
  }

  async setLimit(id: string, name: string, value: number | null): Promise<boolean> {
    return this.db.tx(async (sql) => {
      if (!(await sql.query('SELECT 1 FROM orgs WHERE id = $1', [id])).rowCount) return false;
      if (value === null) await sql.query('DELETE FROM org_limits WHERE org_id = $1 AND name = $2', [id, name]);
      else
        await sql.query('INSERT INTO org_limits (org_id, name, value) VALUES ($1, $2, $3) ON CONFLICT (org_id, name) DO UPDATE SET value = excluded.value', [
          id,
          name,
          value,
        ]);
      return true;
    });
  }
}

export class PgApiKeys implements ApiKeyStore {
  constructor(private readonly db: PgDb) {}

  async create(row: Omit<ApiKeyRow, 'revokedAt' | 'lastUsedAt'>): Promise<void> {
    await this.db.query(
      'INSERT INTO api_keys (id, org_id, name, scopes, key_hash, created_by, created_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)',
      [row.id, row.orgId, row.name, JSON.stringify(row.scopes), row.keyHash, row.createdBy, row.createdAt, row.expiresAt],
    );
  }

  async findByHash(keyHash: string): Promise<ApiKeyRow | undefined> {
    const r = await this.db.one<ApiKeyDbRow>('SELECT * FROM api_keys WHERE key_hash = $1', [keyHash]);
    return r && apiKeyFromDb(r);
  }

  async list(orgId: string): Promise<ApiKeyRow[]> {
    return (await this.db.many<ApiKeyDbRow>('SELECT * FROM api_keys WHERE org_id = $1 ORDER BY created_at, id', [orgId])).map(apiKeyFromDb);
  }

  async get(orgId: string, id: string): Promise<ApiKeyRow | undefined> {
    const r = await this.db.one<ApiKeyDbRow>('SELECT * FROM api_keys WHERE org_id = $1 AND id = $2', [orgId, id]);
    return r && apiKeyFromDb(r);
  }

  async revoke(orgId: string, id: string, at: number): Promise<boolean> {
    const r = await this.db.query('UPDATE api_keys SET revoked_at = COALESCE(revoked_at, $1) WHERE org_id = $2 AND id = $3', [at, orgId, id]);
    return (r.rowCount ?? 0) > 0;
  }

  async touch(uses: ReadonlyMap<string, number>): Promise<void> {
    if (uses.size === 0) return;
    // One statement for the batch; GREATEST never moves a key's last use backwards.
    await this.db.query(
      `UPDATE api_keys k SET last_used_at = GREATEST(COALESCE(k.last_used_at, 0), u.at)
       FROM unnest($1::text[], $2::bigint[]) AS u(id, at) WHERE k.id = u.id`,
      [[...uses.keys()], [...uses.values()]],
    );
  }

  async authRevision(): Promise<number> {
    const r = await this.db.one<{ revision: number }>('SELECT revision FROM auth_revision WHERE id = 1');
    return r!.revision;
  }
}
