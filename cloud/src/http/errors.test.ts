import type { LightMyRequestResponse } from 'fastify';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { API_ERROR_CODES, API_ERRORS, FEATURES, SCOPES, type Entitlements } from '@fleet/protocol';
import { bearer, errorCode, startTestCloud, type TestCloud, type TestTenant } from '../test-support.js';

/** The error body, exactly: no other keys at either level. */
const StrictErrorBody = z.strictObject({
  error: z.strictObject({
    code: z.enum(API_ERROR_CODES as [string, ...string[]]),
    message: z.string().min(1),
    details: z.record(z.string(), z.unknown()).optional(),
    request_id: z.string().min(1),
  }),
});

function expectError(res: LightMyRequestResponse, status: number, code: string): void {
  expect([res.statusCode, errorCode(res)], res.payload).toEqual([status, code]);
  expect(API_ERRORS[code as keyof typeof API_ERRORS]).toBe(status);
  expect(res.headers['content-type']).toMatch(/^application\/json/);
  expect(res.headers['x-request-id']).toMatch(/^req_/);
  const parsed = StrictErrorBody.safeParse(JSON.parse(res.payload));
  expect(parsed.success, `error body shape: ${res.payload}`).toBe(true);
  expect(parsed.data?.error.request_id).toBe(res.headers['x-request-id']);
  expect(res.payload).not.toMatch(/FST_|statusCode/);
}

let t: TestCloud;
let tenant: TestTenant;
let readinessFailure: Error | null;

beforeEach(async () => {
  readinessFailure = null;
  t = await startTestCloud({
    config: { bodyLimitBytes: 2048 },
    deps: {
      readiness: async () => {
        if (readinessFailure) throw readinessFailure;
      },
    },
  });
  tenant = await t.createTenant();
});
afterEach(async () => {
  await t.close();
});

const post = (payload: string | undefined, contentType: string | undefined) =>
  t.app.inject({
    method: 'POST',
    url: '/v1/api-keys',
    headers: { ...tenant.auth, ...(contentType ? { 'content-type': contentType } : {}) },
    ...(payload === undefined ? {} : { payload }),
  });

describe('error mapping', () => {
  it('answers 503 not_ready with Retry-After while the database is unreachable; anything else unknown stays 500 internal', async () => {
    const find = t.store.robots.find.bind(t.store.robots);
    const gone = [
      Object.assign(new Error('terminating connection due to administrator command'), { code: '57P01' }),
      Object.assign(new Error('the database system is starting up'), { code: '57P03' }),
      Object.assign(new Error('connection failure'), { code: '08006' }),
      new Error('Connection terminated unexpectedly'),
      new Error('timeout exceeded when trying to connect'),
      new AggregateError([Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' })], 'connect failed'),
    ];
    try {
      for (const err of gone) {
        t.store.robots.find = () => Promise.reject(err);
        const res = await t.app.inject({ method: 'GET', url: '/v1/robots', headers: tenant.auth });
        expectError(res, 503, 'not_ready');
        expect(res.headers['retry-after'], err.message).toBe('5');
        expect(res.payload).not.toMatch(/5432|ECONNREFUSED|administrator/);
      }
      for (const err of [new Error('boom'), Object.assign(new Error('duplicate key'), { code: '23505' })]) {
        t.store.robots.find = () => Promise.reject(err);
        expectError(await t.app.inject({ method: 'GET', url: '/v1/robots', headers: tenant.auth }), 500, 'internal');
      }
    } finally {
      t.store.robots.find = find;
    }
  });

  it('answers 404 not_found to unknown routes, with or without a key', async () => {
    for (const [method, url] of [
      ['GET', '/v1/nope'],
      ['GET', '/nope'],
      ['POST', '/v1/nope'],
      ['PUT', '/v1/nope/deeper'],
      ['GET', '/v1/api-keys/'],
      ['GET', '/v2/api-keys'],
    ] as const) {
      expectError(await t.app.inject({ method, url }), 404, 'not_found');
      expectError(await t.app.inject({ method, url, headers: tenant.auth }), 404, 'not_found');
    }
  });

  it('answers 400 validation_failed to malformed JSON', async () => {
    for (const payload of ['{"name":', '{name: "x"}', "{'a':1}", '[1,2', 'undefined']) {
      expectError(await post(payload, 'application/json'), 400, 'validation_failed');
    }
  });

  it('answers 400 validation_failed to a JSON body that tries prototype pollution', async () => {
    const res = await post('{"name":"k","scopes":["admin"],"__proto__":{"admin":true}}', 'application/json');
    expectError(res, 400, 'validation_failed');
    const res2 = await post('{"name":"k","scopes":["admin"],"constructor":{"prototype":{"x":1}}}', 'application/json');
    expectError(res2, 400, 'validation_failed');
  });

  it('answers 413 payload_too_large above bodyLimitBytes', async () => {
    const big = JSON.stringify({ name: 'x'.repeat(4096), scopes: ['admin'] });
    expectError(await post(big, 'application/json'), 413, 'payload_too_large');
  });

  it('checks the key before reading a large body', async () => {
    const big = JSON.stringify({ name: 'x'.repeat(4096), scopes: ['admin'] });
    const res = await t.app.inject({ method: 'POST', url: '/v1/api-keys', headers: { 'content-type': 'application/json' }, payload: big });
    expectError(res, 401, 'unauthenticated');
  });

  it('answers 415 unsupported_media_type to a non-JSON body', async () => {
    expectError(await post('name=k', 'text/plain'), 415, 'unsupported_media_type');
    expectError(await post('name=k&scopes=admin', 'application/x-www-form-urlencoded'), 415, 'unsupported_media_type');
    expectError(await post('<k/>', 'application/xml'), 415, 'unsupported_media_type');
  });

  it('accepts application/json with a charset', async () => {
    const res = await post(JSON.stringify({ name: 'k', scopes: ['admin'] }), 'application/json; charset=utf-8');
    expect(res.statusCode).toBe(201);
  });

  it('answers 400 validation_failed to a missing body where one is required', async () => {
    expectError(await post('', 'application/json'), 400, 'validation_failed');
    expectError(await post('   ', 'application/json'), 400, 'validation_failed');
    expectError(await post(undefined, undefined), 400, 'validation_failed');
    expectError(await post('null', 'application/json'), 400, 'validation_failed');
  });

  it('answers 400 validation_failed to malformed path parameters', async () => {
    const del = (id: string) => t.app.inject({ method: 'DELETE', url: `/v1/api-keys/${id}`, headers: tenant.auth });
    expectError(await del('x'.repeat(129)), 400, 'validation_failed');
    // Beyond the router's parameter length and undecodable: the router refuses them itself.
    expectError(await del('x'.repeat(300)), 400, 'validation_failed');
    expectError(await del('%'), 400, 'validation_failed');
    expectError(await del('%E0%A4%A'), 400, 'validation_failed');
  });

  it('gives every error the shape {error:{code,message,details?}}', async () => {
    const other = await t.createTenant();
    await t.store.orgs.setFeature(other.org.id, 'api.access', false);
    const { key: reader } = await t.createKey(tenant.org, ['data:read']);
    const responses: [LightMyRequestResponse, number, string][] = [
      [await t.app.inject({ method: 'GET', url: '/v1/api-keys' }), 401, 'unauthenticated'],
      [await t.app.inject({ method: 'GET', url: '/v1/api-keys', headers: bearer(reader) }), 403, 'insufficient_scope'],
      [await t.app.inject({ method: 'GET', url: '/v1/api-keys', headers: other.auth }), 403, 'entitlement_required'],
      [await t.app.inject({ method: 'DELETE', url: '/v1/api-keys/key_x', headers: tenant.auth }), 404, 'not_found'],
      [await post('{"name":"", "scopes":[]}', 'application/json'), 400, 'validation_failed'],
      [await post('x', 'text/plain'), 415, 'unsupported_media_type'],
    ];
    for (const [res, status, code] of responses) expectError(res, status, code);
  });
});

describe('GET /v1/entitlements', () => {
  it('works with any single scope even when every feature is off', async () => {
    for (const f of FEATURES) await t.store.orgs.setFeature(tenant.org.id, f, false);
    for (const scope of SCOPES) {
      const { key } = await t.createKey(tenant.org, [scope]);
      const res = await t.app.inject({ method: 'GET', url: '/v1/entitlements', headers: bearer(key) });
      expect(res.statusCode, scope).toBe(200);
      const ent = res.json<Entitlements>();
      expect(ent.tier).toBe('enterprise');
      for (const f of FEATURES) expect(ent.features[f], f).toBe(false);
      // The console shows only what the calling key may do.
      expect(ent.key.scopes).toEqual([scope]);
      expect(ent.key.expires_at).toBeNull();
    }
  });

  it("reports the tier's features and limits with the overrides applied", async () => {
    const free = await t.createTenant({ tier: 'free' });
    await t.store.orgs.setFeature(free.org.id, 'api.robot_commands', true);
    await t.store.orgs.setLimit(free.org.id, 'robots', 42);
    const res = await t.app.inject({ method: 'GET', url: '/v1/entitlements', headers: free.auth });
    const ent = res.json<Entitlements>();
    expect(ent.tier).toBe('free');
    expect(ent.features).toEqual({ 'api.access': true, 'api.robot_commands': true, 'data.metadata': true });
    expect(ent.limits.robots).toBe(42);
    expect(ent.limits.api_keys).toBe(10);
  });
});

describe('health probes', () => {
  it('answers /healthz and /readyz without a key', async () => {
    const health = await t.app.inject({ method: 'GET', url: '/healthz' });
    expect(health.statusCode).toBe(200);
    expect(health.json()).toEqual({ status: 'ok' });
    const ready = await t.app.inject({ method: 'GET', url: '/readyz' });
    expect(ready.statusCode).toBe(200);
    expect(ready.json()).toEqual({ status: 'ready' });
  });

  it('answers 503 not_ready while a readiness check fails, and recovers', async () => {
    readinessFailure = new Error('MQTT broker closed');
    expectError(await t.app.inject({ method: 'GET', url: '/readyz' }), 503, 'not_ready');
    // Liveness is not readiness.
    expect((await t.app.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(200);
    readinessFailure = null;
    expect((await t.app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(200);
  });

  it('answers 503 not_ready when the store is gone', async () => {
    await t.store.close();
    expectError(await t.app.inject({ method: 'GET', url: '/readyz' }), 503, 'not_ready');
  });
});

describe('GET /v1/usage', () => {
  const usage = (query: string) => t.app.inject({ method: 'GET', url: `/v1/usage${query}`, headers: tenant.auth });

  it('accepts an inclusive range of up to 366 days', async () => {
    expect((await usage('')).statusCode).toBe(200);
    expect((await usage('?from=2026-01-01&to=2026-01-01')).statusCode).toBe(200);
    expect((await usage('?from=2025-01-01&to=2026-01-01')).statusCode).toBe(200);
    expect((await usage('?from=2024-01-01&to=2024-12-31')).statusCode).toBe(200);
  });

  it.each([
    ['from after to', '?from=2026-01-02&to=2026-01-01'],
    ['from after the default to (today)', '?from=2026-06-01'],
    ['a range of more than 366 days', '?from=2024-01-01&to=2025-01-01'],
    ['a day that is not YYYY-MM-DD', '?from=2026-1-1&to=2026-01-02'],
    ['a date-time instead of a day', '?to=2026-01-01T00:00:00Z'],
    ['a month that does not exist', '?from=2026-13-01&to=2026-12-31'],
    ['a day that does not exist', '?from=2026-02-01&to=2026-02-30'],
    ['February 29 of a common year', '?from=2025-02-01&to=2025-02-29'],
    ['an unknown parameter', '?since=2026-01-01'],
    ['a repeated parameter', '?from=2026-01-01&from=2026-01-02'],
  ])('answers 400 validation_failed to %s', async (_what, query) => {
    expectError(await usage(query), 400, 'validation_failed');
  });

  it('accepts February 29 of a leap year', async () => {
    expect((await usage('?from=2028-02-01&to=2028-02-29')).statusCode).toBe(200);
  });

  it('returns counts only within the range', async () => {
    const org = tenant.org.id;
    await t.store.meters.increment(org, 'x', '2025-12-31');
    await t.store.meters.increment(org, 'x', '2026-01-01', 3);
    await t.store.meters.increment(org, 'x', '2026-01-03');
    const res = await usage('?from=2026-01-01&to=2026-01-02');
    expect(res.json()).toEqual({ usage: [{ meter: 'x', day: '2026-01-01', count: 3 }] });
  });
});

describe('NUL characters in the URL', () => {
  it('are 400 validation_failed in a path or a query, before any lookup, on every engine', async () => {
    for (const url of ['/v1/api-keys/%00', '/v1/api-keys/ak%00x', '/v1/webhooks/%00/test', '/v1/episodes?robot_id=%00', '/v1/episodes?metadata.site=a%00b']) {
      const method = url.includes('/test') ? 'POST' : url.startsWith('/v1/api-keys') ? 'DELETE' : 'GET';
      const res = await t.app.inject({ method, url, headers: tenant.auth });
      expectError(res, 400, 'validation_failed');
      expect((JSON.parse(res.payload) as { error: { details: { issues: { code: string }[] } } }).error.details.issues[0]!.code).toBe('nul_character');
    }
  });
});
