import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '@fleet/protocol';
import { FailedLoginLimiter } from './login-limit.js';
import type { Store } from './store/index.js';
import { openTestStore, openTwin, postgresAvailable } from './store/test-store.js';
import { errorCode, errorDetails, startTestCloud, type TestCloud } from './test-support.js';

describe('FailedLoginLimiter (injected clock)', () => {
  it('refuses an address after N failures until its window ends; other addresses keep their budget', async () => {
    const clock = new ManualClock();
    const limiter = new FailedLoginLimiter({ kind: 'http', maxFailures: 3, windowMs: 60_000, clock });
    for (let i = 0; i < 2; i++) await limiter.failed('10.0.0.1');
    expect(limiter.retryAfterS('10.0.0.1')).toBeNull();
    clock.advance(20_000);
    await limiter.failed('10.0.0.1');
    // The window began with the first failure: 40 s of it are left.
    expect(limiter.retryAfterS('10.0.0.1')).toBe(40);
    expect(limiter.retryAfterS('10.0.0.2')).toBeNull();
    clock.advance(39_000);
    expect(limiter.retryAfterS('10.0.0.1')).toBe(1);
    clock.advance(1_000);
    expect(limiter.retryAfterS('10.0.0.1')).toBeNull();
    // A new window: the old failures are gone.
    for (let i = 0; i < 2; i++) await limiter.failed('10.0.0.1');
    expect(limiter.retryAfterS('10.0.0.1')).toBeNull();
  });

  it('remembers a bounded number of addresses', async () => {
    const clock = new ManualClock();
    const limiter = new FailedLoginLimiter({ kind: 'http', maxFailures: 1, windowMs: 60_000, clock, maxAddresses: 2 });
    for (const a of ['a', 'b', 'c']) await limiter.failed(a);
    expect(['a', 'b', 'c'].map((a) => limiter.retryAfterS(a) !== null)).toEqual([false, true, true]);
  });

  it('an unreachable shared counter leaves the attempt unlimited instead of failing it', async () => {
    const errors: unknown[] = [];
    const limiter = new FailedLoginLimiter({
      kind: 'mqtt',
      maxFailures: 1,
      windowMs: 60_000,
      clock: new ManualClock(),
      shared: { hit: () => Promise.reject(new Error('database down')), purge: () => Promise.resolve(0) },
      onError: (err) => errors.push(err),
    });
    await limiter.failed('a');
    expect(limiter.retryAfterS('a')).toBeNull();
    expect(errors).toHaveLength(1);
  });

  // Replicas on PostgreSQL count failures into the shared rate counters.
  (postgresAvailable() ? it : it.skip)('two replicas on one database share an address\'s failures', async () => {
    const store = await openTestStore('postgres');
    const twin = await openTwin(store);
    try {
      const clock = new ManualClock();
      const limiters = [store, twin].map((s: Store) => new FailedLoginLimiter({ kind: 'http', maxFailures: 4, windowMs: 60_000, clock, shared: s.sharedCounters! }));
      const address = `10.9.${Math.floor(Math.random() * 250)}.${Math.floor(Math.random() * 250)}`;
      for (let i = 0; i < 4; i++) await limiters[i % 2]!.failed(address);
      // The replica that counted the fourth refuses at once; the other, on its next failure.
      expect(limiters[1]!.retryAfterS(address)).toBe(60);
      expect(limiters[0]!.retryAfterS(address)).toBeNull();
      await limiters[0]!.failed(address);
      expect(limiters[0]!.retryAfterS(address)).toBe(60);
    } finally {
      await twin.close();
      await store.close();
    }
  });
});

describe('failed API-key logins per client address', () => {
  let t: TestCloud;
  afterEach(async () => {
    await t.close();
  });

  const from = (remoteAddress: string, authorization?: string) =>
    t.app.inject({ method: 'GET', url: '/v1/api-keys', remoteAddress, ...(authorization ? { headers: { authorization } } : {}) });
  const WRONG = `Bearer ak_${'x'.repeat(32)}`;

  it('answers 429 rate_limited with Retry-After once an address had N refused keys, until the window passes', async () => {
    t = await startTestCloud({ config: { failedLoginsPerWindow: 3, failedLoginWindowS: 60 } });
    const tenant = await t.createTenant();
    // Missing keys are not login attempts; valid ones from the same address are not counted.
    for (let i = 0; i < 5; i++) expect((await from('10.0.0.1')).statusCode).toBe(401);
    for (let i = 0; i < 5; i++) expect((await from('10.0.0.1', tenant.auth.authorization)).statusCode).toBe(200);
    for (let i = 0; i < 3; i++) {
      const res = await from('10.0.0.1', i === 1 ? 'Bearer not-a-key' : WRONG);
      expect(res.statusCode).toBe(401);
      expect(errorCode(res)).toBe('unauthenticated');
    }
    const refused = await from('10.0.0.1', WRONG);
    expect(refused.statusCode).toBe(429);
    expect(errorCode(refused)).toBe('rate_limited');
    expect(errorDetails(refused)).toEqual({ limit: 'failed_logins_per_ip', max: 3, retry_after_s: 60 });
    expect(refused.headers['retry-after']).toBe('60');
    // Every attempt from that address, a valid key's too, until the window ends.
    expect((await from('10.0.0.1', tenant.auth.authorization)).statusCode).toBe(429);
    // Another address is not affected.
    expect((await from('10.0.0.2', tenant.auth.authorization)).statusCode).toBe(200);
    expect((await from('10.0.0.2', WRONG)).statusCode).toBe(401);

    t.clock.advance(30_000);
    expect((await from('10.0.0.1', WRONG)).headers['retry-after']).toBe('30');
    t.clock.advance(30_000);
    expect((await from('10.0.0.1', tenant.auth.authorization)).statusCode).toBe(200);
    expect((await from('10.0.0.1', WRONG)).statusCode).toBe(401);
  });

  it('counts a refused key on a path the router refuses, too', async () => {
    t = await startTestCloud({ config: { failedLoginsPerWindow: 2 } });
    const long = `/v1/robots/${'r'.repeat(300)}`;
    for (let i = 0; i < 2; i++) {
      const res = await t.app.inject({ method: 'GET', url: long, remoteAddress: '10.0.0.3', headers: { authorization: WRONG } });
      expect(res.statusCode).toBe(401);
    }
    const refused = await t.app.inject({ method: 'GET', url: '/v1/api-keys', remoteAddress: '10.0.0.3', headers: { authorization: WRONG } });
    expect(refused.statusCode).toBe(429);
  });
});
