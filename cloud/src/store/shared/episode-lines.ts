// An episode's stored columns, and the subset an export or manifest line is built from, shared by
// both engines (no EpisodeRow per line: see episodes/present.ts).
import { safeJsonStringify } from '@fleet/protocol';

/** The columns of an episode row, as both engines store them. */
export interface EpisodeColumns {
  seq: number;
  id: string;
  org_id: string;
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
  outcome: string;
  recorded_outcome: string | null;
  started_at: number;
  ended_at: number | null;
  duration_s: number | null;
  message_count: number | null;
  bag_size_bytes: number | null;
  bag_uri: string | null;
  metadata: string;
  annotations: string;
  segments: string;
  manifest: string;
  /** 0/1 in SQLite, a boolean in PostgreSQL. */
  interrupted: number | boolean;
  reported_at: number;
}

/** Attribute values longer than this are kept in the episode but not indexed for filters. */
export const MAX_INDEXED_ATTR_VALUE = 512;
/** Attribute keys longer than this are kept in the episode but not indexed for filters. */
export const MAX_INDEXED_ATTR_KEY = 256;

/**
 * The (key, string form) pairs of an episode's metadata or annotations that the attribute index
 * holds, so that `metadata.<key>` / `annotation.<key>` filters find them: every one within the
 * key and value bounds, on both engines.
 */
export function* indexedAttrs(values: Record<string, unknown>): Generator<[key: string, value: string]> {
  for (const [key, value] of Object.entries(values)) {
    const s = attrString(value);
    if (key.length <= MAX_INDEXED_ATTR_KEY && s.length <= MAX_INDEXED_ATTR_VALUE) yield [key, s];
  }
}

/**
 * The top-level keys of an episode's metadata or annotations that the key index holds, so that
 * `has_metadata.<key>` / `has_annotation.<key>` filters find them: every key within the key
 * bound, whatever its value (a value too long for the attribute index still makes its key present).
 */
export function* indexedKeys(values: Record<string, unknown>): Generator<string> {
  for (const key of Object.keys(values)) if (key.length <= MAX_INDEXED_ATTR_KEY) yield key;
}

/** The keys an annotation patch takes out of the key index and puts in (keys kept stay as they are). */
export function keyChanges(before: Record<string, unknown>, after: Record<string, unknown>): { removed: string[]; added: string[] } {
  const had = new Set(indexedKeys(before));
  const has = new Set(indexedKeys(after));
  return { removed: [...had].filter((k) => !has.has(k)), added: [...has].filter((k) => !had.has(k)) };
}

/**
 * The key index rows of an episode as stored (its metadata and annotations as their JSON text):
 * what a migration that brings the key index writes for the episodes indexed before it.
 */
export function storedKeys(metadata: string, annotations: string): [layer: 'm' | 'a', key: string][] {
  const out: [layer: 'm' | 'a', key: string][] = [];
  for (const [layer, text] of [['m', metadata], ['a', annotations]] as const) {
    const values: unknown = JSON.parse(text);
    if (typeof values !== 'object' || values === null || Array.isArray(values)) continue;
    for (const key of indexedKeys(values as Record<string, unknown>)) out.push([layer, key]);
  }
  return out;
}

/**
 * An episode id that is indexed already, reported again: the same robot of the same organization
 * resending its report is a duplicate (acknowledged, nothing written); anyone else is a conflict.
 */
export function reportedAgain(prior: { org_id: string; robot_id: string }, orgId: string, robotId: string): 'duplicate' | 'conflict' {
  return prior.org_id === orgId && prior.robot_id === robotId ? 'duplicate' : 'conflict';
}

/** The string form an `annotation.<key>` / `metadata.<key>` filter compares against. */
export function attrString(value: unknown): string {
  return typeof value === 'string' ? value : safeJsonStringify(value);
}

/**
 * The columns an export line or a manifest line is made of, in this order: no segments (not part
 * of the line), metadata, annotations and manifest as their stored JSON text, parsed only by the
 * presenter. Rows come as arrays (better-sqlite3 raw mode), half the cost of an object per row.
 */
export const EPISODE_LINE_COLUMNS = [
  'seq', 'id', 'robot_id', 'recording_session_id', 'episode_seq', 'session_name', 'task_id', 'task_name', 'subtask_id',
  'operator_id', 'operator_name', 'outcome', 'recorded_outcome', 'control_mode', 'policy_version_id', 'eval_id',
  'started_at', 'ended_at', 'duration_s', 'message_count', 'bag_size_bytes', 'bag_uri', 'metadata', 'annotations',
  'manifest', 'reported_at',
] as const;
type LineColumn = (typeof EPISODE_LINE_COLUMNS)[number];
type ToTuple<T extends readonly LineColumn[]> = { readonly [K in keyof T]: EpisodeColumns[T[K] & LineColumn] };
export type EpisodeLineRow = ToTuple<typeof EPISODE_LINE_COLUMNS>;

/** The line columns with the episodes table's alias, for a SELECT list. */
export const EPISODE_LINE_SELECT = EPISODE_LINE_COLUMNS.map((c) => `e.${c}`).join(', ');
