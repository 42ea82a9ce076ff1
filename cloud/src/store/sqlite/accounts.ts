import type { Feature } from '@fleet/protocol';
import { apiKeyFromDb, type ApiKeyDbRow } from '../shared/rows.js';
import type { Db } from './db.js';
import type { ApiKeyRow, ApiKeyStore, OrgRow, OrgStore } from '../shared/types.js';

interface OrgDbRow {
  id: string;
  name: string;
  tier: string;
  created_at: number;
}

export class SqliteOrgs implements OrgStore {
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

  async createFirst(org: { id: string; name: string; tier: string; createdAt: number }): Promise<boolean> {
    return this.db
      .transaction(() => {
        if (this.all.get()) return false;
        this.insert.run(org.id, org.name, org.tier, org.createdAt);
        return true;
      })
      .immediate();
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

export class SqliteApiKeys implements ApiKeyStore {
  private readonly insert;
  private readonly byHash;
  private readonly byOrg;
  private readonly byId;
  private readonly revokeStmt;
  private readonly touchStmt;
  private readonly revisionStmt;

  constructor(private readonly db: Db) {
    this.insert = db.prepare(
      'INSERT INTO api_keys (id, org_id, name, scopes, key_hash, created_by, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
    );
    this.byHash = db.prepare<[string], ApiKeyDbRow>('SELECT * FROM api_keys WHERE key_hash = ?');
    this.byOrg = db.prepare<[string], ApiKeyDbRow>('SELECT * FROM api_keys WHERE org_id = ? ORDER BY created_at, id');
    this.byId = db.prepare<[string, string], ApiKeyDbRow>('SELECT * FROM api_keys WHERE org_id = ? AND id = ?');
    this.revokeStmt = db.prepare('UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE org_id = ? AND id = ?');
    this.touchStmt = db.prepare('UPDATE api_keys SET last_used_at = MAX(COALESCE(last_used_at, 0), ?) WHERE id = ?');
    // Bumped by triggers (migration 10) on api_keys, orgs, org_features and org_limits.
    this.revisionStmt = db.prepare<[], number>('SELECT revision FROM auth_revision WHERE id = 1').pluck();
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
    }).immediate();
  }

  async authRevision(): Promise<number> {
    return this.revisionStmt.get()!;
  }
}
