import { createReadStream } from 'node:fs';
import { open, readdir, rm, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { McapStreamReader, McapWriter } from '@mcap/core';
import type { Clock } from '@fleet/protocol';
import type { Scheduler, TimerHandle } from '../time.js';
import type { RecordedFiles, Recorder, RecorderStats, RecordingHandle, RecordingInfo } from './recorder.js';
import {
  CAMERA_TOPIC,
  CameraFrames,
  JOINT_STATE_SCHEMA,
  JOINT_STATES_TOPIC,
  jointStateMessage,
  MIN_FRAME_BYTES,
  RAW_IMAGE_SCHEMA,
  schemaBytes,
} from './synthetic-signals.js';

export interface SyntheticRecorderOptions {
  clock: Clock;
  scheduler: Scheduler;
  /** Payload bytes written per second of recording (joint states and camera frames together). */
  bytesPerSecond: number;
  /** How often it writes what has fallen due. */
  chunkIntervalMs: number;
  /** Largest camera frame message; a higher byte rate raises the frame rate instead. Default 512 KiB. */
  maxMessageBytes?: number;
  /** MCAP chunk size: what a crash can lose at most. Default 256 KiB. */
  mcapChunkBytes?: number;
}

export const SYNTHETIC_FILE = 'recording.mcap';
export { CAMERA_TOPIC, JOINT_STATES_TOPIC } from './synthetic-signals.js';

/** Message rates for a byte rate: joint states take at most a quarter of it, frames the rest. */
interface RatePlan {
  jointHz: number;
  frameHz: number;
  /** Usual size of a frame message. */
  frameBytes: number;
}

export function planRates(bytesPerSecond: number, maxFrameBytes: number): RatePlan {
  const jointBytes = jointStateMessage(Date.UTC(2026, 0, 1), 0).byteLength;
  const jointHz = Math.min(50, Math.max(1, Math.floor(bytesPerSecond / 4 / jointBytes)));
  const frameBudget = Math.max(0, bytesPerSecond - jointHz * jointBytes);
  let frameHz = 5;
  if (frameBudget / frameHz > maxFrameBytes) frameHz = Math.ceil(frameBudget / maxFrameBytes);
  else if (frameBudget / frameHz < MIN_FRAME_BYTES) frameHz = Math.max(1, Math.floor(frameBudget / MIN_FRAME_BYTES));
  return { jointHz, frameHz, frameBytes: Math.max(MIN_FRAME_BYTES, Math.min(maxFrameBytes, frameBudget / frameHz)) };
}

/**
 * Writes a real MCAP file (chunked, indexed, with a summary section) that Foxglove opens: an
 * arm's `/joint_states` (up to 50 Hz) and a camera's `/camera/image` (`foxglove.RawImage`, about
 * 5 Hz), both JSON with JSON Schemas. The byte rate is kept by sizing the frames: each frame
 * carries what the elapsed time owes beyond the joint states. What is written follows the
 * injected clock: at every tick it writes every message that has fallen due, stamped with its
 * own time, so a test that moves a manual clock by one second gets about `bytesPerSecond`.
 */
export class SyntheticRecorder implements Recorder {
  private readonly active = new Set<SyntheticRecording>();
  private readonly plan: RatePlan;
  private readonly maxFrame: number;
  private frames: CameraFrames | undefined;

  constructor(private readonly opts: SyntheticRecorderOptions) {
    this.maxFrame = Math.max(MIN_FRAME_BYTES, opts.maxMessageBytes ?? 512 * 1024);
    this.plan = planRates(opts.bytesPerSecond, this.maxFrame);
  }

  /** Resolves once every write that has fallen due so far is on disk (tests, benchmarks). */
  async settled(): Promise<void> {
    await Promise.all([...this.active].map((r) => r.settled()));
  }

  async start(dir: string, info: RecordingInfo): Promise<RecordingHandle> {
    // One texture per recorder: its pixels are made once, whatever the number of episodes.
    this.frames ??= new CameraFrames(this.plan.frameBytes, this.maxFrame);
    const fh = await open(join(dir, SYNTHETIC_FILE), 'wx', 0o644);
    const recording = new SyntheticRecording(
      { ...this.opts, plan: this.plan, maxFrame: this.maxFrame, frames: this.frames },
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
  plan: RatePlan;
  maxFrame: number;
  frames: CameraFrames;
}

class SyntheticRecording implements RecordingHandle {
  private position = 0n;
  /** Payload bytes written (message data). */
  private written = 0;
  private messages = 0;
  private jointChannel = 0;
  private cameraChannel = 0;
  /** Joint states and frames written so far: the next one of each is due at its index's time. */
  private joints = 0;
  private frameSeq = 0;
  private lastAt: number;
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
    this.lastAt = info.startedAt;
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
    const imageSchema = await this.writer.registerSchema({ name: RAW_IMAGE_SCHEMA.name, encoding: 'jsonschema', data: schemaBytes(RAW_IMAGE_SCHEMA) });
    this.jointChannel = await this.writer.registerChannel({ topic: JOINT_STATES_TOPIC, messageEncoding: 'json', schemaId: jointSchema, metadata });
    this.cameraChannel = await this.writer.registerChannel({ topic: CAMERA_TOPIC, messageEncoding: 'json', schemaId: imageSchema, metadata });
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
   * Writes every message due by `now` in time order. At the stop, a last frame takes what the
   * time since the previous frame still owes, so the file holds about the configured rate.
   */
  private async writeDue(now: number, final: boolean): Promise<void> {
    const { plan, frames, maxFrame } = this.opts;
    const start = this.info.startedAt;
    for (;;) {
      const jointAt = start + Math.floor((this.joints * 1000) / plan.jointHz);
      const frameAt = start + Math.floor(((this.frameSeq + 1) * 1000) / plan.frameHz);
      const at = Math.min(jointAt, frameAt);
      if (at > now) break;
      if (jointAt <= frameAt) {
        await this.write(this.jointChannel, this.joints, at, jointStateMessage(at, (at - start) / 1000));
        this.joints += 1;
      } else {
        await this.write(this.cameraChannel, this.frameSeq, at, frames.message(at, this.frameSeq, Math.min(maxFrame, this.owed(at) - this.written)));
        this.frameSeq += 1;
      }
    }
    const rest = this.owed(now) - this.written;
    if (final && rest >= MIN_FRAME_BYTES) {
      await this.write(this.cameraChannel, this.frameSeq, Math.max(now, this.lastAt), frames.message(now, this.frameSeq, Math.min(maxFrame, rest)));
      this.frameSeq += 1;
    }
  }

  private async write(channelId: number, sequence: number, at: number, data: Buffer): Promise<void> {
    const t = BigInt(at) * 1_000_000n;
    await this.writer.addMessage({ channelId, sequence, logTime: t, publishTime: t, data });
    this.lastAt = at;
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
