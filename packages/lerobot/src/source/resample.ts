import { cameraImage, isRecordingError, type CameraImage } from '@fleet/recordings';
import sharp from 'sharp';
import { SourceError } from './errors.js';
import { featureLabel, type StateRule, type VectorPlan } from './mapping.js';
import type { RecordingMessage } from './mcap.js';

/**
 * The fixed grid every episode is resampled onto: frame i is at `start + i / fps` (its LeRobot
 * `timestamp` is `i / fps`).
 *
 * - `start` is the first time EVERY mapped stream has data: the latest of the first samples of
 *   all of them, vectors (each part of a joined one) and cameras alike. No frame is read before a
 *   stream has begun, so no value or image is taken from before its first sample.
 * - `end` is the last time every mapped stream still has data: the earliest of their last samples
 *   (a camera's last frame is the last full-size one, see episode.ts).
 * - `length = floor((end - start) * fps) + 1`; `end < start` (the streams never overlap) is
 *   `too_short` naming the stream that starts last and the one that ends first, as is a mapped
 *   topic without a single message.
 *
 * Each stream is then read at every frame time by its rule (`resampleVector`, `nearestFrames`),
 * and with a staleness tolerance, the sample(s) used must lie within it of that time, else
 * `stale_stream`. Times are the messages' times by the mapping's stamp rule (`header.stamp` or
 * the MCAP log time, see mcap.ts) in integer nanoseconds; a grid time is rounded to the nearest
 * nanosecond, so `t_i - start` never exceeds `end - start`. A stream whose times go backwards is
 * `corrupt_recording`.
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
  /** Time (by the stamp rule) of its first and last message used, ns; undefined when it has none. */
  firstNs: bigint | undefined;
  lastNs: bigint | undefined;
  /** A vector topic or a camera; both bound the start and the end, the kind only names it in messages. */
  kind: 'vector' | 'camera';
}

/** A duration in ms for messages: `180`, `33.333`. */
export function msText(ns: bigint): string {
  return String(Math.round(Number(ns) / 1e3) / 1e3);
}

export function makeGrid(fps: number, spans: readonly StreamSpan[]): Grid {
  if (spans.length === 0) throw new SourceError('mapping_invalid', 'the mapping maps no stream');
  for (const s of spans) if (s.firstNs === undefined || s.lastNs === undefined) throw new SourceError('too_short', `topic ${s.topic} has no message`);
  const starter = spans.reduce((m, s) => (s.firstNs! > m.firstNs! ? s : m));
  const ender = spans.reduce((m, s) => (s.lastNs! < m.lastNs! ? s : m));
  const startNs = starter.firstNs!;
  const endNs = ender.lastNs!;
  if (endNs < startNs) {
    throw new SourceError(
      'too_short',
      `the streams do not overlap: ${starter.kind} topic ${starter.topic} starts at ${startNs} ns, ${msText(startNs - endNs)} ms after ${ender.kind} topic ${ender.topic} ends (${endNs} ns)`,
    );
  }
  const length = Number(((endNs - startNs) * BigInt(fps)) / NS_PER_S) + 1;
  return { startNs, fps, length };
}

/**
 * `stale_stream` for frame i: the sample(s) `rule` picked for it lie `gapNs` from the time it is
 * read at, more than the tolerance. Names feature, topic, frame (index and time) and the gap.
 */
function staleError(label: string, topic: string, what: string, grid: Grid, i: number, readAt: number, gapNs: bigint, maxNs: bigint): SourceError {
  const t = gridTimeNs(grid, readAt);
  const at = readAt === i ? '' : `, read at frame ${readAt}'s time`;
  return new SourceError(
    'stale_stream',
    `${label}: topic ${topic} has ${what} ${msText(gapNs)} ms from frame ${i} (t = ${msText(t - grid.startNs)} ms into the episode, ${t} ns${at}), more than max_staleness_ms ${msText(maxNs)}`,
  );
}

/** One vector feature's (or joined part's) samples in time order: `values` is `timesNs.length * dim`, row-major. */
export interface VectorSamples {
  key: string;
  /** The topic read, and how the feature is named in messages (`featureLabel`). */
  topic: string;
  label: string;
  dim: number;
  names: string[];
  timesNs: bigint[];
  values: number[];
}

/** The value at a dotted field path (`position`, `twist.linear.x`); undefined when a step is missing. */
export function fieldAt(msg: unknown, path: string): unknown {
  let v: unknown = msg;
  for (const step of path.split('.')) {
    if (typeof v !== 'object' || v === null || ArrayBuffer.isView(v)) return undefined;
    v = (v as Record<string, unknown>)[step];
  }
  return v;
}

/**
 * A field's numbers: an array of numbers, a typed array (CDR's `float64[]` is a `Float64Array`,
 * 64-bit integers come as bigints) or one number (a scalar field like `twist.linear.x` is one value).
 */
function numbersOf(msg: unknown, field: string, topic: string, label: string): ArrayLike<number> {
  const v = fieldAt(msg, field);
  if (typeof v === 'number') return [v];
  if (typeof v === 'bigint') return [Number(v)];
  if (v instanceof BigInt64Array || v instanceof BigUint64Array) return Array.from(v, Number);
  if (ArrayBuffer.isView(v) && !(v instanceof DataView)) return v as unknown as ArrayLike<number>;
  if (Array.isArray(v) && v.every((x) => typeof x === 'number')) return v;
  throw new SourceError('mapping_invalid', `field ${field} of ${topic} is not a number or an array of numbers (${label})`);
}

function stringsOf(msg: unknown, field: string, topic: string, what: string): string[] {
  const names = fieldAt(msg, field);
  if (!Array.isArray(names) || !names.every((n) => typeof n === 'string')) {
    throw new SourceError('mapping_invalid', `field ${field} of ${topic} is not an array of strings (${what})`);
  }
  return names;
}

/**
 * With `joints`, the index of each chosen joint in this message's `names_from` (joints are chosen
 * and ordered by name: a driver may publish them in any order, and more of them). A chosen joint
 * the first message lacks is `mapping_invalid`; one a later message lacks, `shape_changed`.
 */
function jointIndexes(msg: unknown, plan: VectorPlan, first: boolean, atNs: bigint): number[] | undefined {
  if (plan.joints === undefined) return undefined;
  const field = plan.namesFrom ?? 'name';
  const names = stringsOf(msg, field, plan.topic, `the joints of ${featureLabel(plan)}`);
  return plan.joints.map((j) => {
    const i = names.indexOf(j);
    if (i < 0) {
      const what = `joint ${j} is not in field ${field} of ${plan.topic} (${featureLabel(plan)}; it has ${names.join(', ') || 'none'})`;
      throw first ? new SourceError('mapping_invalid', what) : new SourceError('shape_changed', `${what} at ${atNs} ns`);
    }
    return i;
  });
}

function namesOf(first: unknown, plan: VectorPlan, dims: number[]): string[] {
  const dim = dims.reduce((a, b) => a + b, 0);
  if (plan.names !== undefined) {
    if (plan.names.length !== dim) throw new SourceError('mapping_invalid', `${featureLabel(plan)} has ${plan.names.length} names for ${dim} values (fields ${plan.fields.join(', ')} of ${plan.topic})`);
    return plan.names;
  }
  const out: string[] = [];
  const listed = plan.joints ?? (plan.namesFrom !== undefined ? stringsOf(first, plan.namesFrom, plan.topic, `names_from of ${featureLabel(plan)}`) : undefined);
  if (listed !== undefined) {
    plan.fields.forEach((field, fi) => {
      if (listed.length !== dims[fi]) throw new SourceError('mapping_invalid', `field ${plan.namesFrom ?? 'name'} of ${plan.topic} has ${listed.length} names, field ${field} ${dims[fi]} values (${featureLabel(plan)})`);
      for (const n of listed) out.push(plan.fields.length === 1 ? n : `${n}.${field}`);
    });
    return out;
  }
  plan.fields.forEach((field, fi) => {
    if (dims[fi] === 1 && !Array.isArray(fieldAt(first, field)) && !ArrayBuffer.isView(fieldAt(first, field))) out.push(field);
    else for (let i = 0; i < dims[fi]!; i++) out.push(`${field}.${i}`);
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
  const out = plans.map((p) => ({ plan: p, dims: [] as number[], samples: { key: p.key, topic: p.topic, label: featureLabel(p), dim: 0, names: [] as string[], timesNs: [] as bigint[], values: [] as number[] } }));
  let lastNs: bigint | undefined;
  for await (const m of messages) {
    if (typeof m.data !== 'object' || m.data === null) throw new SourceError('mapping_invalid', `a message of ${m.topic} is not an object`);
    const t = m.timeNs ?? m.logTimeNs;
    if (lastNs !== undefined && t < lastNs) throw new SourceError('corrupt_recording', `the stamps of ${m.topic} go backwards: ${t} ns after ${lastNs} ns (log time ${m.logTimeNs} ns)`);
    // Two messages at the same time: the later one wins, so "latest at or before t" is one value.
    const replace = lastNs === t;
    lastNs = t;
    for (const o of out) {
      const first = o.samples.timesNs.length === 0 && !replace;
      const picks = jointIndexes(m.data, o.plan, first, t);
      const arrays = o.plan.fields.map((f) => {
        const a = numbersOf(m.data, f, o.plan.topic, featureLabel(o.plan));
        if (picks === undefined) return a;
        return picks.map((i) => {
          if (i >= a.length) throw new SourceError(first ? 'mapping_invalid' : 'shape_changed', `field ${f} of ${o.plan.topic} has ${a.length} values, fewer than its names (${featureLabel(o.plan)}, at ${t} ns)`);
          return a[i]!;
        });
      });
      if (first) {
        o.dims = arrays.map((a) => a.length);
        o.samples.dim = o.dims.reduce((a, b) => a + b, 0);
        o.samples.names = namesOf(m.data, o.plan, o.dims);
      } else {
        arrays.forEach((a, i) => {
          if (a.length !== o.dims[i]) {
            throw new SourceError('shape_changed', `field ${o.plan.fields[i]} of ${o.plan.topic} had ${o.dims[i]} values, then ${a.length} at ${t} ns (${featureLabel(o.plan)})`);
          }
        });
      }
      if (replace) o.samples.values.length -= o.samples.dim;
      else o.samples.timesNs.push(t);
      for (const a of arrays) for (let i = 0; i < a.length; i++) o.samples.values.push(a[i]!);
    }
  }
  return out.map((o) => o.samples);
}

export interface ResampleOptions {
  /**
   * 1 reads frame i at frame i+1's time (an action that is the next state). The last frame has
   * no next one: it is read at its own time, so its action equals its state. Reading past the
   * grid's end instead would take a sample from after the episode (another stream ended it) that
   * no frame's state shows.
   */
  offsetFrames?: 0 | 1;
  /** The staleness tolerance (ns): past it, `stale_stream`. Undefined: no limit. */
  maxStalenessNs?: bigint | undefined;
}

/**
 * The feature on the grid, read at each frame time t by `rule`:
 * - `hold`: the latest sample at or before t. Its age `t - t_sample` is the gap.
 * - `nearest`: the sample nearest to t (a tie goes to the earlier one, as cameras). The gap is
 *   the distance to it.
 * - `linear`: interpolated between the samples at or before and after t; the gap is the distance
 *   to the farther of the two. At a sample's own time, or past the last sample, that one sample
 *   (clamped), and the gap is the distance to it.
 * Before the first sample (only when the grid starts earlier, which `makeGrid` does not do) every
 * rule takes the first, at its distance. A gap over `maxStalenessNs` is `stale_stream`.
 */
export function resampleVector(samples: VectorSamples, grid: Grid, rule: StateRule, opts: ResampleOptions = {}): Float32Array {
  const { dim, timesNs, values } = samples;
  const offset = opts.offsetFrames ?? 0;
  const max = opts.maxStalenessNs;
  const out = new Float32Array(grid.length * dim);
  if (timesNs.length === 0) throw new SourceError('too_short', `${samples.label} has no sample`);
  const what = rule === 'hold' ? 'its latest sample' : rule === 'nearest' ? 'its nearest sample' : 'a sample it interpolates';
  let j = 0; // the latest sample at or before t (or 0 before the first)
  for (let i = 0; i < grid.length; i++) {
    const readAt = Math.min(i + offset, grid.length - 1);
    const t = gridTimeNs(grid, readAt);
    while (j + 1 < timesNs.length && timesNs[j + 1]! <= t) j++;
    const t0 = timesNs[j]!;
    const t1 = j + 1 < timesNs.length ? timesNs[j + 1]! : undefined;
    let from = j;
    let frac = 0;
    let gap: bigint;
    if (t < t0) gap = t0 - t;
    else if (rule === 'nearest' && t1 !== undefined && t1 - t < t - t0) {
      from = j + 1;
      gap = t1 - t;
    } else if (rule === 'linear' && t > t0 && t1 !== undefined) {
      frac = Number(t - t0) / Number(t1 - t0);
      gap = t - t0 > t1 - t ? t - t0 : t1 - t;
    } else gap = t - t0;
    if (max !== undefined && gap > max) throw staleError(samples.label, samples.topic, what, grid, i, readAt, gap, max);
    if (frac === 0) {
      for (let d = 0; d < dim; d++) out[i * dim + d] = values[from * dim + d]!;
    } else {
      for (let d = 0; d < dim; d++) {
        const a = values[j * dim + d]!;
        const b = values[(j + 1) * dim + d]!;
        out[i * dim + d] = a + (b - a) * frac;
      }
    }
  }
  return out;
}

/**
 * A joined feature on the grid: its parts (each resampled on its own, `dims[p]` values a frame)
 * concatenated frame by frame, in the parts' order.
 */
export function concatFrames(parts: readonly Float32Array[], dims: readonly number[], length: number): Float32Array {
  const dim = dims.reduce((a, b) => a + b, 0);
  const out = new Float32Array(length * dim);
  let at = 0;
  parts.forEach((p, k) => {
    const d = dims[k]!;
    if (p.length !== length * d) throw new Error(`part ${k}: ${p.length} values for ${length} frames of ${d}`);
    for (let i = 0; i < length; i++) out.set(p.subarray(i * d, (i + 1) * d), i * dim + at);
    at += d;
  });
  return out;
}

export interface RgbFrame {
  width: number;
  height: number;
  /** `width * height * 3` bytes, row-major RGB, no row padding. */
  pixels: Uint8Array;
}

/**
 * A raw camera message (`sensor_msgs/msg/Image`, `foxglove.RawImage`; see @fleet/recordings'
 * `cameraImage` for the encodings) to packed RGB. A compressed one is `bad_image` here: it needs
 * `decodeFrame`.
 */
export function decodeRawImage(data: unknown, where: string, schemaName = 'foxglove.RawImage'): RgbFrame {
  const im = imageOf(schemaName, data, where);
  if (im.kind !== 'raw') throw new SourceError('bad_image', `${where}: a ${im.format} image, not a raw one`);
  return { width: im.width, height: im.height, pixels: im.rgb };
}

function imageOf(schemaName: string, data: unknown, where: string): CameraImage {
  try {
    return cameraImage(schemaName, data, where);
  } catch (err) {
    if (isRecordingError(err)) throw new SourceError('bad_image', err.message.replace(/^bad_image: /, ''), { cause: err });
    throw err;
  }
}

// Frames are decoded once each: libvips' operation cache would only hold memory.
sharp.cache(false);

/**
 * Any camera message to packed RGB: raw images as `decodeRawImage`; JPEG and PNG decoded once by
 * libjpeg-turbo / libpng through sharp (the pixels then go to the video encoder: one lossy step,
 * the camera's own, plus the video's). Grey and alpha images come out as three channels.
 */
export async function decodeFrame(schemaName: string, data: unknown, where: string): Promise<RgbFrame> {
  const im = imageOf(schemaName, data, where);
  if (im.kind === 'raw') return { width: im.width, height: im.height, pixels: im.rgb };
  try {
    const { data: pixels, info } = await sharp(im.data, { failOn: 'error' }).removeAlpha().toColourspace('srgb').raw().toBuffer({ resolveWithObject: true });
    if (info.channels !== 3) throw new Error(`${info.channels} channels after conversion to RGB`);
    return { width: info.width, height: info.height, pixels: new Uint8Array(pixels.buffer, pixels.byteOffset, pixels.byteLength) };
  } catch (err) {
    throw new SourceError('bad_image', `${where}: the ${im.format} data does not decode (${err instanceof Error ? err.message : String(err)})`, { cause: err });
  }
}

/** A camera message's size without decoding its pixels (a compressed image's header is read). */
export async function frameSize(schemaName: string, data: unknown, where: string): Promise<{ width: number; height: number }> {
  const im = imageOf(schemaName, data, where);
  if (im.kind === 'raw') return { width: im.width, height: im.height };
  try {
    const meta = await sharp(im.data).metadata();
    if (!meta.width || !meta.height) throw new Error('no size in its header');
    return { width: meta.width, height: meta.height };
  } catch (err) {
    throw new SourceError('bad_image', `${where}: the ${im.format} data does not decode (${err instanceof Error ? err.message : String(err)})`, { cause: err });
  }
}

/**
 * A camera on the grid: for each frame time, the image nearest in time (a tie goes to the
 * earlier one), decoded. Reads the topic's messages as a stream in time order and decodes only
 * the images it yields (the same image twice in a row is decoded once), so one frame at a time is
 * in memory. A frame of another size than `size` is `shape_changed`; an image farther than
 * `maxStalenessNs` from its frame time is `stale_stream`, found as the frames are read (the
 * episode is skipped all the same: the export stages it whole or not at all).
 */
export async function* nearestFrames(
  messages: AsyncIterable<RecordingMessage>,
  grid: Grid,
  size: { width: number; height: number },
  topic: string,
  schemaName = 'foxglove.RawImage',
  opts: { key?: string; maxStalenessNs?: bigint | undefined } = {},
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
      while (peek !== undefined && (timeOf(peek) <= t || timeOf(peek) - t < t - timeOf(cur))) {
        if (timeOf(peek) < timeOf(cur)) throw new SourceError('corrupt_recording', `the stamps of ${topic} go backwards: ${timeOf(peek)} ns after ${timeOf(cur)} ns (log time ${peek.logTimeNs} ns)`);
        cur = peek;
        peek = await nextOf(it);
      }
      const gap = timeOf(cur) > t ? timeOf(cur) - t : t - timeOf(cur);
      if (opts.maxStalenessNs !== undefined && gap > opts.maxStalenessNs) throw staleError(`feature ${opts.key ?? topic}`, topic, 'its nearest image', grid, i, i, gap, opts.maxStalenessNs);
      if (decoded?.msg !== cur) {
        const frame = await decodeFrame(schemaName, cur.data, `${topic} at ${cur.logTimeNs} ns`);
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

const timeOf = (m: RecordingMessage): bigint => m.timeNs ?? m.logTimeNs;

async function nextOf(it: AsyncIterator<RecordingMessage>): Promise<RecordingMessage | undefined> {
  const r = await it.next();
  return r.done === true ? undefined : r.value;
}
