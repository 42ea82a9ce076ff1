import { z } from 'zod';

/** Events a subscription can ask for (spec, Events). */
export const WEBHOOK_EVENTS = ['episode.finalized', 'episode.synced', 'episode.verified', 'episode.failed', 'episode.pruned'] as const;
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
      .refine((e) => new Set(e).size === e.length, 'events must be unique'),
  })
  .meta({ id: 'CreateWebhookRequest' });

export const WebhookSchema = z
  .object({
    id: z.string(),
    url: z.string(),
    events: z.array(z.string()),
    status: z.enum(['active', 'disabled']),
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
