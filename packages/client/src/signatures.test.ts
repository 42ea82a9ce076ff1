import { signPayload } from '@fleet/protocol';
import { describe, expect, it } from 'vitest';
import { verifyGrantRequestSignature, verifyWebhookSignature } from './signatures.js';

const body = '{"event":"episode.finalized"}';
const t = 1_800_000_000;
const now = t * 1000 + 5_000;

describe('verifyWebhookSignature', () => {
  it('accepts either secret of a rotation, from a Headers object or a Node header record', () => {
    const header = signPayload(body, ['whsec_new', 'whsec_old'], t);
    expect(verifyWebhookSignature(body, new Headers({ 'X-Service-Signature': header, 'X-Service-Event': 'episode.finalized' }), 'whsec_old', { now })).toEqual({
      ok: true,
      timestamp: t,
      event: 'episode.finalized',
      eventId: undefined,
    });
    expect(verifyWebhookSignature(Buffer.from(body), { 'x-service-signature': header }, ['whsec_x', 'whsec_new'], { now: () => now }).ok).toBe(true);
  });

  it('refuses a stale timestamp, another body, another secret and a malformed header', () => {
    const header = { 'x-service-signature': signPayload(body, ['whsec_a'], t) };
    expect(verifyWebhookSignature(body, header, 'whsec_a', { now: now + 300_000 })).toEqual({ ok: false, reason: 'stale' });
    expect(verifyWebhookSignature(body, header, 'whsec_a', { now: now + 300_000, toleranceS: 600 }).ok).toBe(true);
    expect(verifyWebhookSignature(`${body} `, header, 'whsec_a', { now })).toEqual({ ok: false, reason: 'mismatch' });
    expect(verifyWebhookSignature(body, header, 'whsec_b', { now })).toEqual({ ok: false, reason: 'mismatch' });
    expect(verifyWebhookSignature(body, { 'x-service-signature': 'v1=abc' }, 'whsec_a', { now })).toEqual({ ok: false, reason: 'malformed' });
    expect(verifyWebhookSignature(body, {}, 'whsec_a', { now })).toEqual({ ok: false, reason: 'missing_signature' });
  });
});

describe('verifyGrantRequestSignature', () => {
  it('checks the signature and the event, and returns the destination header', () => {
    const headers = { 'x-service-signature': signPayload(body, ['dsec_1'], t), 'x-service-event': 'grant.request', 'x-service-destination-id': 'dst_1' };
    expect(verifyGrantRequestSignature(body, headers, 'dsec_1', { now })).toMatchObject({ ok: true, destinationId: 'dst_1' });
    expect(verifyGrantRequestSignature(body, { ...headers, 'x-service-event': 'episode.finalized' }, 'dsec_1', { now })).toEqual({ ok: false, reason: 'wrong_event' });
  });
});
