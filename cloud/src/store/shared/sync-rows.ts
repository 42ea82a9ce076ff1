// Sync's rows (destinations, routing rules, routes, replicas) as both engines return them, their
// domain form, and the column lists both engines select.
import { DAY, HOUR, type RetentionDirective } from '@fleet/protocol';
import { hasAutonomous } from '../../sync/facts.js';
import type { DestinationRow, ForwardOutcome, RouteRow, RoutingFacts, RoutingRuleRow } from './sync-types.js';
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

/** A replica's current state, as the transition rule reads it. */
export interface ReplicaStateDbRow {
  state: ReplicaRow['state'];
  grant_id: string;
  error: string | null;
  object_key: string | null;
  reported_at: number | null;
}

export interface EpisodeRefDbRow {
  seq: number;
  org_id: string;
  robot_id: string;
  recording_session_id: string;
  episode_seq: number;
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
