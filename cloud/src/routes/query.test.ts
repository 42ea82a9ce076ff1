import { describe, expect, it } from 'vitest';
import { decimalRangePattern, queryInt } from './query.js';

describe('decimalRangePattern', () => {
  it.each([
    [1, 100],
    [1, 5000],
    [0, 7],
    [3, 3],
    [17, 234],
    [1, 1_000_000],
  ])('matches exactly the integers %i to %i, leading zeros allowed', (min, max) => {
    const re = new RegExp(decimalRangePattern(min, max));
    const wrong: string[] = [];
    for (let n = 0; n <= max + 20; n++) {
      const inRange = n >= min && n <= max;
      for (const text of [String(n), `00${n}`]) if (re.test(text) !== inRange) wrong.push(text);
    }
    for (const text of ['', '-1', '1e2', '0x10', ' 5', '5.0', '+5']) if (re.test(text)) wrong.push(text);
    expect(wrong).toEqual([]);
  });

  it('refuses a range it cannot write', () => {
    expect(() => decimalRangePattern(5, 4)).toThrow();
    expect(() => decimalRangePattern(-1, 4)).toThrow();
  });
});

describe('queryInt', () => {
  it('reads the digits, defaults when absent and refuses what its pattern refuses', () => {
    const limit = queryInt(1, 100, 50);
    expect(limit.parse('007')).toBe(7);
    expect(limit.parse(undefined)).toBe(50);
    for (const bad of ['0', '101', '1e1', '']) expect(limit.safeParse(bad).success, bad).toBe(false);
  });
});
