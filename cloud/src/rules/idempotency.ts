import type { IdempotencyBegin } from '../store/shared/types.js';

/** An `idempotency_keys` row as both engines read it. */
export interface IdemDbRow {
  fingerprint: string;
  state: 'in_flight' | 'completed';
  status: number | null;
  content_type: string | null;
  body: string | null;
  lease_until: number | null;
  expires_at: number | null;
}

/**
 * The rule of an Idempotency-Key that already has a row, for every engine: while it lives (a
 * completed response before it expires, a claim within its lease) a request with another body is
 * a mismatch, one with the same body waits for the claim or gets the stored response. Null: the
 * row is no longer live (expired, or the lease of a process that died), so the caller takes it
 * over with a fresh claim.
 */
export function existingKeyVerdict(row: IdemDbRow | undefined, fingerprint: string, now: number): Exclude<IdempotencyBegin, { kind: 'started' }> | null {
  if (!row) return null;
  const live = (row.state === 'completed' && (row.expires_at ?? 0) > now) || (row.state === 'in_flight' && (row.lease_until ?? 0) > now);
  if (!live) return null;
  if (row.fingerprint !== fingerprint) return { kind: 'mismatch' };
  if (row.state === 'in_flight') return { kind: 'in_flight' };
  return { kind: 'replay', response: { status: row.status ?? 200, contentType: row.content_type, body: row.body ?? '' } };
}
