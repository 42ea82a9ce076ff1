/**
 * Numeric streams out of decoded messages, for the plots and the readout at the playhead. A
 * `sensor_msgs/msg/JointState` gives `position.<joint>`, `velocity.<joint>` and `effort.<joint>`
 * (by joint name, whatever the order of `name` in each message); any other message gives its
 * numeric leaves by path (`data[3]` of a `std_msgs/msg/Float64MultiArray`, `linear.x` of a
 * Twist), walked to a bounded depth and width. Header stamps are times, not signals: skipped.
 */

/** Leaves per topic and arrays' elements taken, so one wide message cannot flood the plot. */
export const MAX_SERIES_PER_TOPIC = 48;
const MAX_ARRAY = 64;
const MAX_DEPTH = 4;
const SKIPPED_KEYS = new Set(['header', 'stamp', 'layout']);

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
