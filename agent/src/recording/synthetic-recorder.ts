import { randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { open, readdir, rm, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { McapStreamReader, McapWriter } from '@mcap/core';
import type { Clock } from '@fleet/protocol';
import type { Scheduler, TimerHandle } from '../time.js';
import type { RecordedFiles, Recorder, RecorderStats, RecordingHandle, RecordingInfo } from './recorder.js';

export interface SyntheticRecorderOptions {
  clock: Clock;
  scheduler: Scheduler;
  /** Payload bytes written per second of recording. */
  bytesPerSecond: number;
  /** How often it writes what has fallen due. */
  chunkIntervalMs: number;
  /** Largest payload of one message; a tick that owes more writes several. Default 64 KiB. */
  maxMessageBytes?: number;
  /** MCAP chunk size: what a crash can lose at most. Default 256 KiB. */
  mcapChunkBytes?: number;
}

export const SYNTHETIC_FILE = 'recording.mcap';
export const SYNTHETIC_TOPIC = '/synthetic/sensor';

/**
 * Writes a real MCAP file (one channel of opaque synthetic messages) at a fixed byte rate. The
 * amount written follows the injected clock: at every tick it writes what the elapsed time owes,
 * so a test that moves a manual clock by one second gets exactly `bytesPerSecond` of payload.
 */
export class SyntheticRecorder implements Recorder {
  private readonly active = new Set<SyntheticRecording>();

  constructor(private readonly opts: SyntheticRecorderOptions) {}

  /** Resolves once every write that has fallen due so far is on disk (tests, benchmarks). */
  async settled(): Promise<void> {
    await Promise.all([...this.active].map((r) => r.settled()));
  }

  async start(dir: string, info: RecordingInfo): Promise<RecordingHandle> {
    const fh = await open(join(dir, SYNTHETIC_FILE), 'wx', 0o644);
    const recording = new SyntheticRecording(this.opts, fh, join(dir, SYNTHETIC_FILE), info, () => this.active.delete(recording));
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

  /** Counts the messages of every MCAP file in `dir` that can still be read after a crash. */
  async recover(dir: string): Promise<RecordedFiles> {
    const names = (await readdir(dir, { withFileTypes: true })).filter((d) => d.isFile() && d.name.endsWith('.mcap')).map((d) => d.name);
    let messageCount = 0;
    for (const name of names.sort()) messageCount += await countMessages(join(dir, name));
    return { files: names, messageCount };
  }
}

class SyntheticRecording implements RecordingHandle {
  private position = 0n;
  private written = 0;
  private messages = 0;
  private channelId = 0;
  private timer: TimerHandle | undefined;
  private queue: Promise<void> = Promise.resolve();
  private failure: unknown;
  private stopped = false;
  private readonly writer: McapWriter;
  private readonly noise: Buffer;
  private readonly maxMessage: number;

  constructor(
    private readonly opts: SyntheticRecorderOptions,
    private readonly fh: FileHandle,
    private readonly path: string,
    private readonly info: RecordingInfo,
    private readonly onClosed: () => void,
  ) {
    this.maxMessage = Math.max(1, opts.maxMessageBytes ?? 64 * 1024);
    // Random bytes once per recording: real-looking (incompressible) payload at no CPU cost per message.
    this.noise = randomBytes(this.maxMessage);
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
    const schemaId = await this.writer.registerSchema({ name: 'fleet.synthetic.Blob', encoding: '', data: new Uint8Array() });
    this.channelId = await this.writer.registerChannel({
      topic: SYNTHETIC_TOPIC,
      messageEncoding: 'application/octet-stream',
      schemaId,
      metadata: new Map([
        ['robot_id', this.info.robotId],
        ['episode_id', this.info.episodeId],
      ]),
    });
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
    this.enqueue(() => this.writeDue(until));
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
      this.enqueue(() => this.writeDue(until));
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

  private async writeDue(now: number): Promise<void> {
    const due = Math.floor((Math.max(0, now - this.info.startedAt) * this.opts.bytesPerSecond) / 1000);
    while (this.written < due) {
      const size = Math.min(this.maxMessage, due - this.written);
      const data = Buffer.from(this.noise.subarray(0, size));
      if (size >= 8) data.writeBigUInt64LE(BigInt(this.messages), 0);
      const t = BigInt(now) * 1_000_000n;
      await this.writer.addMessage({ channelId: this.channelId, sequence: this.messages, logTime: t, publishTime: t, data });
      this.written += size;
      this.messages += 1;
    }
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
