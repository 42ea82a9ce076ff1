import { cameraImage, isImageSchema, isRecordingError, type CameraImage, type DecodedMessage } from '@fleet/recordings';
import type { RecordingSet } from './recording-set.js';
import { ColumnsBuilder, JOINT_STATE, MAX_SERIES_PER_TOPIC, numericLeaves, seriesId, type SampleColumns, type SeriesDef } from './series.js';

/**
 * The playback engine: a playhead over an episode's recording (log time, ns), the camera frames
 * and numeric values at it, and the plot window around it. DOM-free (the view draws), with an
 * injected clock.
 *
 * - Paused or after a seek: each camera's frame is the latest message with log time <= playhead
 *   (a reverse read from the playhead, which touches the one chunk that holds it), and so is each
 *   plotted series' readout value.
 * - Playing: one forward message iterator from the playhead over the shown topics keeps about
 *   1.5 s (and at most 24 MiB of messages) ahead of the playhead; each animation frame moves the
 *   playhead by the wall time passed times the speed and applies the messages it passed. When the
 *   iterator falls behind (a slow network) the playhead waits ("buffering") instead of skipping.
 *   A seek cancels the iterator and starts a new one from the new time.
 * - Plots: the plotted numbers (not the messages: typed arrays, 8 bytes a sample) of the plotted
 *   topics inside a window of 10 s around the playhead. When the playhead nears the window's
 *   edge the next window keeps what it shares with this one and reads only the rest; a window
 *   being read for a place the playhead left (a seek) stops at its next message.
 *
 * Nothing grows with the file: the byte source's LRU bounds what is fetched and kept, the queue
 * is bounded, frames and readouts hold one message per topic (a frame's image bytes copied out
 * of its chunk, so a shown frame does not keep a decompressed chunk alive), the window a
 * bounded count of numbers.
 */

export interface EngineClock {
  /** Milliseconds, monotonic. */
  now(): number;
  frame(cb: () => void): number;
  cancel(handle: number): void;
}

export const BROWSER_CLOCK: EngineClock = {
  now: () => performance.now(),
  frame: (cb) => requestAnimationFrame(cb),
  cancel: (h) => cancelAnimationFrame(h),
};

const AHEAD_NS = 1_500_000_000n;
const MAX_QUEUE_BYTES = 24 * 1024 * 1024;
const MAX_QUEUE_MESSAGES = 4000;
export const WINDOW_NS = 10_000_000_000n;
/** Messages read into one plot window at most (a 1 kHz topic over 10 s is 10,000). */
export const MAX_WINDOW_MESSAGES = 30_000;
export const SPEEDS = [0.25, 0.5, 1, 1.5, 2, 4] as const;
const MAX_DEFAULT_SERIES = 8;
const MAX_DEFAULT_CAMERAS = 4;

export interface CameraTopic {
  topic: string;
  schemaName: string;
}

export interface NumericTopic {
  topic: string;
  schemaName: string;
  keys: readonly string[];
}

export interface CameraFrame {
  topic: string;
  logTimeNs: bigint;
  image?: CameraImage;
  /** Why this frame cannot be drawn (an encoding the player does not draw names it). */
  error?: string;
}

export interface ReadoutValue {
  value: number;
  logTimeNs: bigint;
}

/** A plotted topic's samples in the window: times (s from the recording's start) and values, NaN for a missing leaf. */
export type WindowTopic = SampleColumns;

export interface PlotWindow {
  fromNs: bigint;
  toNs: bigint;
  topics: Map<string, WindowTopic>;
  /** The window held more than MAX_WINDOW_MESSAGES: its end is not drawn. */
  capped: boolean;
}

export interface EngineSnapshot {
  playheadNs: bigint;
  playing: boolean;
  buffering: boolean;
  speed: number;
  frames: ReadonlyMap<string, CameraFrame>;
  readout: ReadonlyMap<string, ReadoutValue>;
  window: PlotWindow | undefined;
  /** A read failed after the start (the bucket went away, a link could not be renewed). */
  error: unknown;
  /** Topics that could not be read for plotting (a schema that does not parse), with why. */
  topicErrors: ReadonlyMap<string, string>;
}

const clampNs = (t: bigint, lo: bigint, hi: bigint) => (t < lo ? lo : t > hi ? hi : t);

/** `v` itself when it spans its whole buffer, else a copy of its bytes. */
const own = (v: Uint8Array): Uint8Array => (v.byteOffset === 0 && v.byteLength === v.buffer.byteLength ? v : v.slice());

/**
 * The image with bytes of its own: a decoded message's bytes are a view into its whole
 * decompressed chunk (hundreds of KiB to MBs), which a shown frame would otherwise keep alive.
 */
function ownBytes(image: CameraImage): CameraImage {
  return image.kind === 'raw' ? { ...image, rgb: own(image.rgb) } : { ...image, data: own(image.data) };
}

/** A plot window being read; `stale` once the playhead left it (or the selection changed): the read stops. */
interface WindowRead {
  fromNs: bigint;
  toNs: bigint;
  stale: boolean;
}

export class PlaybackEngine {
  readonly cameras: readonly CameraTopic[];
  numeric: readonly NumericTopic[] = [];
  readonly startNs: bigint;
  readonly endNs: bigint;
  selectedCameras: ReadonlySet<string>;
  selectedSeries: ReadonlySet<string> = new Set();

  private playhead: bigint;
  private playing = false;
  private buffering = false;
  private speed = 1;
  private frames = new Map<string, CameraFrame>();
  private readout = new Map<string, ReadoutValue>();
  private window: PlotWindow | undefined;
  private error: unknown = undefined;
  private topicErrors = new Map<string, string>();
  private readonly listeners = new Set<(s: EngineSnapshot) => void>();
  private closed = false;

  // The seek in progress and the next one wanted (rapid seeks coalesce to the last).
  private gen = 0;
  private seekWanted: bigint | undefined;
  private seeking = false;
  // The forward iterator while playing.
  private queue: DecodedMessage[] = [];
  private queueBytes = 0;
  private pumpDone = true;
  private pump: AsyncGenerator<DecodedMessage, void, void> | undefined;
  private drained: (() => void) | undefined;
  private frameHandle: number | undefined;
  private lastWall = 0;
  // The plot window being read, and the next one wanted.
  private windowWanted: bigint | undefined;
  private windowLoading = false;
  private windowRead: WindowRead | undefined;

  constructor(
    readonly set: RecordingSet,
    private readonly clock: EngineClock = BROWSER_CLOCK,
  ) {
    this.cameras = set.channels.filter((c) => isImageSchema(c.schemaName)).map((c) => ({ topic: c.topic, schemaName: c.schemaName }));
    this.selectedCameras = new Set(this.cameras.slice(0, MAX_DEFAULT_CAMERAS).map((c) => c.topic));
    this.startNs = set.startNs;
    this.endNs = set.endNs;
    this.playhead = set.startNs;
  }

  /**
   * Learns each non-camera topic's numeric series from its first message, picks the default
   * plots (a JointState's positions, else the first topic's first leaves), and shows the first
   * frame: the playhead starts at the main camera's first message.
   */
  async start(): Promise<void> {
    const numeric: NumericTopic[] = [];
    const others = this.set.channels.filter((c) => !isImageSchema(c.schemaName));
    const seen = new Set<string>();
    await Promise.all(
      others.map(async (c) => {
        if (seen.has(c.topic)) return;
        seen.add(c.topic);
        try {
          const m = await this.set.first([c.topic]);
          if (m === undefined) return;
          const keys = [...numericLeaves(m.data, c.schemaName, MAX_SERIES_PER_TOPIC).keys()];
          if (keys.length > 0) numeric.push({ topic: c.topic, schemaName: c.schemaName, keys });
        } catch (err) {
          // A topic whose schema does not parse is not plotted; the others are.
          if (!isRecordingError(err) || err.code === 'unreadable') throw err;
          this.topicErrors.set(c.topic, err.message);
        }
      }),
    );
    numeric.sort((a, b) => a.topic.localeCompare(b.topic));
    this.numeric = numeric;
    // The measured joints (`/joint_states`, joint_state_broadcaster's topic) before commanded ones.
    const jointTopics = numeric.filter((n) => n.schemaName === JOINT_STATE);
    const joints = jointTopics.find((n) => /(^|\/)joint_states$/.test(n.topic)) ?? jointTopics[0];
    const defaults = joints ? joints.keys.filter((k) => k.startsWith('position.')).map((k) => seriesId(joints.topic, k)) : numeric.flatMap((n) => n.keys.map((k) => seriesId(n.topic, k)));
    this.selectedSeries = new Set(defaults.slice(0, MAX_DEFAULT_SERIES));
    const main = this.mainTopic();
    const first = main ? await this.set.first([main]) : undefined;
    this.seek(first?.logTimeNs ?? this.startNs);
  }

  /** The series the numeric topics offer, for the topic picker. */
  seriesDefs(): SeriesDef[] {
    return this.numeric.flatMap((n) => n.keys.map((key) => ({ id: seriesId(n.topic, key), topic: n.topic, key })));
  }

  subscribe(listener: (s: EngineSnapshot) => void): () => void {
    this.listeners.add(listener);
    listener(this.snapshot());
    return () => this.listeners.delete(listener);
  }

  snapshot(): EngineSnapshot {
    return {
      playheadNs: this.playhead,
      playing: this.playing,
      buffering: this.buffering,
      speed: this.speed,
      frames: this.frames,
      readout: this.readout,
      window: this.window,
      error: this.error,
      topicErrors: this.topicErrors,
    };
  }

  private emit(): void {
    if (this.closed) return;
    const s = this.snapshot();
    for (const l of this.listeners) l(s);
  }

  get playheadNs(): bigint {
    return this.playhead;
  }

  get isPlaying(): boolean {
    return this.playing;
  }

  /** The camera frame steps follow: the first shown camera, else the first plotted topic. */
  mainTopic(): string | undefined {
    return [...this.selectedCameras][0] ?? this.cameras[0]?.topic ?? this.readoutTopics()[0];
  }

  private readoutTopics(): string[] {
    return this.numeric.filter((n) => n.keys.some((k) => this.selectedSeries.has(seriesId(n.topic, k)))).map((n) => n.topic);
  }

  setSelection(cameras: Iterable<string>, series: Iterable<string>): void {
    this.selectedCameras = new Set(cameras);
    this.selectedSeries = new Set(series);
    for (const t of [...this.frames.keys()]) if (!this.selectedCameras.has(t)) this.frames.delete(t);
    this.frames = new Map(this.frames);
    this.window = undefined;
    // A window being read for the old selection is of no use.
    if (this.windowRead) this.windowRead.stale = true;
    this.seek(this.playhead);
  }

  setSpeed(speed: number): void {
    this.speed = Math.min(4, Math.max(0.25, speed));
    this.emit();
  }

  /** One step up or down the SPEEDS ladder (`[` and `]`). */
  stepSpeed(dir: 1 | -1): void {
    const i = SPEEDS.findIndex((s) => s >= this.speed);
    const next = SPEEDS[Math.min(SPEEDS.length - 1, Math.max(0, (i < 0 ? SPEEDS.length - 1 : i) + dir))]!;
    this.setSpeed(next);
  }

  play(): void {
    if (this.playing || this.closed) return;
    if (this.playhead >= this.endNs) this.seek(this.startNs);
    this.playing = true;
    this.error = undefined;
    this.startPump(this.playhead + 1n);
    this.lastWall = this.clock.now();
    this.frameHandle = this.clock.frame(this.tick);
    this.emit();
  }

  pause(): void {
    if (!this.playing) return;
    this.playing = false;
    this.buffering = false;
    this.stopPump();
    if (this.frameHandle !== undefined) this.clock.cancel(this.frameHandle);
    this.frameHandle = undefined;
    this.emit();
  }

  toggle(): void {
    if (this.playing) this.pause();
    else this.play();
  }

  /** Moves the playhead; frames and readouts follow with a reverse read, then playback resumes from there. */
  seek(ns: bigint): void {
    if (this.closed) return;
    this.playhead = clampNs(ns, this.startNs, this.endNs);
    this.gen++;
    if (this.playing) {
      this.stopPump();
      this.startPump(this.playhead + 1n);
      this.lastWall = this.clock.now();
    }
    this.seekWanted = this.playhead;
    // A plot window being read elsewhere stops now, not after the frames at the new time.
    const reading = this.windowRead;
    if (reading && (this.playhead < reading.fromNs || this.playhead > reading.toNs)) reading.stale = true;
    this.emit();
    void this.runSeeks();
  }

  seekBy(deltaNs: bigint): void {
    this.seek(this.playhead + deltaNs);
  }

  /** The next (dir 1) or previous (-1) message of the main camera; pauses. */
  async step(dir: 1 | -1): Promise<void> {
    this.pause();
    const main = this.mainTopic();
    if (main === undefined) return;
    const shown = this.frames.get(main)?.logTimeNs ?? this.readout.values().next().value?.logTimeNs;
    try {
      const m =
        dir > 0
          ? await this.set.first([main], { startNs: this.playhead + 1n })
          : await this.set.first([main], { endNs: (shown !== undefined && shown <= this.playhead ? shown : this.playhead) - 1n, reverse: true });
      if (m) this.seek(m.logTimeNs);
    } catch (err) {
      this.fail(err);
    }
  }

  private fail(err: unknown): void {
    if (this.closed) return;
    this.error = err;
    this.pause();
    this.emit();
  }

  private async runSeeks(): Promise<void> {
    if (this.seeking) return;
    this.seeking = true;
    try {
      while (this.seekWanted !== undefined && !this.closed) {
        const t = this.seekWanted;
        this.seekWanted = undefined;
        await this.refreshAt(t);
      }
    } finally {
      this.seeking = false;
    }
  }

  /** Frames and readouts at `t` by reverse reads; then the plot window. */
  private async refreshAt(t: bigint): Promise<void> {
    const gen = this.gen;
    try {
      const cams = [...this.selectedCameras];
      const topics = this.readoutTopics();
      const [frames, values] = await Promise.all([
        Promise.all(cams.map((topic) => this.set.first([topic], { endNs: t, reverse: true }))),
        Promise.all(topics.map((topic) => this.set.first([topic], { endNs: t, reverse: true }))),
      ]);
      if (gen !== this.gen || this.closed) return;
      const nextFrames = new Map<string, CameraFrame>();
      cams.forEach((topic, i) => {
        const m = frames[i];
        if (m) nextFrames.set(topic, this.toFrame(m));
      });
      this.frames = nextFrames;
      this.readout = new Map();
      values.forEach((m) => m && this.applyNumeric(m));
      this.emit();
    } catch (err) {
      if (gen === this.gen) this.fail(err);
      return;
    }
    this.wantWindow(t);
  }

  private toFrame(m: DecodedMessage): CameraFrame {
    const schema = this.cameras.find((c) => c.topic === m.topic)?.schemaName ?? '';
    try {
      return { topic: m.topic, logTimeNs: m.logTimeNs, image: ownBytes(cameraImage(schema, m.data, `${m.topic} at ${m.logTimeNs} ns`)) };
    } catch (err) {
      const message = err instanceof Error ? err.message.replace(/^[a-z_]+: /, '').replace(/^.* ns: /, '') : String(err);
      return { topic: m.topic, logTimeNs: m.logTimeNs, error: message };
    }
  }

  private applyNumeric(m: DecodedMessage): void {
    const n = this.numeric.find((x) => x.topic === m.topic);
    if (!n) return;
    const leaves = numericLeaves(m.data, n.schemaName);
    for (const [k, v] of leaves) {
      const id = seriesId(m.topic, k);
      if (this.selectedSeries.has(id)) this.readout.set(id, { value: v, logTimeNs: m.logTimeNs });
    }
  }

  // ---- playing --------------------------------------------------------------------------------

  private startPump(fromNs: bigint): void {
    const gen = this.gen;
    const topics = [...new Set([...this.selectedCameras, ...this.readoutTopics()])];
    this.queue = [];
    this.queueBytes = 0;
    this.pumpDone = topics.length === 0 || fromNs > this.endNs;
    if (this.pumpDone) return;
    const it = this.set.messages(topics, { startNs: fromNs });
    this.pump = it;
    const run = async () => {
      try {
        for (;;) {
          const r = await it.next();
          if (gen !== this.gen || !this.playing) return;
          if (r.done === true) break;
          this.queue.push(r.value);
          this.queueBytes += r.value.sizeBytes;
          while (gen === this.gen && this.playing && this.queue.length > 0 && (this.queue[this.queue.length - 1]!.logTimeNs - this.playhead > AHEAD_NS || this.queueBytes > MAX_QUEUE_BYTES || this.queue.length > MAX_QUEUE_MESSAGES)) {
            await new Promise<void>((resolve) => (this.drained = resolve));
          }
        }
        if (gen === this.gen) this.pumpDone = true;
      } catch (err) {
        if (gen === this.gen) this.fail(err);
      }
    };
    void run();
  }

  private stopPump(): void {
    const it = this.pump;
    this.pump = undefined;
    this.queue = [];
    this.queueBytes = 0;
    this.pumpDone = true;
    this.drained?.();
    this.drained = undefined;
    // Ends the reader's iteration (it releases its chunk) once its pending read settles.
    if (it) void it.return().catch(() => undefined);
  }

  private tick = (): void => {
    this.frameHandle = undefined;
    if (!this.playing || this.closed) return;
    const wall = this.clock.now();
    const dt = Math.max(0, wall - this.lastWall);
    this.lastWall = wall;
    let target = this.playhead + BigInt(Math.round(dt * this.speed * 1e6));
    let buffering = false;
    if (!this.pumpDone) {
      const known = this.queue.at(-1)?.logTimeNs;
      if (known === undefined || target > known) {
        // Everything up to `known` is here; past it the iterator has not read yet.
        target = known === undefined ? this.playhead : known > this.playhead ? known : this.playhead;
        buffering = true;
      }
    }
    const ended = target >= this.endNs && (this.pumpDone || this.queue.length === 0 || this.queue.at(-1)!.logTimeNs >= this.endNs);
    if (target > this.endNs) target = this.endNs;
    let n = 0;
    const latest = new Map<string, DecodedMessage>();
    while (n < this.queue.length && this.queue[n]!.logTimeNs <= target) {
      const m = this.queue[n]!;
      this.queueBytes -= m.sizeBytes;
      if (this.selectedCameras.has(m.topic)) latest.set(m.topic, m);
      else this.applyNumeric(m);
      n++;
    }
    if (n > 0) {
      this.queue.splice(0, n);
      this.readout = new Map(this.readout);
    }
    if (latest.size > 0) {
      const frames = new Map(this.frames);
      for (const m of latest.values()) frames.set(m.topic, this.toFrame(m));
      this.frames = frames;
    }
    this.playhead = target;
    this.buffering = buffering;
    this.drained?.();
    this.drained = undefined;
    this.wantWindow(target);
    if (ended) {
      this.pause();
      return;
    }
    this.emit();
    this.frameHandle = this.clock.frame(this.tick);
  };

  // ---- plot window ----------------------------------------------------------------------------

  /**
   * Reads a new window when `t` is outside the middle of the current one. A window being read
   * that does not hold `t` (a seek elsewhere) is given up at its next message: its bytes are not
   * fetched for nothing.
   */
  private wantWindow(t: bigint): void {
    if (this.readoutTopics().length === 0) return;
    const reading = this.windowRead;
    if (reading && (t < reading.fromNs || t > reading.toNs)) reading.stale = true;
    if (this.window && this.windowFits(this.window, t)) return;
    this.windowWanted = t;
    void this.runWindows();
  }

  /** `t` is inside `w` with room on both sides (or the side where the recording ends). */
  private windowFits(w: PlotWindow, t: bigint): boolean {
    if (t < w.fromNs || t > w.toNs) return false;
    const width = w.toNs - w.fromNs;
    const roomAfter = w.toNs >= this.endNs || t <= w.toNs - width / 4n;
    const roomBefore = w.fromNs <= this.startNs || t >= w.fromNs + width / 6n;
    return roomAfter && roomBefore;
  }

  private async runWindows(): Promise<void> {
    if (this.windowLoading) return;
    this.windowLoading = true;
    try {
      while (this.windowWanted !== undefined && !this.closed) {
        const t = this.windowWanted;
        this.windowWanted = undefined;
        if (this.window && this.windowFits(this.window, t)) continue;
        await this.loadWindow(t);
      }
    } finally {
      this.windowLoading = false;
      this.windowRead = undefined;
    }
  }

  /** The window placed around `t`: a third before, two thirds after, inside the recording. */
  private windowAround(t: bigint): { from: bigint; to: bigint } {
    const width = WINDOW_NS;
    let from = t - width / 3n;
    let to = from + width;
    if (from < this.startNs) {
      from = this.startNs;
      to = from + width;
    }
    if (to > this.endNs) {
      to = this.endNs;
      from = to - width < this.startNs ? this.startNs : to - width;
    }
    return { from, to };
  }

  private seconds(ns: bigint): number {
    return Number(ns - this.startNs) / 1e9;
  }

  /**
   * The window around `t`. What the current window already holds of it is kept (its numbers),
   * and only the rest is read: playing on reads the few seconds the window moves ahead, not all
   * ten again. A window that was capped, or an extension that would exceed the cap, is read whole.
   */
  private async loadWindow(t: bigint): Promise<void> {
    const { from, to } = this.windowAround(t);
    const topics = this.readoutTopics();
    const keysOf = new Map(topics.map((topic) => [topic, this.numeric.find((n) => n.topic === topic)!.keys.filter((k) => this.selectedSeries.has(seriesId(topic, k)))]));
    const read: WindowRead = { fromNs: from, toNs: to, stale: false };
    this.windowRead = read;
    const old = this.window;
    const sameSeries = old !== undefined && old.topics.size === keysOf.size && [...keysOf].every(([topic, keys]) => {
      const have = old.topics.get(topic);
      return have !== undefined && have.values.size === keys.length && keys.every((k) => have.values.has(k));
    });
    const keep = old !== undefined && sameSeries && !old.capped && old.fromNs <= to && from <= old.toNs ? old : undefined;
    try {
      let out: Map<string, WindowTopic> | undefined;
      let capped = false;
      if (keep) {
        const before = from < keep.fromNs ? await this.readSamples(topics, keysOf, from, keep.fromNs - 1n, read) : this.noSamples(keysOf);
        if (before === undefined) return;
        const after = to > keep.toNs ? await this.readSamples(topics, keysOf, keep.toNs + 1n, to, read) : this.noSamples(keysOf);
        if (after === undefined) return;
        const [loS, hiS] = [this.seconds(from), this.seconds(to)];
        const merged = new Map<string, WindowTopic>();
        let total = 0;
        for (const [topic, keys] of keysOf) {
          const b = new ColumnsBuilder(keys);
          b.pushAll(before.topics.get(topic)!);
          b.pushRange(keep.topics.get(topic)!, loS, hiS);
          b.pushAll(after.topics.get(topic)!);
          total += b.length;
          merged.set(topic, b.done());
        }
        if (!before.capped && !after.capped && total <= MAX_WINDOW_MESSAGES) out = merged;
      }
      if (out === undefined) {
        const whole = await this.readSamples(topics, keysOf, from, to, read);
        if (whole === undefined) return;
        out = new Map([...whole.topics].map(([topic, b]) => [topic, b.done()]));
        capped = whole.capped;
      }
      if (this.closed || read.stale) return;
      this.window = { fromNs: from, toNs: to, topics: out, capped };
      this.emit();
    } catch (err) {
      this.fail(err);
    }
  }

  private noSamples(keysOf: ReadonlyMap<string, readonly string[]>): { topics: Map<string, ColumnsBuilder>; capped: boolean } {
    return { topics: new Map([...keysOf].map(([topic, keys]) => [topic, new ColumnsBuilder(keys)])), capped: false };
  }

  /**
   * The plotted numbers of `topics` with log time in [from, to], at most MAX_WINDOW_MESSAGES
   * messages (`capped` past that); each message is dropped once its numbers are taken. Undefined
   * when the read was given up (`read.stale`, or the engine closed).
   */
  private async readSamples(
    topics: readonly string[],
    keysOf: ReadonlyMap<string, readonly string[]>,
    from: bigint,
    to: bigint,
    read: WindowRead,
  ): Promise<{ topics: Map<string, ColumnsBuilder>; capped: boolean } | undefined> {
    const out = this.noSamples(keysOf);
    let count = 0;
    const it = this.set.messages(topics, { startNs: from, endNs: to });
    try {
      for (;;) {
        if (read.stale || this.closed) return undefined;
        const r = await it.next();
        if (r.done === true) break;
        if (read.stale || this.closed) return undefined;
        const m = r.value;
        if (++count > MAX_WINDOW_MESSAGES) {
          out.capped = true;
          break;
        }
        const b = out.topics.get(m.topic);
        const n = this.numeric.find((x) => x.topic === m.topic);
        if (!b || !n) continue;
        b.push(this.seconds(m.logTimeNs), numericLeaves(m.data, n.schemaName));
      }
    } finally {
      await it.return();
    }
    return out;
  }

  async close(): Promise<void> {
    this.pause();
    this.closed = true;
    this.gen++;
    this.listeners.clear();
    await this.set.close();
  }
}
