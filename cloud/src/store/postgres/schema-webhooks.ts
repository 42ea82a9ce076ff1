/**
 * Webhook subscriptions, their queues (one delivery row per event and subscription) and the
 * attempt log. The claim columns are the lease of the process attempting a subscription's head.
 */
export const WEBHOOKS_SCHEMA = `
  CREATE TABLE webhook_subscriptions (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL REFERENCES orgs(id),
    url TEXT NOT NULL,
    events TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('active', 'disabled')),
    disabled_reason TEXT,
    secret_sealed TEXT NOT NULL,
    previous_secret_sealed TEXT,
    previous_secret_until BIGINT,
    -- The last event of the log already fanned out to this subscription.
    event_cursor BIGINT NOT NULL,
    last_delivered_at BIGINT,
    last_delivery_error TEXT,
    created_at BIGINT NOT NULL,
    -- Who attempts the head now and until when (NULL: nobody); see WebhookStore.claimDue.
    claim_token TEXT,
    claimed_until BIGINT
  );
  CREATE INDEX webhook_subscriptions_by_org ON webhook_subscriptions (org_id, created_at);
  -- A subscription's queue is its pending rows in id order.
  CREATE TABLE webhook_deliveries (
    id BIGSERIAL PRIMARY KEY,
    subscription_id TEXT NOT NULL,
    event_id TEXT NOT NULL,
    event_type TEXT NOT NULL,
    payload TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'dead', 'redelivered')),
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at BIGINT NOT NULL,
    last_status INTEGER,
    last_error TEXT,
    dead_lettered_at BIGINT,
    created_at BIGINT NOT NULL
  );
  CREATE INDEX webhook_deliveries_queue ON webhook_deliveries (subscription_id, state, id);
  CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (subscription_id, id) WHERE state = 'pending';
  CREATE TABLE webhook_attempts (
    id BIGSERIAL PRIMARY KEY,
    subscription_id TEXT NOT NULL,
    delivery_id BIGINT NOT NULL,
    event_id TEXT NOT NULL,
    event_type TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    status_code INTEGER,
    error TEXT,
    latency_ms INTEGER,
    outcome TEXT NOT NULL CHECK (outcome IN ('delivered', 'retry', 'dead')),
    at BIGINT NOT NULL
  );
  CREATE INDEX webhook_attempts_by_subscription ON webhook_attempts (subscription_id, id);
`;
