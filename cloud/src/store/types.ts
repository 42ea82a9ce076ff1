import type { Feature, RecordingState, Scope } from '@fleet/protocol';

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
  readonly robots: RobotStore;
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
  /** Creates `org` only if there is no organization at all, atomically across processes. */
  createFirst(org: { id: string; name: string; tier: string; createdAt: number }): Promise<boolean>;
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

export interface EnrollmentTokenRow {
  id: string;
  orgId: string;
  tokenHash: string;
  namePrefix: string | null;
  maxUses: number;
  uses: number;
  expiresAt: number;
  createdBy: string;
  createdAt: number;
}

export interface RobotRow {
  id: string;
  orgId: string;
  name: string;
  platform: string | null;
  runtimeVersion: string | null;
  capabilities: string[];
  mqttPasswordHash: string;
  enrollmentTokenId: string;
  connected: boolean;
  recordingState: RecordingState | null;
  lastSeenAt: number | null;
  createdAt: number;
}

export type EnrollOutcome =
  | { kind: 'enrolled'; robot: RobotRow }
  | { kind: 'token_invalid' | 'token_expired' | 'token_used_up' }
  | { kind: 'robot_limit'; limit: number };

export interface RobotStatusUpdate {
  connected: boolean;
  runtimeVersion?: string;
  platform?: string;
  capabilities?: string[];
  recordingState?: RecordingState;
  seenAt: number;
}

export interface RobotStore {
  createEnrollmentToken(row: Omit<EnrollmentTokenRow, 'uses'>): Promise<void>;
  /**
   * In one transaction: checks the token (known, unexpired, uses left), the organization's robot
   * limit, takes one use and inserts the robot built by `build` (which gets the name index).
   */
  enroll(args: {
    tokenHash: string;
    now: number;
    robotLimit: (orgId: string) => Promise<number | undefined> | number | undefined;
    build: (token: EnrollmentTokenRow, ordinal: number) => Omit<RobotRow, 'orgId' | 'enrollmentTokenId'>;
  }): Promise<EnrollOutcome>;
  get(orgId: string, id: string): Promise<RobotRow | undefined>;
  /** Not scoped: only the MQTT broker's authentication and the robot link use it. */
  getById(id: string): Promise<RobotRow | undefined>;
  /** Keyset page ordered by id. */
  list(orgId: string, after: string | null, limit: number): Promise<RobotRow[]>;
  updateStatus(id: string, update: RobotStatusUpdate): Promise<void>;
  /** At start of the embedded broker nobody is connected yet. */
  markAllDisconnected(): Promise<void>;
}
