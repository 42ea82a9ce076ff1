import { afterEach, beforeEach, expect, it } from 'vitest';
import { DAY, HOUR } from '@fleet/protocol';
import { startTestCloud, type TestCloud, type TestTenant } from './test-support.js';
import { countRows } from './store/test-store.js';

/** The app's background work runs on the injected scheduler: tests move time, never sleep. */

let t: TestCloud;
let tenant: TestTenant;
beforeEach(async () => {
  t = await startTestCloud({ config: { lastUsedFlushMs: 60_000 } });
  tenant = await t.createTenant();
});
afterEach(async () => {
  await t.close();
});

it('writes api-key last use when the flush interval passes on the scheduler, not before', async () => {
  expect((await t.app.inject({ method: 'GET', url: '/v1/api-keys', headers: tenant.auth })).statusCode).toBe(200);
  const stored = async () => (await t.store.apiKeys.list(tenant.org.id))[0]!.lastUsedAt;
  expect(await stored()).toBeNull();
  t.scheduler.advance(59_999);
  await new Promise((r) => setImmediate(r));
  expect(await stored()).toBeNull();
  t.scheduler.advance(1);
  await expect.poll(stored).toBe(t.clock.now() - 60_000);
});

it('purges expired Idempotency-Key entries hourly on the scheduler', async () => {
  const res = await t.app.inject({ method: 'POST', url: '/v1/api-keys', headers: { ...tenant.auth, 'idempotency-key': 'k1' }, payload: { name: 'k', scopes: ['admin'] } });
  expect(res.statusCode).toBe(201);
  const entries = () => countRows(t.store, 'idempotency_keys');
  expect(await entries()).toBe(1);
  // Still inside the 24 h window at the first hourly purges; gone after the purge past it.
  t.scheduler.advance(23 * HOUR);
  await new Promise((r) => setImmediate(r));
  expect(await entries()).toBe(1);
  t.scheduler.advance(DAY + HOUR - 23 * HOUR);
  await expect.poll(entries).toBe(0);
});
