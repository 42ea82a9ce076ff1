import { describe, expect, it } from 'vitest';
import { ManualClock, ManualScheduler } from '@fleet/protocol';
import type { IdempotencyClaim, IdempotencyStore } from '../store/index.js';
import { IdempotencyClaims } from './idempotency.js';

/** Records each renewal; `next` decides how the next one ends (a test resolves or rejects it). */
function fakeStore() {
  const renewals: { claims: IdempotencyClaim[]; now: number; leaseMs: number; settle: (err?: Error) => void }[] = [];
  const store = {
    renew: (claims: readonly IdempotencyClaim[], now: number, leaseMs: number) =>
      new Promise<number>((resolve, reject) => {
        renewals.push({ claims: [...claims], now, leaseMs, settle: (err) => (err ? reject(err) : resolve(claims.length)) });
      }),
  } as unknown as IdempotencyStore;
  return { store, renewals };
}

const flush = () => new Promise((resolve) => setImmediate(resolve));

describe('IdempotencyClaims', () => {
  const setup = () => {
    const clock = new ManualClock();
    const scheduler = new ManualScheduler(clock);
    const { store, renewals } = fakeStore();
    const errors: unknown[] = [];
    const claims = new IdempotencyClaims({ store, clock, scheduler, leaseMs: 15_000, onError: (err) => errors.push(err) });
    return { clock, scheduler, renewals, errors, claims };
  };
  const a = { orgId: 'org_a', key: 'a', token: 'ta' };
  const b = { orgId: 'org_b', key: 'b', token: 'tb' };

  it('renews every held claim in one call a third of a lease apart, and runs no timer while it holds none', async () => {
    const { clock, scheduler, renewals, claims } = setup();
    expect(claims.renewEveryMs).toBe(5_000);
    expect(scheduler.pending).toBe(0);
    claims.hold(a);
    claims.hold(b);
    expect(scheduler.pending).toBe(1);
    scheduler.advance(4_999);
    expect(renewals).toHaveLength(0);
    scheduler.advance(1);
    expect(renewals).toHaveLength(1);
    expect(renewals[0]).toMatchObject({ claims: [a, b], now: clock.now(), leaseMs: 15_000 });
    renewals[0]!.settle();
    await flush();

    claims.drop(a);
    scheduler.advance(5_000);
    expect(renewals[1]!.claims).toEqual([b]);
    renewals[1]!.settle();
    await flush();
    claims.drop(b);
    expect(scheduler.pending).toBe(0);
    scheduler.advance(60_000);
    expect(renewals).toHaveLength(2);
  });

  it('does not pile renewals up behind a slow one, and reports a failed one and goes on', async () => {
    const { scheduler, renewals, errors, claims } = setup();
    claims.hold(a);
    scheduler.advance(5_000);
    scheduler.advance(5_000);
    expect(renewals).toHaveLength(1);
    renewals[0]!.settle(new Error('database away'));
    await flush();
    expect(errors).toHaveLength(1);
    scheduler.advance(5_000);
    expect(renewals).toHaveLength(2);
    renewals[1]!.settle();
    await flush();
    claims.close();
    expect(scheduler.pending).toBe(0);
    expect(claims.size).toBe(0);
  });
});
