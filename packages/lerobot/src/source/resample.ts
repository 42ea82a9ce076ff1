import { SourceError } from './errors.js';
import type { StateRule, VectorPlan } from './mapping.js';
import type { RecordingMessage } from './mcap.js';

/**
 * The fixed grid every episode is resampled onto: frame i is at `start + i / fps` (its LeRobot
 * `timestamp` is `i / fps`).
 *
 * - `start` is the first time every mapped vector topic has a sample (the latest of their first
 *   samples), so every vector has a real value at frame 0 without extrapolating. With no vector
 *   feature, the latest first frame of the cameras.
 * - `end` is the last time all mapped streams (vectors and cameras) still have data: the earliest
 *   of their last samples.
 * - `length = floor((end - start) * fps) + 1`; `end < start` (the streams never overlap) is
 *   `too_short`, as is a mapped topic without a single message.
 *
 * Times are the messages' MCAP log times in integer nanoseconds; a grid time is rounded to the
 * nearest nanosecond, so `t_i - start` never exceeds `end - start`.
 */

export interface Grid {
  startNs: bigint;
  fps: number;
  length: number;
}

const NS_PER_S = 1_000_000_000n;

/** `start + i / fps`, in ns, rounded to the nearest ns. */
export function gridTimeNs(grid: Pick<Grid, 'startNs' | 'fps'>, i: number): bigint {
  const fps = BigInt(grid.fps);
  return grid.startNs + (BigInt(i) * NS_PER_S * 2n + fps) / (2n * fps);
}

export interface StreamSpan {
  topic: string;
  /** Log time of its first and last message, ns; undefined when it has none. */
  firstNs: bigint | undefined;
  lastNs: bigint | undefined;
  /** A vector topic (bounds the start) or a camera (bounds only the end). */
  kind: 'vector' | 'camera';
}

export function makeGrid(fps: number, spans: readonly StreamSpan[]): Grid {
  if (spans.length === 0) throw new SourceError('mapping_invalid', 'the mapping maps no stream');
  for (const s of spans) if (s.firstNs === undefined || s.lastNs === undefined) throw new SourceError('too_short', `topic ${s.topic} has no message`);
  const starters = spans.some((s) => s.kind === 'vector') ? spans.filter((s) => s.kind === 'vector') : spans;
  const startNs = starters.reduce((m, s) => (s.firstNs! > m ? s.firstNs! : m), starters[0]!.firstNs!);
  const endNs = spans.reduce((m, s) => (s.lastNs! < m ? s.lastNs! : m), spans[0]!.lastNs!);
  if (endNs < startNs) {
    throw new SourceError('too_short', `the streams do not overlap: every vector topic has data from ${startNs} ns, but one stream ends at ${endNs} ns`);
  }
  const length = Number(((endNs - startNs) * BigInt(fps)) / NS_PER_S) + 1;
  return { startNs, fps, length };
}

/** One vector feature's samples in time order: `values` is `timesNs.length * dim`, row-major. */
export interface VectorSamples {
  key: string;
  dim: number;
  names: string[];
  timesNs: bigint[];
  values: number[];
}

function numbersOf(msg: Record<string, unknown>, field: string, topic: string, key: string): readonly number[] {
  const v = msg[field];
  if (!Array.isArray(v) || !v.every((x) => typeof x === 'number')) {
    throw new SourceError('mapping_invalid', `field ${field} of ${topic} is not an array of numbers (feature ${key})`);
  }
  return v;
}

function namesOf(first: Record<string, unknown>, plan: VectorPlan, dims: number[]): string[] {
  const dim = dims.reduce((a, b) => a + b, 0);
  if (plan.names !== undefined) {
    if (plan.names.length !== dim) throw new SourceError('mapping_invalid', `feature ${plan.key} has ${plan.names.length} names for ${dim} values (fields ${plan.fields.join(', ')} of ${plan.topic})`);
    return plan.names;
  }
  const out: string[] = [];
  if (plan.namesFrom !== undefined) {
    const names = first[plan.namesFrom];
    if (!Array.isArray(names) || !names.every((n) => typeof n === 'string')) {
      throw new SourceError('mapping_invalid', `field ${plan.namesFrom} of ${plan.topic} is not an array of strings (names_from of feature ${plan.key})`);
    }
    plan.fields.forEach((field, fi) => {
      if (names.length !== dims[fi]) throw new SourceError('mapping_invalid', `field ${plan.namesFrom} of ${plan.topic} has ${names.length} names, field ${field} ${dims[fi]} values (feature ${plan.key})`);
      for (const n of names) out.push(plan.fields.length === 1 ? n : `${n}.${field}`);
    });
    return out;
  }
  plan.fields.forEach((field, fi) => {
    for (let i = 0; i < dims[fi]!; i++) out.push(`${field}.${i}`);
  });
  return out;
}

/**
 * Reads one topic's messages (in time order) into the samples of every vector feature of that
 * topic. The first message fixes each field's length; a later message with another length is
 * `shape_changed`. A vector topic is small next to the camera (tens of floats at up to a few
 * hundred Hz), so its samples are held in memory for the episode.
 */
export async function readVectorSamples(messages: AsyncIterable<RecordingMessage>, plans: readonly VectorPlan[]): Promise<VectorSamples[]> {
  const out = plans.map((p) => ({ plan: p, dims: [] as number[], samples: { key: p.key, dim: 0, names: [] as string[], timesNs: [] as bigint[], values: [] as number[] } }));
  let lastNs: bigint | undefined;
  for await (const m of messages) {
    if (typeof m.data !== 'object' || m.data === null) throw new SourceError('mapping_invalid', `a message of ${m.topic} is not a JSON object`);
    // Two messages at the same log time: the later one wins, so "latest at or before t" is one value.
    const replace = lastNs === m.logTimeNs;
    lastNs = m.logTimeNs;
    for (const o of out) {
      const msg = m.data as Record<string, unknown>;
      const arrays = o.plan.fields.map((f) => numbersOf(msg, f, o.plan.topic, o.plan.key));
      if (o.samples.timesNs.length === 0 && !replace) {
        o.dims = arrays.map((a) => a.length);
        o.samples.dim = o.dims.reduce((a, b) => a + b, 0);
        o.samples.names = namesOf(msg, o.plan, o.dims);
      } else {
        arrays.forEach((a, i) => {
          if (a.length !== o.dims[i]) {
            throw new SourceError('shape_changed', `field ${o.plan.fields[i]} of ${o.plan.topic} had ${o.dims[i]} values, then ${a.length} at ${m.logTimeNs} ns (feature ${o.plan.key})`);
          }
        });
      }
      if (replace) o.samples.values.length -= o.samples.dim;
      else o.samples.timesNs.push(m.logTimeNs);
      for (const a of arrays) for (const x of a) o.samples.values.push(x);
    }
  }
  return out.map((o) => o.samples);
}

/**
 * The feature on the grid. `hold`: the latest sample at or before the frame's time (before the
 * first sample, the first). `linear`: interpolated between the samples around it (clamped to the
 * first / last sample outside them). `offsetFrames` 1 reads frame i at `t_{i+1}` (an action that
 * is the next state); the last frame's `t_{i+1}` is past the end, so it takes the last sample.
 */
export function resampleVector(samples: VectorSamples, grid: Grid, rule: StateRule, offsetFrames: 0 | 1 = 0): Float32Array {
  const { dim, timesNs, values } = samples;
  const out = new Float32Array(grid.length * dim);
  if (timesNs.length === 0) throw new SourceError('too_short', `feature ${samples.key} has no sample`);
  let j = 0; // the latest sample at or before t (or 0 before the first)
  for (let i = 0; i < grid.length; i++) {
    const t = gridTimeNs(grid, i + offsetFrames);
    while (j + 1 < timesNs.length && timesNs[j + 1]! <= t) j++;
    const t0 = timesNs[j]!;
    const next = j + 1 < timesNs.length ? timesNs[j + 1]! : undefined;
    if (rule === 'linear' && t > t0 && next !== undefined) {
      const frac = Number(t - t0) / Number(next - t0);
      for (let d = 0; d < dim; d++) {
        const a = values[j * dim + d]!;
        const b = values[(j + 1) * dim + d]!;
        out[i * dim + d] = a + (b - a) * frac;
      }
    } else {
      for (let d = 0; d < dim; d++) out[i * dim + d] = values[j * dim + d]!;
    }
  }
  return out;
}

export interface RgbFrame {
  width: number;
  height: number;
  /** `width * height * 3` bytes, row-major RGB, no row padding. */
  pixels: Uint8Array;
}

/** A `foxglove.RawImage` JSON message to packed RGB (`rgb8`, or `bgr8` swapped); row padding (`step`) dropped. */
export function decodeRawImage(data: unknown, where: string): RgbFrame {
  const m = data as { width?: unknown; height?: unknown; encoding?: unknown; step?: unknown; data?: unknown } | null;
  if (typeof m !== 'object' || m === null) throw new SourceError('bad_image', `${where}: not a JSON object`);
  const { width, height, encoding, data: b64 } = m;
  if (typeof width !== 'number' || typeof height !== 'number' || !Number.isInteger(width) || !Number.isInteger(height) || width <= 0 || height <= 0) {
    throw new SourceError('bad_image', `${where}: width and height must be positive integers`);
  }
  if (encoding !== 'rgb8' && encoding !== 'bgr8') throw new SourceError('bad_image', `${where}: encoding ${JSON.stringify(encoding)}; rgb8 and bgr8 are read`);
  const base64 = typeof b64 === 'object' && b64 !== null && Buffer.isBuffer((b64 as { base64?: unknown }).base64) ? (b64 as { base64: Buffer }).base64 : null;
  if (typeof b64 !== 'string' && base64 === null) throw new SourceError('bad_image', `${where}: data is not a base64 string`);
  const row = width * 3;
  const step = m.step === undefined ? row : m.step;
  if (typeof step !== 'number' || !Number.isInteger(step) || step < row) throw new SourceError('bad_image', `${where}: step ${JSON.stringify(step)} is less than width * 3 = ${row}`);
  // The bytes of the base64 text (see parseRawImage) as a one-byte string: a copy, not a UTF-8 decode.
  const raw = Buffer.from(base64 !== null ? base64.toString('latin1') : (b64 as string), 'base64');
  if (raw.byteLength < step * (height - 1) + row) throw new SourceError('bad_image', `${where}: ${raw.byteLength} bytes of data for ${width}x${height} with step ${step}`);
  let pixels: Uint8Array;
  if (step === row && encoding === 'rgb8') {
    pixels = new Uint8Array(raw.buffer, raw.byteOffset, row * height);
  } else {
    pixels = new Uint8Array(row * height);
    for (let y = 0; y < height; y++) pixels.set(raw.subarray(y * step, y * step + row), y * row);
    if (encoding === 'bgr8') {
      for (let o = 0; o < pixels.length; o += 3) {
        const b = pixels[o]!;
        pixels[o] = pixels[o + 2]!;
        pixels[o + 2] = b;
      }
    }
  }
  return { width, height, pixels };
}

/**
 * A camera on the grid: for each frame time, the image nearest in time (a tie goes to the
 * earlier one), decoded. Reads the topic's messages as a stream in time order and decodes only
 * the images it yields (the same image twice in a row is decoded once), so one frame at a time is
 * in memory. A frame of another size than `size` is `shape_changed`.
 */
export async function* nearestFrames(
  messages: AsyncIterable<RecordingMessage>,
  grid: Grid,
  size: { width: number; height: number },
  topic: string,
): AsyncGenerator<Uint8Array, void, void> {
  const it = messages[Symbol.asyncIterator]();
  try {
    const first = await it.next();
    if (first.done === true) throw new SourceError('too_short', `topic ${topic} has no message`);
    let cur = first.value;
    let peek: RecordingMessage | undefined = await nextOf(it);
    let decoded: { msg: RecordingMessage; pixels: Uint8Array } | undefined;
    for (let i = 0; i < grid.length; i++) {
      const t = gridTimeNs(grid, i);
      // Times only grow, so once the next image is farther than the current one, every later one is too.
      while (peek !== undefined && (peek.logTimeNs <= t || peek.logTimeNs - t < t - cur.logTimeNs)) {
        cur = peek;
        peek = await nextOf(it);
      }
      if (decoded?.msg !== cur) {
        const frame = decodeRawImage(cur.data, `${topic} at ${cur.logTimeNs} ns`);
        if (frame.width !== size.width || frame.height !== size.height) {
          throw new SourceError('shape_changed', `${topic}: frames were ${size.width}x${size.height}, then ${frame.width}x${frame.height} at ${cur.logTimeNs} ns`);
        }
        decoded = { msg: cur, pixels: frame.pixels };
      }
      yield decoded.pixels;
    }
  } finally {
    await it.return?.();
  }
}

async function nextOf(it: AsyncIterator<RecordingMessage>): Promise<RecordingMessage | undefined> {
  const r = await it.next();
  return r.done === true ? undefined : r.value;
}
