// Sync's rows (destinations, routing rules, routes, replicas) as both engines return them, their
// domain form, and the column lists both engines select.
import { DAY, HOUR, type RetentionDirective } from '@fleet/protocol';
import type { ReplicaFacts, ReportedEpisode } from '../../rules/episode-reports.js';
import { hasAutonomous } from '../../rules/has-autonomous.js';
import type { DestinationRow, ForwardOutcome, RouteRow, RoutingFacts, RoutingRuleRow, SyncHealthRow } from './sync-types.js';
import type { ReplicaRow } from './types.js';

export interface DestinationDbRow {
  id: string;
  org_id: string;
  type: 'external';
  url: string;
  secret_sealed: string;
  retention: RetentionDirective;
  created_at: number;
  revoked_at: number | null;
  last_forward_at: number | null;
}

export interface RuleDbRow {
  id: string;
  org_id: string;
  destination_id: string;
  match: string;
  position: number;
  created_at: number;
}

export interface RouteDbRow {
  episode_seq: number;
  episode_id: string;
  destination_id: string;
  org_id: string;
  robot_id: string;
  decided_at: number;
}

/**
 * The episode a robot's report names, the replica (episode x `destination_id`) as it stands and
 * whether that destination is one of the episode's organization: every fact the report rules
 * read, in one row (both engines select REPORTED_EPISODE_COLUMNS and REPLICA_FACT_COLUMNS).
 */
export interface ReportedEpisodeDbRow {
  seq: number;
  org_id: string;
  robot_id: string;
  recording_session_id: string;
  episode_seq: number;
  pruned_at: number | null;
}

export const REPORTED_EPISODE_COLUMNS = 'e.seq, e.org_id, e.robot_id, e.recording_session_id, e.episode_seq, e.pruned_at';

export interface ReplicaFactsDbRow extends ReportedEpisodeDbRow {
  /** 1/0 on SQLite, a boolean on PostgreSQL. */
  destination_known: number | boolean;
  state: ReplicaRow['state'] | null;
  object_key: string | null;
  reported_at: number | null;
}

/** Selected from `episodes e LEFT JOIN replicas p`; the destination's id is the first parameter. */
export function replicaFactColumns(destinationParam: string): string {
  return `${REPORTED_EPISODE_COLUMNS},
    EXISTS (SELECT 1 FROM destinations d WHERE d.org_id = e.org_id AND d.id = ${destinationParam}) AS destination_known,
    p.state, p.object_key, p.reported_at`;
}

export function reportedEpisodeFromDb(r: ReportedEpisodeDbRow | undefined): ReportedEpisode | undefined {
  return r && { seq: r.seq, orgId: r.org_id, robotId: r.robot_id, recordingSessionId: r.recording_session_id, episodeSeq: r.episode_seq };
}

export function replicaFactsFromDb(r: ReplicaFactsDbRow | undefined): ReplicaFacts {
  return {
    episode: reportedEpisodeFromDb(r),
    destinationKnown: Boolean(r?.destination_known),
    current: r?.state ? { state: r.state, objectKey: r.object_key, reportedAt: r.reported_at } : undefined,
  };
}

export function destinationFromDb(r: DestinationDbRow): DestinationRow {
  return {
    id: r.id,
    orgId: r.org_id,
    type: r.type,
    url: r.url,
    secretSealed: r.secret_sealed,
    retention: r.retention,
    createdAt: r.created_at,
    revokedAt: r.revoked_at,
  };
}

export function ruleFromDb(r: RuleDbRow): RoutingRuleRow {
  return {
    id: r.id,
    orgId: r.org_id,
    destinationId: r.destination_id,
    match: JSON.parse(r.match) as Record<string, string[]>,
    position: r.position,
    createdAt: r.created_at,
  };
}

export function routeFromDb(r: RouteDbRow): RouteRow {
  return { orgId: r.org_id, robotId: r.robot_id, episodeId: r.episode_id, episodeSeq: r.episode_seq, destinationId: r.destination_id, decidedAt: r.decided_at };
}

/** Forwards older than this are pruned; the health counts look back 24 h. */
export const FORWARD_KEEP_MS = DAY + HOUR;
export const UNVERIFIED_ALERT_MS = 72 * HOUR;

export const ROUTE_COLUMNS = 'r.episode_seq, e.id AS episode_id, r.destination_id, r.org_id, r.robot_id, r.decided_at';

/** An episode without a route yet, with what the routing rules match on (both engines). */
export interface UnroutedDbRow {
  seq: number;
  id: string;
  robot_id: string;
  task_id: string | null;
  recording_session_id: string;
  episode_seq: number;
  outcome: string;
  control_mode: string | null;
  metadata: string;
  platform: string | null;
}

export const UNROUTED_COLUMNS = `e.seq, e.id, e.robot_id, e.task_id, e.recording_session_id, e.episode_seq, e.outcome, e.control_mode, e.metadata,
  (SELECT platform FROM robots b WHERE b.id = e.robot_id) AS platform`;

export function unroutedFromDb(r: UnroutedDbRow): { seq: number; robotId: string; facts: RoutingFacts } {
  return {
    seq: r.seq,
    robotId: r.robot_id,
    facts: {
      episode_id: r.id,
      robot_id: r.robot_id,
      task_id: r.task_id,
      recording_session_id: r.recording_session_id,
      episode_seq: r.episode_seq,
      outcome: r.outcome,
      robot_platform: r.platform,
      has_autonomous: hasAutonomous(r.control_mode, JSON.parse(r.metadata) as Record<string, unknown>),
    },
  };
}

/** A grant forward's outcome as the columns of its `grant_forwards` row: (outcome, grant_id, reason). */
export function forwardColumns(outcome: ForwardOutcome): [kind: ForwardOutcome['kind'], grantId: string | null, reason: string | null] {
  return [outcome.kind, outcome.kind === 'granted' ? outcome.grantId : null, outcome.kind === 'deferred' ? outcome.reason : null];
}

/** One robot's counts as both engines' sync-health query returns them. */
export interface SyncCountsDbRow {
  robot_id: string;
  reported: number;
  unverified: number;
  over: number;
  bytes: number;
  missing: number;
}

export interface PressureDbRow {
  robot_id: string;
  free_bytes: number;
  backlog_bytes: number;
  hours_to_full: number | null;
  reported_at: number;
}

/**
 * The sync-health rows: every robot asked for (all of the organization's by default) and every
 * robot with episodes, by id, with zero counts when it reported nothing; `withPressure` adds the
 * last disk pressure each reported.
 */
export function syncHealthRows(robotIds: readonly string[], counts: readonly SyncCountsDbRow[]): SyncHealthRow[] {
  const byRobot = new Map<string, SyncHealthRow>();
  for (const robotId of robotIds) {
    byRobot.set(robotId, { robotId, episodesReported: 0, unverified: 0, unverifiedOver72h: 0, bytesUnverified: 0, localMissing: 0, pressure: null });
  }
  for (const r of counts) {
    byRobot.set(r.robot_id, {
      robotId: r.robot_id,
      episodesReported: r.reported,
      unverified: r.unverified,
      unverifiedOver72h: r.over,
      bytesUnverified: r.bytes,
      localMissing: r.missing,
      pressure: null,
    });
  }
  return [...byRobot.values()].sort((a, b) => (a.robotId < b.robotId ? -1 : a.robotId > b.robotId ? 1 : 0));
}

export function withPressure(rows: SyncHealthRow[], pressure: readonly PressureDbRow[]): SyncHealthRow[] {
  const byId = new Map(pressure.map((p) => [p.robot_id, p]));
  for (const row of rows) {
    const p = byId.get(row.robotId);
    if (p) row.pressure = { free_bytes: p.free_bytes, backlog_bytes: p.backlog_bytes, hours_to_full: p.hours_to_full, reportedAt: p.reported_at };
  }
  return rows;
}
