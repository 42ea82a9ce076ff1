import { z } from 'zod';
import { CreateDatasetBodySchema, DatasetCountSchema, DatasetSchema, EpisodeWithLocationsSchema, iso, ManifestHeaderSchema, SnapshotResultSchema, STREAM_PAGE_LIMIT, type Dataset } from '@fleet/protocol';
import { parseEpisodeFilter } from '../../episodes/filter.js';
import { queryInt } from '../query.js';
import { episodeLines } from '../../episodes/present.js';
import { ApiError, notFound } from '../../errors.js';
import { errorResponses } from '../../http/error-responses.js';
import { principalOf } from '../../http/policy.js';
import { newId } from '../../ids.js';
import type { DatasetRow, EpisodeFilter } from '../../store/index.js';
import { decodeCursor, encodeCursor } from '../cursor.js';
import { NDJSON, sendNdjson } from '../ndjson.js';
import { v1Plugin } from './types.js';
import { fromBody, linksTo } from '../../http/openapi-links.js';

const MANIFEST_CHUNK = 500;
/** A live count reads the matching seqs this many at a time… */
const COUNT_CHUNK = 10_000;
/** …and stops here (the answer says `capped`): a count is asked often (the console, on new episodes). */
export const COUNT_CAP = 100_000;

function toDataset(d: DatasetRow): Dataset {
  return {
    id: d.id,
    name: d.name,
    description: d.description,
    filter: d.filter,
    snapshot_at: d.snapshotAt === null ? null : iso(d.snapshotAt),
    episode_count: d.episodeCount,
    created_by: d.createdBy,
    created_at: iso(d.createdAt),
  };
}

/**
 * A dataset filter's values are stored as strings: strings as given, numbers and booleans in
 * their usual form (the body schema refuses anything else, and says so in the document).
 */
function filterStrings(filter: Record<string, string | number | boolean>): Record<string, string> {
  return Object.fromEntries(Object.entries(filter).map(([k, v]) => [k, String(v)]));
}

/** The spec's snapshot rules, on top of the dataset's own filter. */
export function snapshotFilter(filter: Record<string, string>): EpisodeFilter {
  const parsed = parseEpisodeFilter(filter, 'body');
  return { ...parsed, excludeEval: !('eval_id' in filter), excludeDiscarded: !('outcome' in filter) };
}

const IdParams = z.strictObject({ id: z.string().min(1).max(128) });

/** /v1/datasets: live filters, one-shot snapshots, paged NDJSON manifests (spec, Datasets). */
export const datasetRoutes = v1Plugin<'store' | 'clock'>('datasets', async (app, { store, clock }) => {
  const read = { auth: 'key', scope: 'data:read', feature: 'data.metadata' } as const;
  const write = { auth: 'key', scope: 'data:write', feature: 'data.metadata' } as const;

  app.route({
    method: 'POST',
    url: '/datasets',
    config: { policy: { ...write, meter: 'datasets.created' } },
    links: { 201: linksTo(['getDataset', 'getDatasetCount', 'snapshotDataset', 'getDatasetManifest'], { id: fromBody('/id') }, 'The dataset just created') },
    schema: {
      operationId: 'createDataset',
      summary: 'Create a dataset (live until snapshotted)',
      description: 'The filter takes exactly the episode list filter keys; an unknown key is 400.',
      body: CreateDatasetBodySchema,
      response: { 201: DatasetSchema },
    },
    handler: async (request, reply) => {
      const { org, key } = principalOf(request);
      const filter = filterStrings(request.body.filter);
      parseEpisodeFilter(filter, 'body');
      const row = {
        id: newId('ds'),
        orgId: org.id,
        name: request.body.name,
        description: request.body.description ?? null,
        filter,
        createdBy: key.id,
        createdAt: clock.now(),
      };
      await store.datasets.create(row);
      return reply.code(201).send(toDataset({ ...row, snapshotAt: null, episodeCount: null }));
    },
  });

  app.route({
    method: 'GET',
    url: '/datasets',
    config: { policy: { ...read, meter: 'datasets.list' } },
    links: { 200: linksTo(['getDataset', 'getDatasetCount', 'snapshotDataset', 'getDatasetManifest'], { id: fromBody('/datasets/0/id') }, 'The first dataset listed') },
    schema: {
      operationId: 'listDatasets',
      summary: 'List datasets',
      querystring: z.strictObject({
        cursor: z.string().min(1).max(512).optional(),
        limit: queryInt(1, 100, 50),
      }),
      response: { 200: z.object({ datasets: z.array(DatasetSchema), cursor: z.string().nullable() }) },
    },
    handler: async (request) => {
      const { org } = principalOf(request);
      const { limit, cursor } = request.query;
      const after = cursor === undefined ? null : decodeCursor(cursor, (v) => (typeof v === 'string' ? v : null));
      const rows = await store.datasets.list(org.id, after, limit + 1);
      const page = rows.slice(0, limit);
      return { datasets: page.map(toDataset), cursor: rows.length > limit ? encodeCursor(page[page.length - 1]!.id) : null };
    },
  });

  app.route({
    method: 'GET',
    url: '/datasets/:id',
    config: { policy: { ...read, meter: 'datasets.get' } },
    schema: { operationId: 'getDataset', summary: 'Get a dataset', params: IdParams, response: { 200: DatasetSchema, ...errorResponses('not_found') } },
    handler: async (request) => {
      const ds = await store.datasets.get(principalOf(request).org.id, request.params.id);
      if (!ds) throw notFound('dataset');
      return toDataset(ds);
    },
  });

  app.route({
    method: 'GET',
    url: '/datasets/:id/count',
    config: { policy: { ...read, meter: null } },
    schema: {
      operationId: 'getDatasetCount',
      summary: 'How many episodes the dataset holds',
      description: `A snapshot's pinned count, or for a live dataset the episodes a snapshot taken now would pin (the same rules: evaluation episodes unless the filter names eval_id, discarded ones unless it names outcome). A live count stops at ${COUNT_CAP.toLocaleString('en-US')} (\`capped\`).`,
      params: IdParams,
      response: { 200: DatasetCountSchema, ...errorResponses('not_found') },
    },
    handler: async (request) => {
      const { org } = principalOf(request);
      const ds = await store.datasets.get(org.id, request.params.id);
      if (!ds) throw notFound('dataset');
      if (ds.snapshotAt !== null && ds.episodeCount !== null) return { dataset_id: ds.id, live: false, episode_count: ds.episodeCount, capped: false };
      const filter = snapshotFilter(ds.filter);
      let n = 0;
      let after = 0;
      for (;;) {
        const want = Math.min(COUNT_CHUNK, COUNT_CAP + 1 - n);
        const seqs = await store.episodes.listSeqs(org.id, filter, after, want);
        n += seqs.length;
        if (seqs.length < want || n > COUNT_CAP) break;
        after = seqs[seqs.length - 1]!;
      }
      return { dataset_id: ds.id, live: true, episode_count: Math.min(n, COUNT_CAP), capped: n > COUNT_CAP };
    },
  });

  app.route({
    method: 'POST',
    url: '/datasets/:id/snapshot',
    config: { policy: { ...write, meter: 'datasets.snapshotted' } },
    links: { 200: linksTo(['getDatasetManifest', 'getDataset', 'getDatasetCount'], { id: fromBody('/id') }, 'The dataset just snapshotted') },
    schema: {
      operationId: 'snapshotDataset',
      summary: 'Pin the membership now (one-shot, permanent)',
      description:
        'Evaluation episodes (with an eval_id) are left out unless the filter names eval_id; discarded episodes unless it names outcome. 409 `conflict` if already snapshotted.',
      params: IdParams,
      body: z.strictObject({}).nullish(),
      response: { 200: SnapshotResultSchema, ...errorResponses('not_found', 'conflict') },
    },
    handler: async (request) => {
      const { org } = principalOf(request);
      const ds = await store.datasets.get(org.id, request.params.id);
      if (!ds) throw notFound('dataset');
      const result = await store.datasets.snapshot(org.id, ds.id, snapshotFilter(ds.filter), clock.now());
      if (result === null) throw notFound('dataset');
      if (result === 'already') throw new ApiError('conflict', 'the dataset is already snapshotted; a snapshot is permanent');
      return { id: result.id, snapshot_at: iso(result.snapshotAt!), episode_count: result.episodeCount! };
    },
  });

  app.route({
    method: 'GET',
    url: '/datasets/:id/manifest',
    config: { policy: { ...read, meter: 'datasets.manifest' } },
    schema: {
      operationId: 'getDatasetManifest',
      summary: "A snapshot's members as NDJSON pages",
      description:
        'The first page starts with the header line (dataset_id, name, filter, snapshot_at, episode_count); then one line per member with its current data, files and locations. `X-Next-Cursor` is absent on the last page. 409 `conflict` while live.',
      params: IdParams,
      querystring: z.strictObject({
        cursor: z.string().min(1).max(512).optional(),
        limit: queryInt(1, STREAM_PAGE_LIMIT.max, STREAM_PAGE_LIMIT.default),
      }),
      response: {
        200: { description: 'NDJSON: a ManifestHeader line (first page only), then EpisodeWithLocations lines', content: { [NDJSON]: { schema: z.union([ManifestHeaderSchema, EpisodeWithLocationsSchema]) } } },
        ...errorResponses('not_found', 'conflict'),
      },
    },
    handler: async (request, reply) => {
      const { org } = principalOf(request);
      const ds = await store.datasets.get(org.id, request.params.id);
      if (!ds) throw notFound('dataset');
      if (ds.snapshotAt === null || ds.episodeCount === null) throw new ApiError('conflict', 'the dataset is live; snapshot it first');
      const { limit, cursor } = request.query;
      const after =
        cursor === undefined
          ? 0
          : decodeCursor(cursor, (v) => {
              // A cursor names its dataset, so one dataset's cursor never pages another.
              const c = v as { d?: unknown; p?: unknown } | null;
              const p = c?.p;
              return c?.d === ds.id && typeof p === 'number' && Number.isSafeInteger(p) && p > 0 && p <= ds.episodeCount! ? p : null;
            });
      const end = Math.min(ds.episodeCount, after + limit);
      const header = {
        dataset_id: ds.id,
        name: ds.name,
        filter: ds.filter,
        snapshot_at: iso(ds.snapshotAt),
        episode_count: ds.episodeCount,
      };
      async function* lines(): AsyncGenerator<string> {
        if (after === 0) yield `${JSON.stringify(header)}\n`;
        for (let pos = after; pos < end; pos += MANIFEST_CHUNK) {
          const batch = await store.datasets.memberLineRows(ds!.id, pos, Math.min(MANIFEST_CHUNK, end - pos));
          if (batch.rows.length > 0) yield* episodeLines(batch);
        }
      }
      return sendNdjson(reply, end < ds.episodeCount ? encodeCursor({ d: ds.id, p: end }) : null, lines());
    },
  });
});
