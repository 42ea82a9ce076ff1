import { z } from 'zod';
import {
  EpisodeFilesSchema,
  EpisodeSchema,
  EpisodeWithLocationsSchema,
  EPISODE_OUTCOMES,
  iso,
  OutcomeChangeSchema,
  PatchAnnotationsBodySchema,
  PatchOutcomeBodySchema,
  safeJsonStringify,
  SegmentSchema,
  STREAM_PAGE_LIMIT,
} from '@fleet/protocol';
import { parseEpisodeFilter } from '../../episodes/filter.js';
import { episodeLines, toEpisode } from '../../episodes/present.js';
import { notFound, validationError } from '../../errors.js';
import { errorResponses } from '../../http/error-responses.js';
import { principalOf } from '../../http/policy.js';
import type { EpisodeFilter, Store } from '../../store/index.js';
import { decodeRowCursor } from '../cursor.js';
import type { OpaqueIds } from '../../opaque-ids.js';
import { NDJSON, sendNdjson } from '../ndjson.js';
import { queryInt } from '../query.js';
import { v1Plugin } from './types.js';
import { fromBody, linksTo } from '../../http/openapi-links.js';

/** Largest annotations layer of one episode, as JSON. */
export const MAX_ANNOTATIONS_BYTES = 64 * 1024;
const EXPORT_CHUNK = 500;

// 1 to 512 characters, as parseEpisodeFilter takes them (an empty value is refused, so the
// document says so).
const filterText = z.string().min(1).max(512).optional();
/** The documented filter parameters; the attribute families (`metadata.<key>`, `annotation.<key>`, `has_metadata.<key>`, `has_annotation.<key>`) ride in the catchall. */
const FilterQuery = {
  cursor: z.string().min(1).max(512).optional(),
  robot_id: filterText,
  task_id: filterText,
  subtask_id: filterText,
  operator_id: filterText,
  control_mode: filterText,
  policy_version_id: filterText,
  eval_id: filterText,
  outcome: z.enum(EPISODE_OUTCOMES).optional(),
  // Stated as a date-time (RFC 3339) in the document; `to` cannot be: it is a destination id with sync_state.
  from: z.string().max(512).meta({ format: 'date-time' }).optional().describe('date-time: started_at lower bound'),
  to: filterText.describe('date-time: started_at upper bound; otherwise, with sync_state, a destination id'),
  destination_id: filterText.describe('with sync_state: the destination it is about'),
  sync_state: z.enum(['unverified', 'synced', 'verified']).optional(),
};
const Catchall = z
  .union([z.string(), z.array(z.string())])
  .describe('metadata.<key> or annotation.<key>: equality on the value; has_metadata.<key> or has_annotation.<key>: true or false, whether the key is present');

const IdParams = z.strictObject({ id: z.string().min(1).max(128) });

/** The position after which a page starts: 0 without a cursor. */
export function decodeSeqCursor(ids: OpaqueIds, cursor: string | undefined): number {
  return cursor === undefined ? 0 : decodeRowCursor(ids, 'episodeCursor', cursor);
}

function filterFrom(query: Record<string, unknown>): EpisodeFilter {
  const { cursor: _c, limit: _l, ...rest } = query;
  return parseEpisodeFilter(rest, 'querystring');
}

/**
 * Streams up to `limit` rows as NDJSON. The page is sized first from the seqs alone (cheap), so
 * `X-Next-Cursor` can go out before the body; then the rows follow in chunks.
 */
export async function streamEpisodePage(
  store: Store,
  ids: OpaqueIds,
  orgId: string,
  filter: EpisodeFilter,
  afterSeq: number,
  limit: number,
): Promise<{ nextCursor: string | null; lines: AsyncIterable<string> }> {
  const seqs = await store.episodes.listSeqs(orgId, filter, afterSeq, limit + 1);
  const page = seqs.slice(0, limit);
  const lastSeq = page[page.length - 1];
  const source = store.episodes;
  async function* lines(): AsyncGenerator<string> {
    if (lastSeq === undefined) return;
    let after = afterSeq;
    // One string per chunk of rows, built straight from the stored columns (no EpisodeRow).
    for (;;) {
      const batch = await source.listLines(orgId, filter, after, EXPORT_CHUNK, lastSeq);
      if (batch.rows.length > 0) yield* episodeLines(batch);
      if (batch.rows.length < EXPORT_CHUNK) return;
      after = batch.rows[batch.rows.length - 1]![0];
    }
  }
  return { nextCursor: seqs.length > limit && lastSeq !== undefined ? ids.encode('episodeCursor', lastSeq) : null, lines: lines() };
}

/** /v1/episodes: the index (spec, Episodes). */
export const episodeRoutes = v1Plugin<'store' | 'clock' | 'secrets'>('episodes', async (app, { store, clock, secrets }) => {
  const ids = secrets.opaqueIds();
  const read = { auth: 'key', scope: 'data:read', feature: 'data.metadata' } as const;
  const write = { auth: 'key', scope: 'data:write', feature: 'data.metadata' } as const;

  app.route({
    method: 'GET',
    url: '/episodes',
    config: { policy: { ...read, meter: 'episodes.list' } },
    links: { 200: linksTo(['getEpisode', 'annotateEpisode', 'listEpisodeSegments', 'getEpisodeFiles', 'getEpisodeOutcomeHistory', 'setEpisodeOutcome', 'createEpisodeReadLinks'], { id: fromBody('/episodes/0/id') }, 'The first episode listed') },
    schema: {
      operationId: 'listEpisodes',
      summary: 'List episodes',
      description: 'Keyset-paginated in the order episodes were indexed, so paging never skips or repeats a row while new ones arrive.',
      querystring: z.object({ ...FilterQuery, limit: queryInt(1, 100, 50) }).catchall(Catchall),
      response: { 200: z.object({ episodes: z.array(EpisodeSchema), cursor: z.string().nullable() }) },
    },
    handler: async (request) => {
      const { org } = principalOf(request);
      const { limit, cursor } = request.query;
      const filter = filterFrom(request.query);
      const rows = await store.episodes.list(org.id, filter, decodeSeqCursor(ids, cursor), limit + 1);
      const page = rows.slice(0, limit);
      const next = rows.length > limit ? ids.encode('episodeCursor', page[page.length - 1]!.seq) : null;
      return { episodes: page.map(toEpisode), cursor: next };
    },
  });

  app.route({
    method: 'GET',
    url: '/episodes/export',
    config: { policy: { ...read, meter: 'episodes.exported' } },
    schema: {
      operationId: 'exportEpisodes',
      summary: 'Export episodes with their files and data locations as NDJSON',
      description: 'One line per episode. `X-Next-Cursor` carries the next page and is absent when complete.',
      querystring: z.object({ ...FilterQuery, limit: queryInt(1, STREAM_PAGE_LIMIT.max, STREAM_PAGE_LIMIT.default) }).catchall(Catchall),
      response: { 200: { description: 'NDJSON rows', content: { [NDJSON]: { schema: EpisodeWithLocationsSchema } } } },
    },
    handler: async (request, reply) => {
      const { org } = principalOf(request);
      const { limit, cursor } = request.query;
      const page = await streamEpisodePage(store, ids, org.id, filterFrom(request.query), decodeSeqCursor(ids, cursor), limit);
      return sendNdjson(reply, page.nextCursor, page.lines);
    },
  });

  app.route({
    method: 'GET',
    url: '/episodes/:id',
    config: { policy: { ...read, meter: null } },
    schema: { operationId: 'getEpisode', summary: 'Get an episode', params: IdParams, response: { 200: EpisodeSchema, ...errorResponses('not_found') } },
    handler: async (request) => {
      const row = await store.episodes.get(principalOf(request).org.id, request.params.id);
      if (!row) throw notFound('episode');
      return toEpisode(row);
    },
  });

  app.route({
    method: 'GET',
    url: '/episodes/:id/segments',
    config: { policy: { ...read, meter: null } },
    schema: {
      operationId: 'listEpisodeSegments',
      summary: "The episode's subtask timeline",
      description: 'Offsets are seconds from the episode\'s `started_at`.',
      params: IdParams,
      response: { 200: z.object({ segments: z.array(SegmentSchema) }), ...errorResponses('not_found') },
    },
    handler: async (request) => {
      const row = await store.episodes.get(principalOf(request).org.id, request.params.id);
      if (!row) throw notFound('episode');
      return { segments: row.segments };
    },
  });

  app.route({
    method: 'GET',
    url: '/episodes/:id/files',
    config: { policy: { ...read, meter: null } },
    schema: {
      operationId: 'getEpisodeFiles',
      summary: "The episode's files as its manifest lists them",
      description: 'Paths, sizes and SHA-256 digests the robot reported; never the bytes or a URL to them.',
      params: IdParams,
      response: { 200: EpisodeFilesSchema, ...errorResponses('not_found') },
    },
    handler: async (request) => {
      const row = await store.episodes.get(principalOf(request).org.id, request.params.id);
      if (!row) throw notFound('episode');
      return {
        files: row.manifest.files.map((f) => ({ path: f.path, size_bytes: f.size_bytes, sha256: f.sha256 })),
        total_bytes: row.manifest.total_bytes,
      };
    },
  });

  app.route({
    method: 'GET',
    url: '/episodes/:id/outcome-history',
    config: { policy: { ...read, meter: null } },
    schema: {
      operationId: 'getEpisodeOutcomeHistory',
      summary: 'The audit log of outcome overrides',
      params: IdParams,
      response: { 200: z.object({ outcome_history: z.array(OutcomeChangeSchema) }), ...errorResponses('not_found') },
    },
    handler: async (request) => {
      const changes = await store.episodes.outcomeHistory(principalOf(request).org.id, request.params.id);
      if (!changes) throw notFound('episode');
      return { outcome_history: changes.map((c) => ({ actor: c.actor, at: iso(c.at), from: c.from, to: c.to, reason: c.reason })) };
    },
  });

  app.route({
    method: 'PATCH',
    url: '/episodes/:id',
    config: { policy: { ...write, meter: null } },
    schema: {
      operationId: 'annotateEpisode',
      summary: 'Annotate an episode',
      description: `Recorded facts cannot be modified. The merged annotations may be at most ${MAX_ANNOTATIONS_BYTES} bytes of JSON.`,
      params: IdParams,
      body: PatchAnnotationsBodySchema,
      response: { 200: EpisodeSchema, ...errorResponses('not_found') },
    },
    handler: async (request) => {
      const { org } = principalOf(request);
      const current = await store.episodes.get(org.id, request.params.id);
      if (!current) throw notFound('episode');
      const merged: Record<string, unknown> = { ...current.annotations };
      for (const [k, v] of Object.entries(request.body.annotations)) {
        if (v === null) delete merged[k];
        else merged[k] = v;
      }
      if (Buffer.byteLength(safeJsonStringify(merged)) > MAX_ANNOTATIONS_BYTES) {
        throw validationError('body', '/annotations', `annotations would exceed ${MAX_ANNOTATIONS_BYTES} bytes`, 'too_large');
      }
      const row = await store.episodes.patchAnnotations(org.id, request.params.id, request.body.annotations);
      if (!row) throw notFound('episode');
      return toEpisode(row);
    },
  });

  app.route({
    method: 'PATCH',
    url: '/episodes/:id/outcome',
    config: { policy: { ...write, meter: null } },
    schema: {
      operationId: 'setEpisodeOutcome',
      summary: "Override an episode's effective outcome",
      description: '`recorded_outcome` never changes; each override appends to the outcome history.',
      params: IdParams,
      body: PatchOutcomeBodySchema,
      response: { 200: EpisodeSchema, ...errorResponses('not_found') },
    },
    handler: async (request) => {
      const { org, key } = principalOf(request);
      const row = await store.episodes.setOutcome(org.id, request.params.id, {
        outcome: request.body.outcome,
        reason: request.body.reason,
        actor: key.id,
        at: clock.now(),
      });
      if (!row) throw notFound('episode');
      return toEpisode(row);
    },
  });
});
