// Webhook rows (subscriptions, deliveries, attempts) as both engines return them and their domain
// form, and the token of a subscription's delivery claim.
import { randomBytes } from 'node:crypto';
import type { DeliveryAttemptRow, DeliveryOutcome, DeliveryRow, WebhookRow } from './types.js';

export interface SubDbRow {
  id: string;
  org_id: string;
  url: string;
  events: string;
  status: 'active' | 'disabled';
  disabled_reason: string | null;
  secret_sealed: string;
  previous_secret_sealed: string | null;
  previous_secret_until: number | null;
  event_cursor: number;
  last_delivered_at: number | null;
  last_delivery_error: string | null;
  created_at: number;
  claim_token: string | null;
  claimed_until: number | null;
  pending: number;
}

export interface DeliveryDbRow {
  id: number;
  subscription_id: string;
  event_id: string;
  event_type: string;
  payload: string;
  state: DeliveryRow['state'];
  attempts: number;
  next_attempt_at: number;
  last_status: number | null;
  last_error: string | null;
  dead_lettered_at: number | null;
  created_at: number;
}

export interface AttemptDbRow {
  id: number;
  subscription_id: string;
  delivery_id: number;
  event_id: string;
  event_type: string;
  attempt: number;
  status_code: number | null;
  error: string | null;
  latency_ms: number | null;
  outcome: DeliveryOutcome['kind'];
  at: number;
}

export function attemptFromDb(r: AttemptDbRow): DeliveryAttemptRow {
  return {
    id: r.id,
    subscriptionId: r.subscription_id,
    deliveryId: r.delivery_id,
    eventId: r.event_id,
    eventType: r.event_type,
    attempt: r.attempt,
    statusCode: r.status_code,
    error: r.error,
    latencyMs: r.latency_ms,
    outcome: r.outcome,
    at: r.at,
  };
}

export function subFromDb(r: SubDbRow): WebhookRow {
  return {
    id: r.id,
    orgId: r.org_id,
    url: r.url,
    events: JSON.parse(r.events) as string[],
    status: r.status,
    disabledReason: r.disabled_reason,
    secretSealed: r.secret_sealed,
    previousSecretSealed: r.previous_secret_sealed,
    previousSecretUntil: r.previous_secret_until,
    lastDeliveredAt: r.last_delivered_at,
    lastDeliveryError: r.last_delivery_error,
    createdAt: r.created_at,
    pendingDeliveries: r.pending,
  };
}

export function deliveryFromDb(r: DeliveryDbRow): DeliveryRow {
  return {
    id: r.id,
    subscriptionId: r.subscription_id,
    eventId: r.event_id,
    eventType: r.event_type,
    payload: r.payload,
    state: r.state,
    attempts: r.attempts,
    nextAttemptAt: r.next_attempt_at,
    lastStatus: r.last_status,
    lastError: r.last_error,
    deadLetteredAt: r.dead_lettered_at,
    createdAt: r.created_at,
  };
}

/** A claim's token: who holds a subscription's lease (unguessable only so that it never repeats). */
export function newClaimToken(): string {
  return randomBytes(12).toString('base64url');
}
