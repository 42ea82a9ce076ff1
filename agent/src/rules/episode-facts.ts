// The agent's lowest floor (rules/): pure facts and decisions that the store and the parts above
// it both stand on; nothing here imports the rest of agent/src.
import type { OperatorContext } from './operator-context.js';

export const EPISODE_OUTCOMES = ['success', 'failure', 'discarded'] as const;
export type EpisodeOutcome = (typeof EPISODE_OUTCOMES)[number];

/** One file of an episode, as the grant envelope's manifest carries it (spec, grant provider). */
export interface ManifestFile {
  /** Relative to the episode directory, `/`-separated. */
  path: string;
  size_bytes: number;
  /** Lower-case hex. */
  sha256: string;
}

/** `manifest.json` of an episode directory. */
export interface EpisodeManifest {
  files: ManifestFile[];
  total_bytes: number;
}

/** One subtask the operator stepped through (decisions.md, Episodes: offsets in seconds). */
export interface EpisodeSegment {
  segment_index: number;
  subtask_id: string | null;
  subtask_name: string | null;
  start_offset_s: number;
  end_offset_s: number;
}

/**
 * The recorded facts of one episode, `episode.json` of its directory: stamped by the robot and
 * immutable once written (spec, Episode).
 */
export interface EpisodeFacts {
  id: string;
  robot_id: string;
  recording_session_id: string;
  episode_seq: number;
  session_name: string | null;
  task_id: string | null;
  task_name: string | null;
  subtask_id: string | null;
  operator_id: string | null;
  operator_name: string | null;
  control_mode: string | null;
  policy_version_id: string | null;
  eval_id: string | null;
  outcome: EpisodeOutcome;
  /** ISO 8601. */
  started_at: string;
  ended_at: string;
  duration_s: number;
  message_count: number | null;
  bag_size_bytes: number;
  metadata: Record<string, unknown>;
  segments: EpisodeSegment[];
}

/** A change of subtask while recording; segments are computed from these at finalize. */
export interface SubtaskStep {
  /** Robot clock, ms since the epoch. */
  at: number;
  subtask_id: string | null;
  subtask_name: string | null;
}

/** The context fields an episode is stamped with, taken when recording starts. */
export type ContextSnapshot = OperatorContext;
