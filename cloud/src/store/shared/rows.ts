import type { EpisodeOutcome, EpisodeReport, RecordingState, Scope } from '@fleet/protocol';
import type { EpisodeColumns } from './episode-lines.js';
import type { ApiKeyRow, DatasetRow, EnrollmentTokenRow, EpisodeRow, IngestItem, ReplicaRow, RobotRow } from './types.js';

// Rows as both engines return them (snake_case columns) and their domain form.

export interface ApiKeyDbRow {
  id: string;
  org_id: string;
  name: string;
  scopes: string;
  key_hash: string;
  created_by: string;
  created_at: number;
  expires_at: number | null;
  revoked_at: number | null;
  last_used_at: number | null;
}

export function apiKeyFromDb(r: ApiKeyDbRow): ApiKeyRow {
  return {
    id: r.id,
    orgId: r.org_id,
    name: r.name,
    scopes: JSON.parse(r.scopes) as Scope[],
    keyHash: r.key_hash,
    createdBy: r.created_by,
    createdAt: r.created_at,
    expiresAt: r.expires_at,
    revokedAt: r.revoked_at,
    lastUsedAt: r.last_used_at,
  };
}

export interface TokenDbRow {
  id: string;
  org_id: string;
  token_hash: string;
  name_prefix: string | null;
  max_uses: number;
  uses: number;
  expires_at: number;
  created_by: string;
  created_at: number;
  token_prefix: string | null;
  revoked_at: number | null;
}

export interface RobotDbRow {
  id: string;
  org_id: string;
  name: string;
  platform: string | null;
  runtime_version: string | null;
  capabilities: string;
  mqtt_password_hash: string;
  enrollment_token_id: string;
  /** 0/1 in SQLite, a boolean in PostgreSQL. */
  connected: boolean | number;
  recording_state: string | null;
  last_seen_at: number | null;
  created_at: number;
  deenrolled_at: number | null;
  rotation_requested_at: number | null;
  pending_password_hash: string | null;
  pending_secret_sealed: string | null;
  rotated_at: number | null;
}

export function robotFromDb(r: RobotDbRow): RobotRow {
  return {
    id: r.id,
    orgId: r.org_id,
    name: r.name,
    platform: r.platform,
    runtimeVersion: r.runtime_version,
    capabilities: JSON.parse(r.capabilities) as string[],
    mqttPasswordHash: r.mqtt_password_hash,
    enrollmentTokenId: r.enrollment_token_id,
    connected: r.connected === true || r.connected === 1,
    recordingState: r.recording_state as RecordingState | null,
    lastSeenAt: r.last_seen_at,
    createdAt: r.created_at,
    deenrolledAt: r.deenrolled_at,
    rotationRequestedAt: r.rotation_requested_at,
    pendingPasswordHash: r.pending_password_hash,
    pendingSecretSealed: r.pending_secret_sealed,
    rotatedAt: r.rotated_at,
  };
}

export function tokenFromDb(t: TokenDbRow): EnrollmentTokenRow {
  return {
    id: t.id,
    orgId: t.org_id,
    tokenHash: t.token_hash,
    namePrefix: t.name_prefix,
    maxUses: t.max_uses,
    uses: t.uses,
    expiresAt: t.expires_at,
    createdBy: t.created_by,
    createdAt: t.created_at,
    tokenPrefix: t.token_prefix,
    revokedAt: t.revoked_at,
  };
}


export interface ReplicaDbRow {
  episode_seq: number;
  destination_id: string;
  state: ReplicaRow['state'];
  grant_id: string;
  error: string | null;
  object_key: string | null;
  updated_at: number;
}

export function replicaFromDb(r: ReplicaDbRow): ReplicaRow {
  return { destinationId: r.destination_id, state: r.state, grantId: r.grant_id, error: r.error, objectKey: r.object_key, updatedAt: r.updated_at };
}

/** The episode columns an ingest writes, in the order of episodeInsertValues. */
export const EPISODE_INSERT_COLUMNS = [
  'id', 'org_id', 'robot_id', 'recording_session_id', 'episode_seq', 'session_name', 'task_id', 'task_name', 'subtask_id',
  'operator_id', 'operator_name', 'control_mode', 'policy_version_id', 'eval_id', 'outcome', 'recorded_outcome', 'started_at',
  'ended_at', 'duration_s', 'message_count', 'bag_size_bytes', 'bag_uri', 'metadata', 'segments', 'manifest', 'interrupted',
  'reported_at',
] as const;

/**
 * What an ingested report writes, column by column (EPISODE_INSERT_COLUMNS), on every engine: the
 * outcome also as the recorded one, times in ms, JSON as text, `interrupted` as 1 or 0 (SQLite's
 * integer, which PostgreSQL reads as a boolean). episodeFromDb reads it back.
 */
export function episodeInsertValues({ orgId, robotId, report: r, reportedAt }: IngestItem): unknown[] {
  return [
    r.id, orgId, robotId, r.recording_session_id, r.episode_seq, r.session_name, r.task_id, r.task_name, r.subtask_id,
    r.operator_id, r.operator_name, r.control_mode, r.policy_version_id, r.eval_id, r.outcome, r.outcome,
    Date.parse(r.started_at), r.ended_at === null ? null : Date.parse(r.ended_at), r.duration_s, r.message_count,
    r.bag_size_bytes, r.bag_uri ?? null, JSON.stringify(r.metadata), JSON.stringify(r.segments), JSON.stringify(r.manifest),
    r.interrupted ? 1 : 0, reportedAt,
  ];
}

export function episodeFromDb(r: EpisodeColumns, replicas: ReplicaRow[]): EpisodeRow {
  const interrupted = r.interrupted === true || r.interrupted === 1;
  return {
    seq: r.seq,
    id: r.id,
    orgId: r.org_id,
    robotId: r.robot_id,
    report: {
      id: r.id,
      recording_session_id: r.recording_session_id,
      episode_seq: r.episode_seq,
      session_name: r.session_name,
      task_id: r.task_id,
      task_name: r.task_name,
      subtask_id: r.subtask_id,
      operator_id: r.operator_id,
      operator_name: r.operator_name,
      control_mode: r.control_mode,
      policy_version_id: r.policy_version_id,
      eval_id: r.eval_id,
      started_at: new Date(r.started_at).toISOString(),
      ended_at: r.ended_at === null ? null : new Date(r.ended_at).toISOString(),
      duration_s: r.duration_s,
      message_count: r.message_count,
      bag_size_bytes: r.bag_size_bytes,
      bag_uri: r.bag_uri,
      interrupted,
    },
    outcome: r.outcome as EpisodeOutcome,
    recordedOutcome: r.recorded_outcome as EpisodeOutcome | null,
    metadata: JSON.parse(r.metadata) as Record<string, unknown>,
    annotations: JSON.parse(r.annotations) as Record<string, unknown>,
    segments: JSON.parse(r.segments) as EpisodeReport['segments'],
    manifest: JSON.parse(r.manifest) as EpisodeReport['manifest'],
    interrupted,
    reportedAt: r.reported_at,
    replicas,
  };
}

export interface DatasetDbRow {
  id: string;
  org_id: string;
  name: string;
  description: string | null;
  filter: string;
  snapshot_at: number | null;
  episode_count: number | null;
  created_by: string;
  created_at: number;
}

export function datasetFromDb(r: DatasetDbRow): DatasetRow {
  return {
    id: r.id,
    orgId: r.org_id,
    name: r.name,
    description: r.description,
    filter: JSON.parse(r.filter) as Record<string, string>,
    snapshotAt: r.snapshot_at,
    episodeCount: r.episode_count,
    createdBy: r.created_by,
    createdAt: r.created_at,
  };
}
