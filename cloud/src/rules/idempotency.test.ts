import { describe, expect, it } from 'vitest';
import { existingKeyVerdict, type IdemDbRow } from './idempotency.js';

const NOW = 1_000_000;
const row = (o: Partial<IdemDbRow>): IdemDbRow => ({
  fingerprint: 'fp',
  state: 'completed',
  status: 201,
  content_type: 'application/json',
  body: '{"a":1}',
  lease_until: null,
  expires_at: NOW + 1,
  ...o,
});

/** The Idempotency-Key rule both engines apply to a key that already has a row, without a database. */
describe('existingKeyVerdict', () => {
  it.each([
    ['no row: take the key', undefined, 'fp', null],
    ['a completed response, same body: replayed', row({}), 'fp', { kind: 'replay', response: { status: 201, contentType: 'application/json', body: '{"a":1}' } }],
    ['a completed response, another body: mismatch', row({}), 'other', { kind: 'mismatch' }],
    ['a completed response at its expiry: taken over', row({ expires_at: NOW }), 'fp', null],
    ['a completed response without an expiry: taken over', row({ expires_at: null }), 'other', null],
    ['a live claim, same body: in flight', row({ state: 'in_flight', lease_until: NOW + 1, status: null, body: null }), 'fp', { kind: 'in_flight' }],
    ['a live claim, another body: mismatch', row({ state: 'in_flight', lease_until: NOW + 1 }), 'other', { kind: 'mismatch' }],
    ['a claim whose lease ran out (its process died): taken over', row({ state: 'in_flight', lease_until: NOW }), 'fp', null],
    ['a stored response without status or body: 200 and empty', row({ status: null, body: null, content_type: null }), 'fp', { kind: 'replay', response: { status: 200, contentType: null, body: '' } }],
  ] as const)('%s', (_name, r, fingerprint, expected) => {
    expect(existingKeyVerdict(r, fingerprint, NOW)).toEqual(expected);
  });
});
