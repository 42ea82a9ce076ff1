import { createReadStream } from 'node:fs';
import { mkdir, open, readdir, rm, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { McapStreamReader, McapWriter } from '@mcap/core';
import zstd from '@foxglove/wasm-zstd';
import type { Clock } from '@fleet/protocol';
import type { RecordedFiles, Recorder, RecorderStats, RecordingHandle, RecordingInfo, Scheduler, TimerHandle } from '@fleet/agent';
import { BAG_DIR, BAG_FILE, METADATA_FILE, Rosbag2Writer, type BagTopic } from './ros2-bag.js';
import {
  COMPRESSED_IMAGE_TYPE,
  IMAGE_TYPE,
  JOINT_STATE_TYPE,
  ROS2_FRONT_COMPRESSED_TOPIC,
  ROS2_FRONT_RAW_TOPIC,
  ROS2_JOINT_COMMANDS_TOPIC,
  ROS2_JOINT_STATES_TOPIC,
  ROS2_WRIST_COMPRESSED_TOPIC,
  ros2CompressedImage,
  ros2JointCommand,
  ros2JointState,
  ros2RawImage,
} from './ros2-signals.js';
import { ArmTask, episodeSeed, type JointSample, type SceneDescription } from './synthetic-motion.js';
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

/**
 * What the recorder writes. `ros2`: what `ros2 bag record --storage mcap` writes, a rosbag2
 * directory `bag/` (bag_0.mcap with CDR messages, metadata.yaml). `json`: one `recording.mcap`
 * of JSON messages with JSON Schemas (foxglove.RawImage frames), which the LeRobot exporter reads.
 */
export const SYNTHETIC_RECORDING_FORMATS = ['ros2', 'json'] as const;
export type SyntheticRecordingFormat = (typeof SYNTHETIC_RECORDING_FORMATS)[number];

export interface SyntheticRecorderOptions {
  clock: Clock;
  scheduler: Scheduler;
  /** Default `ros2`. */
  format?: SyntheticRecordingFormat;
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

/** The `json` format's file. */
export const SYNTHETIC_FILE = 'recording.mcap';
/** The `ros2` format's files, relative to the episode directory. */
export const ROS2_BAG_FILES = [`${BAG_DIR}/${BAG_FILE}`, `${BAG_DIR}/${METADATA_FILE}`] as const;
export { CAMERA_TOPIC, JOINT_COMMANDS_TOPIC, JOINT_STATES_TOPIC, WRIST_CAMERA_TOPIC } from './synthetic-signals.js';
export {
  ROS2_FRONT_COMPRESSED_TOPIC,
  ROS2_FRONT_RAW_TOPIC,
  ROS2_JOINT_COMMANDS_TOPIC,
  ROS2_JOINT_STATES_TOPIC,
  ROS2_WRIST_COMPRESSED_TOPIC,
} from './ros2-signals.js';

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
  /** The `json` format's topic. */
  topic: string;
  /** The `ros2` format's JPEG topic, and the raw rgb8 one (the front camera only). */
  compressedTopic: string;
  rawTopic?: string;
  frameId: string;
  width: number;
  height: number;
  view: (scene: SceneDescription) => CameraView;
}

/** What a recorder records: the rates, and each camera's topic, size and view. */
export interface RecordingPlan {
  format: SyntheticRecordingFormat;
  /** Frames sized from `bytesPerSecond`: a stop between two frames writes a last, shorter one (`json`). */
  sizedByRate: boolean;
  stateHz: number;
  cameraHz: number;
  cameras: readonly CameraPlan[];
}

function checkOption(name: string, v: number | undefined, min: number, max: number): void {
  if (v !== undefined && !(Number.isInteger(v) && v >= min && v <= max)) throw new RangeError(`${name} must be an integer from ${min} to ${max}`);
}

/**
 * JPEG bytes per pixel of the synthetic scene at {@link JPEG_QUALITY} (flat colours compress
 * well): what the ros2 format's frame sizing assumes for each compressed stream. Measured on
 * the renderer's frames; the byte rate of a ros2 recording is therefore approximate.
 */
const JPEG_BYTES_PER_PIXEL = 0.25;
/** CDR framing and header of one Image and one CompressedImage message. */
const ROS2_FRAME_OVERHEAD = 160;

export function planRecording(opts: SyntheticRecorderOptions, maxFrameBytes: number): RecordingPlan {
  const format = opts.format ?? 'ros2';
  if (!(SYNTHETIC_RECORDING_FORMATS as readonly string[]).includes(format)) throw new RangeError(`format must be one of ${SYNTHETIC_RECORDING_FORMATS.join(', ')}`);
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
  // ros2: every camera's JPEG, and the front camera's raw rgb8 (3 bytes a pixel) besides, share
  // the frames' budget of all cameras.
  const size = fixedSize
    ? {
        width: opts.cameraWidth ?? Math.max(2, Math.round((opts.cameraHeight! * 4) / 3)),
        height: opts.cameraHeight ?? Math.max(2, Math.round((opts.cameraWidth! * 3) / 4)),
      }
    : format === 'json'
      ? frameSize(rates.frameBytes, 'camera')
      : frameSize(rates.frameBytes * count, 'camera', 3 + JPEG_BYTES_PER_PIXEL * count, ROS2_FRAME_OVERHEAD * count);
  const cameras: CameraPlan[] = [
    { topic: CAMERA_TOPIC, compressedTopic: ROS2_FRONT_COMPRESSED_TOPIC, rawTopic: ROS2_FRONT_RAW_TOPIC, frameId: format === 'json' ? 'camera' : 'camera_front', ...size, view: () => FRONT_VIEW },
  ];
  if (count === 2) cameras.push({ topic: WRIST_CAMERA_TOPIC, compressedTopic: ROS2_WRIST_COMPRESSED_TOPIC, frameId: 'camera_wrist', ...size, view: wristView });
  return { format, sizedByRate: !fixedSize && format === 'json', stateHz: rates.jointHz, cameraHz: rates.frameHz, cameras };
}

/**
 * Records an arm doing pick-and-place: its measured joints and the joint targets its controller
 * commands (up to 50 Hz by default) and one or two cameras (about 5 Hz by default) rendering the
 * scene. In the `ros2` format (the default) that is a rosbag2 directory `bag/` as `ros2 bag
 * record --storage mcap` leaves it (CDR messages of `sensor_msgs` types, see ros2-bag.ts); in the
 * `json` format one `recording.mcap` of JSON messages with JSON Schemas that Foxglove opens.
 * Either is a real MCAP file (chunked, indexed, with a summary section). Unless sizes and rates
 * are fixed by the options, the byte rate is kept by sizing the frames (exactly in `json`; about,
 * in `ros2`, whose JPEG sizes depend on the picture). What is written follows the injected clock:
 * at every tick it writes every message that has fallen due, stamped with its own time, so a test
 * that moves a manual clock by one second gets about `bytesPerSecond`.
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
    const ros2 = this.plan.format === 'ros2';
    if (ros2) await mkdir(join(dir, BAG_DIR));
    const path = ros2 ? join(dir, BAG_DIR, BAG_FILE) : join(dir, SYNTHETIC_FILE);
    const written = ros2 ? join(dir, BAG_DIR) : path;
    const fh = await open(path, 'wx', 0o644);
    const recording = new SyntheticRecording({ ...this.opts, plan: this.plan, renderers: this.renderers }, fh, dir, written, info, () => this.active.delete(recording));
    this.active.add(recording);
    try {
      await recording.begin();
    } catch (err) {
      this.active.delete(recording);
      await fh.close().catch(() => undefined);
      await rm(written, { recursive: true, force: true });
      throw err;
    }
    return recording;
  }

  /**
   * After a crash: counts the messages of every MCAP file in `dir` (or its `bag/`) that can still
   * be read. The files stay exactly as recorded (an unfinished MCAP has no summary or footer, and
   * a bag cut short has no metadata.yaml; MCAP readers that stream, Foxglove among them, read it up
   * to the cut, and `ros2 bag reindex` rebuilds the metadata), so their checksums are those of the
   * bytes the robot wrote.
   */
  async recover(dir: string): Promise<RecordedFiles> {
    const files: string[] = [];
    let messageCount = 0;
    for (const sub of ['', BAG_DIR]) {
      const entries = await readdir(join(dir, sub), { withFileTypes: true }).catch(() => []);
      for (const d of entries.filter((e) => e.isFile()).sort((a, b) => (a.name < b.name ? -1 : 1))) {
        const rel = sub ? `${sub}/${d.name}` : d.name;
        if (d.name.endsWith('.mcap')) {
          files.push(rel);
          messageCount += await countMessages(join(dir, sub, d.name));
        } else if (sub === BAG_DIR && d.name === METADATA_FILE) files.push(rel);
      }
    }
    return { files, messageCount };
  }
}

/** A {@link SyntheticRecorder}: what `@fleet/simulator/synthetic-recorder` gives the agent's CLI. */
export function createSyntheticRecorder(
  opts: Omit<SyntheticRecorderOptions, 'bytesPerSecond' | 'chunkIntervalMs' | 'format'> & { bytesPerSecond?: number; chunkIntervalMs?: number; format?: SyntheticRecordingFormat | undefined },
): SyntheticRecorder {
  const { format, ...rest } = opts;
  return new SyntheticRecorder({ ...rest, bytesPerSecond: opts.bytesPerSecond ?? 64 * 1024, chunkIntervalMs: opts.chunkIntervalMs ?? 100, ...(format !== undefined ? { format } : {}) });
}

interface RecordingOptions extends SyntheticRecorderOptions {
  plan: RecordingPlan;
  renderers: readonly SceneRenderer[];
}

/** The `json` format's channels and writer. */
interface JsonSink {
  kind: 'json';
  writer: McapWriter;
  jointChannel: number;
  commandChannel: number;
  cameraChannels: number[];
  /** Bytes handed to the file so far. */
  position: { bytes: bigint };
}

/** The `ros2` format's bag. */
interface Ros2Sink {
  kind: 'ros2';
  bag: Rosbag2Writer;
}

class SyntheticRecording implements RecordingHandle {
  private messages = 0;
  /** Payload bytes written (message data). */
  private written = 0;
  /** Joint samples and frames written so far: the next one of each is due at its index's time. */
  private joints = 0;
  private frameSeq = 0;
  private lastFrameAt = -Infinity;
  private readonly task: ArmTask;
  private timer: TimerHandle | undefined;
  private queue: Promise<void> = Promise.resolve();
  private failure: unknown;
  private stopped = false;
  private readonly sink: JsonSink | Ros2Sink;

  constructor(
    private readonly opts: RecordingOptions,
    private readonly fh: FileHandle,
    dir: string,
    /** What abort deletes: the json file, or the bag directory. */
    private readonly ownPath: string,
    private readonly info: RecordingInfo,
    private readonly onClosed: () => void,
  ) {
    this.task = new ArmTask(episodeSeed(info.episodeId));
    const chunkSize = opts.mcapChunkBytes ?? 256 * 1024;
    if (opts.plan.format === 'ros2') {
      this.sink = { kind: 'ros2', bag: new Rosbag2Writer(join(dir, BAG_DIR), fh, chunkSize) };
    } else {
      const position = { bytes: 0n };
      // Streams to the file: the writer hands over each finished chunk, so at most one chunk is in memory.
      const writer = new McapWriter({
        writable: {
          write: async (buf: Uint8Array) => {
            await this.fh.write(buf);
            position.bytes += BigInt(buf.byteLength);
          },
          position: () => position.bytes,
        },
        chunkSize,
      });
      this.sink = { kind: 'json', writer, jointChannel: 0, commandChannel: 0, cameraChannels: [], position };
    }
  }

  async begin(): Promise<void> {
    if (this.sink.kind === 'ros2') {
      const topics: BagTopic[] = [
        { name: ROS2_JOINT_STATES_TOPIC, type: JOINT_STATE_TYPE },
        { name: ROS2_JOINT_COMMANDS_TOPIC, type: JOINT_STATE_TYPE },
      ];
      for (const camera of this.opts.plan.cameras) {
        topics.push({ name: camera.compressedTopic, type: COMPRESSED_IMAGE_TYPE });
        if (camera.rawTopic) topics.push({ name: camera.rawTopic, type: IMAGE_TYPE });
      }
      await this.sink.bag.begin(topics, 'fleet-sim synthetic recorder');
    } else {
      const { writer } = this.sink;
      await writer.start({ profile: '', library: 'fleet-sim synthetic recorder' });
      const metadata = new Map([
        ['robot_id', this.info.robotId],
        ['episode_id', this.info.episodeId],
      ]);
      await writer.addMetadata({ name: 'episode', metadata: new Map([...metadata, ['started_at', new Date(this.info.startedAt).toISOString()]]) });
      const jointSchema = await writer.registerSchema({ name: JOINT_STATE_SCHEMA.name, encoding: 'jsonschema', data: schemaBytes(JOINT_STATE_SCHEMA) });
      const commandSchema = await writer.registerSchema({ name: JOINT_COMMAND_SCHEMA.name, encoding: 'jsonschema', data: schemaBytes(JOINT_COMMAND_SCHEMA) });
      const imageSchema = await writer.registerSchema({ name: RAW_IMAGE_SCHEMA.name, encoding: 'jsonschema', data: schemaBytes(RAW_IMAGE_SCHEMA) });
      this.sink.jointChannel = await writer.registerChannel({ topic: JOINT_STATES_TOPIC, messageEncoding: 'json', schemaId: jointSchema, metadata });
      this.sink.commandChannel = await writer.registerChannel({ topic: JOINT_COMMANDS_TOPIC, messageEncoding: 'json', schemaId: commandSchema, metadata });
      for (const camera of this.opts.plan.cameras) {
        this.sink.cameraChannels.push(await writer.registerChannel({ topic: camera.topic, messageEncoding: 'json', schemaId: imageSchema, metadata }));
      }
    }
    this.schedule();
  }

  settled(): Promise<void> {
    return this.queue;
  }

  stats(): RecorderStats {
    return { messageCount: this.messages, bytes: this.sink.kind === 'ros2' ? this.sink.bag.bytes : Number(this.sink.position.bytes) };
  }

  async stop(): Promise<RecordedFiles> {
    this.halt();
    // What is owed up to the moment of the stop, not up to when the queue gets to it.
    const until = this.opts.clock.now();
    this.enqueue(() => this.writeDue(until, true));
    this.enqueue(async () => {
      if (this.sink.kind === 'ros2') await this.sink.bag.end();
      else {
        await this.sink.writer.end();
        await this.fh.sync();
      }
    });
    try {
      await this.queue;
    } finally {
      await this.fh.close().catch(() => undefined);
      this.onClosed();
    }
    if (this.failure !== undefined) throw this.failure instanceof Error ? this.failure : new Error('recorder write failed', { cause: this.failure });
    return { files: this.sink.kind === 'ros2' ? [...ROS2_BAG_FILES] : [SYNTHETIC_FILE], messageCount: this.messages };
  }

  async abort(): Promise<void> {
    this.halt();
    await this.queue;
    await this.fh.close().catch(() => undefined);
    this.onClosed();
    await rm(this.ownPath, { recursive: true, force: true });
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
   * then a frame of each camera together. Frames have one size. When the byte rate sizes them
   * (`json`), a stop between two frames adds a last one per camera, of the same width and only the
   * middle rows that the time since the previous frame still pays for, so the file holds the rate.
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
        await this.writeJoints(at, this.task.sample(t));
        this.joints += 1;
      } else {
        const scene = this.task.scene(t);
        for (const [i, camera] of plan.cameras.entries()) {
          // Encoded before the next await: the renderer's buffer is shared.
          await this.writeFrame(i, at, camera.width, camera.height, renderers[i]!.render(scene, camera.view(scene)));
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
        await this.writeFrame(i, now, camera.width, rows, pixels);
      }
      this.frameSeq += 1;
    }
  }

  private async writeJoints(at: number, sample: JointSample): Promise<void> {
    if (this.sink.kind === 'ros2') {
      this.count(await this.sink.bag.write(ROS2_JOINT_STATES_TOPIC, this.joints, at, ros2JointState(at, sample)));
      this.count(await this.sink.bag.write(ROS2_JOINT_COMMANDS_TOPIC, this.joints, at, ros2JointCommand(at, sample)));
    } else {
      await this.writeJson(this.sink.jointChannel, this.joints, at, jointStateMessage(at, sample));
      await this.writeJson(this.sink.commandChannel, this.joints, at, jointCommandMessage(at, sample));
    }
  }

  /** One camera's frame of `pixels` (rgb8, `width * height * 3`), in every stream of that camera. */
  private async writeFrame(index: number, at: number, width: number, height: number, pixels: Uint8Array): Promise<void> {
    const camera = this.opts.plan.cameras[index]!;
    if (this.sink.kind === 'ros2') {
      // Copied before the first await: the renderer's buffer is shared and redrawn by the next frame.
      const rgb = Buffer.from(pixels.subarray(0, width * height * 3));
      this.count(await this.sink.bag.write(camera.compressedTopic, this.frameSeq, at, await ros2CompressedImage(at, camera.frameId, width, height, rgb)));
      if (camera.rawTopic) this.count(await this.sink.bag.write(camera.rawTopic, this.frameSeq, at, ros2RawImage(at, camera.frameId, width, height, rgb)));
    } else {
      await this.writeJson(this.sink.cameraChannels[index]!, this.frameSeq, at, rawImageMessage(at, camera.frameId, width, height, pixels));
    }
  }

  private count(bytes: number): void {
    this.written += bytes;
    this.messages += 1;
  }

  private async writeJson(channelId: number, sequence: number, at: number, data: Buffer): Promise<void> {
    if (this.sink.kind !== 'json') throw new Error('not a json recording');
    const t = BigInt(at) * 1_000_000n;
    await this.sink.writer.addMessage({ channelId, sequence, logTime: t, publishTime: t, data });
    this.count(data.byteLength);
  }
}

/** Messages readable from an MCAP file, stopping quietly at a truncated or corrupt tail. */
async function countMessages(path: string): Promise<number> {
  // ros2 bags' chunks are zstd: the reader needs the decompressor to see their messages.
  await zstd.isLoaded;
  const reader = new McapStreamReader({ validateCrcs: false, decompressHandlers: { zstd: (data, size) => zstd.decompress(data, Number(size)) } });
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
