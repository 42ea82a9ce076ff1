import { z } from 'zod';
import { humanText } from './text.js';
import { EPISODE_OUTCOMES, EPISODE_SYNC_STATES } from './values.js';

export { EPISODE_SYNC_STATES } from './values.js';

/** An equality value: 1 to 512 characters once in its string form (numbers and booleans are). */
const FILTER_VALUE = { type: ['string', 'number', 'boolean'], minLength: 1, maxLength: 512 };
const ATTRIBUTE_KEY = '[\\s\\S]{1,256}$';
/** A presence value: whether the key is in the layer at all, as a boolean or its string form. */
const PRESENCE_VALUE = { enum: [true, false, 'true', 'false'], description: 'true: the key is present; false: it is absent (never set, or deleted with null)' };

/**
 * A dataset filter as JSON Schema: the episode list's filter keys (cloud/src/episodes/filter.ts
 * parses them; a cloud test holds the two lists equal) with their values, and nothing else. The
 * zod record below only checks the value types: the keys and their values are checked by the
 * episode filter parser, which the document cannot read.
 */
const FILTER_JSON_SCHEMA = {
  properties: {
    ...Object.fromEntries(['robot_id', 'task_id', 'subtask_id', 'operator_id', 'control_mode', 'policy_version_id', 'eval_id', 'destination_id'].map((k) => [k, FILTER_VALUE])),
    outcome: { type: 'string', enum: [...EPISODE_OUTCOMES] },
    from: { type: 'string', format: 'date-time', maxLength: 512 },
    to: { ...FILTER_VALUE, description: 'a date-time, or with sync_state a destination id' },
    sync_state: { type: 'string', enum: [...EPISODE_SYNC_STATES] },
  },
  patternProperties: {
    [`^metadata\\.${ATTRIBUTE_KEY}`]: FILTER_VALUE,
    [`^annotation\\.${ATTRIBUTE_KEY}`]: FILTER_VALUE,
    [`^has_metadata\\.${ATTRIBUTE_KEY}`]: PRESENCE_VALUE,
    [`^has_annotation\\.${ATTRIBUTE_KEY}`]: PRESENCE_VALUE,
  },
  additionalProperties: false,
};

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
      // Numbers and booleans are taken for their string form; an object, an array or null is refused.
      .record(z.string().min(1).max(300), z.union([z.string(), z.number(), z.boolean()], { error: 'must be a string, number or boolean' }))
      .meta(FILTER_JSON_SCHEMA)
      .describe('Episode list filter keys (metadata.<key>, annotation.<key>, has_metadata.<key> and has_annotation.<key> included); values are stored as strings.'),
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
