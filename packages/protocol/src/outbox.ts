import { z } from 'zod';
import { EpisodeReportSchema } from './episodes.js';
import { EpisodePrunedSchema, LocalMissingSchema, ReplicaReportSchema } from './sync.js';

/** Largest outbox message a robot may send; larger ones are refused with a reason. */
export const MAX_OUTBOX_MESSAGE_BYTES = 1024 * 1024;

/**
 * The kinds of durable message a robot sends through its outbox, each with its body's schema.
 * The cloud hands each kind to its own handler; a kind it does not know yet (a newer agent) is
 * answered "retry later", never refused for good, so nothing a robot must report is lost.
 */
export const OUTBOX_BODIES = {
  /** An episode was finalized: its recorded facts, segments and manifest. */
  'episode.report': EpisodeReportSchema,
  /** A replica of an episode at a destination changed state (or an attempt failed). */
  'replica.state': ReplicaReportSchema,
  /** Retention deleted an episode's local files (every destination verified it 72 h earlier). */
  'episode.pruned': EpisodePrunedSchema,
  /** Files of an episode disappeared from the robot's disk before a verified sync; sent once per episode. */
  'episode.local_missing': LocalMissingSchema,
} as const;
export type OutboxKind = keyof typeof OUTBOX_BODIES;
export const OUTBOX_KINDS = Object.keys(OUTBOX_BODIES) as OutboxKind[];
export type OutboxBody<K extends OutboxKind> = z.infer<(typeof OUTBOX_BODIES)[K]>;

export const isOutboxKind = (kind: string): kind is OutboxKind => Object.hasOwn(OUTBOX_BODIES, kind);

/**
 * robot -> cloud on `…/outbox`: one durable message, resent until acknowledged. The envelope is
 * checked first; the body is checked against its kind's schema by the kind's handler.
 */
export const OutboxMessageSchema = z.object({
  msg_id: z.string().min(1).max(128),
  kind: z.string().regex(/^[a-z][a-z0-9._-]{0,63}$/, 'not a message kind'),
  body: z.unknown(),
});
export type OutboxMessage = z.infer<typeof OutboxMessageSchema>;

/**
 * cloud -> robot on `…/outbox/ack`. `ok: true` once the message is durably handled (a PUBACK is
 * not that). `ok: false` without `retry_after_s`: refused for good (malformed, too large); the
 * robot keeps the data, logs the reason and stops resending that message. `ok: false` with
 * `retry_after_s`: not now (a kind the cloud does not know yet, a replica state that arrived
 * before its episode was indexed); the robot keeps the message and sends it again after that
 * many seconds.
 */
export const OutboxAckSchema = z.discriminatedUnion('ok', [
  z.object({ msg_id: z.string(), ok: z.literal(true), batch_max: z.number().int().min(1).max(1024).optional() }),
  z.object({
    msg_id: z.string(),
    ok: z.literal(false),
    error: z.object({ code: z.string(), message: z.string() }),
    retry_after_s: z.number().int().min(0).max(24 * 3600).optional(),
    batch_max: z.number().int().min(1).max(1024).optional(),
  }),
]);
export type OutboxAck = z.infer<typeof OutboxAckSchema>;

/**
 * Batches (outbox protocol 2). A robot may carry several outbox messages in one publish on
 * `…/outbox`: `{"batch":[message, message, ...]}`, each element a whole outbox message as above,
 * the publish within MAX_OUTBOX_MESSAGE_BYTES. The cloud answers all of a batch's messages in one
 * publish on `…/outbox/ack`: `{"acks":[ack, ack, ...]}`, each element an acknowledgment as above
 * (one per message it could name). A robot sends batches only to a cloud that said it takes them:
 * a cloud that does sets `batch_max` (the most messages it takes in one batch) on the
 * acknowledgments it sends; an older cloud never does, and a robot talking to it sends one
 * message per publish as before. An older robot never sends a batch, and gets one acknowledgment
 * per message as before. One message's outcome never depends on another's in the same batch.
 */
export const OUTBOX_BATCH_MAX = 64;

export const OutboxBatchSchema = z.object({ batch: z.array(z.unknown()).min(1).max(OUTBOX_BATCH_MAX) });

export const OutboxAckBatchSchema = z.object({ acks: z.array(OutboxAckSchema).min(1).max(OUTBOX_BATCH_MAX) });
export type OutboxAckBatch = z.infer<typeof OutboxAckBatchSchema>;

/** The wire form of a batch: the messages' own wire forms, spliced in as they are. */
export function outboxBatchPayload(messages: readonly string[]): string {
  return `{"batch":[${messages.join(',')}]}`;
}
