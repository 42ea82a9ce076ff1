import { existingKeyVerdict, type IdemDbRow } from '../../rules/idempotency.js';
import type { Db } from './db.js';
import type { IdempotencyBegin, IdempotencyClaim, IdempotencyStore, StoredResponse } from '../shared/types.js';

export class SqliteIdempotency implements IdempotencyStore {
  private readonly select;
  private readonly claim;
  private readonly completeStmt;
  private readonly releaseStmt;
  private readonly renewStmt;
  private readonly purge;

  constructor(private readonly db: Db) {
    this.select = db.prepare<[string, string], IdemDbRow>('SELECT * FROM idempotency_keys WHERE org_id = ? AND key = ?');
    this.claim = db.prepare(
      `INSERT INTO idempotency_keys (org_id, key, fingerprint, state, claim_token, lease_until, created_at)
       VALUES (?, ?, ?, 'in_flight', ?, ?, ?)
       ON CONFLICT (org_id, key) DO UPDATE SET fingerprint = excluded.fingerprint, state = 'in_flight',
         status = NULL, content_type = NULL, body = NULL, claim_token = excluded.claim_token, lease_until = excluded.lease_until,
         expires_at = NULL, created_at = excluded.created_at`,
    );
    this.completeStmt = db.prepare(
      `UPDATE idempotency_keys SET state = 'completed', status = ?, content_type = ?, body = ?, claim_token = NULL, lease_until = NULL, expires_at = ?
       WHERE org_id = ? AND key = ? AND state = 'in_flight' AND claim_token = ?`,
    );
    this.releaseStmt = db.prepare(`DELETE FROM idempotency_keys WHERE org_id = ? AND key = ? AND state = 'in_flight' AND claim_token = ?`);
    this.renewStmt = db.prepare(
      `UPDATE idempotency_keys SET lease_until = ?
       WHERE state = 'in_flight' AND (org_id, key, claim_token) IN
         (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]') FROM json_each(?))`,
    );
    this.purge = db.prepare(
      `DELETE FROM idempotency_keys WHERE (state = 'completed' AND expires_at <= ?) OR (state = 'in_flight' AND lease_until <= ?)`,
    );
  }

  async begin(args: { orgId: string; key: string; token: string; fingerprint: string; now: number; leaseMs: number }): Promise<IdempotencyBegin> {
    const { orgId, key, token, fingerprint, now, leaseMs } = args;
    // One IMMEDIATE transaction: the read and the claim happen under the write lock, so two
    // concurrent requests with one key (even from two processes) cannot both start.
    return this.db
      .transaction((): IdempotencyBegin => {
        const verdict = existingKeyVerdict(this.select.get(orgId, key), fingerprint, now);
        if (verdict) return verdict;
        this.claim.run(orgId, key, fingerprint, token, now + leaseMs, now);
        return { kind: 'started' };
      })
      .immediate();
  }

  async complete(args: IdempotencyClaim & { response: StoredResponse; now: number; ttlMs: number }): Promise<boolean> {
    const { orgId, key, token, response, now, ttlMs } = args;
    return this.completeStmt.run(response.status, response.contentType, response.body, now + ttlMs, orgId, key, token).changes > 0;
  }

  async release(claim: IdempotencyClaim): Promise<void> {
    this.releaseStmt.run(claim.orgId, claim.key, claim.token);
  }

  async renew(claims: readonly IdempotencyClaim[], now: number, leaseMs: number): Promise<number> {
    if (claims.length === 0) return 0;
    return this.renewStmt.run(now + leaseMs, JSON.stringify(claims.map((c) => [c.orgId, c.key, c.token]))).changes;
  }

  async purgeExpired(now: number): Promise<number> {
    return this.purge.run(now, now).changes;
  }
}
