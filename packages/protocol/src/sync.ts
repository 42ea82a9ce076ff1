import { z } from 'zod';
import { type LOCAL_REPLICA_STATES, REPLICA_STATES, RETENTION_DIRECTIVES } from './values.js';
import { ManifestFileSchema, ManifestSchema } from './episodes.js';

/**
 * Cloud sync on the wire: the grant envelope the cloud POSTs to a customer's grant provider, the
 * provider's answer, the messages between a robot and the cloud about grants and assignments,
 * and the replica states a robot reports through its durable outbox. The bytes themselves go
 * from the robot straight to the URLs of a grant; they never pass through the cloud.
 */

export { REPLICA_STATES } from './values.js';
export type ReplicaState = (typeof REPLICA_STATES)[number];
export const ReplicaStateSchema = z.enum(REPLICA_STATES);
export const replicaRank = (s: ReplicaState): number => REPLICA_STATES.indexOf(s);
/** A replica's state on the robot: `assigned` (routed, no grant yet), then the API's states. */
export type LocalReplicaState = (typeof LOCAL_REPLICA_STATES)[number];

/** What a destination asks the robot to do with its local copy once verified. */
export { RETENTION_DIRECTIVES, LOCAL_REPLICA_STATES } from './values.js';
export type RetentionDirective = (typeof RETENTION_DIRECTIVES)[number];
export const RetentionDirectiveSchema = z.enum(RETENTION_DIRECTIVES);

export const UPLOAD_PROTOCOLS = ['http-put', 's3-multipart'] as const;
export type UploadProtocol = (typeof UPLOAD_PROTOCOLS)[number];

const Id = z.string().min(1).max(128);
const Url = z.string().min(1).max(8192);

/** An in-flight multipart upload the robot wants to continue (spec, grant provider: resume). */
export const ResumeUploadSchema = z.strictObject({
  path: ManifestFileSchema.shape.path,
  upload_id: z.string().min(1).max(1024),
  parts_done: z.array(z.number().int().min(1).max(10_000)).max(10_000),
});
export type ResumeUpload = z.infer<typeof ResumeUploadSchema>;

export const ResumeSchema = z.array(z.strictObject({ destination_id: Id, uploads: z.array(ResumeUploadSchema).max(10_000) })).max(16);

/** The robot's disk, as it reports it with each grant request. */
export const PressureSchema = z.strictObject({
  free_bytes: z.number().int().nonnegative(),
  backlog_bytes: z.number().int().nonnegative(),
  /** At the recent recording rate; null when the robot is not filling its disk. */
  hours_to_full: z.number().nonnegative().nullable(),
});
export type Pressure = z.infer<typeof PressureSchema>;

/** What the cloud POSTs to a destination's URL, signed with its `dsec_` secret. */
export const GrantRequestEnvelopeSchema = z.strictObject({
  episode_id: z.string(),
  org_id: z.string(),
  request: z.strictObject({
    destination_id: z.string(),
    episode: z.strictObject({ robot_id: z.string(), recording_session_id: z.string(), episode_seq: z.number().int() }),
    manifest: ManifestSchema,
    resume: ResumeSchema.optional(),
    pressure: PressureSchema.optional(),
    /** Only on the synthetic request of `POST /v1/destinations/{id}/check`. */
    check: z.literal(true).optional(),
  }),
});
export type GrantRequestEnvelope = z.infer<typeof GrantRequestEnvelopeSchema>;

export { DESTINATION_ID_HEADER, GRANT_EVENT } from './values.js';

/** One file of a grant: a single PUT URL, or the multipart set. */
export const GrantFileSchema = z.union([
  z.strictObject({ path: ManifestFileSchema.shape.path, put_url: Url }),
  z.strictObject({
    path: ManifestFileSchema.shape.path,
    upload_id: z.string().min(1).max(1024),
    /** Bytes per part; S3 allows 5 MiB to 5 GiB (the last part may be smaller). */
    part_size: z.number().int().min(1).max(5 * 1024 ** 3),
    /** `part_urls[i]` uploads part number i + 1. */
    part_urls: z.array(Url).min(1).max(10_000),
    complete_url: Url,
  }),
]);
export type GrantFile = z.infer<typeof GrantFileSchema>;
export type MultipartGrantFile = Extract<GrantFile, { upload_id: string }>;
export const isMultipartFile = (f: GrantFile): f is MultipartGrantFile => 'upload_id' in f;

export const GrantDestinationSchema = z.strictObject({
  destination_id: z.string(),
  protocol: z.enum(UPLOAD_PROTOCOLS),
  object_key: z.string().min(1).max(1024).optional(),
  files: z.array(GrantFileSchema).max(10_000),
});
export type GrantDestination = z.infer<typeof GrantDestinationSchema>;

const Retention = z.object({ local: z.string().min(1).max(64) }).loose();

/**
 * A provider's answer: a grant (one destination entry) or a deferral. Checked strictly by the
 * cloud before anything reaches a robot; see `checkGrantAnswer` in the cloud's relay for the
 * rules that need the request (paths, destination, part coverage, expiry).
 */
export const GrantAnswerSchema = z.union([
  z
    .object({
      grant_id: z.string().min(1).max(256),
      expires_at: z.iso.datetime({ offset: true }),
      retry_after: z.null(),
      retention: Retention,
      destinations: z.array(GrantDestinationSchema).length(1),
    })
    .loose(),
  z
    .object({
      grant_id: z.null(),
      destinations: z.array(z.unknown()).length(0),
      retention: Retention,
      retry_after: z.number().int().min(0).max(7 * 24 * 3600),
    })
    .loose(),
]);
export type GrantAnswer = z.infer<typeof GrantAnswerSchema>;

// ---- robot <-> cloud over MQTT -------------------------------------------------------------

/** One (episode, destination) pair the robot must sync. */
export const AssignmentSchema = z.strictObject({ episode_id: Id, destination_id: Id });
export type Assignment = z.infer<typeof AssignmentSchema>;

/** robot -> cloud on `…/sync/request`, QoS 1. */
export const SyncRequestSchema = z.discriminatedUnion('type', [
  /** Every assignment the robot has not finished: sent after each connect. */
  z.strictObject({ type: z.literal('assignments.request'), req_id: Id }),
  z.strictObject({
    type: z.literal('grant.request'),
    req_id: Id,
    episode_id: Id,
    destination_id: Id,
    resume: ResumeSchema.optional(),
    pressure: PressureSchema.optional(),
  }),
]);
export type SyncRequest = z.infer<typeof SyncRequestSchema>;

/** Why the cloud did not hand a grant over: the provider's deferral, or one of these. */
export const DEFERRAL_REASONS = [
  'deferred',
  'unreachable',
  'timeout',
  'http_error',
  'too_large',
  'invalid_json',
  'schema_invalid',
  'destination_mismatch',
  'grant_reused',
  'expired',
  'not_assigned',
  'revoked',
  'unknown_episode',
] as const;
export type DeferralReason = (typeof DEFERRAL_REASONS)[number];

/** cloud -> robot on `…/sync`, QoS 1. */
export const SyncMessageSchema = z.discriminatedUnion('type', [
  z.strictObject({
    type: z.literal('assignments'),
    /** Set on the answer to an `assignments.request`; a push of new assignments has none. */
    req_id: Id.optional(),
    assignments: z.array(AssignmentSchema).max(10_000),
    /** With `req_id`: the full list; the robot drops assignments it has that are not in it. */
    complete: z.boolean(),
  }),
  z.strictObject({
    type: z.literal('grant'),
    req_id: Id,
    episode_id: Id,
    destination_id: Id,
    grant_id: z.string().min(1).max(256),
    expires_at: z.number().int(),
    protocol: z.enum(UPLOAD_PROTOCOLS),
    object_key: z.string().max(1024).optional(),
    /** The destination's registered retention directive (the grant's own is not applied). */
    retention: RetentionDirectiveSchema,
    files: z.array(GrantFileSchema).max(10_000),
  }),
  z.strictObject({
    type: z.literal('deferral'),
    req_id: Id,
    episode_id: Id,
    destination_id: Id,
    reason: z.enum(DEFERRAL_REASONS),
    message: z.string().max(1024),
    retry_after_s: z.number().int().min(0),
  }),
]);
export type SyncMessage = z.infer<typeof SyncMessageSchema>;
export type GrantMessage = Extract<SyncMessage, { type: 'grant' }>;
export type DeferralMessage = Extract<SyncMessage, { type: 'deferral' }>;

/** robot -> cloud through the durable outbox, kind `replica.state`. */
export const ReplicaReportSchema = z.strictObject({
  episode_id: Id,
  destination_id: Id,
  grant_id: z.string().min(1).max(256),
  state: ReplicaStateSchema,
  /** `code: message`, one line, after a failed attempt; the state stays the last one reached. */
  error: z.string().max(1024).nullable(),
  object_key: z.string().max(1024).nullable(),
  /** Why a replica stays `synced` (the store gave no usable receipt), when it does. */
  note: z.string().max(1024).nullable().optional(),
  /** Robot clock, ms: orders reports of one replica that arrive out of order. */
  at: z.number().int().nonnegative(),
});
export type ReplicaReport = z.infer<typeof ReplicaReportSchema>;

/** How long after the last of an episode's destinations verified it `until_all_verified_plus_72h` deletes the local copy. */
export const PRUNE_DELAY_MS = 72 * 60 * 60 * 1000;

/** robot -> cloud through the durable outbox, kind `episode.pruned`: retention deleted the episode's local files. */
export const EpisodePrunedSchema = z.strictObject({
  episode_id: Id,
  /** Robot clock, ms. */
  pruned_at: z.number().int().nonnegative(),
});
export type EpisodePruned = z.infer<typeof EpisodePrunedSchema>;

/** robot -> cloud through the durable outbox, kind `episode.local_missing`: files gone before a verified sync. */
export const LocalMissingSchema = z.strictObject({
  episode_id: Id,
  /** Manifest paths not found on the robot's disk when noticed. */
  paths: z.array(ManifestFileSchema.shape.path).max(10_000),
  /** Robot clock, ms. */
  at: z.number().int().nonnegative(),
});
export type LocalMissing = z.infer<typeof LocalMissingSchema>;
