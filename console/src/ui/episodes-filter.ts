import { FleetApiError } from '@fleet/client';
import type { Episode } from '@fleet/client';

/**
 * The episode filter as the console keeps it: the query parameters of `GET /v1/episodes`
 * (docs/api.md, Episodes), held in the page URL so a view can be shared and reloaded. The same
 * keys make a dataset's filter. Values are strings, as the API compares them.
 */
export type EpisodeFilter = Record<string, string>;

export { EPISODE_OUTCOMES as OUTCOMES, EPISODE_SYNC_STATES as SYNC_STATES } from '@fleet/protocol/browser';

/** The fixed filter fields, in the order the form shows them. */
export const FILTER_FIELDS: readonly { key: string; label: string; hint?: string; kind?: 'outcome' | 'sync' | 'time' }[] = [
  { key: 'robot_id', label: 'Robot', hint: 'rbt_…' },
  { key: 'task_id', label: 'Task' },
  { key: 'subtask_id', label: 'Subtask' },
  { key: 'outcome', label: 'Outcome', kind: 'outcome' },
  { key: 'operator_id', label: 'Operator' },
  { key: 'control_mode', label: 'Control mode', hint: 'e.g. teleop, autonomous' },
  { key: 'policy_version_id', label: 'Policy version' },
  { key: 'eval_id', label: 'Evaluation' },
  { key: 'from', label: 'Started from', hint: 'UTC date-time, e.g. 2026-11-23T00:00:00Z', kind: 'time' },
  { key: 'to', label: 'Started until', hint: 'UTC date-time, inclusive', kind: 'time' },
  { key: 'sync_state', label: 'Sync state', kind: 'sync' },
  { key: 'destination_id', label: 'Destination (with sync state)', hint: 'dst_…' },
];

export const FIXED_KEYS: ReadonlySet<string> = new Set(FILTER_FIELDS.map((f) => f.key));
export const LAYERS = ['metadata', 'annotation'] as const;
export type Layer = (typeof LAYERS)[number];

/** A `metadata.<key>` / `annotation.<key>` filter row of the form. */
export interface KeyRow {
  layer: Layer;
  key: string;
  value: string;
}

/** Query parameters that are page state, not filter. */
const PAGE_PARAMS = new Set(['cursor']);

/** The filter in a page query (everything but the cursor; unknown keys are kept so the API can say what is wrong). */
export function filterFromQuery(q: URLSearchParams): EpisodeFilter {
  const f: EpisodeFilter = {};
  for (const [k, v] of q) if (!PAGE_PARAMS.has(k) && v !== '') f[k] = v;
  return f;
}

export function queryFromFilter(f: EpisodeFilter, cursor?: string | null): URLSearchParams {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(f)) if (v !== '') q.set(k, v);
  if (cursor) q.set('cursor', cursor);
  return q;
}

export function keyRowsOf(f: EpisodeFilter): KeyRow[] {
  const rows: KeyRow[] = [];
  for (const [k, v] of Object.entries(f)) {
    const dot = k.indexOf('.');
    const layer = k.slice(0, dot);
    if (dot > 0 && (layer === 'metadata' || layer === 'annotation')) rows.push({ layer, key: k.slice(dot + 1), value: v });
  }
  return rows;
}

/** Keys in the URL the form has no field for (shown so they can be removed). */
export function otherKeys(f: EpisodeFilter): string[] {
  return Object.keys(f).filter((k) => !FIXED_KEYS.has(k) && !/^(metadata|annotation)\.[^]+$/.test(k));
}

/** The string form a `metadata.<key>` / `annotation.<key>` filter compares against (the cloud's attrString). */
export function attrString(value: unknown): string {
  return typeof value === 'string' ? value : JSON.stringify(value);
}

const DATE_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/;

/**
 * Whether an episode (as `GET /v1/episodes/{id}` answers it) matches the filter, as the API would
 * decide: used to say "N new episodes match" when `episode.finalized` events arrive, without
 * re-listing. Undecidable keys count as a match (the list, reloaded, is the truth).
 */
export function episodeMatches(e: Episode, f: EpisodeFilter): boolean {
  let destination: string | undefined = f.destination_id;
  for (const [k, v] of Object.entries(f)) {
    switch (k) {
      case 'robot_id':
      case 'task_id':
      case 'subtask_id':
      case 'operator_id':
      case 'control_mode':
      case 'policy_version_id':
      case 'eval_id':
      case 'outcome':
        if (e[k] !== v) return false;
        break;
      case 'from':
        if (Date.parse(e.started_at) < Date.parse(v)) return false;
        break;
      case 'to':
        if (DATE_TIME.test(v)) {
          if (Date.parse(e.started_at) > Date.parse(v)) return false;
        } else destination ??= v;
        break;
      case 'sync_state':
      case 'destination_id':
        break;
      default: {
        const dot = k.indexOf('.');
        const layer = k.slice(0, dot);
        if (layer === 'metadata' || layer === 'annotation') {
          const bag = layer === 'metadata' ? e.metadata : e.annotations;
          const key = k.slice(dot + 1);
          if (!bag || !Object.prototype.hasOwnProperty.call(bag, key) || attrString(bag[key]) !== v) return false;
        }
      }
    }
  }
  const sync = f.sync_state;
  if (sync) {
    const at = e.replicas.filter((r) => destination === undefined || r.destination_id === destination);
    const verified = at.some((r) => r.state === 'verified');
    const synced = at.some((r) => r.state === 'synced' || r.state === 'verified');
    if (sync === 'verified' && !verified) return false;
    if (sync === 'synced' && !synced) return false;
    if (sync === 'unverified' && verified) return false;
  }
  return true;
}

/** Whether a filter can be decided from an event's own fields (no need to fetch the episode). */
export function decidableFromEvent(f: EpisodeFilter): boolean {
  return Object.keys(f).every((k) => k === 'robot_id');
}

/** One problem of a 400 `validation_failed`, with its JSON Pointer path split into names. */
export interface Issue {
  path: string[];
  message: string;
  /** `unrecognized_keys`: the unknown keys, under `path`. */
  keys: string[];
}

function unescapePointer(s: string): string {
  return s.replace(/~1/g, '/').replace(/~0/g, '~');
}

export function issuesOf(err: unknown): Issue[] {
  if (!(err instanceof FleetApiError) || err.code !== 'validation_failed') return [];
  const raw = (err.details?.issues ?? []) as unknown;
  if (!Array.isArray(raw)) return [];
  return (raw as { path?: unknown; message?: unknown; keys?: unknown }[]).map((i) => {
    let path: string[] = [];
    if (Array.isArray(i.path)) path = i.path.map(String);
    else if (typeof i.path === 'string') path = i.path.replace(/^\//, '').split('/').filter((p) => p !== '').map(unescapePointer);
    const keys = Array.isArray(i.keys) ? i.keys.map(String) : [];
    return { path, message: typeof i.message === 'string' ? i.message : 'invalid', keys };
  });
}

/** The issue's words, naming unknown keys. */
export function issueText(i: Issue): string {
  return i.keys.length > 0 ? `${i.message}: ${i.keys.join(', ')}` : i.message;
}

/**
 * The message of the issue at `path`, if any: an issue at it or under it (`['filter']` takes
 * `/filter/task_id`), or an `unrecognized_keys` issue of its parent listing its last name.
 */
export function issueAt(err: unknown, ...path: string[]): string | undefined {
  const issues = issuesOf(err);
  const at = issues.find((i) => path.every((p, n) => i.path[n] === p));
  if (at) return issueText(at);
  const last = path[path.length - 1];
  const parent = path.slice(0, -1);
  const unknown = issues.find((i) => i.keys.length > 0 && i.path.length === parent.length && parent.every((p, n) => i.path[n] === p) && last !== undefined && i.keys.includes(last));
  return unknown ? unknown.message : undefined;
}

/** A readable one-line summary of a filter (`task_id = pick · outcome = success`). */
export function describeFilter(f: Record<string, string>): string {
  const parts = Object.entries(f).map(([k, v]) => `${k} = ${v}`);
  return parts.length === 0 ? 'every episode' : parts.join(' · ');
}

/** The sync state of an episode as one word, from its replicas. */
export function syncSummary(e: Pick<Episode, 'replicas'>): { label: string; tone: 'ok' | 'warn' | 'bad' | 'idle' | 'info'; error: string | null } {
  const reps = e.replicas;
  const error = reps.find((r) => r.error)?.error ?? null;
  if (reps.length === 0) return { label: 'not routed', tone: 'idle', error: null };
  if (reps.every((r) => r.state === 'verified')) return { label: 'verified', tone: 'ok', error };
  if (error) return { label: 'failed', tone: 'bad', error };
  if (reps.some((r) => r.state === 'verified')) return { label: 'partly verified', tone: 'info', error };
  if (reps.every((r) => r.state === 'synced' || r.state === 'verified')) return { label: 'synced', tone: 'info', error };
  return { label: reps.some((r) => r.state === 'syncing') ? 'syncing' : 'granted', tone: 'warn', error };
}

/** `code: message` (the replica's error) split for display. */
export function splitError(s: string): { code: string; message: string } {
  const i = s.indexOf(': ');
  return i > 0 ? { code: s.slice(0, i), message: s.slice(i + 2) } : { code: '', message: s };
}

/** The event payload of `episode.*` (docs/api.md, Webhooks). */
export interface EpisodeEventData {
  episode_id: string;
  robot_id: string;
  state: string;
  destination_id?: string;
  grant_id?: string;
  object_key?: string;
  error?: { code: string; message: string };
  test?: boolean;
}

export function episodeEventData(data: Record<string, unknown>): EpisodeEventData | null {
  if (typeof data.episode_id !== 'string' || typeof data.robot_id !== 'string' || data.test === true) return null;
  return data as unknown as EpisodeEventData;
}

/**
 * An episode with one replica changed by a live event (`episode.synced|verified|failed`): the
 * row moves without a reload. A replica the page did not know yet is added.
 */
export function applyReplicaEvent(e: Episode, type: string, d: EpisodeEventData): Episode {
  if (!d.destination_id) return e;
  const now = new Date().toISOString();
  const known = e.replicas.some((r) => r.destination_id === d.destination_id);
  const state = (['granted', 'syncing', 'synced', 'verified'] as const).find((s) => s === d.state);
  const replicas = known
    ? e.replicas.map((r) =>
        r.destination_id !== d.destination_id
          ? r
          : {
              ...r,
              ...(state ? { state } : {}),
              ...(d.grant_id ? { grant_id: d.grant_id } : {}),
              ...(d.object_key ? { object_key: d.object_key } : {}),
              error: type === 'episode.failed' && d.error ? `${d.error.code}: ${d.error.message}` : type === 'episode.failed' ? r.error : null,
              updated_at: now,
            },
      )
    : [
        ...e.replicas,
        {
          destination_id: d.destination_id,
          state: state ?? 'granted',
          grant_id: d.grant_id ?? '',
          error: type === 'episode.failed' && d.error ? `${d.error.code}: ${d.error.message}` : null,
          updated_at: now,
          ...(d.object_key ? { object_key: d.object_key } : {}),
        },
      ];
  return { ...e, replicas };
}
