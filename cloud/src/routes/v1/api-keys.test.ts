import type { LightMyRequestResponse } from 'fastify';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DAY, HOUR, iso, type ApiKey, type CreatedApiKey, type Scope, type Usage } from '@fleet/protocol';
import { bearer, dayOf, errorCode, errorDetails, startTestCloud, type TestCloud, type TestTenant } from '../../test-support.js';

let t: TestCloud;
let tenant: TestTenant;

beforeEach(async () => {
  // A flush interval far beyond the test's run time: only explicit flushes write last use.
  t = await startTestCloud({ config: { lastUsedFlushMs: 3_600_000 } });
  tenant = await t.createTenant();
});
afterEach(async () => {
  await t.close();
});

function create(body: unknown, auth = tenant.auth): Promise<LightMyRequestResponse> {
  return t.app.inject({ method: 'POST', url: '/v1/api-keys', headers: auth, payload: body as object });
}

async function createOk(body: { name: string; scopes: Scope[]; expires_at?: string }, auth = tenant.auth): Promise<CreatedApiKey> {
  const res = await create(body, auth);
  expect(res.statusCode, res.payload).toBe(201);
  return res.json<CreatedApiKey>();
}

async function list(auth = tenant.auth): Promise<{ res: LightMyRequestResponse; keys: ApiKey[] }> {
  const res = await t.app.inject({ method: 'GET', url: '/v1/api-keys', headers: auth });
  expect(res.statusCode, res.payload).toBe(200);
  return { res, keys: res.json<{ api_keys: ApiKey[] }>().api_keys };
}

function revoke(id: string, auth = tenant.auth): Promise<LightMyRequestResponse> {
  return t.app.inject({ method: 'DELETE', url: `/v1/api-keys/${encodeURIComponent(id)}`, headers: auth });
}

async function usage(auth = tenant.auth): Promise<Map<string, number>> {
  const res = await t.app.inject({ method: 'GET', url: '/v1/usage', headers: auth });
  expect(res.statusCode, res.payload).toBe(200);
  const today = dayOf(t.clock);
  return new Map(res.json<Usage>().usage.filter((u) => u.day === today).map((u) => [u.meter, u.count]));
}

describe('POST /v1/api-keys', () => {
  it('creates a key and shows the plaintext once', async () => {
    const res = await create({ name: 'ci', scopes: ['data:read', 'data:write'] });
    expect(res.statusCode).toBe(201);
    const created = res.json<CreatedApiKey>();
    expect(created.key).toMatch(/^ak_[A-Za-z0-9_-]{16,}$/);
    expect(created).toMatchObject({
      name: 'ci',
      scopes: ['data:read', 'data:write'],
      last_used_at: null,
      expires_at: null,
      revoked_at: null,
      created_at: iso(t.clock.now()),
    });
    expect(created.id).toEqual(expect.any(String));
    // created_by names the key that made it.
    const { keys } = await list();
    const creator = keys.find((k) => k.scopes.includes('admin') && k.id !== created.id)!;
    expect(created.created_by).toBe(creator.id);

    const { res: listed } = await list();
    expect(listed.payload).not.toContain(created.key);
    for (const k of listed.json<{ api_keys: Record<string, unknown>[] }>().api_keys) expect(k).not.toHaveProperty('key');
    expect(keys.map((k) => k.id)).toContain(created.id);
  });

  it('accepts names of 1 and 128 characters and a future expires_at', async () => {
    await createOk({ name: 'x', scopes: ['admin'] });
    await createOk({ name: 'y'.repeat(128), scopes: ['admin'] });
    const expiresAt = t.clock.now() + DAY;
    const created = await createOk({ name: 'e', scopes: ['fleet:read'], expires_at: iso(expiresAt) });
    expect(Date.parse(created.expires_at!)).toBe(expiresAt);
    // An offset is honoured, not dropped.
    const offset = await createOk({ name: 'o', scopes: ['fleet:read'], expires_at: '2030-01-01T02:00:00+02:00' });
    expect(offset.expires_at).toBe('2030-01-01T00:00:00.000Z');
  });

  it.each([
    ['empty name', { name: '', scopes: ['admin'] }],
    ['name of 129 characters', { name: 'x'.repeat(129), scopes: ['admin'] }],
    ['missing name', { scopes: ['admin'] }],
    ['name not a string', { name: 7, scopes: ['admin'] }],
    ['missing scopes', { name: 'k' }],
    ['empty scopes', { name: 'k', scopes: [] }],
    ['duplicate scopes', { name: 'k', scopes: ['data:read', 'data:read'] }],
    ['unknown scope', { name: 'k', scopes: ['root'] }],
    ['scopes not an array', { name: 'k', scopes: 'admin' }],
    ['expires_at not a date-time', { name: 'k', scopes: ['admin'], expires_at: 'tomorrow' }],
    ['expires_at without offset', { name: 'k', scopes: ['admin'], expires_at: '2030-01-01T00:00:00' }],
    ['expires_at on a day that does not exist', { name: 'k', scopes: ['admin'], expires_at: '2030-02-30T00:00:00Z' }],
    ['body an array', [{ name: 'k', scopes: ['admin'] }]],
  ])('rejects %s with 400 validation_failed', async (_what, body) => {
    const res = await create(body);
    expect(res.statusCode).toBe(400);
    expect(errorCode(res)).toBe('validation_failed');
    const { keys } = await list();
    expect(keys).toHaveLength(1);
  });

  it('names an unknown body field in the details', async () => {
    const res = await create({ name: 'k', scopes: ['admin'], role: 'owner' });
    expect(res.statusCode).toBe(400);
    expect(errorCode(res)).toBe('validation_failed');
    const issues = errorDetails(res)?.issues as { keys?: string[] }[];
    expect(issues.flatMap((i) => i.keys ?? [])).toContain('role');
  });

  it('rejects an expires_at in the past or now with 400', async () => {
    for (const at of [t.clock.now() - HOUR, t.clock.now()]) {
      const res = await create({ name: 'k', scopes: ['admin'], expires_at: iso(at) });
      expect(res.statusCode).toBe(400);
      expect(errorCode(res)).toBe('validation_failed');
    }
  });

  it('gives a key that authenticates with exactly its scopes', async () => {
    const created = await createOk({ name: 'reader', scopes: ['data:read', 'robots:read'] });
    const ent = await t.app.inject({ method: 'GET', url: '/v1/entitlements', headers: bearer(created.key) });
    expect(ent.statusCode).toBe(200);
    // Not admin: the admin-only list refuses it, naming what it holds.
    const res = await t.app.inject({ method: 'GET', url: '/v1/api-keys', headers: bearer(created.key) });
    expect(res.statusCode).toBe(403);
    expect(errorCode(res)).toBe('insufficient_scope');
    expect(errorDetails(res)?.key_scopes).toEqual(['data:read', 'robots:read']);
    const { keys } = await list();
    expect(keys.find((k) => k.id === created.id)?.scopes).toEqual(['data:read', 'robots:read']);
  });

  it('lets a created admin key create keys in the same organization', async () => {
    const admin = await createOk({ name: 'second admin', scopes: ['admin'] });
    const child = await createOk({ name: 'child', scopes: ['fleet:read'] }, bearer(admin.key));
    expect(child.created_by).toBe(admin.id);
    const { keys } = await list();
    expect(keys.map((k) => k.id)).toContain(child.id);
  });

  it('answers 409 conflict at the api_keys limit; revoked and expired keys do not count', async () => {
    await t.store.orgs.setLimit(tenant.org.id, 'api_keys', 3);
    const a = await createOk({ name: 'a', scopes: ['admin'] });
    await createOk({ name: 'b', scopes: ['admin'], expires_at: iso(t.clock.now() + HOUR) });
    const res = await create({ name: 'c', scopes: ['admin'] });
    expect(res.statusCode).toBe(409);
    expect(errorCode(res)).toBe('conflict');

    expect((await revoke(a.id)).statusCode).toBe(204);
    await createOk({ name: 'c', scopes: ['admin'] });
    expect(errorCode(await create({ name: 'd', scopes: ['admin'] }))).toBe('conflict');

    t.clock.advance(HOUR);
    await createOk({ name: 'd', scopes: ['admin'] });

    // Clearing the override gives the tier's limit back.
    await t.store.orgs.setLimit(tenant.org.id, 'api_keys', null);
    await createOk({ name: 'e', scopes: ['admin'] });
  });

  it('does not count a refused creation in the meter', async () => {
    await create({ name: '', scopes: ['admin'] });
    await t.store.orgs.setLimit(tenant.org.id, 'api_keys', 1);
    await create({ name: 'k', scopes: ['admin'] });
    expect((await usage()).get('api_keys.created')).toBeUndefined();
  });
});

describe('GET /v1/api-keys', () => {
  it("never shows another organization's keys", async () => {
    const other = await t.createTenant();
    const theirs = await createOk({ name: 'theirs', scopes: ['admin'] }, other.auth);
    const ours = await createOk({ name: 'ours', scopes: ['admin'] });
    const { keys: mine } = await list();
    expect(mine.map((k) => k.id)).toContain(ours.id);
    expect(mine.map((k) => k.id)).not.toContain(theirs.id);
    const { keys: their } = await list(other.auth);
    expect(their.map((k) => k.id)).toContain(theirs.id);
    expect(their.map((k) => k.id)).not.toContain(ours.id);
  });

  it('shows last_used_at at once, and persists it on flush', async () => {
    const created = await createOk({ name: 'used', scopes: ['data:read'] });
    t.clock.advance(HOUR);
    const usedAt = t.clock.now();
    const res = await t.app.inject({ method: 'GET', url: '/v1/entitlements', headers: bearer(created.key) });
    expect(res.statusCode).toBe(200);

    const { keys } = await list();
    expect(keys.find((k) => k.id === created.id)?.last_used_at).toBe(iso(usedAt));
    // Not written yet: the tracker batches writes.
    expect((await t.store.apiKeys.get(tenant.org.id, created.id))?.lastUsedAt).toBeNull();

    await t.cloud.lastUsed.flush();
    expect((await t.store.apiKeys.get(tenant.org.id, created.id))?.lastUsedAt).toBe(usedAt);

    // A later use moves it forward.
    t.clock.advance(HOUR);
    await t.app.inject({ method: 'GET', url: '/v1/entitlements', headers: bearer(created.key) });
    const { keys: again } = await list();
    expect(again.find((k) => k.id === created.id)?.last_used_at).toBe(iso(usedAt + HOUR));
  });
});

describe('DELETE /v1/api-keys/:id', () => {
  it('revokes at once: 204 and the very next request with the key is 401', async () => {
    const created = await createOk({ name: 'doomed', scopes: ['admin'] });
    const ok = await t.app.inject({ method: 'GET', url: '/v1/api-keys', headers: bearer(created.key) });
    expect(ok.statusCode).toBe(200);

    const res = await revoke(created.id);
    expect(res.statusCode).toBe(204);
    expect(res.payload).toBe('');

    const after = await t.app.inject({ method: 'GET', url: '/v1/api-keys', headers: bearer(created.key) });
    expect(after.statusCode).toBe(401);
    expect(errorCode(after)).toBe('unauthenticated');

    const { keys } = await list();
    expect(keys.find((k) => k.id === created.id)?.revoked_at).toBe(iso(t.clock.now()));
  });

  it('keeps the first revocation time when revoked twice', async () => {
    const created = await createOk({ name: 'twice', scopes: ['admin'] });
    const first = t.clock.now();
    expect((await revoke(created.id)).statusCode).toBe(204);
    t.clock.advance(HOUR);
    expect((await revoke(created.id)).statusCode).toBe(204);
    const { keys } = await list();
    expect(keys.find((k) => k.id === created.id)?.revoked_at).toBe(iso(first));
  });

  it('lets a key revoke itself', async () => {
    const created = await createOk({ name: 'self', scopes: ['admin'] });
    expect((await revoke(created.id, bearer(created.key))).statusCode).toBe(204);
    expect((await revoke(created.id, bearer(created.key))).statusCode).toBe(401);
  });

  it('answers 404 not_found to an unknown id', async () => {
    const res = await revoke('key_doesnotexist');
    expect(res.statusCode).toBe(404);
    expect(errorCode(res)).toBe('not_found');
  });

  it("answers 404 (never 403) to another organization's key id, and leaves that key alone", async () => {
    const other = await t.createTenant();
    const theirs = await createOk({ name: 'theirs', scopes: ['admin'] }, other.auth);
    const res = await revoke(theirs.id);
    expect(res.statusCode).toBe(404);
    expect(errorCode(res)).toBe('not_found');
    const still = await t.app.inject({ method: 'GET', url: '/v1/api-keys', headers: bearer(theirs.key) });
    expect(still.statusCode).toBe(200);
    expect((await t.store.apiKeys.get(other.org.id, theirs.id))?.revokedAt).toBeNull();
  });
});

describe('meters', () => {
  it('counts api_keys.created and api_keys.revoked per organization', async () => {
    const a = await createOk({ name: 'a', scopes: ['admin'] });
    await createOk({ name: 'b', scopes: ['admin'] });
    expect((await revoke(a.id)).statusCode).toBe(204);
    expect((await revoke('key_unknown')).statusCode).toBe(404);

    // The meter is written once the response is sent (onResponse): on a database a round trip
    // away, the next request can come first.
    await expect.poll(async () => Object.fromEntries(await usage())).toMatchObject({ 'api_keys.created': 2, 'api_keys.revoked': 1 });

    const other = await t.createTenant();
    expect((await usage(other.auth)).size).toBe(0);
  });

  it('counts on the UTC day of the request', async () => {
    await createOk({ name: 'a', scopes: ['admin'] });
    const firstDay = dayOf(t.clock);
    t.clock.advance(DAY);
    await createOk({ name: 'b', scopes: ['admin'] });
    const rows = async () => (await t.app.inject({ method: 'GET', url: '/v1/usage', headers: tenant.auth })).json<Usage>().usage.filter((u) => u.meter === 'api_keys.created');
    await expect.poll(rows).toEqual([
      { meter: 'api_keys.created', day: firstDay, count: 1 },
      { meter: 'api_keys.created', day: dayOf(t.clock), count: 1 },
    ]);
  });
});
