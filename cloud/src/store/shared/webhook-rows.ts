// Webhook rows (subscriptions, deliveries, attempts) as both engines return them and their domain
// form, and the token of a subscription's delivery claim.
import { randomUUID } from 'node:crypto';
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

/** The columns of a delivery that an attempt's outcome writes from (attemptWrite). */
export type AttemptedDeliveryDbRow = Pick<DeliveryDbRow, 'id' | 'subscription_id' | 'event_id' | 'event_type' | 'attempts'>;

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

/**
 * What an attempt's outcome writes, on both engines: the attempt's log row (the columns of
 * ATTEMPT_INSERT_COLUMNS, in order), the delivery's change and the subscription's. A delivery
 * that will be retried keeps its state and takes its next time; a delivered one clears its error;
 * a dead one records when it was dead-lettered. The subscription keeps its newest error, cleared
 * by a success, which also stamps its last delivery.
 */
export function attemptWrite(d: AttemptedDeliveryDbRow, o: DeliveryOutcome) {
  const error = o.kind === 'delivered' ? null : o.error;
  return {
    attempt: [d.subscription_id, d.id, d.event_id, d.event_type, d.attempts + 1, o.status, error, o.latencyMs === undefined ? null : Math.max(0, Math.round(o.latencyMs)), o.kind, o.at],
    /** (state or null to keep it, last_status, last_error, next_attempt_at or null to keep it, dead_lettered_at or null to keep it) */
    delivery: [o.kind === 'retry' ? null : o.kind, o.status, error, o.kind === 'retry' ? o.nextAttemptAt : null, o.kind === 'dead' ? o.at : null],
    /** (last_delivered_at or null to keep it, last_delivery_error) */
    subscription: [o.kind === 'delivered' ? o.at : null, error],
  } as const;
}

export const ATTEMPT_INSERT_COLUMNS = 'subscription_id, delivery_id, event_id, event_type, attempt, status_code, error, latency_ms, outcome, at';

/**
 * A claim's token: who holds a subscription's lease (random only so that it never repeats).
 * randomUUID draws from node's cached entropy: a claim per attempt made randomBytes a visible cost.
 */
export function newClaimToken(): string {
  return randomUUID();
}
