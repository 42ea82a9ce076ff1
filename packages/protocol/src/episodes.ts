import { z } from 'zod';
import { humanText } from './text.js';
import { EPISODE_OUTCOMES, REPLICA_STATES } from './values.js';

export { EPISODE_OUTCOMES, STREAM_PAGE_LIMIT } from './values.js';
export const EpisodeOutcomeSchema = z.enum(EPISODE_OUTCOMES);
export type EpisodeOutcome = z.infer<typeof EpisodeOutcomeSchema>;

const Id = z.string().min(1).max(128);
const OptText = z.string().max(1024).nullable();
const IsoTime = z.iso.datetime({ offset: true });

/** One file of an episode as the manifest carries it (spec, grant provider envelope). */
export const ManifestFileSchema = z.strictObject({
  /** Relative to the episode directory, `/`-separated, no `..`. */
  path: z
    .string()
    .min(1)
    .max(1024)
    .refine((p) => !p.startsWith('/') && !p.split('/').includes('..') && !p.includes('\\'), 'must be a relative path inside the episode'),
  size_bytes: z.number().int().nonnegative(),
  sha256: z.string().regex(/^[0-9a-f]{64}$/),
});
export type ManifestFile = z.infer<typeof ManifestFileSchema>;

export const ManifestSchema = z.strictObject({
  files: z.array(ManifestFileSchema).max(10_000),
  total_bytes: z.number().int().nonnegative(),
});
export type Manifest = z.infer<typeof ManifestSchema>;

/** One subtask the operator stepped through; offsets in seconds from `started_at`. */
export const SegmentSchema = z
  .strictObject({
    segment_index: z.number().int().nonnegative(),
    subtask_id: OptText,
    subtask_name: OptText,
    start_offset_s: z.number().nonnegative(),
    end_offset_s: z.number().nonnegative(),
  })
  .meta({ id: 'Segment' });
export type Segment = z.infer<typeof SegmentSchema>;

/**
 * What a robot reports when an episode is finalized: its recorded facts, segments and manifest.
 * `robot_id` is not in the body: the cloud takes it from the topic the broker authorized.
 */
export const EpisodeReportSchema = z.strictObject({
  id: z.string().regex(/^ep_[a-z0-9]{10,64}$/, 'not an episode id'),
  recording_session_id: Id,
  episode_seq: z.number().int().min(1),
  session_name: OptText,
  task_id: OptText,
  task_name: OptText,
  subtask_id: OptText,
  operator_id: OptText,
  operator_name: OptText,
  control_mode: OptText,
  policy_version_id: OptText,
  eval_id: OptText,
  outcome: EpisodeOutcomeSchema,
  started_at: IsoTime,
  ended_at: IsoTime.nullable(),
  duration_s: z.number().nonnegative().nullable(),
  message_count: z.number().int().nonnegative().nullable(),
  bag_size_bytes: z.number().int().nonnegative().nullable(),
  bag_uri: z.string().max(2048).nullable().optional(),
  metadata: z.record(z.string(), z.unknown()),
  segments: z.array(SegmentSchema).max(10_000),
  manifest: ManifestSchema,
  /** The agent was killed while recording and finalized the episode at its next start. */
  interrupted: z.boolean().optional(),
});
export type EpisodeReport = z.infer<typeof EpisodeReportSchema>;

/** API: one replica of an episode at a destination (spec, Replica). */
export const ReplicaSchema = z
  .object({
    destination_id: z.string(),
    state: z.enum(REPLICA_STATES),
    grant_id: z.string(),
    error: z.string().nullable(),
    updated_at: z.string(),
    object_key: z.string().optional(),
  })
  .meta({ id: 'Replica' });
export type Replica = z.infer<typeof ReplicaSchema>;

/** API: an episode (spec, Episode). */
export const EpisodeSchema = z
  .object({
    id: z.string(),
    robot_id: z.string(),
    recording_session_id: z.string(),
    episode_seq: z.number().int(),
    session_name: z.string().nullable(),
    task_id: z.string().nullable(),
    task_name: z.string().nullable(),
    subtask_id: z.string().nullable(),
    operator_id: z.string().nullable(),
    operator_name: z.string().nullable(),
    outcome: EpisodeOutcomeSchema,
    recorded_outcome: EpisodeOutcomeSchema.nullable(),
    control_mode: z.string().nullable(),
    policy_version_id: z.string().nullable(),
    eval_id: z.string().nullable(),
    started_at: z.string(),
    ended_at: z.string().nullable(),
    duration_s: z.number().nullable(),
    message_count: z.number().nullable(),
    bag_size_bytes: z.number().nullable(),
    bag_uri: z.string().nullable(),
    metadata: z.record(z.string(), z.unknown()).nullable(),
    annotations: z.record(z.string(), z.unknown()).nullable(),
    reported_at: z.string(),
    replicas: z.array(ReplicaSchema),
  })
  .meta({ id: 'Episode' });
export type Episode = z.infer<typeof EpisodeSchema>;

/** Export rows and manifest member lines: the episode plus its files and data locations. */
export const EpisodeWithLocationsSchema = EpisodeSchema.extend({
  files: z.array(z.object({ path: z.string(), size_bytes: z.number(), sha256: z.string() })),
  locations: z.array(
    z.object({ destination_id: z.string(), state: z.string(), object_key: z.string().nullable(), grant_id: z.string() }),
  ),
}).meta({ id: 'EpisodeWithLocations' });
export type EpisodeWithLocations = z.infer<typeof EpisodeWithLocationsSchema>;

/** API: `GET /v1/episodes/{id}/files`: the files the robot's manifest lists (no bytes, no URLs). */
export const EpisodeFilesSchema = z
  .object({
    files: z.array(z.object({ path: z.string(), size_bytes: z.number(), sha256: z.string() })),
    total_bytes: z.number(),
  })
  .meta({ id: 'EpisodeFiles' });
export type EpisodeFiles = z.infer<typeof EpisodeFilesSchema>;

export const PatchAnnotationsBodySchema = z
  .strictObject({
    annotations: z
      .record(z.string().min(1).max(256), z.unknown())
      .refine((a) => Object.keys(a).length <= 256, 'at most 256 keys per request')
      .describe('Shallow-merged into the annotations layer; a null value deletes that key.'),
  })
  .meta({ id: 'PatchAnnotationsRequest' });

export const PatchOutcomeBodySchema = z
  .strictObject({
    outcome: EpisodeOutcomeSchema,
    reason: humanText(1, 1024),
  })
  .meta({ id: 'PatchOutcomeRequest' });

export const OutcomeChangeSchema = z
  .object({ actor: z.string(), at: z.string(), from: EpisodeOutcomeSchema, to: EpisodeOutcomeSchema, reason: z.string() })
  .meta({ id: 'OutcomeChange' });
