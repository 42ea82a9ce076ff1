import { afterEach, beforeEach, expect, it } from 'vitest';
import { errorCode, errorDetails, startTestCloud, type TestCloud, type TestTenant } from '../test-support.js';

// The limit check is a route-level hook (added from onRoute): each request must count once,
// also on the HEAD twin Fastify makes of every GET route.

let t: TestCloud;
let tenant: TestTenant;

beforeEach(async () => {
  t = await startTestCloud();
  tenant = await t.createTenant();
  await t.store.orgs.setLimit(tenant.org.id, 'requests_per_minute_per_key', 4);
});
afterEach(async () => {
  await t.close();
});

it('counts each GET and HEAD request once', async () => {
  const statuses: number[] = [];
  for (const method of ['GET', 'HEAD', 'GET', 'HEAD'] as const) {
    statuses.push((await t.app.inject({ method, url: '/v1/api-keys', headers: tenant.auth })).statusCode);
  }
  expect(statuses).toEqual([200, 200, 200, 200]);
  const refused = await t.app.inject({ method: 'GET', url: '/v1/api-keys', headers: tenant.auth });
  expect(refused.statusCode).toBe(429);
  expect(errorCode(refused)).toBe('rate_limited');
  expect(errorDetails(refused)).toMatchObject({ limit: 'requests_per_minute_per_key', max: 4 });
  expect(refused.headers['retry-after']).toMatch(/^\d+$/);
});

it('counts a POST once', async () => {
  for (let i = 0; i < 4; i++) {
    const res = await t.app.inject({ method: 'POST', url: '/v1/api-keys', headers: tenant.auth, payload: { name: `k${i}`, scopes: ['data:read'] } });
    expect(res.statusCode, res.payload).toBe(201);
  }
  const refused = await t.app.inject({ method: 'POST', url: '/v1/api-keys', headers: tenant.auth, payload: { name: 'k', scopes: ['data:read'] } });
  expect(refused.statusCode).toBe(429);
});
