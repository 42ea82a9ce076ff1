import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ManualClock, ManualScheduler } from '@fleet/protocol';
import { createApiKey } from '../api-keys.js';
import { parseCloudConfig } from '../config.js';
import { newId } from '../ids.js';
import { openTestStore, openTwin, postgresAvailable } from '../store/test-store.js';
import { buildTestApp, errorCode, errorDetails, startTestCloud, type TestCloud, type TestTenant } from '../test-support.js';

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

// Replicas on PostgreSQL count into the same windows: a key's limit holds however its requests
// are spread over them.
(postgresAvailable() ? describe : describe.skip)('across replicas (PostgreSQL)', () => {
  it('two apps on one database share each key\'s window', async () => {
    const store = await openTestStore('postgres');
    const twin = await openTwin(store);
    const clock = new ManualClock();
    const config = parseCloudConfig({});
    const a = await buildTestApp(config, { store, clock, scheduler: new ManualScheduler(clock) });
    const b = await buildTestApp(config, { store: twin, clock, scheduler: new ManualScheduler(clock) });
    try {
      const orgId = newId('org');
      await store.orgs.create({ id: orgId, name: 'o', tier: 'enterprise', createdAt: clock.now() });
      await store.orgs.setLimit(orgId, 'requests_per_minute_per_key', 6);
      const { key } = await createApiKey(store, clock, { org: (await store.orgs.get(orgId))!, name: 'k', scopes: ['admin'], expiresAt: null, createdBy: 'test' });
      const statuses: number[] = [];
      for (let i = 0; i < 8; i++) {
        const app = i % 2 === 0 ? a : b;
        statuses.push((await app.app.inject({ method: 'GET', url: '/v1/api-keys', headers: { authorization: `Bearer ${key}` } })).statusCode);
      }
      expect(statuses).toEqual([200, 200, 200, 200, 200, 200, 429, 429]);
    } finally {
      await a.close();
      await b.close();
      await twin.close();
      await store.close();
    }
  });
});
