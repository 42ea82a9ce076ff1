import { activation } from '../../rules/webhook-activation.js';
import { ATTEMPT_INSERT_COLUMNS, attemptFromDb, attemptWrite, deliveryFromDb, newClaimToken, subFromDb, type AttemptDbRow, type DeliveryDbRow, type SubDbRow } from '../shared/webhook-rows.js';
import { ATTEMPTS_KEPT_PER_SUBSCRIPTION, type ClaimedDelivery, type DeliveryAttemptRow, type DeliveryOutcome, type DeliveryRow, type WebhookRow, type WebhookStore } from '../shared/types.js';
import { LOCKS, lockOrgs, type PgDb, type Sql } from './db.js';

const SUB_COLUMNS = `s.*, (SELECT COUNT(*) FROM webhook_deliveries d WHERE d.subscription_id = s.id AND d.state = 'pending') AS pending`;
/** Key space (first key of the two-key advisory lock) of the per-organization subscription limit. */
const ORG_SUBSCRIPTIONS_LOCK = 7_315_101;
/** Events fanned out per call at most: a long backlog is caught up over several passes. */
const FAN_OUT_BATCH = 5000;

/**
 * Webhooks on PostgreSQL. Every cross-replica rule is a database one: the active-subscription
 * limit under a per-organization lock, one fan-out at a time (LOCKS.fanOut) reading only event
 * ids its organization has already committed in order (see events.ts), and claims on queue heads taken with
 * FOR UPDATE SKIP LOCKED and held as a lease until the outcome is recorded.
 */
export class PgWebhooks implements WebhookStore {
  constructor(private readonly db: PgDb) {}

  private async lockOrg(sql: Sql, orgId: string): Promise<void> {
    await lockOrgs(sql, ORG_SUBSCRIPTIONS_LOCK, [orgId]);
  }

  private async activeCount(sql: Sql, orgId: string): Promise<number> {
    const r = await sql.query<{ n: number }>(`SELECT COUNT(*) AS n FROM webhook_subscriptions WHERE org_id = $1 AND status = 'active'`, [orgId]);
    return r.rows[0]!.n;
  }

  async create(row: Parameters<WebhookStore['create']>[0], maxActive: number): Promise<'ok' | 'limit'> {
    return this.db.tx(async (sql) => {
      await this.lockOrg(sql, row.orgId);
      if (activation('new', await this.activeCount(sql, row.orgId), maxActive) === 'limit') return 'limit';
      // A new subscription starts with the events that come after it, not the history.
      await sql.query(
        `INSERT INTO webhook_subscriptions (id, org_id, url, events, status, secret_sealed, event_cursor, created_at)
         VALUES ($1, $2, $3, $4, 'active', $5, COALESCE((SELECT MAX(id) FROM events WHERE org_id = $2), 0), $6)`,
        [row.id, row.orgId, row.url, JSON.stringify(row.events), row.secretSealed, row.createdAt],
      );
      return 'ok';
    });
  }

  async get(orgId: string, id: string): Promise<WebhookRow | undefined> {
    const r = await this.db.one<SubDbRow>(`SELECT ${SUB_COLUMNS} FROM webhook_subscriptions s WHERE s.org_id = $1 AND s.id = $2`, [orgId, id]);
    return r && subFromDb(r);
  }

  async getById(id: string): Promise<WebhookRow | undefined> {
    const r = await this.db.one<SubDbRow>(`SELECT ${SUB_COLUMNS} FROM webhook_subscriptions s WHERE s.id = $1`, [id]);
    return r && subFromDb(r);
  }

  async deliveryTarget(id: string): Promise<Pick<WebhookRow, 'id' | 'url' | 'status' | 'secretSealed' | 'previousSecretSealed' | 'previousSecretUntil'> | undefined> {
    const r = await this.db.one<SubDbRow>('SELECT * FROM webhook_subscriptions WHERE id = $1', [id]);
    return r && { id: r.id, url: r.url, status: r.status, secretSealed: r.secret_sealed, previousSecretSealed: r.previous_secret_sealed, previousSecretUntil: r.previous_secret_until };
  }

  async list(orgId: string): Promise<WebhookRow[]> {
    return (await this.db.many<SubDbRow>(`SELECT ${SUB_COLUMNS} FROM webhook_subscriptions s WHERE s.org_id = $1 ORDER BY s.created_at, s.id`, [orgId])).map(subFromDb);
  }

  async delete(orgId: string, id: string): Promise<boolean> {
    return this.db.tx(async (sql) => {
      const gone = ((await sql.query('DELETE FROM webhook_subscriptions WHERE org_id = $1 AND id = $2', [orgId, id])).rowCount ?? 0) > 0;
      if (gone) {
        await sql.query('DELETE FROM webhook_deliveries WHERE subscription_id = $1', [id]);
        await sql.query('DELETE FROM webhook_attempts WHERE subscription_id = $1', [id]);
      }
      return gone;
    });
  }

  async enable(orgId: string, id: string, maxActive: number): Promise<WebhookRow | 'limit' | undefined> {
    const result = await this.db.tx(async (sql): Promise<'ok' | 'limit' | undefined> => {
      await this.lockOrg(sql, orgId);
      const r = (
        await sql.query<{ status: 'active' | 'disabled'; active: number }>(
          `SELECT status, (SELECT COUNT(*) FROM webhook_subscriptions WHERE org_id = $1 AND status = 'active') AS active FROM webhook_subscriptions WHERE org_id = $1 AND id = $2`,
          [orgId, id],
        )
      ).rows[0];
      if (!r) return undefined;
      const next = activation(r.status, r.active, maxActive);
      if (next !== 'activate') return next === 'limit' ? 'limit' : 'ok';
      await sql.query(`UPDATE webhook_subscriptions SET status = 'active', disabled_reason = NULL WHERE id = $1`, [id]);
      return 'ok';
    });
    return result === 'ok' ? this.get(orgId, id) : result;
  }

  async disable(id: string, reason: string): Promise<void> {
    await this.db.query(`UPDATE webhook_subscriptions SET status = 'disabled', disabled_reason = $1 WHERE id = $2`, [reason, id]);
  }

  async rotateSecret(orgId: string, id: string, secretSealed: string, previousUntil: number): Promise<WebhookRow | undefined> {
    const r = await this.db.query(
      `UPDATE webhook_subscriptions SET previous_secret_sealed = secret_sealed, previous_secret_until = $1, secret_sealed = $2
       WHERE org_id = $3 AND id = $4`,
      [previousUntil, secretSealed, orgId, id],
    );
    return (r.rowCount ?? 0) > 0 ? this.get(orgId, id) : undefined;
  }

  /**
   * One fan-out at a time across replicas (LOCKS.fanOut), so each queue gets its events in id
   * order. Each subscription's bound is its own organization's newest visible event: an
   * organization's events commit in id order (events.ts), so every one of its ids at or below
   * that bound has committed and moving the cursor up to it skips nothing. Another
   * organization's newer events say nothing about this one's (they commit under another lock),
   * so no bound is taken across organizations.
   */
  async fanOut(now: number): Promise<number> {
    return this.db.tx(async (sql) => {
      await sql.query('SELECT pg_advisory_xact_lock($1)', [LOCKS.fanOut]);
      // The subscriptions behind, each with its bound, fixed now: one created meanwhile starts at its own cursor.
      const subs = (
        await sql.query<{ id: string; c: number; newest: number }>(
          `SELECT s.id, s.event_cursor AS c, n.newest
             FROM webhook_subscriptions s
             CROSS JOIN LATERAL (SELECT MAX(e.id) AS newest FROM events e WHERE e.org_id = s.org_id) n
            WHERE n.newest > s.event_cursor`,
        )
      ).rows;
      if (subs.length === 0) return 0;
      const ids = subs.map((s) => s.id);
      const tops = subs.map((s) => Math.min(s.newest, s.c + FAN_OUT_BATCH));
      const inserted = await sql.query(
        `INSERT INTO webhook_deliveries (subscription_id, event_id, event_type, payload, state, next_attempt_at, created_at)
         SELECT s.id, 'evt_' || e.id, e.type, e.payload, 'pending', $1, $1
         FROM unnest($2::text[], $3::bigint[]) AS b(id, top)
         JOIN webhook_subscriptions s ON s.id = b.id
         JOIN events e ON e.org_id = s.org_id AND e.id > s.event_cursor AND e.id <= b.top
         WHERE s.events::jsonb ? e.type
         ORDER BY s.id, e.id`,
        [now, ids, tops],
      );
      await sql.query(
        `UPDATE webhook_subscriptions s SET event_cursor = b.top
           FROM unnest($1::text[], $2::bigint[]) AS b(id, top)
          WHERE s.id = b.id AND s.event_cursor < b.top`,
        [ids, tops],
      );
      return inserted.rowCount ?? 0;
    });
  }

  async enqueue(subscriptionId: string, d: { eventId: string; eventType: string; payload: string }, now: number): Promise<number> {
    const r = await this.db.one<{ id: number }>(
      `INSERT INTO webhook_deliveries (subscription_id, event_id, event_type, payload, state, next_attempt_at, created_at)
       VALUES ($1, $2, $3, $4, 'pending', $5, $5) RETURNING id`,
      [subscriptionId, d.eventId, d.eventType, d.payload, now],
    );
    return r!.id;
  }

  async claimDue(now: number, limit: number, leaseMs: number): Promise<ClaimedDelivery[]> {
    return limit <= 0 ? [] : this.claimHeads(now, leaseMs, { limit });
  }

  async dueHead(subscriptionId: string, now: number, leaseMs: number): Promise<ClaimedDelivery | undefined> {
    return (await this.claimHeads(now, leaseMs, { subscriptionId }))[0];
  }

  /**
   * Claims the subscriptions whose head is due (the `limit` most overdue, or the one named) and
   * returns their heads. SKIP LOCKED passes over subscriptions another replica is claiming this
   * instant; a claim committed before ours is seen on the re-checked row (its lease is live) and
   * passed over too.
   */
  private claimHeads(now: number, leaseMs: number, which: { limit: number } | { subscriptionId: string }): Promise<ClaimedDelivery[]> {
    const token = newClaimToken();
    const one = 'subscriptionId' in which;
    return this.db.tx(async (sql) => {
      const claimed = await sql.query<{ id: string }>(
        `WITH due AS (
           SELECT s.id FROM webhook_subscriptions s
           CROSS JOIN LATERAL (SELECT d.next_attempt_at FROM webhook_deliveries d
                               WHERE d.subscription_id = s.id AND d.state = 'pending' ORDER BY d.id LIMIT 1) h
           WHERE ${one ? 's.id = $5 AND ' : ''}s.status = 'active' AND h.next_attempt_at <= $1 AND (s.claimed_until IS NULL OR s.claimed_until <= $1)
           ORDER BY h.next_attempt_at LIMIT $2
           FOR UPDATE OF s SKIP LOCKED
         )
         UPDATE webhook_subscriptions s SET claim_token = $3, claimed_until = $4 FROM due WHERE s.id = due.id RETURNING s.id`,
        one ? [now, 1, token, now + leaseMs, which.subscriptionId] : [now, which.limit, token, now + leaseMs],
      );
      return headsOfClaimed(sql, claimed.rows.map((r) => r.id), now, token);
    });
  }

  async release(subscriptionId: string, claim: string): Promise<void> {
    await this.db.query('UPDATE webhook_subscriptions SET claim_token = NULL, claimed_until = NULL WHERE id = $1 AND claim_token = $2', [subscriptionId, claim]);
  }

  async nextDueAt(): Promise<number | null> {
    const r = await this.db.one<{ t: number | null }>(
      `SELECT MIN(h.next_attempt_at) AS t FROM webhook_subscriptions s
       CROSS JOIN LATERAL (SELECT d.next_attempt_at FROM webhook_deliveries d
                           WHERE d.subscription_id = s.id AND d.state = 'pending' ORDER BY d.id LIMIT 1) h
       WHERE s.status = 'active'`,
    );
    return r?.t ?? null;
  }

  async record(deliveryId: number, o: DeliveryOutcome, claim?: string): Promise<void> {
    await this.db.tx(async (sql) => {
      const d = (await sql.query<DeliveryDbRow>('SELECT * FROM webhook_deliveries WHERE id = $1', [deliveryId])).rows[0];
      if (!d) return;
      const write = attemptWrite(d, o);
      await sql.query(`INSERT INTO webhook_attempts (${ATTEMPT_INSERT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`, [...write.attempt]);
      // The newest ATTEMPTS_KEPT_PER_SUBSCRIPTION stay (ids grow).
      await sql.query(
        `DELETE FROM webhook_attempts WHERE subscription_id = $1 AND id <= (
           SELECT id FROM webhook_attempts WHERE subscription_id = $1 ORDER BY id DESC LIMIT 1 OFFSET $2)`,
        [d.subscription_id, ATTEMPTS_KEPT_PER_SUBSCRIPTION],
      );
      if (claim !== undefined) {
        // Releasing is also the check that the claim still holds: a holder whose lease ran out
        // and was taken over only logs its attempt, the new holder decides the delivery.
        const held = await sql.query('UPDATE webhook_subscriptions SET claim_token = NULL, claimed_until = NULL WHERE id = $1 AND claim_token = $2', [d.subscription_id, claim]);
        if ((held.rowCount ?? 0) === 0) return;
      }
      await sql.query(
        `UPDATE webhook_deliveries SET state = COALESCE($1, state), attempts = attempts + 1, last_status = $2, last_error = $3,
           next_attempt_at = COALESCE($4, next_attempt_at), dead_lettered_at = COALESCE($5, dead_lettered_at) WHERE id = $6`,
        [...write.delivery, deliveryId],
      );
      await sql.query('UPDATE webhook_subscriptions SET last_delivered_at = COALESCE($1, last_delivered_at), last_delivery_error = $2 WHERE id = $3', [
        ...write.subscription,
        d.subscription_id,
      ]);
    });
  }

  async recordAndClaimNext(d: Pick<ClaimedDelivery, 'id' | 'subscriptionId' | 'claim'>, o: DeliveryOutcome, now: number, leaseMs: number): Promise<ClaimedDelivery | undefined> {
    // Two transactions: the claim re-reads the subscription after the release (another replica
    // may take the queue over between them; either way one holder at a time).
    await this.record(d.id, o, d.claim);
    return o.kind === 'retry' ? undefined : this.dueHead(d.subscriptionId, now, leaseMs);
  }

  private async exists(orgId: string, subscriptionId: string): Promise<boolean> {
    return (await this.db.one('SELECT 1 FROM webhook_subscriptions WHERE org_id = $1 AND id = $2', [orgId, subscriptionId])) !== undefined;
  }

  async attempts(orgId: string, subscriptionId: string, beforeId: number | null, limit: number): Promise<DeliveryAttemptRow[] | undefined> {
    if (!(await this.exists(orgId, subscriptionId))) return undefined;
    const rows = await this.db.many<AttemptDbRow>('SELECT * FROM webhook_attempts WHERE subscription_id = $1 AND id < $2 ORDER BY id DESC LIMIT $3', [
      subscriptionId,
      beforeId ?? Number.MAX_SAFE_INTEGER,
      limit,
    ]);
    return rows.map(attemptFromDb);
  }

  async deadLetters(orgId: string, subscriptionId: string): Promise<DeliveryRow[] | undefined> {
    if (!(await this.exists(orgId, subscriptionId))) return undefined;
    return (await this.db.many<DeliveryDbRow>(`SELECT * FROM webhook_deliveries WHERE subscription_id = $1 AND state = 'dead' ORDER BY id`, [subscriptionId])).map(deliveryFromDb);
  }

  async redeliver(orgId: string, subscriptionId: string, deliveryId: number, now: number): Promise<DeliveryRow | undefined> {
    const row = await this.db.tx(async (sql) => {
      const moved = await sql.query<DeliveryDbRow>(
        `UPDATE webhook_deliveries d SET state = 'redelivered' FROM webhook_subscriptions s
         WHERE d.id = $1 AND d.subscription_id = $2 AND d.state = 'dead' AND s.id = d.subscription_id AND s.org_id = $3
         RETURNING d.*`,
        [deliveryId, subscriptionId, orgId],
      );
      const d = moved.rows[0];
      if (!d) return undefined;
      return (
        await sql.query<DeliveryDbRow>(
          `INSERT INTO webhook_deliveries (subscription_id, event_id, event_type, payload, state, next_attempt_at, created_at)
           VALUES ($1, $2, $3, $4, 'pending', $5, $5) RETURNING *`,
          [subscriptionId, d.event_id, d.event_type, d.payload, now],
        )
      ).rows[0];
    });
    return row && deliveryFromDb(row);
  }
}

/**
 * The heads of subscriptions just claimed, read by a statement of their own. The claiming
 * statement saw the queues as of its start: a holder that delivered a head and released its lease
 * while that statement waited has its release re-checked on the locked subscription row, but its
 * delivery's new state is not (PostgreSQL re-checks only the locked rows), so reading the head in
 * the same statement handed out a delivery already made, and it went out twice. A new statement
 * sees every commit made before the lock was taken. A claimed queue whose head is no longer due
 * is released.
 */
async function headsOfClaimed(sql: Sql, ids: string[], now: number, token: string): Promise<ClaimedDelivery[]> {
  if (ids.length === 0) return [];
  const heads = await sql.query<DeliveryDbRow>(
    `SELECT h.* FROM webhook_subscriptions s
     CROSS JOIN LATERAL (SELECT d.* FROM webhook_deliveries d
                         WHERE d.subscription_id = s.id AND d.state = 'pending' ORDER BY d.id LIMIT 1) h
     WHERE s.id = ANY($1) AND h.next_attempt_at <= $2
     ORDER BY h.next_attempt_at, h.id`,
    [ids, now],
  );
  const due = new Set(heads.rows.map((r) => r.subscription_id));
  const idle = ids.filter((id) => !due.has(id));
  if (idle.length > 0) await sql.query('UPDATE webhook_subscriptions SET claim_token = NULL, claimed_until = NULL WHERE id = ANY($1) AND claim_token = $2', [idle, token]);
  return heads.rows.map((r) => ({ ...deliveryFromDb(r), claim: token }));
}
