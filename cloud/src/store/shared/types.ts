import type { EpisodeOutcome, EpisodeReport, Feature, LocalReplicaState, RecordingState, ReplicaState, Scope } from '@fleet/protocol';
import type { LoggedEvent, RobotPresence } from '../../rules/events.js';
import type { SyncStore } from './sync-types.js';
import type { RobotListQuery } from './robot-list-query.js';
import type { EpisodeLineRow } from './episode-lines.js';

/** The parts of a store, each built by the engine on its own connection. */
export interface StoreParts {
  readonly orgs: OrgStore;
  readonly apiKeys: ApiKeyStore;
  readonly idempotency: IdempotencyStore;
  readonly meters: MeterStore;
  readonly robots: RobotStore;
  readonly episodes: EpisodeStore;
  readonly datasets: DatasetStore;
  readonly webhooks: WebhookStore;
  /** The event log, read by the event stream (webhooks read it through their fan-out). */
  readonly events: EventStore;
  /** Cloud sync: destinations, routing rules, routes, replicas, sync health. */
  readonly sync: SyncStore;
  /** Whole-service counts read when /metrics is scraped. */
  readonly gauges: GaugeStore;
  /**
   * Request-rate counters that every replica shares (PostgreSQL). Absent on SQLite, where one
   * process serves the database and counts in its own memory.
   */
  readonly sharedCounters?: SharedCounterStore;
}

/**
 * The cloud's durable state, behind an async interface so that a second implementation
 * (PostgreSQL for the multi-replica deployment) is a module, not a rewrite. Timestamps are
 * milliseconds since the epoch; every function that reads tenant data takes the org id.
 */
export interface Store extends StoreParts {
  /**
   * Records the fingerprint of the key that seals stored secrets on first use; afterwards says
   * whether `fingerprint` is the recorded one (`different`: this process has another key than
   * the one the stored secrets were sealed with).
   */
  checkSecretKey(fingerprint: string): Promise<'recorded' | 'same' | 'different'>;
  /** Cheap liveness probe for /readyz. */
  ping(): Promise<void>;
  /**
   * What a serving process starts besides the connection (SQLite: the background thread that
   * checkpoints the WAL and reads snapshots' memberships); administration commands do not.
   */
  startBackground?(): void;
  close(): Promise<void>;
}

/**
 * The base of each engine's store: it holds the parts the engine built, so the list of parts is
 * the interface above and is not written again in each engine.
 */
export const StoreOfParts = class {
  constructor(parts: StoreParts) {
    Object.assign(this, parts);
  }
} as new (parts: StoreParts) => StoreParts;

/** Fixed-window counters keyed by a string (per key, per organization, per client address). */
export interface SharedCounterStore {
  /**
   * Counts one hit on `key`: a window starts at the first hit and lasts `windowMs`; a hit after
   * it starts the next window at 1. Returns the count in the current window and its start.
   */
  hit(key: string, now: number, windowMs: number): Promise<{ count: number; windowStart: number }>;
  /** Drops counters whose window started before `before`. */
  purge(before: number): Promise<number>;
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
  /**
   * A number that changes with every committed change, by any writer, to what authentication
   * reads: api keys (not their last use), organizations, their feature and limit overrides.
   * Caches of keys and organizations are valid while it stays the same.
   */
  authRevision(): Promise<number>;
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

/** Who holds an in-flight Idempotency-Key claim: the token its `begin` was given. */
export interface IdempotencyClaim {
  orgId: string;
  key: string;
  token: string;
}

export interface IdempotencyStore {
  /**
   * Claims `key` for a request with `fingerprint`, or says why not. The claim lasts `leaseMs`
   * unless renewed; one whose lease ran out (its process died mid-request) may be taken over; an
   * expired completed entry is replaced. `token` names the holder: only it completes, releases
   * or renews the claim.
   */
  begin(args: { orgId: string; key: string; token: string; fingerprint: string; now: number; leaseMs: number }): Promise<IdempotencyBegin>;
  /** Stores the response of the holder of `token`; false (nothing stored) when another request took the key over. */
  complete(args: IdempotencyClaim & { response: StoredResponse; now: number; ttlMs: number }): Promise<boolean>;
  /** Drops the holder's claim without storing a response, so that a retry runs again; never another holder's. */
  release(claim: IdempotencyClaim): Promise<void>;
  /**
   * Extends the leases of the claims still held by their tokens to `now + leaseMs`, in one
   * statement; returns how many were renewed (a claim taken over or finished is not).
   */
  renew(claims: readonly IdempotencyClaim[], now: number, leaseMs: number): Promise<number>;
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
  /** `ret_` and the next characters of the token, to tell tokens apart; null for older tokens. */
  tokenPrefix: string | null;
  /** Set once by a revocation; a revoked token enrolls no robot. */
  revokedAt: number | null;
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
  /** Set once by a de-enrollment: the broker refuses the robot, the API its commands. */
  deenrolledAt: number | null;
  /** A credential rotation asked for and not yet acknowledged by the robot. */
  rotationRequestedAt: number | null;
  /** Hash of the secret of the running rotation (the broker accepts it too). */
  pendingPasswordHash: string | null;
  /** That secret, sealed: sent again until the robot acknowledges it. */
  pendingSecretSealed: string | null;
  /** When the robot last acknowledged a new secret. */
  rotatedAt: number | null;
}

/** The columns a new robot starts without. */
export type NewRobotRow = Omit<RobotRow, 'orgId' | 'enrollmentTokenId' | 'deenrolledAt' | 'rotationRequestedAt' | 'pendingPasswordHash' | 'pendingSecretSealed' | 'rotatedAt'>;

export type EnrollOutcome =
  | { kind: 'enrolled'; robot: RobotRow }
  | { kind: 'token_invalid' | 'token_expired' | 'token_used_up' | 'token_revoked' }
  | { kind: 'robot_limit'; limit: number };

export interface RobotStatusUpdate {
  connected: boolean;
  runtimeVersion?: string;
  platform?: string;
  capabilities?: string[];
  recordingState?: RecordingState;
  seenAt: number;
  /**
   * The robot's own status message, when the update is one (absent for a change of the
   * connection the cloud saw): `at` is the robot's clock. Every replica writes every status, so
   * a replica behind another writes statuses the robot has since replaced: an online status
   * older than the last one written changes nothing (rules/status-order.ts).
   */
  status?: { at: number; online: boolean };
}


export interface RobotStore {
  createEnrollmentToken(row: Omit<EnrollmentTokenRow, 'uses' | 'revokedAt'>): Promise<void>;
  /** Keyset page of the organization's tokens ordered by id, revoked and expired ones included. */
  listEnrollmentTokens(orgId: string, after: string | null, limit: number): Promise<EnrollmentTokenRow[]>;
  /** Revokes once (a second revoke keeps the first time); undefined for an unknown id. */
  revokeEnrollmentToken(orgId: string, id: string, at: number): Promise<EnrollmentTokenRow | undefined>;
  /**
   * In one transaction: checks the token (known, unrevoked, unexpired, uses left), the organization's robot
   * limit, takes one use and inserts the robot built by `build` (which gets the name index).
   */
  enroll(args: {
    tokenHash: string;
    now: number;
    robotLimit: (orgId: string) => Promise<number | undefined> | number | undefined;
    build: (token: EnrollmentTokenRow, ordinal: number) => NewRobotRow;
  }): Promise<EnrollOutcome>;
  get(orgId: string, id: string): Promise<RobotRow | undefined>;
  /** Not scoped: only the MQTT broker's authentication, the robot link and the credential rotator use it. */
  getById(id: string): Promise<RobotRow | undefined>;
  /** Keyset page ordered by id; de-enrolled robots only when asked for. */
  list(orgId: string, after: string | null, limit: number, opts?: { includeDeenrolled?: boolean }): Promise<RobotRow[]>;
  /**
   * A filtered keyset page in the query's order (by id unless told), up to `limit` rows after (or
   * before, still in page order) the query's position.
   */
  find(orgId: string, query: RobotListQuery, limit: number): Promise<RobotRow[]>;
  /**
   * Ignored for a de-enrolled robot (a late status must not show it connected again). Returns
   * whether the robot's presence (`connected`) or recording state changed. When it did and
   * `logChange` is given, the event it builds from the robot's new state is appended to the log
   * in the same transaction; the check and the write hold the robot's row, so when several
   * replicas write the same status only the first one sees (and logs) the change.
   */
  updateStatus(id: string, update: RobotStatusUpdate, logChange?: (robot: RobotPresence) => LoggedEvent): Promise<boolean>;
  /**
   * Marks the robot de-enrolled (once: a second call keeps the first time), disconnected, and
   * drops a running rotation. Undefined for an unknown id.
   */
  deenroll(orgId: string, id: string, at: number): Promise<RobotRow | undefined>;
  /**
   * Notes that the robot's credentials are to be rotated (keeps an earlier request's time).
   * Undefined for an unknown id; a de-enrolled robot is returned unchanged.
   */
  requestRotation(orgId: string, id: string, at: number): Promise<RobotRow | undefined>;
  /**
   * Not scoped. Stores the secret of a requested rotation (its hash and sealed form); false when
   * no rotation is requested or one secret is already pending (it is the one to send again).
   */
  setPendingPassword(id: string, hash: string, sealed: string): Promise<boolean>;
  /**
   * Not scoped. The robot holds the secret whose hash is `pendingHash`: it becomes the robot's
   * only password and the rotation ends. False when another secret is pending by now.
   */
  completeRotation(id: string, pendingHash: string, at: number): Promise<boolean>;

  /**
   * At start of the embedded broker nobody is connected yet. With `log`, each robot shown
   * connected until now gets the event `logChange` builds, in the same transaction.
   */
  markAllDisconnected(log?: { at: number; logChange: (robot: RobotPresence) => LoggedEvent }): Promise<void>;
}

/** Equality columns of the episode list filter (spec: GET /v1/episodes query parameters). */
export const EPISODE_EQ_COLUMNS = [
  'robot_id',
  'task_id',
  'subtask_id',
  'operator_id',
  'control_mode',
  'policy_version_id',
  'eval_id',
  'outcome',
] as const;
export type EpisodeEqColumn = (typeof EPISODE_EQ_COLUMNS)[number];

export interface EpisodeFilter {
  eq: Partial<Record<EpisodeEqColumn, string>>;
  /** Bounds on started_at, ms, inclusive. */
  from?: number;
  to?: number;
  /** Top-level key -> the value's string form. */
  metadata: Record<string, string>;
  annotation: Record<string, string>;
  /**
   * Top-level key -> whether it must be present (true) or absent (false) in the layer, whatever
   * its value (`has_metadata.<key>`, `has_annotation.<key>`). Optional: most filters name none.
   */
  hasMetadata?: Record<string, boolean>;
  hasAnnotation?: Record<string, boolean>;
  /** `unverified`: no verified replica (at the destination, if given). */
  syncState?: { state: 'unverified' | 'synced' | 'verified'; destinationId?: string };
  /** Dataset snapshot rules: leave out evaluation episodes / discarded episodes. */
  excludeEval?: boolean;
  excludeDiscarded?: boolean;
}

/** A filter's presence conditions (`has_metadata.<key>`, `has_annotation.<key>`), metadata first, each as given. */
export function presenceOf(f: EpisodeFilter): [layer: 'm' | 'a', key: string, present: boolean][] {
  return [
    ...Object.entries(f.hasMetadata ?? {}).map(([k, v]) => ['m', k, v] as [layer: 'm', key: string, present: boolean]),
    ...Object.entries(f.hasAnnotation ?? {}).map(([k, v]) => ['a', k, v] as [layer: 'a', key: string, present: boolean]),
  ];
}

export interface ReplicaRow {
  destinationId: string;
  state: ReplicaState;
  grantId: string;
  error: string | null;
  objectKey: string | null;
  updatedAt: number;
}

export interface EpisodeRow {
  /** Ingest order; the keyset of every episode listing. */
  seq: number;
  id: string;
  orgId: string;
  robotId: string;
  report: Omit<EpisodeReport, 'manifest' | 'segments' | 'metadata' | 'outcome'>;
  outcome: EpisodeOutcome;
  recordedOutcome: EpisodeOutcome | null;
  metadata: Record<string, unknown>;
  annotations: Record<string, unknown>;
  segments: EpisodeReport['segments'];
  manifest: EpisodeReport['manifest'];
  interrupted: boolean;
  reportedAt: number;
  replicas: ReplicaRow[];
}

export interface IngestItem {
  orgId: string;
  robotId: string;
  report: EpisodeReport;
  reportedAt: number;
}

/** `duplicate`: already indexed from this robot (a resend); `conflict`: the id belongs to another robot. */
export type IngestResult = 'inserted' | 'duplicate' | 'conflict';

export interface OutcomeChangeRow {
  at: number;
  actor: string;
  from: EpisodeOutcome;
  to: EpisodeOutcome;
  reason: string;
}

/** Rows for NDJSON lines, with each row's replicas (by seq; absent when it has none). */
export interface EpisodeLineBatch {
  rows: EpisodeLineRow[];
  replicas: Map<number, ReplicaRow[]>;
}

export interface EpisodeStore {
  /**
   * Indexes a batch in one transaction, idempotent on the episode id, and appends an
   * `episode.finalized` event for each episode inserted.
   */
  ingest(items: readonly IngestItem[]): Promise<IngestResult[]>;
  get(orgId: string, id: string): Promise<EpisodeRow | undefined>;
  /** Rows with afterSeq < seq (<= maxSeq) matching the filter, in seq order. */
  list(orgId: string, filter: EpisodeFilter, afterSeq: number, limit: number, maxSeq?: number): Promise<EpisodeRow[]>;
  /**
   * The same rows as `list`, as line rows instead of an EpisodeRow each: what the export
   * streams. Same query, same chunks, same order.
   */
  listLines(orgId: string, filter: EpisodeFilter, afterSeq: number, limit: number, maxSeq?: number): Promise<EpisodeLineBatch>;
  /** Only the seqs of what `list` would return: cheap, to size a page before streaming it. */
  listSeqs(orgId: string, filter: EpisodeFilter, afterSeq: number, limit: number): Promise<number[]>;
  /** Shallow merge; a null value deletes the key. Undefined for an unknown episode. */
  patchAnnotations(orgId: string, id: string, patch: Record<string, unknown>): Promise<EpisodeRow | undefined>;
  setOutcome(orgId: string, id: string, change: { outcome: EpisodeOutcome; reason: string; actor: string; at: number }): Promise<EpisodeRow | undefined>;
  outcomeHistory(orgId: string, id: string): Promise<OutcomeChangeRow[] | undefined>;
  count(orgId: string): Promise<number>;
}

export interface DatasetRow {
  id: string;
  orgId: string;
  name: string;
  description: string | null;
  /** Filter key -> string value, as given. */
  filter: Record<string, string>;
  snapshotAt: number | null;
  episodeCount: number | null;
  createdBy: string;
  createdAt: number;
}

export interface DatasetStore {
  create(row: Omit<DatasetRow, 'snapshotAt' | 'episodeCount'>): Promise<void>;
  get(orgId: string, id: string): Promise<DatasetRow | undefined>;
  /** Keyset page in creation order; `after` is the last id of the previous page. */
  list(orgId: string, after: string | null, limit: number): Promise<DatasetRow[]>;
  /**
   * Pins the members (episodes matching `filter` now, in index order), visible together once pinned.
   * `null` for an unknown dataset; `'already'` if it was snapshotted before.
   */
  snapshot(orgId: string, id: string, filter: EpisodeFilter, at: number): Promise<DatasetRow | 'already' | null>;
  /** Members at positions afterPos+1 .. afterPos+limit, with their current episode data. */
  members(datasetId: string, afterPos: number, limit: number): Promise<EpisodeRow[]>;
  /** What `members` returns, as line rows for the manifest. */
  memberLineRows(datasetId: string, afterPos: number, limit: number): Promise<EpisodeLineBatch>;
}

export interface WebhookRow {
  id: string;
  orgId: string;
  url: string;
  events: string[];
  status: 'active' | 'disabled';
  disabledReason: string | null;
  secretSealed: string;
  previousSecretSealed: string | null;
  previousSecretUntil: number | null;
  lastDeliveredAt: number | null;
  lastDeliveryError: string | null;
  createdAt: number;
  pendingDeliveries: number;
}

export interface DeliveryRow {
  id: number;
  subscriptionId: string;
  eventId: string;
  eventType: string;
  payload: string;
  state: 'pending' | 'delivered' | 'dead' | 'redelivered';
  attempts: number;
  nextAttemptAt: number;
  lastStatus: number | null;
  lastError: string | null;
  deadLetteredAt: number | null;
  createdAt: number;
}

/** A queue head claimed for an attempt: `claim` is the token that records or releases it. */
export interface ClaimedDelivery extends DeliveryRow {
  claim: string;
}

/** `latencyMs`: how long the attempt took, for the attempt log (absent: not measured). */
export type DeliveryOutcome =
  | { kind: 'delivered'; status: number; at: number; latencyMs?: number }
  | { kind: 'retry'; status: number | null; error: string; at: number; nextAttemptAt: number; latencyMs?: number }
  | { kind: 'dead'; status: number | null; error: string; at: number; latencyMs?: number };

/** One attempt in a subscription's delivery log. */
export interface DeliveryAttemptRow {
  id: number;
  subscriptionId: string;
  deliveryId: number;
  eventId: string;
  eventType: string;
  attempt: number;
  statusCode: number | null;
  error: string | null;
  latencyMs: number | null;
  outcome: DeliveryOutcome['kind'];
  at: number;
}

/** Attempts kept per subscription; older ones are dropped as new ones are logged. */
export const ATTEMPTS_KEPT_PER_SUBSCRIPTION = 500;

export interface WebhookStore {
  /** Refuses (returns 'limit') when the org already has `maxActive` active subscriptions. */
  create(row: Omit<WebhookRow, 'pendingDeliveries' | 'status' | 'disabledReason' | 'previousSecretSealed' | 'previousSecretUntil' | 'lastDeliveredAt' | 'lastDeliveryError'>, maxActive: number): Promise<'ok' | 'limit'>;
  get(orgId: string, id: string): Promise<WebhookRow | undefined>;
  /** Not scoped: only the delivery worker uses it. */
  getById(id: string): Promise<WebhookRow | undefined>;
  list(orgId: string): Promise<WebhookRow[]>;
  delete(orgId: string, id: string): Promise<boolean>;
  enable(orgId: string, id: string, maxActive: number): Promise<WebhookRow | 'limit' | undefined>;
  disable(id: string, reason: string): Promise<void>;
  rotateSecret(orgId: string, id: string, secretSealed: string, previousUntil: number): Promise<WebhookRow | undefined>;
  /** Copies new events of the log into the queues of the active subscriptions that want them. */
  fanOut(now: number): Promise<number>;
  /** Appends one delivery to a subscription's queue (test events, redeliveries). */
  enqueue(subscriptionId: string, delivery: { eventId: string; eventType: string; payload: string }, now: number): Promise<number>;
  /**
   * Claims up to `limit` active subscriptions whose queue head is due at `now` and that no live
   * lease holds (oldest due first), leasing each until `now + leaseMs`, and returns their heads
   * with the claim's token. Atomic across processes (PostgreSQL: FOR UPDATE SKIP LOCKED), so two
   * replicas never hold one subscription: only the holder attempts its head, which keeps each
   * queue in order. A holder that dies leaves a lease that runs out; the head is then claimed
   * again (that one delivery at most twice).
   */
  claimDue(now: number, limit: number, leaseMs: number): Promise<ClaimedDelivery[]>;
  /**
   * The same claim for one subscription (a slot going on down the queue it just worked on): its
   * head if the subscription is active, the head is due and no other holder's lease is live.
   */
  dueHead(subscriptionId: string, now: number, leaseMs: number): Promise<ClaimedDelivery | undefined>;
  /** Gives up a claim without recording an attempt (the subscription went inactive, the worker stops). */
  release(subscriptionId: string, claim: string): Promise<void>;
  /** What an attempt needs of its subscription (no queue counts); not scoped, like getById. */
  deliveryTarget(id: string): Promise<Pick<WebhookRow, 'id' | 'url' | 'status' | 'secretSealed' | 'previousSecretSealed' | 'previousSecretUntil'> | undefined>;
  /** Earliest next_attempt_at among active queue heads, for the scheduler. */
  nextDueAt(): Promise<number | null>;
  /**
   * Records an attempt's outcome on its delivery and in the attempt log, in one transaction, and
   * releases the subscription's lease. With `claim`, only while that claim still holds the
   * subscription: a holder whose lease ran out and was taken over only logs its attempt (the new
   * holder decides the delivery). Without `claim` (tests, tools) the outcome is applied as is.
   */
  record(deliveryId: number, outcome: DeliveryOutcome, claim?: string): Promise<void>;
  /**
   * A slot's step down its queue: records `d`'s outcome under its claim (as record does) and,
   * when the outcome lets the queue go on (delivered or dead) and the claim still held, claims
   * the subscription's next due head (as dueHead does) and returns it. SQLite does both in the
   * outcome's shared commit; PostgreSQL one after the other.
   */
  recordAndClaimNext(d: Pick<ClaimedDelivery, 'id' | 'subscriptionId' | 'claim'>, outcome: DeliveryOutcome, now: number, leaseMs: number): Promise<ClaimedDelivery | undefined>;
  /** The attempt log, newest first, ids below `beforeId`; undefined for an unknown subscription. */
  attempts(orgId: string, subscriptionId: string, beforeId: number | null, limit: number): Promise<DeliveryAttemptRow[] | undefined>;
  deadLetters(orgId: string, subscriptionId: string): Promise<DeliveryRow[] | undefined>;
  /** Puts a dead letter's event back at the end of its subscription's queue. */
  redeliver(orgId: string, subscriptionId: string, deliveryId: number, now: number): Promise<DeliveryRow | undefined>;
}

/** One event of the log as stored: its payload is the JSON text webhooks deliver. */
export interface EventRow {
  /** The log id (`evt_<id>` on the wire). */
  id: number;
  type: string;
  payload: string;
}

export interface EventReadOptions {
  /** Most rows returned. */
  limit: number;
  /** Only ids up to this one (inclusive). */
  upTo?: number;
  /** Only these types. */
  types?: readonly string[];
  /** Only events whose payload names this robot. */
  robotId?: string;
}

/** Reads of the event log; every read is scoped to one organization. */
export interface EventStore {
  /**
   * The organization's events with an id above `afterId`, in id order (the `(org_id, id)`
   * index). Ids commit in order on every engine, so a reader that got id N has every event below
   * N it may read: paging on the last id returned never skips or repeats one.
   */
  listAfter(orgId: string, afterId: number, opts: EventReadOptions): Promise<EventRow[]>;
  /** The organization's newest event id; 0 when it has none. */
  latestId(orgId: string): Promise<number>;
}

/** A replica's state for the metrics: `assigned` is a route with no grant yet, then the API's states. */
export type ReplicaGaugeState = LocalReplicaState;

/** Counts across every organization, for the operator's /metrics (never for a tenant). */
export interface GaugeStore {
  /** Robots whose broker connection is up. */
  connectedRobots(): Promise<number>;
  /** Webhook deliveries waiting in their subscriptions' queues. */
  pendingDeliveries(): Promise<number>;
  /** Routed (episode, destination) pairs by replica state. */
  replicasByState(): Promise<Record<ReplicaGaugeState, number>>;
}
