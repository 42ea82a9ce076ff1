import type { PageOptions, Robot, RobotListOptions } from '@fleet/client';
import { RECORDING_STATES } from '@fleet/protocol/browser';

/**
 * The fleet page's state as its URL keeps it (shared or reloaded, the view is the same): the
 * filters and order of `GET /v1/robots` under the API's own parameter names, and the page cursor.
 * A value the page does not offer (a hand-edited URL) counts as not given.
 */
export interface FleetQuery {
  q: string;
  connected: '' | 'true' | 'false';
  recordingState: '' | 'idle' | 'recording' | 'finalizing';
  /** Hours to a full disk, as offered in the filter (see PRESSURE_CHOICES); '' for any. */
  hoursToFullBelow: string;
  sort: FleetSort;
  order: 'asc' | 'desc';
  cursor: string;
}

export type FleetSort = 'name' | 'id' | 'last_seen_at';

export { RECORDING_STATES };

/** The disk filter's choices: fewer than this many hours until the robot's disk is full. */
export const PRESSURE_CHOICES: readonly { hours: string; label: string }[] = [
  { hours: '24', label: 'Low disk: under 24 h to full' },
  { hours: '72', label: 'Under 3 days to full' },
  { hours: '168', label: 'Under a week to full' },
];

/** The page size: a page of robots and one sync-health request for exactly those (the API allows 100 ids). */
export const FLEET_PAGE_SIZE = 50;

/** Sorting by name is what a person scans; the API's own default is by id. */
const DEFAULT_SORT: FleetSort = 'name';

function oneOf<T extends string>(v: string | null, allowed: readonly T[], fallback: T): T {
  return v !== null && (allowed as readonly string[]).includes(v) ? (v as T) : fallback;
}

export function fleetQueryFrom(params: URLSearchParams): FleetQuery {
  const sort = oneOf(params.get('sort'), ['name', 'id', 'last_seen_at'] as const, DEFAULT_SORT);
  return {
    q: (params.get('q') ?? '').slice(0, 128),
    connected: oneOf(params.get('connected'), ['', 'true', 'false'] as const, ''),
    recordingState: oneOf(params.get('recording_state'), ['', ...RECORDING_STATES] as const, ''),
    hoursToFullBelow: oneOf(params.get('hours_to_full_below'), ['', ...PRESSURE_CHOICES.map((c) => c.hours)], ''),
    sort,
    order: oneOf(params.get('order'), ['asc', 'desc'] as const, defaultOrder(sort)),
    cursor: params.get('cursor') ?? '',
  };
}

/** Recently seen first is the useful way round for last seen; names and ids read A to Z. */
export function defaultOrder(sort: FleetSort): 'asc' | 'desc' {
  return sort === 'last_seen_at' ? 'desc' : 'asc';
}

/** The URL query of a state, defaults left out (a clean URL for the plain view). */
export function fleetSearch(f: FleetQuery): URLSearchParams {
  const p = new URLSearchParams();
  if (f.q.trim() !== '') p.set('q', f.q);
  if (f.connected) p.set('connected', f.connected);
  if (f.recordingState) p.set('recording_state', f.recordingState);
  if (f.hoursToFullBelow) p.set('hours_to_full_below', f.hoursToFullBelow);
  if (f.sort !== DEFAULT_SORT) p.set('sort', f.sort);
  if (f.order !== defaultOrder(f.sort)) p.set('order', f.order);
  if (f.cursor) p.set('cursor', f.cursor);
  return p;
}

/** The `robots.list` options of a state. */
export function listOptions(f: FleetQuery, signal?: AbortSignal): PageOptions & RobotListOptions {
  return {
    limit: FLEET_PAGE_SIZE,
    ...(f.cursor ? { cursor: f.cursor } : {}),
    ...(f.q.trim() !== '' ? { q: f.q.trim() } : {}),
    ...(f.connected ? { connected: f.connected === 'true' } : {}),
    ...(f.recordingState ? { recordingState: f.recordingState } : {}),
    ...(f.hoursToFullBelow ? { hoursToFullBelow: Number(f.hoursToFullBelow) } : {}),
    sort: f.sort,
    order: f.order,
    ...(signal ? { signal } : {}),
  };
}

/** Whether any filter narrows the list (the empty state says so and offers to clear them). */
export function isFiltered(f: FleetQuery): boolean {
  return f.q.trim() !== '' || f.connected !== '' || f.recordingState !== '' || f.hoursToFullBelow !== '';
}

/** `data` of a `robot.status` event (docs: live events). */
export interface RobotStatusData {
  robot_id: string;
  online: boolean;
  recording_state: Robot['recording_state'];
  last_seen_at: string | null;
}

export function robotStatusOf(data: Record<string, unknown>): RobotStatusData | null {
  const { robot_id, online, recording_state, last_seen_at } = data;
  if (typeof robot_id !== 'string' || typeof online !== 'boolean') return null;
  const state = recording_state === null || (typeof recording_state === 'string' && (RECORDING_STATES as readonly string[]).includes(recording_state)) ? (recording_state as Robot['recording_state']) : null;
  return { robot_id, online, recording_state: state, last_seen_at: typeof last_seen_at === 'string' ? last_seen_at : null };
}

/**
 * A robot with a status event applied. Events of one robot can arrive out of order across a
 * reconnect: one older than what the row shows (by last_seen_at) is not applied.
 */
export function applyStatus(r: Robot, s: RobotStatusData): Robot {
  if (r.id !== s.robot_id) return r;
  if (r.last_seen_at && s.last_seen_at && Date.parse(s.last_seen_at) < Date.parse(r.last_seen_at)) return r;
  return { ...r, connected: s.online, recording_state: s.recording_state, last_seen_at: s.last_seen_at ?? r.last_seen_at };
}
