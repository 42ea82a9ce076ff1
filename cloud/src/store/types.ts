import type { Feature, Scope } from '@fleet/protocol';

/**
 * The cloud's durable state, behind an async interface so that a second implementation
 * (PostgreSQL for the multi-replica deployment) is a module, not a rewrite. Timestamps are
 * milliseconds since the epoch; every function that reads tenant data takes the org id.
 */
export interface Store {
  readonly orgs: OrgStore;
  readonly apiKeys: ApiKeyStore;
  readonly idempotency: IdempotencyStore;
  readonly meters: MeterStore;
  /** Cheap liveness probe for /readyz. */
  ping(): Promise<void>;
  close(): Promise<void>;
}

export interface OrgRow {
  id: string;
  name: string;
  tier: string;
  createdAt: number;
  /** Per-organization feature overrides; absent means the tier decides. */
  featureOverrides: Partial<Record<Feature, boolean>>;
  /** Per-organization limit overrides; absent means the tier decides. */
  limitOverrides: Record<string, number>;
}

export interface OrgStore {
  create(org: { id: string; name: string; tier: string; createdAt: number }): Promise<void>;
  get(id: string): Promise<OrgRow | undefined>;
  list(): Promise<OrgRow[]>;
  setTier(id: string, tier: string): Promise<boolean>;
  /** `enabled: null` removes the override so the tier decides again. */
  setFeature(id: string, feature: Feature, enabled: boolean | null): Promise<boolean>;
  setLimit(id: string, name: string, value: number | null): Promise<boolean>;
}

export interface ApiKeyRow {
  id: string;
  orgId: string;
  name: string;
  scopes: Scope[];
  keyHash: string;
  createdBy: string;
  createdAt: number;
  expiresAt: number | null;
  revokedAt: number | null;
  lastUsedAt: number | null;
}

export interface ApiKeyStore {
  create(row: Omit<ApiKeyRow, 'revokedAt' | 'lastUsedAt'>): Promise<void>;
  findByHash(keyHash: string): Promise<ApiKeyRow | undefined>;
  list(orgId: string): Promise<ApiKeyRow[]>;
  get(orgId: string, id: string): Promise<ApiKeyRow | undefined>;
  /** Revokes once; a second revoke keeps the first time. Returns false for an unknown id. */
  revoke(orgId: string, id: string, at: number): Promise<boolean>;
  /** Records last use in one batch; never moves a key's last_used_at backwards. */
  touch(uses: ReadonlyMap<string, number>): Promise<void>;
}

export interface StoredResponse {
  status: number;
  contentType: string | null;
  body: string;
}

export type IdempotencyBegin =
  | { kind: 'started' }
  | { kind: 'replay'; response: StoredResponse }
  | { kind: 'mismatch' }
  | { kind: 'in_flight' };

export interface IdempotencyStore {
  /**
   * Claims `key` for a request with `fingerprint`, or says why not. A claim whose lease ran out
   * (its process died mid-request) may be taken over; an expired completed entry is replaced.
   */
  begin(args: { orgId: string; key: string; fingerprint: string; now: number; leaseMs: number }): Promise<IdempotencyBegin>;
  complete(args: { orgId: string; key: string; response: StoredResponse; now: number; ttlMs: number }): Promise<void>;
  /** Drops a claim without storing a response, so that a retry runs again. */
  release(orgId: string, key: string): Promise<void>;
  purgeExpired(now: number): Promise<number>;
}

export interface UsageRow {
  meter: string;
  day: string;
  count: number;
}

export interface MeterStore {
  increment(orgId: string, meter: string, day: string, by?: number): Promise<void>;
  list(orgId: string, fromDay: string, toDay: string): Promise<UsageRow[]>;
}
