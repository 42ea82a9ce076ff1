/**
 * Numeric streams out of decoded messages, for the plots and the readout at the playhead. A
 * `sensor_msgs/msg/JointState` gives `position.<joint>`, `velocity.<joint>` and `effort.<joint>`
 * (by joint name, whatever the order of `name` in each message); any other message gives its
 * numeric leaves by path (`data[3]` of a `std_msgs/msg/Float64MultiArray`, `linear.x` of a
 * Twist), walked to a bounded depth and width. Header stamps and protobuf `timestamp` fields
 * (Foxglove's schemas' google.protobuf.Timestamp) are times, not signals: skipped.
 */

/** Leaves per topic and arrays' elements taken, so one wide message cannot flood the plot. */
export const MAX_SERIES_PER_TOPIC = 48;
const MAX_ARRAY = 64;
const MAX_DEPTH = 4;
const SKIPPED_KEYS = new Set(['header', 'stamp', 'timestamp', 'layout']);

export const JOINT_STATE = 'sensor_msgs/msg/JointState';

/** One plotted line: `id` is `<topic> <key>` (the readout's `data-series`). */
export interface SeriesDef {
  id: string;
  topic: string;
  key: string;
}

export function seriesId(topic: string, key: string): string {
  return `${topic} ${key}`;
}

function isNumericArray(v: unknown): v is ArrayLike<number | bigint> {
  if (ArrayBuffer.isView(v) && !(v instanceof DataView)) return true;
  return Array.isArray(v) && v.length > 0 && (typeof v[0] === 'number' || typeof v[0] === 'bigint');
}

/** The numeric leaves of `msg` in path order, at most `limit` of them. */
export function numericLeaves(msg: unknown, schemaName: string, limit = MAX_SERIES_PER_TOPIC): Map<string, number> {
  const out = new Map<string, number>();
  if (schemaName === JOINT_STATE && typeof msg === 'object' && msg !== null) {
    const m = msg as { name?: unknown; position?: unknown; velocity?: unknown; effort?: unknown };
    const names = Array.isArray(m.name) ? m.name.map(String) : [];
    for (const field of ['position', 'velocity', 'effort'] as const) {
      const values = m[field];
      if (!isNumericArray(values)) continue;
      for (let i = 0; i < values.length && i < names.length && out.size < limit; i++) out.set(`${field}.${names[i]}`, Number(values[i]));
    }
    return out;
  }
  const walk = (v: unknown, path: string, depth: number) => {
    if (out.size >= limit) return;
    if (typeof v === 'number') {
      if (path !== '') out.set(path, v);
      return;
    }
    if (typeof v === 'bigint') {
      if (path !== '') out.set(path, Number(v));
      return;
    }
    if (depth >= MAX_DEPTH || typeof v !== 'object' || v === null) return;
    if (isNumericArray(v)) {
      // Bytes are images or blobs, not signals.
      if (v instanceof Uint8Array) return;
      for (let i = 0; i < v.length && i < MAX_ARRAY && out.size < limit; i++) out.set(`${path}[${i}]`, Number(v[i]));
      return;
    }
    if (Array.isArray(v)) {
      for (let i = 0; i < v.length && i < MAX_ARRAY && out.size < limit; i++) walk(v[i], `${path}[${i}]`, depth + 1);
      return;
    }
    for (const [k, child] of Object.entries(v)) {
      if (SKIPPED_KEYS.has(k)) continue;
      walk(child, path === '' ? k : `${path}.${k}`, depth + 1);
      if (out.size >= limit) return;
    }
  };
  walk(msg, '', 0);
  return out;
}

/**
 * One topic's plotted samples over a window: times (s from the recording's start, ascending) and
 * one column of values per series key, NaN where a message had no such leaf. Numbers only, in
 * typed arrays (8 bytes a sample): the decoded messages they came from are not kept.
 */
export interface SampleColumns {
  readonly t: Float64Array;
  readonly values: ReadonlyMap<string, Float64Array>;
}

/** Builds a SampleColumns by appends, growing its arrays by doubling; `done()` trims them. */
export class ColumnsBuilder {
  private n = 0;
  private t = new Float64Array(64);
  private cols: Float64Array[];

  constructor(readonly keys: readonly string[]) {
    this.cols = keys.map(() => new Float64Array(64));
  }

  get length(): number {
    return this.n;
  }

  private room(more: number): void {
    if (this.n + more <= this.t.length) return;
    let cap = this.t.length;
    while (cap < this.n + more) cap *= 2;
    const grow = (a: Float64Array) => {
      const b = new Float64Array(cap);
      b.set(a.subarray(0, this.n));
      return b;
    };
    this.t = grow(this.t);
    this.cols = this.cols.map(grow);
  }

  /** One sample: `leaves` by key (a key it lacks is NaN). */
  push(tS: number, leaves: ReadonlyMap<string, number>): void {
    this.room(1);
    this.t[this.n] = tS;
    this.keys.forEach((k, i) => (this.cols[i]![this.n] = leaves.get(k) ?? Number.NaN));
    this.n++;
  }

  /** The samples of `from` with time in [loS, hiS] (same keys). */
  pushRange(from: SampleColumns, loS: number, hiS: number): void {
    const a = lowerBound(from.t, loS);
    const b = lowerBound(from.t, hiS, true);
    if (b <= a) return;
    this.room(b - a);
    this.t.set(from.t.subarray(a, b), this.n);
    this.keys.forEach((k, i) => {
      const src = from.values.get(k);
      if (src) this.cols[i]!.set(src.subarray(a, b), this.n);
      else this.cols[i]!.fill(Number.NaN, this.n, this.n + b - a);
    });
    this.n += b - a;
  }

  /** Appends everything of `other` (built with the same keys). */
  pushAll(other: ColumnsBuilder): void {
    const done = other.done();
    this.pushRange(done, Number.NEGATIVE_INFINITY, Number.POSITIVE_INFINITY);
  }

  done(): SampleColumns {
    return { t: this.t.slice(0, this.n), values: new Map(this.keys.map((k, i) => [k, this.cols[i]!.slice(0, this.n)])) };
  }
}

/** The first index whose value is >= x (> x with `after`) in ascending `a`. */
function lowerBound(a: Float64Array, x: number, after = false): number {
  let lo = 0;
  let hi = a.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (after ? a[mid]! <= x : a[mid]! < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
