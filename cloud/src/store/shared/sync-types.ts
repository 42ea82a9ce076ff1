import type { Pressure, ReplicaReport, ReplicaState, RetentionDirective } from '@fleet/protocol';

/**
 * Cloud sync in the store: destinations (a customer's grant provider), routing rules, the route
 * each episode was given, grant forwards (health and grant-id reuse), replica states and sync
 * health. Every function that reads tenant data takes the org id; the relay's lookups by robot
 * are scoped by the robot's own organization.
 */

export interface DestinationRow {
  id: string;
  orgId: string;
  type: 'external';
  url: string;
  /** The `dsec_` signing secret, sealed with the installation key. */
  secretSealed: string;
  retention: RetentionDirective;
  createdAt: number;
  revokedAt: number | null;
}

/** Forward counts of the last 24 h and the newest forward, for the destinations list. */
export interface DestinationHealth {
  lastForwardAt: number | null;
  forwards24h: number;
  deferrals24h: number;
  /** The newest deferral within the last 24 h and its reason (`reason: message`). */
  lastDeferral: { at: number; reason: string } | null;
}

export interface RoutingRuleRow {
  id: string;
  orgId: string;
  destinationId: string;
  /** Match field -> accepted values (a string is stored as a one-element array). */
  match: Record<string, string[]>;
  /** 1-based order; the first matching rule wins. */
  position: number;
  createdAt: number;
}

/** What routing decides on: an episode's match fields (spec, Routing rules). */
export interface RoutingFacts {
  episode_id: string;
  robot_id: string;
  task_id: string | null;
  recording_session_id: string;
  episode_seq: number;
  outcome: string;
  robot_platform: string | null;
  has_autonomous: boolean;
}

/** One assignment: the robot must sync this episode to this destination. */
export interface RouteRow {
  orgId: string;
  robotId: string;
  episodeId: string;
  episodeSeq: number;
  destinationId: string;
  decidedAt: number;
}

/**
 * The claim on forwarding a grant request for (episode, destination): `claimed` with the token
 * that releases it, or `held` by another forward (this process or another) until `until`.
 */
export type ForwardClaim = { kind: 'claimed'; token: string; until: number } | { kind: 'held'; until: number };

export type ForwardOutcome = { kind: 'granted'; grantId: string } | { kind: 'deferred'; reason: string };

export type ReplicaIngestResult =
  /** Applied (state moved forward or an error was recorded); events were appended. */
  | 'applied'
  /** Already known, or older than what is stored: nothing changed (still acknowledged). */
  | 'unchanged'
  /** The episode is not indexed yet: the robot is told to retry later. */
  | 'unknown_episode'
  /** The episode belongs to another robot: refused for good. */
  | 'conflict'
  /** No such destination in the episode's organization: refused for good. */
  | 'unknown_destination';

export interface SyncHealthRow {
  robotId: string;
  episodesReported: number;
  unverified: number;
  unverifiedOver72h: number;
  bytesUnverified: number;
  localMissing: number;
  /** The last disk pressure the robot reported with a grant request. */
  pressure: (Pressure & { reportedAt: number }) | null;
}

export interface SyncStore {
  // Destinations
  createDestination(row: Omit<DestinationRow, 'revokedAt'>): Promise<void>;
  getDestination(orgId: string, id: string): Promise<DestinationRow | undefined>;
  listDestinations(orgId: string, now: number): Promise<(DestinationRow & DestinationHealth)[]>;
  /** Revokes (no new grants, rules pointing at it stop matching); false when unknown or already revoked. */
  revokeDestination(orgId: string, id: string, at: number): Promise<boolean>;

  // Routing rules
  createRule(row: Omit<RoutingRuleRow, 'position'>): Promise<RoutingRuleRow>;
  listRules(orgId: string): Promise<RoutingRuleRow[]>;
  deleteRule(orgId: string, id: string): Promise<boolean>;
  /** `ruleIds` must be a permutation of all the org's rules; false otherwise (nothing changes). */
  reorderRules(orgId: string, ruleIds: readonly string[]): Promise<boolean>;

  // Routes (assignments)
  /** Episodes of the org that have no route yet and are not discarded, after `afterSeq`, with their routing facts. */
  unroutedEpisodes(orgId: string, afterSeq: number, limit: number): Promise<{ seq: number; robotId: string; facts: RoutingFacts }[]>;
  /** Writes routes (an episode has at most one: a second for the same episode is skipped). Returns the ones that are new. */
  addRoutes(routes: readonly RouteRow[]): Promise<RouteRow[]>;
  /** Drops routes to a revoked destination whose replica is not synced or verified. */
  dropRoutesTo(orgId: string, destinationId: string): Promise<number>;
  /** The robot's routes whose replica is not verified and whose destination is not revoked. */
  pendingAssignments(robotId: string): Promise<RouteRow[]>;
  /** The route of (episode, destination) when the episode is the robot's and the destination live. */
  assignment(robotId: string, episodeId: string, destinationId: string): Promise<RouteRow | undefined>;

  // Grant forwards
  /** Records one forward to a provider (not for the check endpoint). */
  recordForward(orgId: string, destinationId: string, at: number, outcome: ForwardOutcome): Promise<void>;
  /**
   * Claims the forward of a grant request for (episode, destination) for `leaseMs` from `now`:
   * of any number of claims at once, on any replica, exactly one is `claimed`; the others see
   * it `held` until its lease runs out or it is released. A lease that ran out is taken over.
   */
  claimForward(orgId: string, episodeSeq: number, destinationId: string, now: number, leaseMs: number): Promise<ForwardClaim>;
  /** Ends the claim when `token` still holds it (false otherwise: nothing changes). */
  releaseForward(orgId: string, episodeSeq: number, destinationId: string, token: string): Promise<boolean>;
  /** Claims a grant id for the destination; false when it was seen before (reuse). */
  claimGrantId(destinationId: string, grantId: string, at: number): Promise<boolean>;
  /** Whether the destination's provider answered this grant id before (read only: the destination check). */
  grantIdUsed(destinationId: string, grantId: string): Promise<boolean>;
  /** Remembers the robot's last reported disk pressure. */
  notePressure(robotId: string, pressure: Pressure, at: number): Promise<void>;

  // Replicas
  /**
   * Applies a robot's replica report, in one transaction with the events it causes: a state
   * never moves backwards (a report of an earlier state, or an older `at`, changes nothing);
   * reaching `synced` or `verified` appends `episode.synced` / `episode.verified`; a report with
   * `error` keeps the state, sets the error and appends `episode.failed`.
   */
  applyReplicaReport(robotId: string, report: ReplicaReport, receivedAt: number): Promise<ReplicaIngestResult>;
  /**
   * The robot says an episode's local files disappeared before a verified sync (counted as
   * `local_missing` in sync health). Same answers as a replica report, without `applied` events.
   */
  markLocalMissing(robotId: string, episodeId: string): Promise<'applied' | 'unchanged' | 'unknown_episode' | 'conflict'>;
  /**
   * The robot's retention deleted an episode's local copy: the first report sets `pruned_at` and
   * appends `episode.pruned` in the same transaction; a repeat changes nothing (`unchanged`).
   */
  markPruned(robotId: string, episodeId: string, prunedAt: number, receivedAt: number): Promise<'applied' | 'unchanged' | 'unknown_episode' | 'conflict'>;
  /**
   * Marks (episode, destination) granted when the relay hands a grant over (never moves a replica
   * back), and records the grant as issued for that episode and destination, whatever the state.
   */
  markGranted(orgId: string, episodeSeq: number, destinationId: string, grantId: string, objectKey: string | null, at: number): Promise<void>;

  /** Whether the relay issued `grantId` for this robot's episode and this destination (a replica report must name one). */
  grantIssued(robotId: string, episodeId: string, destinationId: string, grantId: string): Promise<boolean>;

  // Sync health
  /** One row per robot of the organization and per robot id that reported episodes; `robotIds`: only those. */
  syncHealth(orgId: string, now: number, opts?: { robotIds?: readonly string[] }): Promise<SyncHealthRow[]>;
}

export type { ReplicaState };
