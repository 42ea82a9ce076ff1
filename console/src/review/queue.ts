import type { Episode } from '@fleet/client';
import type { EpisodeFilter } from '../ui/episodes-filter.js';

/**
 * The review queue's state and rules, without the DOM: what the URL holds, which episodes are in
 * a queue and in what order, what a decision and its undo write. The page (views/review.tsx) and
 * the tests use the same functions.
 *
 * A queue is a filter of the episode list plus an id (`q`): every decision writes the id into the
 * episode's annotations (`qa_queue`), so the queue finds its decided episodes again after a reload
 * even when its filter ("not yet reviewed") no longer matches them.
 */

/** Most episodes a queue holds from its filter (and, separately, from its own decisions). */
export const QUEUE_CAP = 2000;
/** The page size of the list calls that fill a queue (the API's largest). */
export const QUEUE_PAGE = 100;
/** Tags the curator can toggle: one per digit key 1–9. */
export const MAX_TAGS = 9;
export const MAX_TAG_LENGTH = 64;
/** Steps `u` can take back (a long session keeps only the latest). */
export const MAX_UNDO = 100;

/** The annotation keys a decision writes. */
export const QA_KEYS = ['qa_status', 'qa_by', 'qa_at', 'qa_queue', 'qa_tags'] as const;
export type QaKey = (typeof QA_KEYS)[number];
export type QaStatus = 'accepted' | 'rejected';

/** "Not yet reviewed": no `qa_status` annotation. The queue's filter when the page opens with none. */
export const NOT_REVIEWED: EpisodeFilter = { 'has_annotation.qa_status': 'false' };

/** URL parameters of the queue that are not episode filters. */
export const QUEUE_PARAMS: ReadonlySet<string> = new Set(['q', 'at', 'tags']);

const QUEUE_ID = /^[A-Za-z0-9_-]{1,64}$/;

export interface QueueParams {
  filter: EpisodeFilter;
  /** The queue id; null when the URL has none or an invalid one (the page then starts a new queue). */
  q: string | null;
  at: string | null;
  tags: string[];
  /** Why some tags of the URL were left out, if any were. */
  tagsNote: string | null;
}

export function isQueueId(s: string): boolean {
  return QUEUE_ID.test(s);
}

/** The filter, queue id, current episode and tags of a review page's query. */
export function parseQueueQuery(query: URLSearchParams): QueueParams {
  const filter: EpisodeFilter = {};
  for (const [k, v] of query) if (!QUEUE_PARAMS.has(k) && k !== 'cursor' && v !== '') filter[k] = v;
  const rawQ = query.get('q');
  const q = rawQ !== null && isQueueId(rawQ) ? rawQ : null;
  const at = query.get('at') || null;
  const { tags, note } = parseTags(query.get('tags') ?? '');
  return { filter, q, at, tags, tagsNote: note };
}

/** The query of a review page: the filter first (as the episode list writes it), then q, at and tags. */
export function queueQuery(p: { filter: EpisodeFilter; q: string | null; at?: string | null; tags?: readonly string[] }): URLSearchParams {
  const out = new URLSearchParams();
  for (const [k, v] of Object.entries(p.filter)) if (v !== '' && !QUEUE_PARAMS.has(k)) out.set(k, v);
  if (p.q) out.set('q', p.q);
  if (p.at) out.set('at', p.at);
  if (p.tags && p.tags.length > 0) out.set('tags', p.tags.join(','));
  return out;
}

/**
 * A comma list of tags as the curator typed it (or the URL holds it): trimmed, empty ones and
 * repeats dropped, at most {@link MAX_TAGS} of at most {@link MAX_TAG_LENGTH} characters.
 */
export function parseTags(raw: string): { tags: string[]; note: string | null } {
  const tags: string[] = [];
  let tooLong = 0;
  let tooMany = 0;
  for (const part of raw.split(',')) {
    const t = part.trim();
    if (t === '' || tags.includes(t)) continue;
    if (t.length > MAX_TAG_LENGTH) tooLong++;
    else if (tags.length >= MAX_TAGS) tooMany++;
    else tags.push(t);
  }
  const notes: string[] = [];
  if (tooMany > 0) notes.push(`at most ${MAX_TAGS} tags (one per key 1–9): ${tooMany} left out`);
  if (tooLong > 0) notes.push(`a tag has at most ${MAX_TAG_LENGTH} characters: ${tooLong} left out`);
  return { tags, note: notes.length > 0 ? notes.join('; ') : null };
}

/** A new queue id: `rq_` and 16 random letters and digits (about 80 bits). */
export function newQueueId(random: (bytes: Uint8Array) => Uint8Array = (b) => crypto.getRandomValues(b)): string {
  const alphabet = 'abcdefghijklmnopqrstuvwxyz234567';
  const bytes = random(new Uint8Array(16));
  let s = 'rq_';
  for (const b of bytes) s += alphabet[b & 31];
  return s;
}

/**
 * Every episode of a keyset-paginated listing, page after page, up to `cap`: `capped` says the
 * listing had more. `listPage` is one `client.episodes.list` call.
 */
export async function collectEpisodes(
  listPage: (cursor: string | undefined) => Promise<{ episodes: Episode[]; cursor: string | null }>,
  cap: number = QUEUE_CAP,
  onProgress?: (n: number) => void,
): Promise<{ episodes: Episode[]; capped: boolean }> {
  const episodes: Episode[] = [];
  let cursor: string | undefined;
  for (;;) {
    const page = await listPage(cursor);
    for (const e of page.episodes) {
      if (episodes.length >= cap) return { episodes, capped: true };
      episodes.push(e);
    }
    onProgress?.(episodes.length);
    if (!page.cursor) return { episodes, capped: false };
    if (episodes.length >= cap) return { episodes, capped: true };
    cursor = page.cursor;
  }
}

/**
 * The queue: the filter's episodes and those decided in this queue, each once, in the order the
 * cloud indexed them. Both inputs are in that order already (the list's keyset), so a decided
 * episode the filter no longer matches goes in before the first filtered episode indexed after it
 * (`reported_at`, the time the cloud indexed it).
 */
export function mergeQueue(filtered: readonly Episode[], decided: readonly Episode[]): Episode[] {
  const have = new Set(filtered.map((e) => e.id));
  const extra = decided.filter((e) => !have.has(e.id));
  if (extra.length === 0) return [...filtered];
  const out: Episode[] = [];
  let i = 0;
  for (const e of filtered) {
    const t = Date.parse(e.reported_at);
    while (i < extra.length && Date.parse(extra[i]!.reported_at) < t) out.push(extra[i++]!);
    out.push(e);
  }
  while (i < extra.length) out.push(extra[i++]!);
  return out;
}

/** This queue's decision on an episode, or null when it has none (decisions of other queues do not count here). */
export function decisionOf(e: Episode, q: string): QaStatus | null {
  const a = e.annotations;
  if (!a || a.qa_queue !== q) return null;
  return a.qa_status === 'accepted' || a.qa_status === 'rejected' ? a.qa_status : null;
}

export function progressOf(list: readonly Episode[], q: string): { reviewed: number; total: number } {
  let reviewed = 0;
  for (const e of list) if (decisionOf(e, q) !== null) reviewed++;
  return { reviewed, total: list.length };
}

/** The index of the first undecided episode after `from` (wrapping to the start), or -1 when every one is decided. */
export function nextUndecided(list: readonly Episode[], q: string, from: number): number {
  const n = list.length;
  for (let step = 1; step <= n; step++) {
    const i = (((from + step) % n) + n) % n;
    if (decisionOf(list[i]!, q) === null) return i;
  }
  return -1;
}

/** Where a queue opens: the episode of the URL when it is in the queue, else the first undecided one, else the first. */
export function startIndex(list: readonly Episode[], q: string, at: string | null): number {
  if (list.length === 0) return -1;
  if (at !== null) {
    const i = list.findIndex((e) => e.id === at);
    if (i >= 0) return i;
  }
  const first = nextUndecided(list, q, -1);
  return first >= 0 ? first : 0;
}

/** The `qa_tags` of an episode, when it holds a list of strings. */
export function tagsOf(e: Episode): string[] {
  const t = e.annotations?.qa_tags;
  return Array.isArray(t) ? t.filter((x): x is string => typeof x === 'string') : [];
}

/** Who decided: the API key's id and name (the console acts as the key it is signed in with). */
export interface Reviewer {
  keyId: string;
  keyName: string;
}

/** The annotations a decision writes; `qa_tags` only when the curator toggled tags on this episode. */
export function decisionPatch(d: { status: QaStatus; reviewer: Reviewer; q: string; at: Date; tags?: readonly string[] | undefined }): Partial<Record<QaKey, unknown>> {
  const base = {
    qa_status: d.status,
    qa_by: { id: d.reviewer.keyId, name: d.reviewer.keyName },
    qa_at: d.at.toISOString(),
    qa_queue: d.q,
  };
  return d.tags === undefined ? base : { ...base, qa_tags: [...d.tags] };
}

/**
 * The annotations that put back what an episode held before a decision: for each key the
 * decision wrote, its previous value, or null (which deletes it) when it had none.
 */
export function restorePatch(before: Episode, written: readonly string[]): Record<string, unknown> {
  const prev = before.annotations ?? {};
  const out: Record<string, unknown> = {};
  for (const k of written) out[k] = Object.prototype.hasOwnProperty.call(prev, k) ? prev[k] : null;
  return out;
}

export type Outcome = Episode['outcome'];

/** One step `u` takes back. */
export type UndoStep =
  | { kind: 'decision'; episodeId: string; status: QaStatus; restore: Record<string, unknown> }
  | { kind: 'outcome'; episodeId: string; from: Outcome; to: Outcome };

/** The stack with `step` on top, the oldest dropped past {@link MAX_UNDO}. */
export function pushUndo(stack: readonly UndoStep[], step: UndoStep): UndoStep[] {
  const next = [...stack, step];
  return next.length > MAX_UNDO ? next.slice(next.length - MAX_UNDO) : next;
}

/** The reason recorded in the outcome history when `u` takes an override back. */
export const UNDO_REASON = 'undo';
