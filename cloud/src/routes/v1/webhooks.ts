import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import {
  CreatedWebhookSchema,
  CreateWebhookBodySchema,
  DAY,
  DeadLetterSchema,
  DeliveryAttemptSchema,
  iso,
  WebhookSchema,
  type Webhook,
} from '@fleet/protocol';
import { entitlementsOf } from '../../entitlements.js';
import { testFinalizedEvent } from '../../rules/events.js';
import { ApiError, notFound } from '../../errors.js';
import { errorResponses } from '../../http/error-responses.js';
import { principalOf } from '../../http/policy.js';
import { newId, newSecret } from '../../ids.js';
import { ATTEMPTS_KEPT_PER_SUBSCRIPTION, type OrgRow, type WebhookRow } from '../../store/index.js';
import { decodeRowCursor } from '../cursor.js';
import { queryInt } from '../query.js';
import { checkEgressUrl } from '../../egress/url-check.js';
import { v1Plugin } from './types.js';
import { fromBody, linksTo } from '../../http/openapi-links.js';

/** How long the previous secret keeps signing after a rotation (spec). */
export const ROTATION_OVERLAP_MS = DAY;

function toWebhook(w: WebhookRow): Webhook {
  return {
    id: w.id,
    url: w.url,
    events: w.events,
    status: w.status,
    disabled_reason: w.disabledReason,
    pending_deliveries: w.pendingDeliveries,
    last_delivered_at: w.lastDeliveredAt === null ? null : iso(w.lastDeliveredAt),
    last_delivery_error: w.lastDeliveryError,
    created_at: iso(w.createdAt),
  };
}

const maxActive = (org: OrgRow): number => entitlementsOf(org).limits.webhook_subscriptions ?? 5;

const IdParams = z.strictObject({ id: z.string().min(1).max(128) });
const NoBody = z.strictObject({}).nullish();

/** /v1/webhooks: subscriptions, dead letters, rotation and the test event (admin). */
export const webhookRoutes = v1Plugin<'store' | 'clock' | 'secrets' | 'deliveries' | 'egressAllowLoopback'>('webhooks', async (app, { store, clock, secrets, deliveries, egressAllowLoopback }) => {
  const ids = secrets.opaqueIds();
  const admin = { auth: 'key', scope: 'admin', feature: 'api.access', meter: null } as const;

  app.route({
    method: 'POST',
    url: '/webhooks',
    config: { policy: admin },
    links: { 201: linksTo(['enableWebhook', 'listWebhookDeadLetters', 'listWebhookDeliveries', 'rotateWebhookSecret', 'testWebhook', 'deleteWebhook'], { id: fromBody('/id') }, 'The subscription just created') },
    schema: {
      operationId: 'createWebhook',
      summary: 'Subscribe an HTTPS endpoint to events',
      description: 'The `whsec_` secret is in this response only. At most 5 active subscriptions per organization (409 `conflict`).',
      body: CreateWebhookBodySchema,
      response: { 201: CreatedWebhookSchema, ...errorResponses('conflict') },
    },
    handler: async (request, reply) => {
      const { org } = principalOf(request);
      const url = checkEgressUrl(request.body.url, egressAllowLoopback);
      const secret = newSecret('whsec');
      const row = {
        id: newId('wh'),
        orgId: org.id,
        url,
        events: request.body.events,
        secretSealed: secrets.seal(secret),
        createdAt: clock.now(),
      };
      if ((await store.webhooks.create(row, maxActive(org))) === 'limit') {
        throw new ApiError('conflict', `the organization already has ${maxActive(org)} active webhook subscriptions`, {
          limit: 'webhook_subscriptions',
          value: maxActive(org),
        });
      }
      const created = (await store.webhooks.get(org.id, row.id))!;
      return reply.code(201).send({ ...toWebhook(created), secret });
    },
  });

  app.route({
    method: 'GET',
    url: '/webhooks',
    config: { policy: admin },
    links: { 200: linksTo(['enableWebhook', 'listWebhookDeadLetters', 'listWebhookDeliveries', 'rotateWebhookSecret', 'testWebhook', 'deleteWebhook'], { id: fromBody('/webhooks/0/id') }, 'The first subscription listed') },
    schema: { operationId: 'listWebhooks', summary: 'List webhook subscriptions', response: { 200: z.object({ webhooks: z.array(WebhookSchema) }) } },
    handler: async (request) => ({ webhooks: (await store.webhooks.list(principalOf(request).org.id)).map(toWebhook) }),
  });

  app.route({
    method: 'DELETE',
    url: '/webhooks/:id',
    config: { policy: admin },
    schema: { operationId: 'deleteWebhook', summary: 'Remove a subscription and its queue', params: IdParams, response: { 204: z.null().describe('Removed'), ...errorResponses('not_found') } },
    handler: async (request, reply) => {
      if (!(await store.webhooks.delete(principalOf(request).org.id, request.params.id))) throw notFound('webhook');
      return reply.code(204).send(null);
    },
  });

  app.route({
    method: 'POST',
    url: '/webhooks/:id/enable',
    config: { policy: admin },
    schema: { operationId: 'enableWebhook', summary: 'Re-activate an auto-disabled subscription', params: IdParams, body: NoBody, response: { 200: WebhookSchema, ...errorResponses('not_found', 'conflict') } },
    handler: async (request) => {
      const { org } = principalOf(request);
      const result = await store.webhooks.enable(org.id, request.params.id, maxActive(org));
      if (result === undefined) throw notFound('webhook');
      if (result === 'limit') throw new ApiError('conflict', `the organization already has ${maxActive(org)} active webhook subscriptions`);
      deliveries.notify();
      return toWebhook(result);
    },
  });

  app.route({
    method: 'GET',
    url: '/webhooks/:id/dead-letters',
    config: { policy: admin },
    links: { 200: linksTo(['redeliverWebhookDeadLetter'], { id: '$request.path.id', delivery_id: fromBody('/dead_letters/0/id') }, 'The first dead letter listed') },
    schema: { operationId: 'listWebhookDeadLetters', summary: 'Deliveries that exhausted their retries', params: IdParams, response: { 200: z.object({ dead_letters: z.array(DeadLetterSchema) }), ...errorResponses('not_found') } },
    handler: async (request) => {
      const rows = await store.webhooks.deadLetters(principalOf(request).org.id, request.params.id);
      if (!rows) throw notFound('webhook');
      return {
        dead_letters: rows.map((d) => ({
          id: ids.encode('delivery', d.id),
          event_id: ids.publicEventId(d.eventId),
          event: d.eventType,
          payload: JSON.parse(d.payload) as Record<string, unknown>,
          attempts: d.attempts,
          last_status: d.lastStatus,
          last_error: d.lastError,
          dead_lettered_at: iso(d.deadLetteredAt ?? d.createdAt),
        })),
      };
    },
  });

  app.route({
    method: 'GET',
    url: '/webhooks/:id/deliveries',
    config: { policy: admin },
    schema: {
      operationId: 'listWebhookDeliveries',
      summary: 'The delivery log: recent attempts, successful or not',
      description:
        `Every attempt to deliver an event to this subscription, newest first: event, attempt number, status code or error, latency. ` +
        `The newest ${ATTEMPTS_KEPT_PER_SUBSCRIPTION} attempts of each subscription are kept. Keyset-paginated.`,
      params: IdParams,
      querystring: z.strictObject({ cursor: z.string().min(1).max(512).optional(), limit: queryInt(1, 100, 50) }),
      response: { 200: z.object({ deliveries: z.array(DeliveryAttemptSchema), cursor: z.string().nullable() }), ...errorResponses('not_found') },
    },
    handler: async (request) => {
      const { limit, cursor } = request.query;
      const before = cursor === undefined ? null : decodeRowCursor(ids, 'attempt', cursor);
      const rows = await store.webhooks.attempts(principalOf(request).org.id, request.params.id, before, limit + 1);
      if (!rows) throw notFound('webhook');
      const page = rows.slice(0, limit);
      return {
        deliveries: page.map((a) => ({
          id: ids.encode('attempt', a.id),
          event_id: ids.publicEventId(a.eventId),
          event: a.eventType,
          attempt: a.attempt,
          status_code: a.statusCode,
          error: a.error,
          latency_ms: a.latencyMs,
          outcome: a.outcome,
          at: iso(a.at),
        })),
        cursor: rows.length > limit ? ids.encode('attempt', page[page.length - 1]!.id) : null,
      };
    },
  });

  app.route({
    method: 'POST',
    url: '/webhooks/:id/dead-letters/:delivery_id/redeliver',
    config: { policy: admin },
    schema: {
      operationId: 'redeliverWebhookDeadLetter',
      summary: 'Put a dead letter back at the end of its queue (same event id)',
      params: z.strictObject({ id: z.string().min(1).max(128), delivery_id: z.string().min(1).max(64).describe('the dead letter\'s id (dlv_…)') }),
      body: NoBody,
      response: { 202: z.object({ delivery_id: z.string(), event_id: z.string() }), ...errorResponses('not_found') },
    },
    handler: async (request, reply) => {
      const deliveryId = ids.decode('delivery', request.params.delivery_id);
      const d = deliveryId === null ? undefined : await store.webhooks.redeliver(principalOf(request).org.id, request.params.id, deliveryId, clock.now());
      if (!d) throw notFound('dead letter');
      deliveries.notify();
      return reply.code(202).send({ delivery_id: ids.encode('delivery', d.id), event_id: ids.publicEventId(d.eventId) });
    },
  });

  app.route({
    method: 'POST',
    url: '/webhooks/:id/rotate-secret',
    config: { policy: admin },
    schema: {
      operationId: 'rotateWebhookSecret',
      summary: 'Rotate the signing secret',
      description: 'The new secret signs at once; the old one keeps signing, as a second v1 entry, for 24 hours.',
      params: IdParams,
      body: NoBody,
      response: { 200: z.object({ secret: z.string(), previous_secret_expires_at: z.string() }), ...errorResponses('not_found') },
    },
    handler: async (request) => {
      const secret = newSecret('whsec');
      const until = clock.now() + ROTATION_OVERLAP_MS;
      const row = await store.webhooks.rotateSecret(principalOf(request).org.id, request.params.id, secrets.seal(secret), until);
      if (!row) throw notFound('webhook');
      return { secret, previous_secret_expires_at: iso(until) };
    },
  });

  app.route({
    method: 'POST',
    url: '/webhooks/:id/test',
    config: { policy: admin },
    schema: {
      operationId: 'testWebhook',
      summary: 'Send a synthetic episode.finalized with test: true through the real pipeline',
      description: 'Delivered whatever the event filter, in order with the subscription\'s other deliveries.',
      params: IdParams,
      body: NoBody,
      response: { 202: z.object({ event_id: z.string() }), ...errorResponses('not_found') },
    },
    handler: async (request, reply) => {
      const sub = await store.webhooks.get(principalOf(request).org.id, request.params.id);
      if (!sub) throw notFound('webhook');
      const eventId = `evt_test_${randomBytes(12).toString('hex')}`;
      const event = testFinalizedEvent();
      await store.webhooks.enqueue(sub.id, { eventId, eventType: event.type, payload: JSON.stringify(event.payload) }, clock.now());
      deliveries.notify();
      return reply.code(202).send({ event_id: eventId });
    },
  });
});

