import { describe, expect, it } from 'vitest';
import { reconnectDelay } from './backoff.js';

describe('reconnectDelay', () => {
  it('doubles from min to max, jittered within the upper half', () => {
    const top = (n: number) => reconnectDelay(n, 500, 30_000, () => 1);
    const bottom = (n: number) => reconnectDelay(n, 500, 30_000, () => 0);
    expect([0, 1, 2, 3, 6, 7, 50].map(top)).toEqual([500, 1000, 2000, 4000, 30_000, 30_000, 30_000]);
    expect(bottom(3)).toBe(2000);
    expect(bottom(0)).toBe(500);
  });
});
