import { iso, type Episode, type EpisodeWithLocations, type Replica } from '@fleet/protocol';
import type { EpisodeRow, ReplicaRow } from '../store/index.js';

function toReplica(r: ReplicaRow): Replica {
  return {
    destination_id: r.destinationId,
    state: r.state,
    grant_id: r.grantId,
    error: r.error,
    updated_at: iso(r.updatedAt),
    ...(r.objectKey !== null ? { object_key: r.objectKey } : {}),
  };
}

/** The API's episode object (spec, Episode). */
export function toEpisode(e: EpisodeRow): Episode {
  const r = e.report;
  return {
    id: e.id,
    robot_id: e.robotId,
    recording_session_id: r.recording_session_id,
    episode_seq: r.episode_seq,
    session_name: r.session_name,
    task_id: r.task_id,
    task_name: r.task_name,
    subtask_id: r.subtask_id,
    operator_id: r.operator_id,
    operator_name: r.operator_name,
    outcome: e.outcome,
    recorded_outcome: e.recordedOutcome,
    control_mode: r.control_mode,
    policy_version_id: r.policy_version_id,
    eval_id: r.eval_id,
    started_at: r.started_at,
    ended_at: r.ended_at,
    duration_s: r.duration_s,
    message_count: r.message_count,
    bag_size_bytes: r.bag_size_bytes,
    bag_uri: r.bag_uri ?? null,
    metadata: e.metadata,
    annotations: e.annotations,
    reported_at: iso(e.reportedAt),
    replicas: e.replicas.map(toReplica),
  };
}

/** Export rows and dataset manifest lines (decisions.md, Episodes). */
export function toEpisodeWithLocations(e: EpisodeRow): EpisodeWithLocations {
  return {
    ...toEpisode(e),
    files: e.manifest.files.map((f) => ({ path: f.path, size_bytes: f.size_bytes, sha256: f.sha256 })),
    locations: e.replicas.map((r) => ({ destination_id: r.destinationId, state: r.state, object_key: r.objectKey, grant_id: r.grantId })),
  };
}
