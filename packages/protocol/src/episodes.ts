import { z } from 'zod';

export const EPISODE_OUTCOMES = ['success', 'failure', 'discarded'] as const;
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

/** Largest outbox message a robot may send; larger ones are refused with a reason. */
export const MAX_OUTBOX_MESSAGE_BYTES = 1024 * 1024;

/** robot -> cloud on `…/outbox`: one durable message, resent until acknowledged. */
export const OutboxMessageSchema = z.object({
  msg_id: z.string().min(1).max(128),
  kind: z.enum(['episode.report']),
  body: z.unknown(),
});
export type OutboxMessage = z.infer<typeof OutboxMessageSchema>;

/**
 * cloud -> robot on `…/outbox/ack`. `ok: true` once the message is durably indexed (a PUBACK is
 * not that); `ok: false` when the cloud refuses it for good (malformed, too large): the robot
 * keeps the episode locally, logs the reason and stops resending that message.
 */
export const OutboxAckSchema = z.discriminatedUnion('ok', [
  z.object({ msg_id: z.string(), ok: z.literal(true) }),
  z.object({ msg_id: z.string(), ok: z.literal(false), error: z.object({ code: z.string(), message: z.string() }) }),
]);
export type OutboxAck = z.infer<typeof OutboxAckSchema>;
