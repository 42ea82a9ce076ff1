import { describe, expect, it } from 'vitest';
import { nextRetryDelay, parseRetryAfter, jitter, retry } from './retry.js';
import { ManualClock, ManualScheduler } from './time.js';

describe('nextRetryDelay', () => {
  const policy = { schedule: [60_000, 300_000, 1_800_000] };
  it('walks the schedule and gives up past its end', () => {
    expect([1, 2, 3, 4].map((n) => nextRetryDelay(policy, n))).toEqual([60_000, 300_000, 1_800_000, null]);
  });
  it('honours a longer Retry-After, never a shorter one', () => {
    expect(nextRetryDelay(policy, 1, { retryAfterMs: 120_000 })).toBe(120_000);
    expect(nextRetryDelay(policy, 1, { retryAfterMs: 1_000 })).toBe(60_000);
  });
  it('spreads by the jitter fraction at most', () => {
    const j = { schedule: [1000], jitter: 0.2 };
    expect(nextRetryDelay(j, 1, { random: () => 0 })).toBe(800);
    expect(nextRetryDelay(j, 1, { random: () => 1 })).toBe(1200);
    expect(nextRetryDelay(j, 1, { random: () => 0.5 })).toBe(1000);
  });
});

describe('parseRetryAfter', () => {
  it('reads seconds and HTTP dates', () => {
    const now = Date.parse('2026-01-01T00:00:00Z');
    expect(parseRetryAfter('120', now)).toBe(120_000);
    expect(parseRetryAfter('Thu, 01 Jan 2026 00:01:00 GMT', now)).toBe(60_000);
    expect(parseRetryAfter('soon', now)).toBeUndefined();
    expect(parseRetryAfter(undefined, now)).toBeUndefined();
  });
});

describe('retry', () => {
  it('retries on the scheduler until success, waiting the schedule', async () => {
    const clock = new ManualClock(0);
    const scheduler = new ManualScheduler(clock);
    const attempts: number[] = [];
    const done = retry(
      async (n) => {
        attempts.push(clock.now());
        if (n < 3) throw new Error(`fail ${n}`);
        return 'ok';
      },
      { policy: { schedule: [1000, 5000] }, scheduler },
    );
    for (let i = 0; i < 10 && attempts.length < 3; i++) {
      await new Promise((r) => setImmediate(r));
      scheduler.advance(1000);
    }
    await expect(done).resolves.toBe('ok');
    expect(attempts).toEqual([0, 1000, 6000]);
  });

  it('stops at a failure that is not retryable, and when the schedule is exhausted', async () => {
    const scheduler = new ManualScheduler(new ManualClock(0));
    await expect(retry(async () => Promise.reject(new Error('403')), { policy: { schedule: [1] }, scheduler, shouldRetry: () => false })).rejects.toThrow('403');
    let n = 0;
    const p = retry(async () => Promise.reject(new Error(`try ${++n}`)), { policy: { schedule: [] }, scheduler });
    await expect(p).rejects.toThrow('try 1');
  });
});

describe('jitter', () => {
  it('spreads over ms × (1 ± fraction): the ends at random 0 and 1, the middle at 0.5', () => {
    expect(jitter(1000, 0.2, () => 0)).toBeCloseTo(800, 9);
    expect(jitter(1000, 0.2, () => 0.5)).toBeCloseTo(1000, 9);
    expect(jitter(1000, 0.2, () => 1)).toBeCloseTo(1200, 9);
  });

  it('a fraction of 0 is the value itself and draws no random number', () => {
    let draws = 0;
    expect(jitter(1000, 0, () => (draws++, 0))).toBe(1000);
    expect(jitter(1000, -1, () => (draws++, 0))).toBe(1000);
    expect(draws).toBe(0);
  });

  it('a fraction above 1 is taken as 1, and the result is never negative', () => {
    expect(jitter(1000, 5, () => 0)).toBe(0);
    expect(jitter(1000, 5, () => 1)).toBeCloseTo(2000, 9);
  });
});
