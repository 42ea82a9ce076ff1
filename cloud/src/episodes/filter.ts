import { EPISODE_OUTCOMES, EPISODE_SYNC_STATES } from '@fleet/protocol';
import { ApiError, jsonPointer, unrecognizedKeys, type ValidationIssue } from '../errors.js';
import { EPISODE_EQ_COLUMNS, type EpisodeEqColumn, type EpisodeFilter } from '../store/index.js';

export const MAX_FILTER_VALUE = 512;
const MAX_ATTR_KEY = 256;
const SYNC_STATES = EPISODE_SYNC_STATES;
/** The presence families and the EpisodeFilter field each fills. */
const PRESENCE = { has_metadata: 'hasMetadata', has_annotation: 'hasAnnotation' } as const;
/** Keys a filter may hold besides the attribute families `metadata.<key>`, `annotation.<key>`, `has_metadata.<key>` and `has_annotation.<key>`. */
export const FILTER_KEYS = [...EPISODE_EQ_COLUMNS, 'from', 'to', 'destination_id', 'sync_state'] as const;


const DATE_TIME = /^(\d{4})-(\d{2})-(\d{2})T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/;

/** Has the shape of a date-time, valid or not (`to` of that shape is never a destination id). */
function looksLikeDateTime(v: string): boolean {
  return DATE_TIME.test(v);
}

// Date.parse rolls 2026-02-30 over to March 2 instead of failing, so the calendar day is checked too.
function isDateTime(v: string): boolean {
  const m = DATE_TIME.exec(v);
  if (!m || Number.isNaN(Date.parse(v))) return false;
  const [y, mo, d] = [Number(m[1]), Number(m[2]), Number(m[3])];
  const day = new Date(0);
  day.setUTCFullYear(y, mo - 1, d);
  return day.getUTCFullYear() === y && day.getUTCMonth() === mo - 1 && day.getUTCDate() === d;
}

/**
 * Turns the episode list's filter keys (query parameters, or a dataset's `filter` object) into an
 * EpisodeFilter. Unknown keys, repeated keys and bad values are 400 `validation_failed` naming
 * each offending key. `to` is the started_at bound when it parses as a date-time, otherwise (with
 * `sync_state`) a destination id; `destination_id` is the unambiguous alias (decisions.md).
 */
export function parseEpisodeFilter(input: Record<string, unknown>, location: 'querystring' | 'body'): EpisodeFilter {
  const issues: ValidationIssue[] = [];
  const unknown: string[] = [];
  const bad = (key: string, message: string, code = 'invalid') =>
    issues.push({ location, path: jsonPointer(location === 'body' ? ['filter', key] : [key]), code, message });
  const filter: EpisodeFilter = { eq: {}, metadata: {}, annotation: {} };
  let destination: string | undefined;
  let toDestination: string | undefined;

  for (const [key, raw] of Object.entries(input)) {
    if (raw === undefined) continue;
    if (Array.isArray(raw)) {
      bad(key, 'given more than once', 'repeated');
      continue;
    }
    if (typeof raw !== 'string') {
      bad(key, 'must be a string');
      continue;
    }
    const value = raw;
    const dot = key.indexOf('.');
    const layer = dot > 0 ? key.slice(0, dot) : '';
    if (layer === 'has_metadata' || layer === 'has_annotation') {
      // Whether the key is there at all, whatever its value: exactly `true` or `false`, so no
      // other spelling (`1`, `yes`, `False`) is read one way here and another way by a client.
      const attr = key.slice(dot + 1);
      if (attr.length === 0 || attr.length > MAX_ATTR_KEY) bad(key, `the key after "${layer}." must be 1 to ${MAX_ATTR_KEY} characters`);
      else if (value !== 'true' && value !== 'false') bad(key, 'must be true (the key is present) or false (the key is absent)');
      else Object.defineProperty((filter[PRESENCE[layer]] ??= {}), attr, { value: value === 'true', enumerable: true, writable: true, configurable: true });
      continue;
    }
    if (value.length === 0 || value.length > MAX_FILTER_VALUE) {
      bad(key, `must be 1 to ${MAX_FILTER_VALUE} characters`);
      continue;
    }
    if (layer === 'metadata' || layer === 'annotation') {
      const attr = key.slice(dot + 1);
      if (attr.length === 0 || attr.length > MAX_ATTR_KEY) bad(key, `the key after "${layer}." must be 1 to ${MAX_ATTR_KEY} characters`);
      // defineProperty: a plain assignment to `__proto__` would drop the filter and match everything.
      else Object.defineProperty(filter[layer], attr, { value, enumerable: true, writable: true, configurable: true });
      continue;
    }
    if ((EPISODE_EQ_COLUMNS as readonly string[]).includes(key)) {
      if (key === 'outcome' && !(EPISODE_OUTCOMES as readonly string[]).includes(value)) bad(key, `must be one of ${EPISODE_OUTCOMES.join(', ')}`);
      else filter.eq[key as EpisodeEqColumn] = value;
      continue;
    }
    switch (key) {
      case 'from':
        if (isDateTime(value)) filter.from = Date.parse(value);
        else bad(key, 'must be a date-time');
        break;
      case 'to':
        if (isDateTime(value)) filter.to = Date.parse(value);
        else if (looksLikeDateTime(value)) bad(key, 'must be a valid date-time');
        else toDestination = value;
        break;
      case 'destination_id':
        destination = value;
        break;
      case 'sync_state':
        if ((SYNC_STATES as readonly string[]).includes(value)) filter.syncState = { state: value as (typeof SYNC_STATES)[number] };
        else bad(key, `must be one of ${SYNC_STATES.join(', ')}`);
        break;
      default:
        unknown.push(key);
    }
  }

  // Rules between keys, which no schema of one key can state: each has its own issue code
  // (docs/api.md, Lists and pagination), so a client or a fuzzer can tell them from a bad value.
  if (toDestination !== undefined && destination !== undefined && toDestination !== destination) {
    bad('to', 'names a destination other than destination_id', 'destination_mismatch');
  }
  const dest = destination ?? toDestination;
  if (dest !== undefined) {
    if (!filter.syncState) bad(toDestination !== undefined ? 'to' : 'destination_id', 'a destination needs sync_state (a non-date-time `to` is a destination id)', 'destination_without_sync_state');
    else filter.syncState.destinationId = dest;
  }
  if (filter.from !== undefined && filter.to !== undefined && filter.from > filter.to) bad('from', 'must not be after to', 'range');
  // Reported as the route schemas report an unknown key, so every route refuses one alike.
  if (unknown.length > 0) issues.push(unrecognizedKeys(location === 'body' ? 'body' : 'querystring', location === 'body' ? '/filter' : '', unknown));
  if (issues.length > 0) throw new ApiError('validation_failed', 'invalid filter', { issues });
  return filter;
}
