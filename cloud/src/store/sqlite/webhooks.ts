import { activation } from '../../rules/webhook-activation.js';
import type { Db } from './db.js';
import { ATTEMPT_INSERT_COLUMNS, attemptFromDb, attemptWrite, deliveryFromDb, newClaimToken, subFromDb, type AttemptDbRow, type AttemptedDeliveryDbRow, type DeliveryDbRow, type SubDbRow } from '../shared/webhook-rows.js';
import { ATTEMPTS_KEPT_PER_SUBSCRIPTION, type ClaimedDelivery, type DeliveryAttemptRow, type DeliveryOutcome, type DeliveryRow, type WebhookRow, type WebhookStore } from '../shared/types.js';

const SUB_COLUMNS = `s.*, (SELECT COUNT(*) FROM webhook_deliveries d WHERE d.subscription_id = s.id AND d.state = 'pending') AS pending`;
const FAN_OUT_BATCH = 1000;
/**
 * A subscription's attempt log is trimmed every this many attempts (per process), not at each:
 * the trim walks ATTEMPTS_KEPT_PER_SUBSCRIPTION index entries to find the bound, a quarter of an
 * outcome's writes (and at a subscription's first attempt in a process). Until then up to this
 * many more stay on disk; `attempts()` shows only the newest ATTEMPTS_KEPT_PER_SUBSCRIPTION, as
 * documented.
 */
const TRIM_EVERY = 64;

export class SqliteWebhooks implements WebhookStore {
  private readonly byId;
  private readonly byOrg;
  private readonly activeCount;
  private readonly insertSub;
  private readonly maxEvent;
  private readonly insertDelivery;
  // The worker's statements, prepared once: it runs them for every attempt.
  private readonly byIdAny;
  private readonly target;
  private readonly heads;
  private readonly headOf;
  private readonly claim;
  private readonly releaseClaim;
  private readonly deliveryById;
  private readonly markAttempt;
  private readonly subAttempted;
  private readonly subAttemptedUnderClaim;
  private readonly insertAttempt;
  private readonly trimAttempts;
  private readonly attemptPage;
  /** Attempts logged per subscription since its last trim (in this process). */
  private readonly untrimmed = new Map<string, number>();
  private readonly fanOutStatements;
  /**
   * The newest event id every subscription's cursor had passed at the last fan-out that left
   * nothing behind: while the log's newest id is still this, a fan-out has nothing to do (the ids
   * only grow, AUTOINCREMENT). Only a shortcut: the cursors in the database are the truth.
   */
  private fannedOutTo: number | null = null;
  /** Outcomes waiting for the next shared commit (see record). */
  private toRecord: {
    deliveryId: number;
    o: DeliveryOutcome;
    claim: string | undefined;
    /** Claim the queue's next due head in the same commit (recordAndClaimNext). */
    next: { now: number; leaseMs: number } | undefined;
    resolve: (next: ClaimedDelivery | undefined) => void;
    reject: (err: unknown) => void;
  }[] = [];

  constructor(private readonly db: Db) {
    this.byId = db.prepare<[string, string], SubDbRow>(`SELECT ${SUB_COLUMNS} FROM webhook_subscriptions s WHERE s.org_id = ? AND s.id = ?`);
    this.byOrg = db.prepare<[string], SubDbRow>(`SELECT ${SUB_COLUMNS} FROM webhook_subscriptions s WHERE s.org_id = ? ORDER BY s.created_at, s.id`);
    this.activeCount = db.prepare<[string], { n: number }>(`SELECT COUNT(*) AS n FROM webhook_subscriptions WHERE org_id = ? AND status = 'active'`);
    this.insertSub = db.prepare(
      `INSERT INTO webhook_subscriptions (id, org_id, url, events, status, secret_sealed, event_cursor, created_at)
       VALUES (?, ?, ?, ?, 'active', ?, ?, ?)`,
    );
    this.maxEvent = db.prepare<[string], { m: number | null }>('SELECT MAX(id) AS m FROM events WHERE org_id = ?');
    this.insertDelivery = db.prepare(
      `INSERT INTO webhook_deliveries (subscription_id, event_id, event_type, payload, state, next_attempt_at, created_at)
       VALUES (?, ?, ?, ?, 'pending', ?, ?)`,
    );
    this.byIdAny = db.prepare<[string], SubDbRow>(`SELECT ${SUB_COLUMNS} FROM webhook_subscriptions s WHERE s.id = ?`);
    this.target = db.prepare<[string], SubDbRow>(`SELECT s.*, 0 AS pending FROM webhook_subscriptions s WHERE s.id = ?`);
    this.heads = db.prepare<[number, number, number], DeliveryDbRow>(
      `SELECT d.* FROM webhook_subscriptions s
       JOIN webhook_deliveries d ON d.id = (SELECT MIN(id) FROM webhook_deliveries q WHERE q.subscription_id = s.id AND q.state = 'pending')
       WHERE s.status = 'active' AND d.next_attempt_at <= ? AND (s.claimed_until IS NULL OR s.claimed_until <= ?)
       ORDER BY d.next_attempt_at LIMIT ?`,
    );
    this.headOf = db.prepare<[string], DeliveryDbRow & { claimed_until: number | null }>(
      `SELECT d.*, s.claimed_until FROM webhook_deliveries d JOIN webhook_subscriptions s ON s.id = d.subscription_id
       WHERE d.subscription_id = ? AND d.state = 'pending' AND s.status = 'active' ORDER BY d.id LIMIT 1`,
    );
    this.claim = db.prepare('UPDATE webhook_subscriptions SET claim_token = ?, claimed_until = ? WHERE id = ?');
    this.releaseClaim = db.prepare('UPDATE webhook_subscriptions SET claim_token = NULL, claimed_until = NULL WHERE id = ? AND claim_token = ?');
    // What an outcome's writes need of the delivery (not its payload).
    this.deliveryById = db.prepare<[number], AttemptedDeliveryDbRow>('SELECT id, subscription_id, event_id, event_type, attempts FROM webhook_deliveries WHERE id = ?');
    this.markAttempt = db.prepare(
      `UPDATE webhook_deliveries SET state = COALESCE(?, state), attempts = attempts + 1, last_status = ?, last_error = ?,
         next_attempt_at = COALESCE(?, next_attempt_at), dead_lettered_at = COALESCE(?, dead_lettered_at) WHERE id = ?`,
    );
    this.subAttempted = db.prepare('UPDATE webhook_subscriptions SET last_delivered_at = COALESCE(?, last_delivered_at), last_delivery_error = ? WHERE id = ?');
    // The same, and the release of the claim, only while `claim` holds (one statement instead of
    // a read of the token, the release and this update).
    this.subAttemptedUnderClaim = db.prepare(
      `UPDATE webhook_subscriptions SET last_delivered_at = COALESCE(?, last_delivered_at), last_delivery_error = ?, claim_token = NULL, claimed_until = NULL
       WHERE id = ? AND claim_token = ?`,
    );
    this.insertAttempt = db.prepare(`INSERT INTO webhook_attempts (${ATTEMPT_INSERT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`);
    this.fanOutStatements = {
      subs: db.prepare<[], SubDbRow>(`SELECT s.*, 0 AS pending FROM webhook_subscriptions s`),
      events: db.prepare<[string, number, number], { id: number; type: string; payload: string }>(
        'SELECT id, type, payload FROM events WHERE org_id = ? AND id > ? ORDER BY id LIMIT ?',
      ),
      advance: db.prepare('UPDATE webhook_subscriptions SET event_cursor = ? WHERE id = ?'),
      newest: db.prepare<[], { m: number | null }>('SELECT MAX(id) AS m FROM events'),
    };
    // Ids grow, so everything at or below the (N+1)th newest id is beyond the bound.
    this.trimAttempts = db.prepare(
      `DELETE FROM webhook_attempts WHERE subscription_id = ? AND id <= (
         SELECT id FROM webhook_attempts WHERE subscription_id = ? ORDER BY id DESC LIMIT 1 OFFSET ?)`,
    );
    // A page of the log within the bound (rows past it may wait for the next trim).
    this.attemptPage = db.prepare<[string, number, string, number, number], AttemptDbRow>(
      `SELECT * FROM webhook_attempts WHERE subscription_id = ? AND id < ? AND id > COALESCE((
         SELECT id FROM webhook_attempts WHERE subscription_id = ? ORDER BY id DESC LIMIT 1 OFFSET ?), 0)
       ORDER BY id DESC LIMIT ?`,
    );
  }

  async create(row: Parameters<WebhookStore['create']>[0], maxActive: number): Promise<'ok' | 'limit'> {
    return this.db
      .transaction((): 'ok' | 'limit' => {
        if (activation('new', this.activeCount.get(row.orgId)!.n, maxActive) === 'limit') return 'limit';
        // A new subscription starts with the events that come after it, not the history.
        const cursor = this.maxEvent.get(row.orgId)!.m ?? 0;
        this.insertSub.run(row.id, row.orgId, row.url, JSON.stringify(row.events), row.secretSealed, cursor, row.createdAt);
        return 'ok';
      })
      .immediate();
  }

  async get(orgId: string, id: string): Promise<WebhookRow | undefined> {
    const r = this.byId.get(orgId, id);
    return r && subFromDb(r);
  }

  async getById(id: string): Promise<WebhookRow | undefined> {
    const r = this.byIdAny.get(id);
    return r && subFromDb(r);
  }

  async deliveryTarget(id: string): Promise<Pick<WebhookRow, 'id' | 'url' | 'status' | 'secretSealed' | 'previousSecretSealed' | 'previousSecretUntil'> | undefined> {
    const r = this.target.get(id);
    return r && { id: r.id, url: r.url, status: r.status, secretSealed: r.secret_sealed, previousSecretSealed: r.previous_secret_sealed, previousSecretUntil: r.previous_secret_until };
  }

  async list(orgId: string): Promise<WebhookRow[]> {
    return this.byOrg.all(orgId).map(subFromDb);
  }

  async delete(orgId: string, id: string): Promise<boolean> {
    return this.db.transaction(() => {
      const gone = this.db.prepare('DELETE FROM webhook_subscriptions WHERE org_id = ? AND id = ?').run(orgId, id).changes > 0;
      if (gone) {
        this.untrimmed.delete(id);
        this.db.prepare('DELETE FROM webhook_deliveries WHERE subscription_id = ?').run(id);
        this.db.prepare('DELETE FROM webhook_attempts WHERE subscription_id = ?').run(id);
      }
      return gone;
    }).immediate();
  }

  async enable(orgId: string, id: string, maxActive: number): Promise<WebhookRow | 'limit' | undefined> {
    const result = this.db
      .transaction((): 'ok' | 'limit' | undefined => {
        const r = this.byId.get(orgId, id);
        if (!r) return undefined;
        const next = activation(r.status, this.activeCount.get(orgId)!.n, maxActive);
        if (next !== 'activate') return next === 'limit' ? 'limit' : 'ok';
        this.db.prepare(`UPDATE webhook_subscriptions SET status = 'active', disabled_reason = NULL WHERE id = ?`).run(id);
        return 'ok';
      })
      .immediate();
    return result === 'ok' ? this.get(orgId, id) : result;
  }

  async disable(id: string, reason: string): Promise<void> {
    this.db.prepare(`UPDATE webhook_subscriptions SET status = 'disabled', disabled_reason = ? WHERE id = ?`).run(reason, id);
  }

  async rotateSecret(orgId: string, id: string, secretSealed: string, previousUntil: number): Promise<WebhookRow | undefined> {
    const changed = this.db
      .prepare(
        `UPDATE webhook_subscriptions SET previous_secret_sealed = secret_sealed, previous_secret_until = ?, secret_sealed = ?
         WHERE org_id = ? AND id = ?`,
      )
      .run(previousUntil, secretSealed, orgId, id).changes;
    return changed > 0 ? this.get(orgId, id) : undefined;
  }

  async fanOut(now: number): Promise<number> {
    const { subs: allSubs, events, advance, newest } = this.fanOutStatements;
    // Read before the transaction: events appended meanwhile are fanned out too, and only make
    // the next call look again.
    const top = newest.get()!.m ?? 0;
    if (top === this.fannedOutTo) return 0;
    const { added, behind } = this.db
      .transaction(() => {
        let added = 0;
        let behind = false;
        for (const s of allSubs.all()) {
          const wanted = new Set(JSON.parse(s.events) as string[]);
          const batch = events.all(s.org_id, s.event_cursor, FAN_OUT_BATCH);
          if (batch.length === 0) continue;
          if (batch.length === FAN_OUT_BATCH) behind = true;
          for (const e of batch) {
            if (!wanted.has(e.type)) continue;
            this.insertDelivery.run(s.id, `evt_${e.id}`, e.type, e.payload, now, now);
            added++;
          }
          advance.run(batch[batch.length - 1]!.id, s.id);
        }
        return { added, behind };
      })
      .immediate();
    if (!behind) this.fannedOutTo = top;
    return added;
  }

  async enqueue(subscriptionId: string, d: { eventId: string; eventType: string; payload: string }, now: number): Promise<number> {
    return Number(this.insertDelivery.run(subscriptionId, d.eventId, d.eventType, d.payload, now, now).lastInsertRowid);
  }

  async claimDue(now: number, limit: number, leaseMs: number): Promise<ClaimedDelivery[]> {
    if (limit <= 0) return [];
    const token = newClaimToken();
    return this.db
      .transaction(() =>
        this.heads.all(now, now, limit).map((r) => {
          this.claim.run(token, now + leaseMs, r.subscription_id);
          return { ...deliveryFromDb(r), claim: token };
        }),
      )
      .immediate();
  }

  async dueHead(subscriptionId: string, now: number, leaseMs: number): Promise<ClaimedDelivery | undefined> {
    return this.db.transaction(() => this.claimHeadOf(subscriptionId, now, leaseMs)).immediate();
  }

  /** Claims `subscriptionId`'s head if it is active, due and no live lease holds it; call inside a transaction. */
  private claimHeadOf(subscriptionId: string, now: number, leaseMs: number): ClaimedDelivery | undefined {
    const r = this.headOf.get(subscriptionId);
    if (!r || r.next_attempt_at > now || (r.claimed_until !== null && r.claimed_until > now)) return undefined;
    const token = newClaimToken();
    this.claim.run(token, now + leaseMs, subscriptionId);
    return { ...deliveryFromDb(r), claim: token };
  }

  async release(subscriptionId: string, claim: string): Promise<void> {
    this.releaseClaim.run(subscriptionId, claim);
  }

  async nextDueAt(): Promise<number | null> {
    const r = this.db
      .prepare<[], { t: number | null }>(
        `SELECT MIN(d.next_attempt_at) AS t FROM webhook_subscriptions s
         JOIN webhook_deliveries d ON d.id = (SELECT MIN(id) FROM webhook_deliveries q WHERE q.subscription_id = s.id AND q.state = 'pending')
         WHERE s.status = 'active'`,
      )
      .get();
    return r?.t ?? null;
  }

  /** Applied in the next shared commit (queueRecord). */
  async record(deliveryId: number, o: DeliveryOutcome, claim?: string): Promise<void> {
    await this.queueRecord(deliveryId, o, claim, undefined);
  }

  /** record, and the claim of the queue's next due head in the same commit (no transaction of its own). */
  async recordAndClaimNext(d: Pick<ClaimedDelivery, 'id' | 'subscriptionId' | 'claim'>, o: DeliveryOutcome, now: number, leaseMs: number): Promise<ClaimedDelivery | undefined> {
    return this.queueRecord(d.id, o, d.claim, { now, leaseMs });
  }

  /**
   * Outcomes recorded in the same turn of the event loop (the worker's slots finish together)
   * share one transaction, committed on the next turn: one commit for several attempts, and for
   * the claims of the next heads of their queues. Each caller's promise settles after that
   * commit, so nothing goes on before its outcome is durable.
   */
  private queueRecord(deliveryId: number, o: DeliveryOutcome, claim: string | undefined, next: { now: number; leaseMs: number } | undefined): Promise<ClaimedDelivery | undefined> {
    return new Promise<ClaimedDelivery | undefined>((resolve, reject) => {
      this.toRecord.push({ deliveryId, o, claim, next, resolve, reject });
      if (this.toRecord.length === 1) setImmediate(() => this.flushRecords());
    });
  }

  private flushRecords(): void {
    const batch = this.toRecord;
    this.toRecord = [];
    let claimed: (ClaimedDelivery | undefined)[];
    try {
      claimed = this.db.transaction(() => batch.map(({ deliveryId, o, claim, next }) => this.recordOne(deliveryId, o, claim, next))).immediate();
    } catch (err) {
      for (const r of batch) r.reject(err);
      return;
    }
    batch.forEach((r, i) => r.resolve(claimed[i]));
  }

  /** One outcome; with `next`, the claim of the queue's next due head once the outcome is applied under `claim`. */
  private recordOne(deliveryId: number, o: DeliveryOutcome, claim: string | undefined, next: { now: number; leaseMs: number } | undefined): ClaimedDelivery | undefined {
    const d = this.deliveryById.get(deliveryId);
    if (!d) return undefined;
    const write = attemptWrite(d, o);
    // One row per attempt; the subscription keeps its newest ATTEMPTS_KEPT_PER_SUBSCRIPTION.
    this.insertAttempt.run(...write.attempt);
    // The first attempt in this process trims too: a process that stops before its 64th attempt
    // must not leave its rows to every later one (restarts would let the log grow without bound).
    const seen = this.untrimmed.get(d.subscription_id);
    if (seen === undefined || seen + 1 >= TRIM_EVERY) {
      this.trimAttempts.run(d.subscription_id, d.subscription_id, ATTEMPTS_KEPT_PER_SUBSCRIPTION);
      this.untrimmed.set(d.subscription_id, 0);
    } else {
      this.untrimmed.set(d.subscription_id, seen + 1);
    }
    if (claim === undefined) this.subAttempted.run(...write.subscription, d.subscription_id);
    // A lease that ran out and was taken over: the attempt happened, the new holder decides.
    else if (this.subAttemptedUnderClaim.run(...write.subscription, d.subscription_id, claim).changes === 0) return undefined;
    this.markAttempt.run(...write.delivery, deliveryId);
    if (next === undefined || claim === undefined || o.kind === 'retry') return undefined;
    return this.claimHeadOf(d.subscription_id, next.now, next.leaseMs);
  }

  async attempts(orgId: string, subscriptionId: string, beforeId: number | null, limit: number): Promise<DeliveryAttemptRow[] | undefined> {
    if (!this.byId.get(orgId, subscriptionId)) return undefined;
    return this.attemptPage.all(subscriptionId, beforeId ?? Number.MAX_SAFE_INTEGER, subscriptionId, ATTEMPTS_KEPT_PER_SUBSCRIPTION, limit).map(attemptFromDb);
  }

  async deadLetters(orgId: string, subscriptionId: string): Promise<DeliveryRow[] | undefined> {
    if (!this.byId.get(orgId, subscriptionId)) return undefined;
    return this.db
      .prepare<[string], DeliveryDbRow>(`SELECT * FROM webhook_deliveries WHERE subscription_id = ? AND state = 'dead' ORDER BY id`)
      .all(subscriptionId)
      .map(deliveryFromDb);
  }

  async redeliver(orgId: string, subscriptionId: string, deliveryId: number, now: number): Promise<DeliveryRow | undefined> {
    const id = this.db
      .transaction((): number | undefined => {
        if (!this.byId.get(orgId, subscriptionId)) return undefined;
        const d = this.db
          .prepare<[number, string], DeliveryDbRow>(`SELECT * FROM webhook_deliveries WHERE id = ? AND subscription_id = ? AND state = 'dead'`)
          .get(deliveryId, subscriptionId);
        if (!d) return undefined;
        this.db.prepare(`UPDATE webhook_deliveries SET state = 'redelivered' WHERE id = ?`).run(deliveryId);
        return Number(this.insertDelivery.run(subscriptionId, d.event_id, d.event_type, d.payload, now, now).lastInsertRowid);
      })
      .immediate();
    if (id === undefined) return undefined;
    const row = this.db.prepare<[number], DeliveryDbRow>('SELECT * FROM webhook_deliveries WHERE id = ?').get(id);
    return row && deliveryFromDb(row);
  }
}
