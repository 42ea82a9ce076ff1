import type { FastifyBaseLogger } from 'fastify';
import { LRUCache } from 'lru-cache';
import { every, nextRetryDelay, signPayload, SIGNATURE_HEADER, type Clock, type Scheduler } from '@fleet/protocol';
import { EgressError, type EgressClient } from '../egress/client.js';
import type { CloudMetrics } from '../metrics.js';
import { isRetryableStatus, RETRY_SCHEDULE_MS } from '../rules/webhook-retry.js';
import type { SecretBox } from '../secret-box.js';
import type { ClaimedDelivery, DeliveryOutcome, DeliveryRow, Store, WebhookRow } from '../store/index.js';

export const RECEIVER_TIMEOUT_MS = 10_000;
/** A receiver's answer is read up to this size; only its status matters. */
const MAX_RESPONSE_BYTES = 64 * 1024;

/** Failures that mean the subscription's configuration cannot work: it is auto-disabled. */
function unusableConfiguration(err: EgressError): boolean {
  if (err.failure === 'invalid_url' || err.failure === 'forbidden_address') return true;
  return err.failure === 'unresolvable' && err.details.transient !== true;
}

export interface DeliveryWorkerOptions {
  store: Store;
  secrets: SecretBox;
  egress: EgressClient;
  clock: Clock;
  /** Paces the background poll. */
  scheduler: Scheduler;
  logger: FastifyBaseLogger;
  schedule?: readonly number[];
  /** Deliveries in flight at once, each to a different subscription. */
  concurrency?: number;
  /** How often the background loop looks for due work. */
  pollMs?: number;
  /** How long a receiver has to answer an attempt (default RECEIVER_TIMEOUT_MS). */
  receiverTimeoutMs?: number;
  /** Counts each attempt's outcome. */
  metrics?: Pick<CloudMetrics, 'webhookDelivery'>;
  /**
   * How long a claim on a subscription holds without an outcome (default leaseFor(receiver
   * timeout)): another process takes the head over after it, so it must outlast one attempt.
   */
  leaseMs?: number;
}

/**
 * A lease that outlasts an attempt (one deadline bounds the whole request) with room for the
 * outcome's commit. It is also how long a subscription waits after its process died mid-attempt
 * (a kill -9, or a restart of the only process), so no longer than that. Should it run out anyway
 * (a stalled process), the late outcome is refused (the claim token no longer holds) and the head
 * is attempted again: one delivery twice, never out of order.
 */
export function leaseFor(receiverTimeoutMs: number): number {
  return receiverTimeoutMs + 5_000;
}

/** Consecutive attempts one slot makes on one subscription's queue before it lets others in. */
const RUN_LENGTH = 32;
/** Opened signing secrets kept (two per subscription during a rotation). */
const OPENED_SECRETS_KEPT = 1024;

/**
 * Fans events out of the log into one queue per subscription and delivers each queue strictly
 * in order: only the oldest pending delivery of an active subscription is ever attempted, so a
 * failing one holds the later ones until it succeeds or is dead-lettered. Everything is in the
 * database, so a restart (or kill -9) resumes where it stopped: at least once, in order.
 *
 * Up to `concurrency` subscriptions are worked on at once, each by one slot: a slot attempts its
 * subscription's head, records the outcome, then goes straight on to that queue's next due head
 * (up to RUN_LENGTH in a row), and when it is done the freed slot claims the oldest due head of a
 * subscription nobody works on. No slot waits for another. The claim is a lease in the database
 * (WebhookStore.claimDue), taken for each attempt and released with its outcome, so a
 * subscription is worked on by at most one slot of one process, which is what keeps its order
 * across replicas; a process killed mid-attempt leaves a lease that runs out, and another takes
 * the head over. `notify()` (ingest, tests, redeliveries) wakes a
 * pass at once; the poll is only the fallback for work that another process wrote.
 */
export class DeliveryWorker {
  private readonly schedule: readonly number[];
  private readonly concurrency: number;
  private readonly leaseMs: number;
  private stopPolling: (() => void) | null = null;
  private running: Promise<number> | null = null;
  /**
   * The slots at work. Not keyed by subscription: between one attempt's outcome (which releases
   * the claim) and the claim of the queue's next head, a pass may claim that head for a new slot;
   * the old slot then finds the head taken and ends, and both must be waited for.
   */
  private readonly slots = new Set<Promise<void>>();
  /** New work may exist that the running pass has not looked for (fan-out and claim again). */
  private dirty = false;
  /** Wake the passes that wait for a slot to finish. */
  private waiting: (() => void)[] = [];
  /** A slot's unexpected failure (the store's): ends the pass, as the poll will retry. */
  private failure: { err: unknown } | null = null;
  private attemptsMade = 0;
  /** stop() was called: slots finish the attempt they are in, and nothing new is claimed. */
  private stopping = false;
  /** Opened signing secrets by their sealed form (a rotation seals a new one: a new key). */
  private readonly opened = new LRUCache<string, string>({ max: OPENED_SECRETS_KEPT });

  constructor(private readonly opts: DeliveryWorkerOptions) {
    this.schedule = opts.schedule ?? RETRY_SCHEDULE_MS;
    this.concurrency = Math.max(1, opts.concurrency ?? 8);
    this.leaseMs = opts.leaseMs ?? leaseFor(opts.receiverTimeoutMs ?? RECEIVER_TIMEOUT_MS);
  }

  start(): void {
    this.stopping = false;
    const poll = this.opts.pollMs ?? 1000;
    this.stopPolling ??= every(this.opts.scheduler, poll, () => this.notify());
    this.notify();
  }

  async stop(): Promise<void> {
    this.stopping = true;
    this.wakeUp();
    this.stopPolling?.();
    this.stopPolling = null;
    await this.running;
    await Promise.all(this.slots.values());
  }

  /** Something may be due (a new event, a test, a redelivery): run a pass now. */
  notify(): void {
    if (this.running) {
      // The running pass fans out and claims again as soon as it wakes.
      this.dirty = true;
      this.wakeUp();
      return;
    }
    this.running = this.tick()
      .catch((err: unknown) => {
        this.opts.logger.error({ err }, 'webhook delivery pass failed');
        return 0;
      })
      .finally(() => {
        this.running = null;
        if (this.dirty) {
          this.dirty = false;
          this.notify();
        }
      });
  }

  /**
   * One pass: fan out new events, then attempt every due queue head (several subscriptions at
   * once) until nothing is due and nothing is in flight. Returns attempts made.
   */
  async tick(): Promise<number> {
    const { store, clock } = this.opts;
    const before = this.attemptsMade;
    await store.webhooks.fanOut(clock.now());
    this.dirty = false;
    for (;;) {
      const free = this.stopping ? 0 : this.concurrency - this.slots.size;
      if (free > 0) {
        // The database's leases keep out every subscription a slot (here or elsewhere) holds.
        for (const d of await store.webhooks.claimDue(clock.now(), free, this.leaseMs)) this.run(d);
      }
      if (this.failure) {
        const { err } = this.failure;
        await Promise.all(this.slots.values());
        this.failure = null;
        throw err;
      }
      if (this.slots.size === 0 && !this.dirty) return this.attemptsMade - before;
      if (!this.dirty) await this.slotFreedOrNotified();
      if (this.dirty) {
        this.dirty = false;
        await store.webhooks.fanOut(clock.now());
      }
    }
  }

  /** Takes `first`'s subscription into a slot and works down its queue. */
  private run(first: ClaimedDelivery): void {
    const slot: Promise<void> = this.workQueue(first).finally(() => {
      this.slots.delete(slot);
      this.wakeUp();
    });
    this.slots.add(slot);
  }

  /** Works down `first`'s subscription queue, up to RUN_LENGTH attempts; never rejects. */
  private async workQueue(first: ClaimedDelivery): Promise<void> {
    const subscriptionId = first.subscriptionId;
    let d: ClaimedDelivery | undefined = first;
    try {
      for (let n = 0; d !== undefined && n < RUN_LENGTH && !this.stopping; n++) {
        this.attemptsMade++;
        // The outcome's commit releases the claim and, unless the run ends here, claims the
        // queue's next due head. (Should the attempt throw, `d`'s claim is released below.)
        d = await this.attempt(d, n + 1 < RUN_LENGTH);
      }
      // Stopping, or the run was long enough: let other slots (and processes) in.
      if (d) await this.opts.store.webhooks.release(subscriptionId, d.claim);
    } catch (err) {
      this.failure ??= { err };
      // Best effort: otherwise the head waits for its lease to run out.
      if (d) await this.opts.store.webhooks.release(subscriptionId, d.claim).catch(() => undefined);
    }
  }

  private slotFreedOrNotified(): Promise<void> {
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  private wakeUp(): void {
    const waiting = this.waiting;
    this.waiting = [];
    for (const wake of waiting) wake();
  }

  /**
   * Attempts `d` and records the outcome, which releases its claim. With `goOn`, an outcome that
   * lets the queue go on also claims its next due head, which is returned; undefined when there
   * is none, or the subscription cannot go on now.
   */
  private async attempt(d: ClaimedDelivery, goOn: boolean): Promise<ClaimedDelivery | undefined> {
    const { store, clock, logger } = this.opts;
    const sub = await store.webhooks.deliveryTarget(d.subscriptionId);
    if (!sub || sub.status !== 'active') {
      await store.webhooks.release(d.subscriptionId, d.claim);
      return undefined;
    }
    const finish = async (o: DeliveryOutcome): Promise<ClaimedDelivery | undefined> => {
      // Only a slot that goes on (not stopping) takes the next head; otherwise the outcome alone.
      let next: ClaimedDelivery | undefined;
      if (goOn && !this.stopping) next = await store.webhooks.recordAndClaimNext(d, o, clock.now(), this.leaseMs);
      else await store.webhooks.record(d.id, o, d.claim);
      this.opts.metrics?.webhookDelivery(o.kind);
      return next;
    };
    const now = clock.now();
    let outcome: DeliveryOutcome;
    // The attempt log's latency: from sending to the answer or the failure, on the injected clock.
    const timed = (o: DeliveryOutcome): DeliveryOutcome => ({ ...o, latencyMs: o.at - now });
    const byStatus = (status: number, at: number): DeliveryOutcome => {
      if (status >= 200 && status < 300) return timed({ kind: 'delivered', status, at });
      if (isRetryableStatus(status)) return timed(this.retryOrDead(d, status, `HTTP ${status}`, at));
      return timed({ kind: 'dead', status, error: `HTTP ${status}`, at });
    };
    try {
      const res = await this.opts.egress.post(sub.url, {
        headers: this.headers(sub, d, now),
        body: d.payload,
        timeoutMs: this.opts.receiverTimeoutMs ?? RECEIVER_TIMEOUT_MS,
        maxResponseBytes: MAX_RESPONSE_BYTES,
        discardBody: true,
      });
      outcome = byStatus(res.status, clock.now());
    } catch (err) {
      if (err instanceof EgressError && err.failure === 'too_large' && err.details.status !== undefined) {
        // Only the status matters: a huge body is cut off, not held against the receiver.
        return finish(byStatus(err.details.status, clock.now()));
      }
      if (err instanceof EgressError && unusableConfiguration(err)) {
        // The URL cannot work as configured: disable, keep the queue, count no attempt.
        // The reason is the tenant's to read: the failure in words; the detail (resolved address,
        // resolver text) is for the operator's log only.
        logger.warn({ subscription_id: sub.id, failure: err.failure, error: err.message }, 'webhook subscription auto-disabled');
        await store.webhooks.disable(sub.id, `${err.failure}: ${err.publicMessage}`.slice(0, 512));
        await store.webhooks.release(sub.id, d.claim);
        this.opts.metrics?.webhookDelivery('disabled');
        return undefined;
      }
      if (err instanceof EgressError && err.publicMessage !== err.message) {
        logger.info({ subscription_id: sub.id, delivery_id: d.id, failure: err.failure, error: err.message }, 'webhook delivery attempt failed');
      }
      const failure = err instanceof EgressError ? `${err.failure}: ${err.publicMessage}` : String(err);
      outcome = timed(this.retryOrDead(d, null, failure.slice(0, 512), clock.now()));
    }
    return finish(outcome);
  }

  private retryOrDead(d: DeliveryRow, status: number | null, error: string, at: number): DeliveryOutcome {
    // The spec's schedule is fixed (no jitter, no Retry-After): receivers can predict it.
    const wait = nextRetryDelay({ schedule: this.schedule }, d.attempts + 1);
    if (wait === null) return { kind: 'dead', status, error: `${error} (after ${d.attempts + 1} attempts)`, at };
    return { kind: 'retry', status, error, at, nextAttemptAt: at + wait };
  }

  /** Decrypting a secret for every attempt cost more than its HMAC; a bounded cache. */
  private open(sealed: string): string {
    let secret = this.opened.get(sealed);
    if (secret === undefined) {
      secret = this.opts.secrets.open(sealed);
      this.opened.set(sealed, secret);
    }
    return secret;
  }

  private headers(sub: Pick<WebhookRow, 'secretSealed' | 'previousSecretSealed' | 'previousSecretUntil'>, d: DeliveryRow, now: number): Record<string, string> {
    const signing = [this.open(sub.secretSealed)];
    // During a rotation the old secret keeps signing, as a second v1 entry, for 24 h.
    if (sub.previousSecretSealed && sub.previousSecretUntil !== null && sub.previousSecretUntil > now) {
      signing.push(this.open(sub.previousSecretSealed));
    }
    return {
      'content-type': 'application/json',
      'user-agent': 'fleet-webhooks/1',
      'x-service-event': d.eventType,
      'x-service-event-id': this.opts.secrets.opaqueIds().publicEventId(d.eventId),
      [SIGNATURE_HEADER.toLowerCase()]: signPayload(d.payload, signing, Math.floor(now / 1000)),
    };
  }
}
