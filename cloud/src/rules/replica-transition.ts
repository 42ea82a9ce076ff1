import { replicaRank, type ReplicaReport, type ReplicaState } from '@fleet/protocol';
import { replicaFailedEvent, replicaReachedEvent, type EpisodeEvent, type EpisodeRef } from './events.js';

/** What the index holds for one replica (episode × destination) before a report. */
export interface ReplicaNow {
  state: ReplicaState;
  objectKey: string | null;
  /** The robot clock of the report that wrote it (null: written before reports carried one). */
  reportedAt: number | null;
}

/** The replica row a report writes, and the events it announces, in order. */
export interface ReplicaWrite {
  state: ReplicaState;
  grantId: string;
  error: string | null;
  objectKey: string | null;
  reportedAt: number;
  events: EpisodeEvent[];
}

/**
 * The one rule of a replica report, for every engine: states only move forward (granted,
 * syncing, synced, verified, in that order); a report of the same state changes
 * anything only when it is newer by the robot's clock, so a resent outbox message never
 * announces twice. Reaching `synced` or `verified` announces `episode.synced` /
 * `episode.verified` once each (a replica that jumps past `synced`, its synced report lost or
 * still on the way, announces both, in order); a report with an error announces
 * `episode.failed`. Undefined: the report changes nothing.
 */
export function replicaTransition(now: ReplicaNow | undefined, report: ReplicaReport, episode: EpisodeRef): ReplicaWrite | undefined {
  const newRank = replicaRank(report.state);
  const oldRank = now ? replicaRank(now.state) : -1;
  if (now && newRank < oldRank) return undefined;
  if (now && newRank === oldRank && now.reportedAt !== null && report.at <= now.reportedAt) return undefined;

  const objectKey = report.object_key ?? now?.objectKey ?? null;
  const replica = { destination_id: report.destination_id, grant_id: report.grant_id, object_key: objectKey, state: report.state };
  const events: EpisodeEvent[] = [];
  if (oldRank < replicaRank('synced') && newRank >= replicaRank('synced')) events.push(replicaReachedEvent('episode.synced', episode, replica));
  if (oldRank < replicaRank('verified') && newRank >= replicaRank('verified')) events.push(replicaReachedEvent('episode.verified', episode, replica));
  if (report.error !== null) events.push(replicaFailedEvent(episode, replica, report.error));
  return { state: report.state, grantId: report.grant_id, error: report.error, objectKey, reportedAt: report.at, events };
}
