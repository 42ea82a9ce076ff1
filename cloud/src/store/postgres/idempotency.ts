import type { IdempotencyBegin, IdempotencyClaim, IdempotencyStore, StoredResponse } from '../shared/types.js';
import { existingKeyVerdict, type IdemDbRow } from '../../rules/idempotency.js';
import type { PgDb } from './db.js';

export class PgIdempotency implements IdempotencyStore {
  constructor(private readonly db: PgDb) {}

  async begin(args: { orgId: string; key: string; token: string; fingerprint: string; now: number; leaseMs: number }): Promise<IdempotencyBegin> {
    const { orgId, key, token, fingerprint, now, leaseMs } = args;
    // Concurrent requests with one key, on any replica: the first INSERT wins; the others wait on
    // its row lock (FOR UPDATE) and then see its claim or its response.
    return this.db.tx(async (sql): Promise<IdempotencyBegin> => {
      const inserted = await sql.query(
        `INSERT INTO idempotency_keys (org_id, key, fingerprint, state, claim_token, lease_until, created_at)
         VALUES ($1, $2, $3, 'in_flight', $4, $5, $6) ON CONFLICT (org_id, key) DO NOTHING`,
        [orgId, key, fingerprint, token, now + leaseMs, now],
      );
      if (inserted.rowCount) return { kind: 'started' };
      const row = (await sql.query<IdemDbRow>('SELECT * FROM idempotency_keys WHERE org_id = $1 AND key = $2 FOR UPDATE', [orgId, key])).rows[0];
      const verdict = existingKeyVerdict(row, fingerprint, now);
      if (verdict) return verdict;
      // Expired (a completed entry past its time, or the lease of a process that died): take it over.
      await sql.query(
        `INSERT INTO idempotency_keys (org_id, key, fingerprint, state, claim_token, lease_until, created_at)
         VALUES ($1, $2, $3, 'in_flight', $4, $5, $6)
         ON CONFLICT (org_id, key) DO UPDATE SET fingerprint = excluded.fingerprint, state = 'in_flight',
           status = NULL, content_type = NULL, body = NULL, claim_token = excluded.claim_token, lease_until = excluded.lease_until,
           expires_at = NULL, created_at = excluded.created_at`,
        [orgId, key, fingerprint, token, now + leaseMs, now],
      );
      return { kind: 'started' };
    });
  }

  async complete(args: IdempotencyClaim & { response: StoredResponse; now: number; ttlMs: number }): Promise<boolean> {
    const { orgId, key, token, response, now, ttlMs } = args;
    const r = await this.db.query(
      `UPDATE idempotency_keys SET state = 'completed', status = $1, content_type = $2, body = $3, claim_token = NULL, lease_until = NULL, expires_at = $4
       WHERE org_id = $5 AND key = $6 AND state = 'in_flight' AND claim_token = $7`,
      [response.status, response.contentType, response.body, now + ttlMs, orgId, key, token],
    );
    return (r.rowCount ?? 0) > 0;
  }

  async release(claim: IdempotencyClaim): Promise<void> {
    await this.db.query(`DELETE FROM idempotency_keys WHERE org_id = $1 AND key = $2 AND state = 'in_flight' AND claim_token = $3`, [
      claim.orgId,
      claim.key,
      claim.token,
    ]);
  }

  async renew(claims: readonly IdempotencyClaim[], now: number, leaseMs: number): Promise<number> {
    if (claims.length === 0) return 0;
    const r = await this.db.query(
      `UPDATE idempotency_keys AS k SET lease_until = $1
       FROM unnest($2::text[], $3::text[], $4::text[]) AS c(org_id, key, token)
       WHERE k.org_id = c.org_id AND k.key = c.key AND k.state = 'in_flight' AND k.claim_token = c.token`,
      [now + leaseMs, claims.map((c) => c.orgId), claims.map((c) => c.key), claims.map((c) => c.token)],
    );
    return r.rowCount ?? 0;
  }

  async purgeExpired(now: number): Promise<number> {
    const r = await this.db.query(
      `DELETE FROM idempotency_keys WHERE (state = 'completed' AND expires_at <= $1) OR (state = 'in_flight' AND lease_until <= $1)`,
      [now],
    );
    return r.rowCount ?? 0;
  }
}
