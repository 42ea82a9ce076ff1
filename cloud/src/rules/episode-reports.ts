import type { ReplicaReport } from '@fleet/protocol';
import { prunedEvent, type EpisodeEvent, type EpisodeRef } from './events.js';
import { replicaTransition, type ReplicaNow, type ReplicaWrite } from './replica-transition.js';

/**
 * The rules of what a robot reports about an episode after it is indexed (a replica's state, a
 * pruned or missing local copy), for every engine. The stores read the facts (locking what they
 * must), hand them here, and write what comes back; they decide nothing themselves.
 */

/** What the index holds of the episode a report names. */
export interface ReportedEpisode {
  /** The index's own sequence number of the episode (its row). */
  seq: number;
  orgId: string;
  robotId: string;
  recordingSessionId: string;
  episodeSeq: number;
}

/** Why a report about an episode is refused before anything is read further. */
export type EpisodeRefusal =
  /** The episode is not indexed (yet): the robot retries later. */
  | 'unknown_episode'
  /** The episode belongs to another robot: refused for good. */
  | 'conflict';

/** A robot reports only on an episode the index holds, and only on one of its own. */
export function refuseReport(episode: ReportedEpisode | undefined, robotId: string): EpisodeRefusal | undefined {
  if (!episode) return 'unknown_episode';
  if (episode.robotId !== robotId) return 'conflict';
  return undefined;
}

/** The episode as webhook payloads name it. */
export function episodeRef(episodeId: string, episode: ReportedEpisode): EpisodeRef {
  return { episode_id: episodeId, robot_id: episode.robotId, recording_session_id: episode.recordingSessionId, episode_seq: episode.episodeSeq };
}

/** What the index holds that a replica report is judged against. */
export interface ReplicaFacts {
  episode: ReportedEpisode | undefined;
  /** The report's destination is one of the episode's organization (live or revoked, routed or not). */
  destinationKnown: boolean;
  /** The replica (episode x destination) as it stands, if any report or grant wrote it. */
  current: ReplicaNow | undefined;
}

export type ReplicaDecision =
  | { result: EpisodeRefusal | 'unknown_destination' | 'unchanged' }
  | { result: 'applied'; episode: ReportedEpisode; write: ReplicaWrite };

/**
 * A replica report: refused for an episode that is not the robot's or a destination outside the
 * episode's organization (a destination of the organization is enough, route or not, live or
 * revoked: the route may have been decided and then dropped while the robot was uploading, and
 * what reached the customer's storage is a fact the index must show); otherwise the replica
 * transition decides what is written and announced.
 */
export function decideReplicaReport(robotId: string, report: ReplicaReport, facts: ReplicaFacts): ReplicaDecision {
  const refused = refuseReport(facts.episode, robotId);
  if (refused) return { result: refused };
  const episode = facts.episode!;
  if (!facts.destinationKnown) return { result: 'unknown_destination' };
  const write = replicaTransition(facts.current, report, episodeRef(report.episode_id, episode));
  return write ? { result: 'applied', episode, write } : { result: 'unchanged' };
}

export type PruneDecision = { result: EpisodeRefusal | 'unchanged' } | { result: 'applied'; episode: ReportedEpisode; event: EpisodeEvent };

/** A pruned local copy: recorded once (the first report's time stays), announced once. */
export function decidePruned(robotId: string, episodeId: string, episode: ReportedEpisode | undefined, prunedAt: number | null): PruneDecision {
  const refused = refuseReport(episode, robotId);
  if (refused) return { result: refused };
  if (prunedAt !== null) return { result: 'unchanged' };
  return { result: 'applied', episode: episode!, event: prunedEvent(episodeRef(episodeId, episode!)) };
}
