import { createReadStream } from 'node:fs';
import { open, readdir, rm, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { McapStreamReader, McapWriter } from '@mcap/core';
import type { Clock } from '@fleet/protocol';
import type { Scheduler, TimerHandle } from '../time.js';
import type { RecordedFiles, Recorder, RecorderStats, RecordingHandle, RecordingInfo } from './recorder.js';
import { ArmTask, episodeSeed, type SceneDescription } from './synthetic-motion.js';
import { FRONT_VIEW, SceneRenderer, wristView, type CameraView } from './synthetic-scene.js';
import {
  CAMERA_TOPIC,
  frameOverhead,
  frameSize,
  JOINT_COMMAND_SCHEMA,
  JOINT_COMMANDS_TOPIC,
  JOINT_STATE_SCHEMA,
  JOINT_STATES_TOPIC,
  jointCommandMessage,
  jointStateMessage,
  MIN_FRAME_BYTES,
  RAW_IMAGE_SCHEMA,
  rawImageMessage,
  schemaBytes,
  WRIST_CAMERA_TOPIC,
} from './synthetic-signals.js';

export interface SyntheticRecorderOptions {
  clock: Clock;
  scheduler: Scheduler;
  /**
   * Payload bytes written per second of recording (joint states, commands and camera frames
   * together): sizes the frames and the joint rate unless the options below fix them.
   */
  bytesPerSecond: number;
  /** How often it writes what has fallen due. */
  chunkIntervalMs: number;
  /** Largest camera frame message; a higher byte rate raises the frame rate instead. Default 512 KiB. */
  maxMessageBytes?: number;
  /** MCAP chunk size: what a crash can lose at most. Default 256 KiB. */
  mcapChunkBytes?: number;
  /** 1: the front camera (`/camera/image`); 2: also the wrist camera (`/camera/wrist/image`). Default 1. */
  cameras?: 1 | 2;
  /**
   * Frame size (px) of every camera. Either one fixes the size (the other follows at 4:3);
   * without both, the size follows from `bytesPerSecond`.
   */
  cameraWidth?: number;
  cameraHeight?: number;
  /** Frames per second of every camera. Default: 10 when the size is fixed, else planned from `bytesPerSecond` (about 5). */
  cameraHz?: number;
  /** Joint states (and commands) per second. Default: planned from `bytesPerSecond`, at most 50. */
  stateHz?: number;
}

/** Frame rate when the size is fixed and no rate is given. */
const FIXED_SIZE_CAMERA_HZ = 10;

export const SYNTHETIC_FILE = 'recording.mcap';
export { CAMERA_TOPIC, JOINT_COMMANDS_TOPIC, JOINT_STATES_TOPIC, WRIST_CAMERA_TOPIC } from './synthetic-signals.js';

/** Most of the byte rate that joint states and commands take; frames have the rest. */
const JOINT_SHARE = 0.4;

/** Message rates for a byte rate: joint samples take at most 40 % of it, frames the rest. */
export interface RatePlan {
  /** Joint states per second, and as many commands. */
  jointHz: number;
  /** Frames per second of each camera. */
  frameHz: number;
  /** Usual size of one camera's frame message. */
  frameBytes: number;
}

let sampleBytesMemo: number | undefined;

/** Bytes of one joint state and its command, on average over a task cycle. */
function sampleBytes(): number {
  if (sampleBytesMemo === undefined) {
    const task = new ArmTask(episodeSeed('ep_plan'));
    const at = Date.UTC(2026, 0, 1, 0, 0, 0, 500);
    let total = 0;
    for (let i = 0; i < 40; i++) {
      const sample = task.sample((i * task.cycleS) / 40);
      total += jointStateMessage(at, sample).byteLength + jointCommandMessage(at, sample).byteLength;
    }
    sampleBytesMemo = total / 40;
  }
  return sampleBytesMemo;
}

/**
 * Rates for a byte rate: joint samples take at most 40 % of it (at most 50 Hz), each
 * camera an equal share of the rest at about 5 Hz. `fixed` rates are taken as given, and the
 * frames get what they leave.
 */
export function planRates(bytesPerSecond: number, maxFrameBytes: number, fixed: { cameras?: number; stateHz?: number; cameraHz?: number } = {}): RatePlan {
  const jointBytes = sampleBytes();
  const jointHz = fixed.stateHz ?? Math.min(50, Math.max(1, Math.floor((bytesPerSecond * JOINT_SHARE) / jointBytes)));
  const frameBudget = Math.max(0, bytesPerSecond - jointHz * jointBytes) / (fixed.cameras ?? 1);
  let frameHz = fixed.cameraHz ?? 5;
  if (fixed.cameraHz === undefined) {
    if (frameBudget / frameHz > maxFrameBytes) frameHz = Math.ceil(frameBudget / maxFrameBytes);
    else if (frameBudget / frameHz < MIN_FRAME_BYTES) frameHz = Math.max(1, Math.floor(frameBudget / MIN_FRAME_BYTES));
  }
  return { jointHz, frameHz, frameBytes: Math.max(MIN_FRAME_BYTES, Math.min(maxFrameBytes, frameBudget / frameHz)) };
}

interface CameraPlan {
  topic: string;
  frameId: string;
  width: number;
  height: number;
  view: (scene: SceneDescription) => CameraView;
}

/** What a recorder records: the rates, and each camera's topic, size and view. */
export interface RecordingPlan {
  /** Frames sized from `bytesPerSecond`: a stop between two frames writes a last, shorter one. */
  sizedByRate: boolean;
  stateHz: number;
  cameraHz: number;
  cameras: readonly CameraPlan[];
}

function checkOption(name: string, v: number | undefined, min: number, max: number): void {
  if (v !== undefined && !(Number.isInteger(v) && v >= min && v <= max)) throw new RangeError(`${name} must be an integer from ${min} to ${max}`);
}

export function planRecording(opts: SyntheticRecorderOptions, maxFrameBytes: number): RecordingPlan {
  checkOption('cameras', opts.cameras, 1, 2);
  checkOption('cameraWidth', opts.cameraWidth, 16, 1920);
  checkOption('cameraHeight', opts.cameraHeight, 16, 1920);
  checkOption('cameraHz', opts.cameraHz, 1, 120);
  checkOption('stateHz', opts.stateHz, 1, 500);
  const count = opts.cameras ?? 1;
  const fixedSize = opts.cameraWidth !== undefined || opts.cameraHeight !== undefined;
  const cameraHz = opts.cameraHz ?? (fixedSize ? FIXED_SIZE_CAMERA_HZ : undefined);
  const rates = planRates(opts.bytesPerSecond, maxFrameBytes, {
    cameras: count,
    ...(opts.stateHz !== undefined ? { stateHz: opts.stateHz } : {}),
    ...(cameraHz !== undefined ? { cameraHz } : {}),
  });
  const size = fixedSize
    ? {
        width: opts.cameraWidth ?? Math.max(2, Math.round((opts.cameraHeight! * 4) / 3)),
        height: opts.cameraHeight ?? Math.max(2, Math.round((opts.cameraWidth! * 3) / 4)),
      }
    : frameSize(rates.frameBytes, 'camera');
  const cameras: CameraPlan[] = [{ topic: CAMERA_TOPIC, frameId: 'camera', ...size, view: () => FRONT_VIEW }];
  if (count === 2) cameras.push({ topic: WRIST_CAMERA_TOPIC, frameId: 'camera_wrist', ...size, view: wristView });
  return { sizedByRate: !fixedSize, stateHz: rates.jointHz, cameraHz: rates.frameHz, cameras };
}

/**
 * Writes a real MCAP file (chunked, indexed, with a summary section) that Foxglove opens: an
 * arm doing pick-and-place, its `/joint_states` and `/joint_commands` (up to 50 Hz by default)
 * and one or two cameras (`foxglove.RawImage`, about 5 Hz by default) rendering the scene, all
 * JSON with JSON Schemas. Unless sizes and rates are fixed by the options, the byte rate is kept
 * by sizing the frames. What is written follows the injected clock: at every tick it writes every
 * message that has fallen due, stamped with its own time, so a test that moves a manual clock by
 * one second gets about `bytesPerSecond`.
 */
export class SyntheticRecorder implements Recorder {
  private readonly active = new Set<SyntheticRecording>();
  readonly plan: RecordingPlan;
  private renderers: SceneRenderer[] | undefined;

  constructor(private readonly opts: SyntheticRecorderOptions) {
    this.plan = planRecording(opts, Math.max(MIN_FRAME_BYTES, opts.maxMessageBytes ?? 512 * 1024));
  }

  /** Resolves once every write that has fallen due so far is on disk (tests, benchmarks). */
  async settled(): Promise<void> {
    await Promise.all([...this.active].map((r) => r.settled()));
  }

  async start(dir: string, info: RecordingInfo): Promise<RecordingHandle> {
    // One pixel buffer per camera and recorder, made at the first episode: a frame is encoded as
    // soon as it is drawn, so recordings share them.
    this.renderers ??= this.plan.cameras.map((c) => new SceneRenderer(c.width, c.height));
    const fh = await open(join(dir, SYNTHETIC_FILE), 'wx', 0o644);
    const recording = new SyntheticRecording(
      { ...this.opts, plan: this.plan, renderers: this.renderers },
      fh,
      join(dir, SYNTHETIC_FILE),
      info,
      () => this.active.delete(recording),
    );
    this.active.add(recording);
    try {
      await recording.begin();
    } catch (err) {
      this.active.delete(recording);
      await fh.close().catch(() => undefined);
      await rm(join(dir, SYNTHETIC_FILE), { force: true });
      throw err;
    }
    return recording;
  }

  /**
   * After a crash: counts the messages of every MCAP file in `dir` that can still be read. The
   * files stay exactly as recorded (an unfinished MCAP has no summary or footer; MCAP readers
   * that stream, Foxglove among them, read it up to the cut), so their checksums are those of
   * the bytes the robot wrote.
   */
  async recover(dir: string): Promise<RecordedFiles> {
    const names = (await readdir(dir, { withFileTypes: true })).filter((d) => d.isFile() && d.name.endsWith('.mcap')).map((d) => d.name);
    let messageCount = 0;
    for (const name of names.sort()) messageCount += await countMessages(join(dir, name));
    return { files: names, messageCount };
  }
}

interface RecordingOptions extends SyntheticRecorderOptions {
  plan: RecordingPlan;
  renderers: readonly SceneRenderer[];
}

class SyntheticRecording implements RecordingHandle {
  private position = 0n;
  private messages = 0;
  /** Payload bytes written (message data). */
  private written = 0;
  private jointChannel = 0;
  private commandChannel = 0;
  private cameraChannels: number[] = [];
  /** Joint samples and frames written so far: the next one of each is due at its index's time. */
  private joints = 0;
  private frameSeq = 0;
  private lastFrameAt = -Infinity;
  private readonly task: ArmTask;
  private timer: TimerHandle | undefined;
  private queue: Promise<void> = Promise.resolve();
  private failure: unknown;
  private stopped = false;
  private readonly writer: McapWriter;

  constructor(
    private readonly opts: RecordingOptions,
    private readonly fh: FileHandle,
    private readonly path: string,
    private readonly info: RecordingInfo,
    private readonly onClosed: () => void,
  ) {
    this.task = new ArmTask(episodeSeed(info.episodeId));
    // Streams to the file: the writer hands over each finished chunk, so at most one chunk is in memory.
    this.writer = new McapWriter({
      writable: {
        write: async (buf: Uint8Array) => {
          await this.fh.write(buf);
          this.position += BigInt(buf.byteLength);
        },
        position: () => this.position,
      },
      chunkSize: opts.mcapChunkBytes ?? 256 * 1024,
    });
  }

  async begin(): Promise<void> {
    await this.writer.start({ profile: '', library: 'fleet-agent synthetic recorder' });
    const metadata = new Map([
      ['robot_id', this.info.robotId],
      ['episode_id', this.info.episodeId],
    ]);
    await this.writer.addMetadata({ name: 'episode', metadata: new Map([...metadata, ['started_at', new Date(this.info.startedAt).toISOString()]]) });
    const jointSchema = await this.writer.registerSchema({ name: JOINT_STATE_SCHEMA.name, encoding: 'jsonschema', data: schemaBytes(JOINT_STATE_SCHEMA) });
    const commandSchema = await this.writer.registerSchema({ name: JOINT_COMMAND_SCHEMA.name, encoding: 'jsonschema', data: schemaBytes(JOINT_COMMAND_SCHEMA) });
    const imageSchema = await this.writer.registerSchema({ name: RAW_IMAGE_SCHEMA.name, encoding: 'jsonschema', data: schemaBytes(RAW_IMAGE_SCHEMA) });
    this.jointChannel = await this.writer.registerChannel({ topic: JOINT_STATES_TOPIC, messageEncoding: 'json', schemaId: jointSchema, metadata });
    this.commandChannel = await this.writer.registerChannel({ topic: JOINT_COMMANDS_TOPIC, messageEncoding: 'json', schemaId: commandSchema, metadata });
    for (const camera of this.opts.plan.cameras) {
      this.cameraChannels.push(await this.writer.registerChannel({ topic: camera.topic, messageEncoding: 'json', schemaId: imageSchema, metadata }));
    }
    this.schedule();
  }

  settled(): Promise<void> {
    return this.queue;
  }

  stats(): RecorderStats {
    return { messageCount: this.messages, bytes: Number(this.position) };
  }

  async stop(): Promise<RecordedFiles> {
    this.halt();
    // What is owed up to the moment of the stop, not up to when the queue gets to it.
    const until = this.opts.clock.now();
    this.enqueue(() => this.writeDue(until, true));
    this.enqueue(async () => {
      await this.writer.end();
      await this.fh.sync();
    });
    try {
      await this.queue;
    } finally {
      await this.fh.close().catch(() => undefined);
      this.onClosed();
    }
    if (this.failure !== undefined) throw this.failure instanceof Error ? this.failure : new Error('recorder write failed', { cause: this.failure });
    return { files: [SYNTHETIC_FILE], messageCount: this.messages };
  }

  async abort(): Promise<void> {
    this.halt();
    await this.queue;
    await this.fh.close().catch(() => undefined);
    this.onClosed();
    await rm(this.path, { force: true });
  }

  private halt(): void {
    this.stopped = true;
    if (this.timer !== undefined) this.opts.scheduler.clearTimeout(this.timer);
    this.timer = undefined;
  }

  private schedule(): void {
    if (this.stopped) return;
    this.timer = this.opts.scheduler.setTimeout(() => {
      this.timer = undefined;
      const until = this.opts.clock.now();
      this.enqueue(() => this.writeDue(until, false));
      this.schedule();
    }, this.opts.chunkIntervalMs);
  }

  // McapWriter must not be called again before its previous call settled.
  private enqueue(step: () => Promise<void>): void {
    this.queue = this.queue.then(async () => {
      if (this.failure !== undefined) return;
      try {
        await step();
      } catch (err) {
        this.failure = err;
      }
    });
  }

  /** Payload the recording owes at `at` (robot clock). */
  private owed(at: number): number {
    return Math.floor((Math.max(0, at - this.info.startedAt) * this.opts.bytesPerSecond) / 1000);
  }

  /**
   * Writes every message due by `now` in time order: a joint state and its command together,
   * then a frame of each camera together. Frames have one size. When the byte rate sizes them,
   * a stop between two frames adds a last one per camera, of the same width and only the middle
   * rows that the time since the previous frame still pays for, so the file holds the rate.
   */
  private async writeDue(now: number, final: boolean): Promise<void> {
    const { plan, renderers } = this.opts;
    const start = this.info.startedAt;
    for (;;) {
      const jointAt = start + Math.floor((this.joints * 1000) / plan.stateHz);
      const frameAt = start + Math.floor(((this.frameSeq + 1) * 1000) / plan.cameraHz);
      const at = Math.min(jointAt, frameAt);
      if (at > now) break;
      const t = (at - start) / 1000;
      if (jointAt <= frameAt) {
        const sample = this.task.sample(t);
        await this.write(this.jointChannel, this.joints, at, jointStateMessage(at, sample));
        await this.write(this.commandChannel, this.joints, at, jointCommandMessage(at, sample));
        this.joints += 1;
      } else {
        const scene = this.task.scene(t);
        for (const [i, camera] of plan.cameras.entries()) {
          // Encoded before the next await: the renderer's buffer is shared.
          const pixels = renderers[i]!.render(scene, camera.view(scene));
          await this.write(this.cameraChannels[i]!, this.frameSeq, at, rawImageMessage(at, camera.frameId, camera.width, camera.height, pixels));
        }
        this.frameSeq += 1;
        this.lastFrameAt = at;
      }
    }
    const rest = (this.owed(now) - this.written) / plan.cameras.length;
    if (final && plan.sizedByRate && rest >= MIN_FRAME_BYTES && now > this.lastFrameAt) {
      const scene = this.task.scene((now - start) / 1000);
      for (const [i, camera] of plan.cameras.entries()) {
        const row = camera.width * 3;
        const rows = Math.max(2, Math.min(camera.height, Math.floor((rest - frameOverhead(camera.frameId, camera.width, camera.height)) / 4 / camera.width)));
        const top = Math.floor((camera.height - rows) / 2);
        const pixels = renderers[i]!.render(scene, camera.view(scene)).subarray(top * row, (top + rows) * row);
        await this.write(this.cameraChannels[i]!, this.frameSeq, now, rawImageMessage(now, camera.frameId, camera.width, rows, pixels));
      }
      this.frameSeq += 1;
    }
  }

  private async write(channelId: number, sequence: number, at: number, data: Buffer): Promise<void> {
    const t = BigInt(at) * 1_000_000n;
    await this.writer.addMessage({ channelId, sequence, logTime: t, publishTime: t, data });
    this.written += data.byteLength;
    this.messages += 1;
  }
}

/** Messages readable from an MCAP file, stopping quietly at a truncated or corrupt tail. */
async function countMessages(path: string): Promise<number> {
  const reader = new McapStreamReader({ validateCrcs: false });
  let count = 0;
  try {
    for await (const chunk of createReadStream(path, { highWaterMark: 1024 * 1024 })) {
      reader.append(chunk as Buffer);
      for (let rec = reader.nextRecord(); rec; rec = reader.nextRecord()) if (rec.type === 'Message') count += 1;
    }
  } catch {
    // A file cut short by a crash ends in a partial record: what came before still counts.
  }
  return count;
}
