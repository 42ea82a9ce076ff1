import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { DAY, iso } from './time.js';

const MAX_TIME = 8.64e15;

/** The string, or the error's class name: iso must agree with toISOString on both. */
function outcome(f: () => string): string {
  try {
    return f();
  } catch (err) {
    return (err as Error).name;
  }
}
const same = (ms: number) => expect(outcome(() => iso(ms))).toBe(outcome(() => new Date(ms).toISOString()));

describe('iso', () => {
  it('is toISOString for any valid time, also days apart and one after another within a day', () => {
    const day0 = Date.parse('2026-11-29T00:00:00Z');
    fc.assert(
      fc.property(
        fc.oneof(
          fc.integer({ min: -MAX_TIME, max: MAX_TIME }),
          fc.integer({ min: day0 - 2 * DAY, max: day0 + 2 * DAY }),
          fc.integer({ min: -2 * DAY, max: 2 * DAY }),
          fc.double({ min: -MAX_TIME, max: MAX_TIME, noNaN: true }),
        ),
        (ms) => {
          same(ms);
          same(ms + 1);
        },
      ),
      { numRuns: 20_000 },
    );
  });

  it.each([0, -1, 1, DAY - 1, DAY, -DAY, -DAY - 1, 253402300799999, 253402300800000, -62167219200000, -62167219200001, MAX_TIME, -MAX_TIME, 1.5, -1.5, -0])(
    'edge %s',
    (ms) => {
      same(ms - 1);
      same(ms);
      same(ms);
    },
  );

  it('throws the RangeError toISOString throws for an invalid time', () => {
    for (const ms of [Number.NaN, Infinity, -Infinity, MAX_TIME + 1]) expect(() => iso(ms)).toThrow(RangeError);
  });
});
