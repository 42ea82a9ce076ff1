import type { LightMyRequestResponse } from 'fastify';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DAY, type ApiKey, type CreatedApiKey, type Usage } from '@fleet/protocol';
import { dayOf, errorCode, startTestCloud, type TestCloud, type TestTenant } from '../test-support.js';
import { requestFingerprint } from './idempotency.js';
import { dumpTables } from '../store/test-store.js';

let t: TestCloud;
let tenant: TestTenant;

beforeEach(async () => {
  t = await startTestCloud();
  tenant = await t.createTenant();
});
afterEach(async () => {
  await t.close();
});

const BODY = { name: 'idem', scopes: ['data:read'] };

function post(idempotencyKey: string | undefined, body: unknown = BODY, auth = tenant.auth): Promise<LightMyRequestResponse> {
  return t.app.inject({
    method: 'POST',
    url: '/v1/api-keys',
    headers: { ...auth, ...(idempotencyKey === undefined ? {} : { 'idempotency-key': idempotencyKey }) },
    payload: body as object,
  });
}

async function keyCount(auth = tenant.auth): Promise<number> {
  const res = await t.app.inject({ method: 'GET', url: '/v1/api-keys', headers: auth });
  return res.json<{ api_keys: ApiKey[] }>().api_keys.length;
}

async function createdMeter(auth = tenant.auth): Promise<number | undefined> {
  const res = await t.app.inject({ method: 'GET', url: '/v1/usage', headers: auth });
  return res.json<Usage>().usage.find((u) => u.meter === 'api_keys.created' && u.day === dayOf(t.clock))?.count;
}


describe('Idempotency-Key', () => {
  it('replays the stored response for the same key and body; the work and the meter happen once', async () => {
    const first = await post('create-1');
    expect(first.statusCode).toBe(201);
    expect(first.headers['idempotent-replayed']).toBeUndefined();

    for (let i = 0; i < 3; i++) {
      const again = await post('create-1');
      expect(again.statusCode).toBe(201);
      expect(again.headers['idempotent-replayed']).toBe('true');
      expect(again.headers['content-type']).toBe(first.headers['content-type']);
      expect(again.payload).toBe(first.payload);
      expect(again.json<CreatedApiKey>().key).toMatch(/^ak_/);
      expect(again.headers['x-request-id']).not.toBe(first.headers['x-request-id']);
    }
    expect(await keyCount()).toBe(2); // the tenant's admin key and the one created
    expect(await createdMeter()).toBe(1);
  });

  it('runs requests without a key every time', async () => {
    expect((await post(undefined)).statusCode).toBe(201);
    expect((await post(undefined)).statusCode).toBe(201);
    expect(await keyCount()).toBe(3);
  });

  it('answers 422 idempotency_key_reused to the same key with a different body', async () => {
    expect((await post('k')).statusCode).toBe(201);
    const res = await post('k', { ...BODY, name: 'other' });
    expect(res.statusCode).toBe(422);
    expect(errorCode(res)).toBe('idempotency_key_reused');
    expect(res.headers['idempotent-replayed']).toBeUndefined();
    expect(await keyCount()).toBe(2);
    // The stored response is untouched by the refused attempt.
    expect((await post('k')).headers['idempotent-replayed']).toBe('true');
  });

  it('recognizes the same body with its keys in another order', async () => {
    expect((await post('order', { name: 'idem', scopes: ['data:read'] })).statusCode).toBe(201);
    const again = await post('order', { scopes: ['data:read'], name: 'idem' });
    expect(again.statusCode).toBe(201);
    expect(again.headers['idempotent-replayed']).toBe('true');
    // Array order is meaning, not serialization: a different order is a different request.
    expect((await post('arr', { name: 'a', scopes: ['data:read', 'data:write'] })).statusCode).toBe(201);
    expect(errorCode(await post('arr', { name: 'a', scopes: ['data:write', 'data:read'] }))).toBe('idempotency_key_reused');
  });

  it('purges entries past their 24 h window', async () => {
    expect((await post('old')).statusCode).toBe(201);
    t.clock.advance(DAY + 1);
    expect(await t.store.idempotency.purgeExpired(t.clock.now())).toBe(1);
    expect(await t.store.idempotency.purgeExpired(t.clock.now())).toBe(0);
  });

  it('scopes keys per organization', async () => {
    const other = await t.createTenant();
    const a = await post('shared');
    const b = await post('shared', BODY, other.auth);
    expect(a.statusCode).toBe(201);
    expect(b.statusCode).toBe(201);
    expect(b.headers['idempotent-replayed']).toBeUndefined();
    expect(b.json<CreatedApiKey>().id).not.toBe(a.json<CreatedApiKey>().id);
    expect(await keyCount(other.auth)).toBe(2);
    // A different body in the other organization is not a reuse either.
    const c = await post('shared-2', { ...BODY, name: 'x' });
    const d = await post('shared-2', { ...BODY, name: 'y' }, other.auth);
    expect([c.statusCode, d.statusCode]).toEqual([201, 201]);
  });

  it('replays for 24 hours, then runs the request again', async () => {
    const first = await post('daily');
    t.clock.advance(DAY - 1);
    const replay = await post('daily');
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(replay.payload).toBe(first.payload);

    t.clock.advance(1);
    const fresh = await post('daily');
    expect(fresh.statusCode).toBe(201);
    expect(fresh.headers['idempotent-replayed']).toBeUndefined();
    expect(fresh.json<CreatedApiKey>().id).not.toBe(first.json<CreatedApiKey>().id);
    // After expiry a different body is no longer a reuse.
    t.clock.advance(DAY);
    expect((await post('daily', { ...BODY, name: 'changed' })).statusCode).toBe(201);
  });

  it('answers 409 idempotency_key_in_use while a claim is in flight, until its lease runs out', async () => {
    const leaseMs = t.config.idempotencyLeaseMs;
    const begun = await t.store.idempotency.begin({
      orgId: tenant.org.id,
      key: 'busy',
      token: 'another-process',
      fingerprint: requestFingerprint('POST', '/v1/api-keys', BODY),
      now: t.clock.now(),
      leaseMs,
    });
    expect(begun.kind).toBe('started');

    const res = await post('busy');
    expect(res.statusCode).toBe(409);
    expect(errorCode(res)).toBe('idempotency_key_in_use');

    t.clock.advance(leaseMs - 1);
    expect(errorCode(await post('busy'))).toBe('idempotency_key_in_use');
    expect(await keyCount()).toBe(1);

    // The claimant died: after the lease the key can be taken over, and then replays.
    t.clock.advance(1);
    const taken = await post('busy');
    expect(taken.statusCode).toBe(201);
    expect(taken.headers['idempotent-replayed']).toBeUndefined();
    expect((await post('busy')).headers['idempotent-replayed']).toBe('true');
    expect(await keyCount()).toBe(2);
  });

  it('lets concurrent requests with one key create exactly one resource', async () => {
    const results = await Promise.all(Array.from({ length: 8 }, () => post('race')));
    for (const res of results) {
      expect([201, 409]).toContain(res.statusCode);
      if (res.statusCode === 409) expect(errorCode(res)).toBe('idempotency_key_in_use');
    }
    expect(await keyCount()).toBe(2);
    expect(await createdMeter()).toBe(1);
  });

  it.each([
    ['300 characters', 'k'.repeat(300)],
    ['256 characters', 'k'.repeat(256)],
    ['empty', ''],
    ['a space', 'two words'],
    ['a control character', 'tab\there'],
  ])('answers 400 validation_failed to a key of %s, and creates nothing', async (_what, value) => {
    const res = await post(value);
    expect(res.statusCode).toBe(400);
    expect(errorCode(res)).toBe('validation_failed');
    expect(await keyCount()).toBe(1);
  });

  it('accepts a key of 255 printable characters', async () => {
    const key = `${'~!'.repeat(127)}z`;
    expect(key).toHaveLength(255);
    expect((await post(key)).statusCode).toBe(201);
    expect((await post(key)).headers['idempotent-replayed']).toBe('true');
  });

  it('replays a validation error too', async () => {
    const bad = { name: '', scopes: ['admin'] };
    const first = await post('bad', bad);
    expect(first.statusCode).toBe(400);
    const again = await post('bad', bad);
    expect(again.statusCode).toBe(400);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.payload).toBe(first.payload);
    expect(errorCode(again)).toBe('validation_failed');
  });

  it('replays a business error (limit conflict) even after the limit is lifted', async () => {
    await t.store.orgs.setLimit(tenant.org.id, 'api_keys', 1);
    const first = await post('limited');
    expect(errorCode(first)).toBe('conflict');
    await t.store.orgs.setLimit(tenant.org.id, 'api_keys', null);
    const again = await post('limited');
    expect(again.statusCode).toBe(409);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(await keyCount()).toBe(1);
  });

  it('does not store the plaintext of a created key anywhere in the database', async () => {
    const created = (await post('secret')).json<CreatedApiKey>();
    expect(created.key).toMatch(/^ak_/);

    const tables = await dumpTables(t.store);
    const stored = (JSON.parse(tables.idempotency_keys!) as { key: string; body: string }[]).filter((r) => r.key === 'secret');
    expect(stored).toHaveLength(1);
    expect(stored[0]!.body).not.toContain('"key"');
    // Nowhere in the database (api_keys holds a hash, the stored response leaves the key out).
    for (const [table, dump] of Object.entries(tables)) {
      expect(dump, table).not.toContain(created.key);
      expect(dump, table).not.toContain(created.key.slice(3));
    }
    // And the replay still gives the caller the plaintext it was shown.
    expect((await post('secret')).json<CreatedApiKey>().key).toBe(created.key);
  });

  it('applies to POST only: a DELETE with a key runs every time', async () => {
    const created = (await post(undefined)).json<CreatedApiKey>();
    const del = () =>
      t.app.inject({ method: 'DELETE', url: `/v1/api-keys/${created.id}`, headers: { ...tenant.auth, 'idempotency-key': 'del' } });
    expect((await del()).statusCode).toBe(204);
    const second = await del();
    expect(second.statusCode).toBe(204);
    expect(second.headers['idempotent-replayed']).toBeUndefined();
  });

  it('is not consulted for a request that fails authentication', async () => {
    const res = await post('anon', BODY, { authorization: 'Bearer ak_unknownunknownunknown' });
    expect(res.statusCode).toBe(401);
    // The key was never claimed, so the organization can still use it.
    expect((await post('anon')).statusCode).toBe(201);
  });
});
