/**
 * Feature statistics as LeRobot computes them (`compute_stats.py`): per dimension min, max, mean,
 * std (from the mean of squares), count, and the quantiles q01 q10 q50 q90 q99 read off a
 * 5000-bin histogram whose edges span [min - 1e-10, max + 1e-10]. Episode stats are aggregated
 * with LeRobot's `aggregate_feature_stats`: count-weighted mean, parallel variance, and for the
 * quantiles an envelope (the minimum of the inputs up to q50, the maximum above).
 *
 * Arithmetic is float64 throughout; LeRobot promotes float32 inputs to float32 only, so values
 * agree to float32 precision, not bit for bit.
 */

export const QUANTILES = [0.01, 0.1, 0.5, 0.9, 0.99] as const;
export const QUANTILE_KEYS = ['q01', 'q10', 'q50', 'q90', 'q99'] as const;
/** The per-dimension statistics, in the order LeRobot writes them (`count` sits between std and q01). */
export const STAT_KEYS = ['min', 'max', 'mean', 'std', 'count', ...QUANTILE_KEYS] as const;
export type StatKey = (typeof STAT_KEYS)[number];
export type ValueStatKey = Exclude<StatKey, 'count'>;

const NUM_BINS = 5000;

/**
 * One feature's statistics. `values` are flat, row-major in `shape`: `[dim]` for vectors, `[1]` for
 * scalars, `[3, 1, 1]` for images. `count` is frames (vectors) or sampled images (cameras).
 */
export interface FeatureStats {
  shape: number[];
  count: number;
  values: Record<ValueStatKey, number[]>;
}

/** numpy's `np.linspace(start, stop, num)` (endpoint included), edge for edge. */
function linspace(start: number, stop: number, num: number): Float64Array {
  const out = new Float64Array(num);
  const div = num - 1;
  if (div <= 0) {
    out.fill(start);
    return out;
  }
  const step = (stop - start) / div;
  for (let i = 0; i < num; i++) out[i] = i * step + start;
  out[num - 1] = stop;
  return out;
}

/** Index of the first element of sorted `a` greater than `x`. */
function upperBound(a: Float64Array, x: number): number {
  let lo = 0;
  let hi = a.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (a[mid]! <= x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * The histogram bin of `x` as `np.histogram` with explicit edges assigns it: `[e_i, e_i+1)`, the
 * last bin closed on the right.
 */
function binOf(edges: Float64Array, x: number): number {
  const b = upperBound(edges, x) - 1;
  return Math.min(Math.max(b, 0), NUM_BINS - 1);
}

/** `RunningQuantileStats._compute_single_quantile`, including its quirk of returning the first edge. */
function quantileFromHistogram(hist: Float64Array, edges: Float64Array, target: number): number {
  let cum = 0;
  let idx = 0;
  let before = 0;
  for (; idx < hist.length; idx++) {
    before = cum;
    cum += hist[idx]!;
    if (cum >= target) break;
  }
  if (idx === 0) return edges[0]!;
  if (idx >= hist.length) return edges[edges.length - 1]!;
  const inBin = cum - before;
  if (inBin === 0) return edges[idx]!;
  const fraction = (target - before) / inBin;
  return edges[idx]! + fraction * (edges[idx + 1]! - edges[idx]!);
}

/**
 * A weighted sample of one dimension: distinct `points` with their `weights` (counts). Vectors pass
 * each value with weight 1; images pass the 256 byte values with their pixel counts.
 */
interface WeightedColumn {
  points: ArrayLike<number>;
  weights: ArrayLike<number> | null;
}

interface ColumnStats {
  min: number;
  max: number;
  mean: number;
  std: number;
  quantiles: number[];
}

function columnStats(col: WeightedColumn, rows: number): ColumnStats {
  let min = Infinity;
  let max = -Infinity;
  let sum = 0;
  let sumSq = 0;
  for (let i = 0; i < col.points.length; i++) {
    const w = col.weights === null ? 1 : col.weights[i]!;
    if (w === 0) continue;
    const x = col.points[i]!;
    if (x < min) min = x;
    if (x > max) max = x;
    sum += w * x;
    sumSq += w * x * x;
  }
  const mean = sum / rows;
  const meanSq = sumSq / rows;
  if (rows < 2) {
    // `_compute_basic_stats`: numpy's population std, and every quantile set to the mean.
    return { min, max, mean, std: Math.sqrt(Math.max(0, meanSq - mean * mean)), quantiles: QUANTILES.map(() => mean) };
  }
  const edges = linspace(min - 1e-10, max + 1e-10, NUM_BINS + 1);
  const hist = new Float64Array(NUM_BINS);
  for (let i = 0; i < col.points.length; i++) {
    const w = col.weights === null ? 1 : col.weights[i]!;
    if (w === 0) continue;
    hist[binOf(edges, col.points[i]!)]! += w;
  }
  return {
    min,
    max,
    mean,
    std: Math.sqrt(Math.max(0, meanSq - mean * mean)),
    quantiles: QUANTILES.map((q) => quantileFromHistogram(hist, edges, q * rows)),
  };
}

function assemble(shape: number[], count: number, cols: ColumnStats[], scale = 1): FeatureStats {
  const values = {} as Record<ValueStatKey, number[]>;
  values.min = cols.map((c) => c.min / scale);
  values.max = cols.map((c) => c.max / scale);
  values.mean = cols.map((c) => c.mean / scale);
  values.std = cols.map((c) => c.std / scale);
  QUANTILE_KEYS.forEach((k, qi) => {
    values[k] = cols.map((c) => c.quantiles[qi]! / scale);
  });
  return { shape, count, values };
}

/**
 * Stats of a numeric feature over one episode: `data` holds `rows * dim` values, row-major. A
 * feature of shape [1] gives stats of shape [1], like LeRobot's `keepdims` for 1-D columns.
 */
export function vectorStats(data: ArrayLike<number>, rows: number, dim: number): FeatureStats {
  if (rows < 1) throw new RangeError('stats need at least one row');
  if (data.length !== rows * dim) throw new RangeError(`expected ${rows * dim} values, got ${data.length}`);
  const cols: ColumnStats[] = [];
  const column = new Float64Array(rows);
  for (let d = 0; d < dim; d++) {
    for (let r = 0; r < rows; r++) column[r] = data[r * dim + d]!;
    cols.push(columnStats({ points: column, weights: null }, rows));
  }
  return assemble([dim], rows, cols);
}

/** LeRobot's `estimate_num_samples`: how many frames of an episode its image stats look at. */
export function estimateNumSamples(datasetLen: number, minNumSamples = 100, maxNumSamples = 10_000, power = 0.75): number {
  const min = datasetLen < minNumSamples ? datasetLen : minNumSamples;
  return Math.max(min, Math.min(Math.trunc(datasetLen ** power), maxNumSamples));
}

/** numpy's `np.round`: halves go to the even neighbour. */
function roundHalfEven(x: number): number {
  const r = Math.round(x);
  return Math.abs(x % 1) === 0.5 ? 2 * Math.round(x / 2) : r;
}

/** LeRobot's `sample_indices`: the frame indices whose pixels go into an episode's image stats. */
export function sampleIndices(length: number): number[] {
  const num = estimateNumSamples(length);
  const points = linspace(0, length - 1, num);
  return Array.from(points, (p) => roundHalfEven(p));
}

/**
 * Per-channel image stats accumulated while frames stream past: an exact 256-value histogram per
 * channel of the sampled (and, as LeRobot does, downsampled) frames, so the result equals one
 * `RunningQuantileStats.update` over all sampled pixels without holding them. Scaled to [0, 1].
 */
export class ImageStatsAccumulator {
  private readonly counts = [new Float64Array(256), new Float64Array(256), new Float64Array(256)];
  private readonly wanted: Map<number, number>;
  private readonly stride: number;
  private images = 0;
  private pixels = 0;

  constructor(
    private readonly width: number,
    private readonly height: number,
    length: number,
  ) {
    this.wanted = new Map();
    for (const i of sampleIndices(length)) this.wanted.set(i, (this.wanted.get(i) ?? 0) + 1);
    // `auto_downsample_height_width`: frames of 300 px or more are strided down to about 150 px.
    this.stride = Math.max(width, height) < 300 ? 1 : Math.trunc((width > height ? width : height) / 150);
  }

  /** Feed frame `index` (rgb24, row-major); frames not in the sample are ignored. */
  add(index: number, frame: Uint8Array): void {
    const times = this.wanted.get(index);
    if (times === undefined) return;
    const { width, height, stride } = this;
    const [r, g, b] = this.counts as [Float64Array, Float64Array, Float64Array];
    for (let y = 0; y < height; y += stride) {
      const row = y * width * 3;
      for (let x = 0; x < width; x += stride) {
        const o = row + x * 3;
        r[frame[o]!]! += times;
        g[frame[o + 1]!]! += times;
        b[frame[o + 2]!]! += times;
        this.pixels += times;
      }
    }
    this.images += times;
  }

  result(): FeatureStats {
    if (this.images === 0) throw new RangeError('no sampled frame was fed');
    const points = Array.from({ length: 256 }, (_, i) => i);
    const cols = this.counts.map((weights) => columnStats({ points, weights }, this.pixels));
    return assemble([3, 1, 1], this.images, cols, 255);
  }
}

/** A feature whose value is the same on every frame (e.g. `task_index` within an episode). */
export function constantStats(value: number, rows: number): FeatureStats {
  return vectorStats(new Float64Array(rows).fill(value), rows, 1);
}

/** LeRobot's `aggregate_feature_stats` over several episodes' stats of one feature. */
export function aggregateFeatureStats(list: FeatureStats[]): FeatureStats {
  const first = list[0];
  if (first === undefined) throw new RangeError('nothing to aggregate');
  const n = first.values.mean.length;
  const total = list.reduce((s, x) => s + x.count, 0);
  const mean = new Array<number>(n).fill(0);
  for (const s of list) for (let i = 0; i < n; i++) mean[i]! += s.values.mean[i]! * s.count;
  for (let i = 0; i < n; i++) mean[i]! /= total;
  const variance = new Array<number>(n).fill(0);
  for (const s of list) {
    for (let i = 0; i < n; i++) {
      const d = s.values.mean[i]! - mean[i]!;
      variance[i]! += (s.values.std[i]! ** 2 + d * d) * s.count;
    }
  }
  const pick = (key: ValueStatKey, f: (...xs: number[]) => number) =>
    Array.from({ length: n }, (_, i) => f(...list.map((s) => s.values[key][i]!)));
  const values = {
    min: pick('min', Math.min),
    max: pick('max', Math.max),
    mean,
    std: variance.map((v) => Math.sqrt(v / total)),
  } as Record<ValueStatKey, number[]>;
  for (const k of QUANTILE_KEYS) values[k] = pick(k, Number(k.slice(1)) <= 50 ? Math.min : Math.max);
  return { shape: [...first.shape], count: total, values };
}

/** Stats of every feature, by feature key. */
export type StatsByFeature = Record<string, FeatureStats>;

/**
 * Fold one more episode into running dataset stats, as LeRobot's recorder does after each episode
 * (`aggregate_stats([self.stats, episode_stats])`).
 */
export function aggregateInto(running: StatsByFeature | null, episode: StatsByFeature): StatsByFeature {
  if (running === null) return structuredClone(episode);
  const out: StatsByFeature = {};
  for (const key of new Set([...Object.keys(running), ...Object.keys(episode)])) {
    const parts = [running[key], episode[key]].filter((x): x is FeatureStats => x !== undefined);
    out[key] = parts.length === 1 ? structuredClone(parts[0]!) : aggregateFeatureStats(parts);
  }
  return out;
}

/** Nest a flat row-major array into `shape` (`[3, 1, 1]` → `[[[r]], [[g]], [[b]]]`). */
export function nest(values: number[], shape: number[]): unknown {
  if (shape.length <= 1) return values;
  const [head, ...rest] = shape as [number, ...number[]];
  const size = rest.reduce((a, b) => a * b, 1);
  return Array.from({ length: head }, (_, i) => nest(values.slice(i * size, (i + 1) * size), rest));
}

/** One feature's stats as `meta/stats.json` holds them: nested arrays, `count` as `[n]`. */
export function statsToJson(stats: FeatureStats): Record<StatKey, unknown> {
  const out = {} as Record<StatKey, unknown>;
  for (const k of STAT_KEYS) out[k] = k === 'count' ? [stats.count] : nest(stats.values[k], stats.shape);
  return out;
}
