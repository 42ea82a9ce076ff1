import { describe, expect, it } from 'vitest';
import {
  aggregateInto,
  constantStats,
  estimateNumSamples,
  ImageStatsAccumulator,
  sampleIndices,
  statsToJson,
  vectorStats,
  type FeatureStats,
} from './stats.js';

// Worked by hand from LeRobot's RunningQuantileStats for [1, 2, 3, 4]: edges span
// [1 - 1e-10, 4 + 1e-10] in 5000 bins of width w = (3 + 2e-10) / 5000; 1 falls in bin 0, 2 in bin
// 1666, 3 in bin 3333, 4 in bin 4999.
const w = (3 + 2e-10) / 5000;
const e0 = 1 - 1e-10;
const expected1234 = {
  min: 1,
  max: 4,
  mean: 2.5,
  std: Math.sqrt(7.5 - 6.25),
  // Targets 0.04 and 0.4 are reached in bin 0, where LeRobot returns the first edge as is.
  q01: e0,
  q10: e0,
  // Target 2: bin 1666 holds the second value, fraction (2 - 1) / 1 = 1: its upper edge.
  q50: e0 + 1667 * w,
  // Targets 3.6 and 3.96: bin 4999 after a count of 3, fractions 0.6 and 0.96.
  q90: e0 + 4999 * w + 0.6 * w,
  q99: e0 + 4999 * w + 0.96 * w,
};

function expectStats(s: FeatureStats, dimIndex: number, want: Record<string, number>, scale = 1): void {
  for (const [k, v] of Object.entries(want)) expect(s.values[k as 'min'][dimIndex], k).toBeCloseTo(v * scale, 9);
}

describe('vectorStats', () => {
  it('matches the hand-computed stats of [1, 2, 3, 4]', () => {
    const s = vectorStats([1, 2, 3, 4], 4, 1);
    expect(s.shape).toEqual([1]);
    expect(s.count).toBe(4);
    expectStats(s, 0, expected1234);
  });

  it('computes each dimension of a row-major vector on its own', () => {
    const s = vectorStats(new Float32Array([1, 10, 2, 20, 3, 30, 4, 40]), 4, 2);
    expect(s.shape).toEqual([2]);
    expectStats(s, 0, expected1234);
    expect(s.values.mean[1]).toBeCloseTo(25, 9);
    expect(s.values.std[1]).toBeCloseTo(10 * Math.sqrt(1.25), 9);
    expect(s.values.q50[1]).toBeCloseTo(10 - 1e-10 + 1667 * ((30 + 2e-10) / 5000), 9);
  });

  it('sets every quantile to the mean for a single frame (LeRobot _compute_basic_stats)', () => {
    const s = vectorStats([7, -1], 1, 2);
    expect(s.values.std).toEqual([0, 0]);
    expect(s.values.q01).toEqual([7, -1]);
    expect(s.values.q99).toEqual([7, -1]);
  });

  it('gives a constant feature its value everywhere', () => {
    const s = constantStats(3, 5);
    expect(s.values.min).toEqual([3]);
    expect(s.values.std).toEqual([0]);
    for (const q of ['q01', 'q10', 'q50', 'q90', 'q99'] as const) expect(s.values[q][0]).toBeCloseTo(3, 9);
  });
});

describe('aggregateInto', () => {
  it('weights means by count, combines variances, and envelopes quantiles', () => {
    const a = vectorStats([1, 2], 2, 1);
    const b = vectorStats([3, 4, 5, 6], 4, 1);
    const agg = aggregateInto(aggregateInto(null, { x: a }), { x: b }).x!;
    expect(agg.count).toBe(6);
    expect(agg.values.min).toEqual([1]);
    expect(agg.values.max).toEqual([6]);
    expect(agg.values.mean[0]).toBeCloseTo(3.5, 12);
    // Population std of 1..6.
    expect(agg.values.std[0]).toBeCloseTo(Math.sqrt(35 / 12), 12);
    expect(agg.values.q10).toEqual([Math.min(a.values.q10[0]!, b.values.q10[0]!)]);
    expect(agg.values.q50).toEqual([Math.min(a.values.q50[0]!, b.values.q50[0]!)]);
    expect(agg.values.q90).toEqual([Math.max(a.values.q90[0]!, b.values.q90[0]!)]);
  });
});

describe('image stats', () => {
  it('samples frames as LeRobot does', () => {
    expect(sampleIndices(20)).toEqual(Array.from({ length: 20 }, (_, i) => i));
    expect(estimateNumSamples(200)).toBe(100);
    expect(estimateNumSamples(1000)).toBe(177);
    const s = sampleIndices(200);
    expect(s).toHaveLength(100);
    // linspace(0, 199, 100) steps by 2.0101…: 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34, 36, 38, 40, 42, 44, 46, 48, 50(.25 → 50)…
    expect(s.slice(0, 5)).toEqual([0, 2, 4, 6, 8]);
    expect(s.at(-1)).toBe(199);
  });

  it('equals vector stats over every sampled pixel, per channel, scaled to [0, 1] with shape [3, 1, 1]', () => {
    const width = 4;
    const height = 2;
    const length = 3;
    const frames = Array.from({ length }, (_, i) =>
      Uint8Array.from({ length: width * height * 3 }, (_, j) => (j * 37 + i * 11) % 256),
    );
    const acc = new ImageStatsAccumulator(width, height, length);
    frames.forEach((f, i) => acc.add(i, f));
    const got = acc.result();
    expect(got.shape).toEqual([3, 1, 1]);
    expect(got.count).toBe(3);
    for (let c = 0; c < 3; c++) {
      const pixels = frames.flatMap((f) => Array.from({ length: width * height }, (_, p) => f[p * 3 + c]!));
      const want = vectorStats(pixels, pixels.length, 1);
      for (const k of ['min', 'max', 'mean', 'std', 'q01', 'q10', 'q50', 'q90', 'q99'] as const) {
        expect(got.values[k][c]).toBeCloseTo(want.values[k][0]! / 255, 9);
      }
    }
    const json = statsToJson(got);
    expect(json.count).toEqual([3]);
    expect((json.mean as number[][][]).map((x) => x.length)).toEqual([1, 1, 1]);
  });
});
