import { z } from 'zod';
import { humanText } from './text.js';

export const DatasetSchema = z
  .object({
    id: z.string(),
    name: z.string(),
    description: z.string().nullable(),
    filter: z.record(z.string(), z.string()),
    snapshot_at: z.string().nullable(),
    episode_count: z.number().int().nullable(),
    created_by: z.string(),
    created_at: z.string(),
  })
  .meta({ id: 'Dataset' });
export type Dataset = z.infer<typeof DatasetSchema>;

export const CreateDatasetBodySchema = z
  .strictObject({
    name: humanText(1, 128),
    description: humanText(1, 4096).nullable().optional(),
    filter: z
      .record(z.string().min(1).max(300), z.unknown())
      .describe('Episode list filter keys (metadata.<key> and annotation.<key> included); values are stored as strings.'),
  })
  .meta({ id: 'CreateDatasetRequest' });
export type CreateDatasetBody = z.infer<typeof CreateDatasetBodySchema>;

export const SnapshotResultSchema = z
  .object({ id: z.string(), snapshot_at: z.string(), episode_count: z.number().int() })
  .meta({ id: 'DatasetSnapshot' });

/**
 * API: `GET /v1/datasets/{id}/count`: how many episodes the dataset holds: the pinned count of a
 * snapshot, or for a live dataset the episodes a snapshot taken now would pin.
 */
export const DatasetCountSchema = z
  .object({
    dataset_id: z.string(),
    live: z.boolean(),
    episode_count: z.number().int(),
    capped: z.boolean().describe('true when counting stopped at the cap: there are more than `episode_count`'),
  })
  .meta({ id: 'DatasetCount' });
export type DatasetCount = z.infer<typeof DatasetCountSchema>;

/** First line of the first manifest page. */
export const ManifestHeaderSchema = z
  .object({
    dataset_id: z.string(),
    name: z.string(),
    filter: z.record(z.string(), z.string()),
    snapshot_at: z.string(),
    episode_count: z.number().int(),
  })
  .meta({ id: 'ManifestHeader' });
