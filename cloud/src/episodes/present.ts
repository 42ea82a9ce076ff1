import { LRUCache } from 'lru-cache';
import { iso, safeJsonStringify, type Episode, type EpisodeWithLocations, type Replica } from '@fleet/protocol';
import type { EpisodeRow, ReplicaRow } from '../store/index.js';
import type { EpisodeLineBatch, EpisodeLineRow } from '../store/index.js';

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

const q = JSON.stringify;
const DAY_MS = 86_400_000;
const MAX_4_DIGIT_YEAR_MS = 253_402_300_799_999;
/** Date prefixes (`2026-01-02T`) by day: a line has two dates (started, reported) from different days. */
const isoDayPrefixes = new LRUCache<number, string>({ max: 64 });
const pad2 = (n: number) => (n < 10 ? `0${n}` : String(n));
const pad3 = (n: number) => (n < 10 ? `00${n}` : n < 100 ? `0${n}` : String(n));

/** `iso(ms)` exactly, with the date part cached: rows of an export come from a few days at a time. */
function fastIso(ms: number): string {
  if (!Number.isInteger(ms) || ms < 0 || ms > MAX_4_DIGIT_YEAR_MS) return iso(ms);
  let rem = ms % DAY_MS;
  const day = ms - rem;
  let prefix = isoDayPrefixes.get(day);
  if (prefix === undefined) {
    prefix = iso(day).slice(0, 11);
    isoDayPrefixes.set(day, prefix);
  }
  const h = Math.floor(rem / 3_600_000);
  rem -= h * 3_600_000;
  const m = Math.floor(rem / 60_000);
  rem -= m * 60_000;
  const sec = Math.floor(rem / 1000);
  return `${prefix}${pad2(h)}:${pad2(m)}:${pad2(sec)}.${pad3(rem - sec * 1000)}Z`;
}

function filesJson(manifestText: string): string {
  const files = (JSON.parse(manifestText) as EpisodeRow['manifest']).files;
  return safeJsonStringify(files.map((f) => ({ path: f.path, size_bytes: f.size_bytes, sha256: f.sha256 })));
}

function replicasJson(replicas: readonly ReplicaRow[]): string {
  return replicas.length === 0 ? '[]' : safeJsonStringify(replicas.map(toReplica));
}

function locationsJson(replicas: readonly ReplicaRow[]): string {
  if (replicas.length === 0) return '[]';
  return safeJsonStringify(replicas.map((r) => ({ destination_id: r.destinationId, state: r.state, object_key: r.objectKey, grant_id: r.grantId })));
}

/**
 * One export / manifest line, `safeJsonStringify(toEpisodeWithLocations(row))` byte for byte
 * plus the newline, built from the stored columns without an EpisodeRow: the keys in the same
 * order, each value serialized by the same JSON.stringify, segments never parsed. Metadata and
 * annotations go out as their stored text: the store writes them with JSON.stringify, and
 * stringifying what JSON.parse makes of that text gives the same text back (key order, number
 * and string forms are canonical), so parsing and re-serializing them per line only cost time.
 */
export function episodeLine(r: EpisodeLineRow, replicas: readonly ReplicaRow[] = []): string {
  const [, id, robotId, sessionId, episodeSeq, sessionName, taskId, taskName, subtaskId, operatorId, operatorName, outcome, recordedOutcome] = r;
  const [, , , , , , , , , , , , , controlMode, policyVersionId, evalId, startedAt, endedAt, durationS, messageCount, bagSizeBytes, bagUri] = r;
  const [, , , , , , , , , , , , , , , , , , , , , , metadata, annotations, manifest, reportedAt] = r;
  return (
    `{"id":${q(id)},"robot_id":${q(robotId)},"recording_session_id":${q(sessionId)},"episode_seq":${q(episodeSeq)}` +
    `,"session_name":${q(sessionName)},"task_id":${q(taskId)},"task_name":${q(taskName)},"subtask_id":${q(subtaskId)}` +
    `,"operator_id":${q(operatorId)},"operator_name":${q(operatorName)},"outcome":${q(outcome)},"recorded_outcome":${q(recordedOutcome)}` +
    `,"control_mode":${q(controlMode)},"policy_version_id":${q(policyVersionId)},"eval_id":${q(evalId)}` +
    `,"started_at":"${fastIso(startedAt)}","ended_at":${endedAt === null ? 'null' : `"${fastIso(endedAt)}"`}` +
    `,"duration_s":${q(durationS)},"message_count":${q(messageCount)},"bag_size_bytes":${q(bagSizeBytes)},"bag_uri":${q(bagUri ?? null)}` +
    `,"metadata":${metadata},"annotations":${annotations}` +
    `,"reported_at":"${fastIso(reportedAt)}","replicas":${replicasJson(replicas)},"files":${filesJson(manifest)},"locations":${locationsJson(replicas)}}\n`
  );
}

/**
 * Characters per stream chunk of lines. Many rows per chunk keep the per-chunk costs (stream,
 * socket write) small; a chunk much past 64 KiB would be a string V8 allocates in its large-object
 * space, which only a full collection frees: an export of 1M rows in 300 KB chunks grew the
 * process by 40-60 MiB before one came, in chunks of this size by a few MiB.
 */
export const LINES_CHUNK_CHARS = 48 * 1024;

/** A batch of lines as stream chunks of about LINES_CHUNK_CHARS: several rows per chunk, never one huge string. */
export function* episodeLines(batch: EpisodeLineBatch): Generator<string> {
  let out = '';
  for (const r of batch.rows) {
    out += episodeLine(r, batch.replicas.get(r[0]));
    if (out.length >= LINES_CHUNK_CHARS) {
      yield out;
      out = '';
    }
  }
  if (out !== '') yield out;
}
