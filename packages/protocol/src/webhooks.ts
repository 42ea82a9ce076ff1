import { z } from 'zod';
import { DELIVERY_ATTEMPT_OUTCOMES, WEBHOOK_EVENTS, WEBHOOK_STATUSES } from './values.js';

export { WEBHOOK_EVENTS } from './values.js';
export const WebhookEventSchema = z.enum(WEBHOOK_EVENTS);

export const CreateWebhookBodySchema = z
  .strictObject({
    url: z
      .url({ protocol: /^https$/ })
      .max(2048)
      .describe('HTTPS; must resolve to public addresses; redirects are not followed'),
    events: z
      .array(WebhookEventSchema)
      .min(1)
      .refine((e) => new Set(e).size === e.length, 'events must be unique')
      // The refinement in the document's terms (a refinement is code no generator reads).
      .meta({ uniqueItems: true }),
  })
  .meta({ id: 'CreateWebhookRequest' });

export const WebhookSchema = z
  .object({
    id: z.string(),
    url: z.string(),
    events: z.array(z.string()),
    status: z.enum(WEBHOOK_STATUSES),
    disabled_reason: z.string().nullable(),
    pending_deliveries: z.number().int(),
    last_delivered_at: z.string().nullable(),
    last_delivery_error: z.string().nullable(),
    created_at: z.string(),
  })
  .meta({ id: 'Webhook' });
export type Webhook = z.infer<typeof WebhookSchema>;

export const CreatedWebhookSchema = WebhookSchema.extend({
  secret: z.string().describe('`whsec_…`; shown once'),
}).meta({ id: 'CreatedWebhook' });

export const DeadLetterSchema = z
  .object({
    id: z.string(),
    event_id: z.string(),
    event: z.string(),
    payload: z.record(z.string(), z.unknown()),
    attempts: z.number().int(),
    last_status: z.number().int().nullable(),
    last_error: z.string().nullable(),
    dead_lettered_at: z.string(),
  })
  .meta({ id: 'DeadLetter' });

/** API: GET /v1/webhooks/{id}/deliveries: one attempt to deliver an event, successful or not. */
export const DeliveryAttemptSchema = z
  .object({
    id: z.string(),
    event_id: z.string(),
    event: z.string(),
    attempt: z.number().int().describe('1 for the first attempt of this delivery, 2 for its first retry, …'),
    status_code: z.number().int().nullable().describe('the receiver\'s HTTP status; null when no answer came'),
    error: z.string().nullable().describe('why the attempt failed (a status or a network error); null on success'),
    latency_ms: z.number().int().nullable().describe('from sending the request to the receiver\'s answer or the failure'),
    outcome: z.enum(DELIVERY_ATTEMPT_OUTCOMES).describe('what the attempt led to'),
    at: z.string(),
  })
  .meta({ id: 'DeliveryAttempt' });
export type DeliveryAttempt = z.infer<typeof DeliveryAttemptSchema>;

/** `episode.failed`'s error: the replica's one-line `code: message`, split. */
export const WebhookErrorSchema = z.strictObject({ code: z.string().min(1).max(64), message: z.string().max(1024) });

/**
 * The body of every webhook delivery (spec, Events: Payload). Identifiers and the state change
 * only; a receiver fetches detail with `episode_id`. Built in one place in the cloud
 * (`cloud/src/events.ts`), which also enforces which fields each event carries.
 */
export const WebhookPayloadSchema = z
  .strictObject({
    schema_version: z.literal(1),
    episode_id: z.string().min(1),
    robot_id: z.string().min(1),
    recording_session_id: z.string().min(1),
    episode_seq: z.number().int(),
    /** Omitted for `episode.finalized` and `episode.pruned`. */
    destination_id: z.string().min(1).optional(),
    grant_id: z.string().min(1).optional(),
    /** Omitted when the grant provider reported none. */
    object_key: z.string().min(1).optional(),
    /** The new state: `reported`, `synced`, `verified`, `pruned`, or the state kept after a failed attempt. */
    state: z.string().min(1),
    /** Only on `episode.failed`. */
    error: WebhookErrorSchema.optional(),
    /** `true` only on the synthetic test event. */
    test: z.literal(true).optional(),
  })
  .meta({ id: 'WebhookPayload' });
export type WebhookPayload = z.infer<typeof WebhookPayloadSchema>;
export type { WebhookEvent } from './values.js';
