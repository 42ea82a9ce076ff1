import {
  iso,
  ROBOT_STATUS_EVENT,
  RobotStatusPayloadSchema,
  WebhookPayloadSchema,
  type EpisodeReport,
  type RecordingState,
  type RobotStatusPayload,
  type WebhookEvent,
  type WebhookPayload,
} from '@fleet/protocol';

/**
 * The one place webhook payloads (and the event stream's robot.status payload) are built (spec,
 * Events: Payload). The store appends what these functions return to the event log in the
 * transaction of the change; the delivery worker and the event stream send the payload as is. Each builder fixes which optional fields its event carries, and every
 * payload is checked against the protocol's schema before it is written.
 */

/** An episode event as the log stores it. */
export interface EpisodeEvent {
  type: WebhookEvent;
  episodeId: string;
  payload: WebhookPayload;
}

/** A robot's presence or recording state changed (the event stream's, never a webhook's). */
export interface RobotStatusEvent {
  type: typeof ROBOT_STATUS_EVENT;
  episodeId: null;
  payload: RobotStatusPayload;
}

/** Anything the log stores. */
export type LoggedEvent = EpisodeEvent | RobotStatusEvent;

/** What a robot.status event says of the robot: its state after the change. */
export interface RobotPresence {
  id: string;
  connected: boolean;
  recordingState: RecordingState | null;
  lastSeenAt: number | null;
}

/** The identifiers every payload carries. */
export interface EpisodeRef {
  episode_id: string;
  robot_id: string;
  recording_session_id: string;
  episode_seq: number;
}

export interface ReplicaRef {
  destination_id: string;
  grant_id: string;
  object_key: string | null;
  state: string;
}

function build(type: WebhookEvent, payload: WebhookPayload): EpisodeEvent {
  return { type, episodeId: payload.episode_id, payload: WebhookPayloadSchema.parse(payload) };
}

function ref(ep: EpisodeRef): Pick<WebhookPayload, 'schema_version' | 'episode_id' | 'robot_id' | 'recording_session_id' | 'episode_seq'> {
  return { schema_version: 1, episode_id: ep.episode_id, robot_id: ep.robot_id, recording_session_id: ep.recording_session_id, episode_seq: ep.episode_seq };
}

/** An episode's report was first indexed. */
export function finalizedEvent(ep: EpisodeRef): EpisodeEvent {
  return build('episode.finalized', { ...ref(ep), state: 'reported' });
}

/** The event an ingest announces for a report it indexed (every engine appends this one). */
export function indexedEvent({ robotId, report: r }: { robotId: string; report: Pick<EpisodeReport, 'id' | 'recording_session_id' | 'episode_seq'> }): EpisodeEvent {
  return finalizedEvent({ episode_id: r.id, robot_id: robotId, recording_session_id: r.recording_session_id, episode_seq: r.episode_seq });
}

/** The robot's retention deleted the episode's local copy (no destination: it is per episode). */
export function prunedEvent(ep: EpisodeRef): EpisodeEvent {
  return build('episode.pruned', { ...ref(ep), state: 'pruned' });
}

/** The synthetic `episode.finalized` of `POST /v1/webhooks/{id}/test`. */
export function testFinalizedEvent(): EpisodeEvent {
  const ep = { episode_id: 'ep_test0000000000', robot_id: 'rbt_test', recording_session_id: 'rs_test', episode_seq: 1 };
  return build('episode.finalized', { ...ref(ep), state: 'reported', test: true });
}

/** A robot went online or offline, or its recording state changed. */
export function robotStatusEvent(r: RobotPresence): RobotStatusEvent {
  const payload = { schema_version: 1, robot_id: r.id, online: r.connected, recording_state: r.recordingState, last_seen_at: r.lastSeenAt === null ? null : iso(r.lastSeenAt) } as const;
  return { type: ROBOT_STATUS_EVENT, episodeId: null, payload: RobotStatusPayloadSchema.parse(payload) };
}

function replicaFields(r: ReplicaRef): Pick<WebhookPayload, 'destination_id' | 'grant_id' | 'object_key' | 'state'> {
  return { destination_id: r.destination_id, grant_id: r.grant_id, ...(r.object_key ? { object_key: r.object_key } : {}), state: r.state };
}

/** A replica reached `synced` (all files uploaded) or `verified` (checksums matched). */
export function replicaReachedEvent(type: 'episode.synced' | 'episode.verified', ep: EpisodeRef, r: ReplicaRef): EpisodeEvent {
  return build(type, { ...ref(ep), ...replicaFields({ ...r, state: type === 'episode.synced' ? 'synced' : 'verified' }) });
}

/** A transfer attempt failed; `state` is the one the replica keeps. */
export function replicaFailedEvent(ep: EpisodeRef, r: ReplicaRef, error: string): EpisodeEvent {
  return build('episode.failed', { ...ref(ep), ...replicaFields(r), error: splitReplicaError(error) });
}

/**
 * A replica's error is one line, `code: message` (decisions); the webhook carries it split. A
 * line without a code-like prefix keeps its whole text as the message under the code `failed`.
 */
export function splitReplicaError(line: string): { code: string; message: string } {
  const m = /^([A-Za-z0-9_.-]{1,64}):\s*(.*)$/s.exec(line);
  if (m) return { code: m[1]!, message: m[2]!.slice(0, 1024) };
  return { code: 'failed', message: line.slice(0, 1024) };
}
