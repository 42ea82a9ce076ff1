import { headerStampNs, isRecordingError, openMcap, timestampNs, type McapRecording, type RecordingChannel as DecodedChannel, type RecordingError } from '@fleet/recordings';
import { fileSource } from '@fleet/recordings/node';
import { messageOf, SourceError } from './errors.js';

/**
 * A local MCAP recording, read through `@fleet/recordings`: opened by its index, chunks lz4 or
 * zstd, messages decoded by encoding (cdr with ros2msg/ros2idl, protobuf, json). What the export
 * needs on top: the recordings package's errors in the source's error table, and each message's
 * time by the mapping's stamp rule. A recording cut short by a crash has no summary: it is
 * `corrupt_recording` here (the export skips it; `mcap recover` can rebuild it).
 */

export type RecordingChannel = DecodedChannel;

/** Which time a message is placed at: its `header.stamp` (or Foxglove `timestamp`), or its log time. */
export type StampSource = 'header' | 'log';

export interface RecordingMessage {
  topic: string;
  /** The message's log time (ns): when the recorder received it. */
  logTimeNs: bigint;
  /** The time the resampling uses (ns): by the stamp rule (see `messageTimeNs`); the log time when unset. */
  timeNs?: bigint;
  /** The decoded message. */
  data: unknown;
}

export interface ReadOptions {
  /** Inclusive bounds on log time (ns). */
  startNs?: bigint;
  endNs?: bigint;
  /** Newest first. */
  reverse?: boolean;
  /**
   * `header`: the message's `header.stamp` (a message without one is `corrupt_recording`);
   * `log`: its log time; undefined: the header stamp when the message has a header, else log time.
   */
  stamp?: StampSource;
}

/** The source error for a recordings-package error: an image problem is `bad_image`, any other `corrupt_recording`. */
export function sourceErrorOf(err: RecordingError, where: string): SourceError {
  const text = err.message.replace(/^[a-z_]+: /, '');
  return new SourceError(err.code === 'bad_image' ? 'bad_image' : 'corrupt_recording', `${where}${where ? ': ' : ''}${text}`, { cause: err });
}

/** A message's time by the stamp rule (see `ReadOptions.stamp`). */
export function messageTimeNs(data: unknown, logTimeNs: bigint, stamp: StampSource | undefined, where: string): bigint {
  if (stamp === 'log') return logTimeNs;
  const header = headerStampNs(data);
  if (header !== undefined) return header;
  if (stamp === 'header') {
    const ts = timestampNs(data);
    if (ts !== undefined) return ts;
    throw new SourceError('corrupt_recording', `${where}: the message has no header.stamp (the mapping's stamp is header)`);
  }
  return logTimeNs;
}

export class Recording {
  readonly channels: readonly RecordingChannel[];
  private closed = false;

  private constructor(
    readonly path: string,
    private readonly mcap: McapRecording,
  ) {
    this.channels = mcap.channels;
  }

  /**
   * Opens the file; `corrupt_recording` with the reader's message when it has no usable index.
   * `checksummed`: the whole file was just checked against its SHA-256 (the export's fetch does
   * so), so the chunks' CRCs are not computed again (in JavaScript, a tenth of the export's time).
   */
  static async open(path: string, opts: { checksummed?: boolean } = {}): Promise<Recording> {
    let source;
    try {
      source = await fileSource(path);
    } catch (err) {
      throw new SourceError('io', `${path}: ${messageOf(err)}`, { cause: err });
    }
    try {
      return new Recording(path, await openMcap(source, { name: path, validateCrcs: opts.checksummed !== true }));
    } catch (err) {
      if (isRecordingError(err)) throw sourceErrorOf(err, '');
      throw err;
    }
  }

  channel(topic: string): RecordingChannel | undefined {
    return this.channels.find((c) => c.topic === topic);
  }

  /**
   * The messages of `topics`, decoded, in log-time order (across topics too). A chunk that fails
   * its CRC, a schema that does not parse or a message that does not decode ends the iteration
   * with `corrupt_recording` naming topic and schema.
   */
  async *messages(topics: readonly string[], opts: ReadOptions = {}): AsyncGenerator<RecordingMessage, void, void> {
    if (this.closed) throw new SourceError('io', `${this.path}: read after close`);
    const it = this.mcap.messages(topics, opts);
    for (;;) {
      let next;
      try {
        next = await it.next();
      } catch (err) {
        if (isRecordingError(err)) throw sourceErrorOf(err, '');
        throw err;
      }
      if (next.done === true) return;
      const m = next.value;
      yield { topic: m.topic, logTimeNs: m.logTimeNs, timeNs: messageTimeNs(m.data, m.logTimeNs, opts.stamp, `${this.path}: ${m.topic} at ${m.logTimeNs} ns`), data: m.data };
    }
  }

  /** The first (or with `reverse`, last) message of a topic, or undefined when it has none. */
  async first(topic: string, reverse = false, stamp?: StampSource): Promise<RecordingMessage | undefined> {
    const it = this.messages([topic], { reverse, ...(stamp !== undefined ? { stamp } : {}) });
    try {
      const r = await it.next();
      return r.done === true ? undefined : r.value;
    } finally {
      await it.return();
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.mcap.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

/** Opens the recording and lists its channels. */
export async function openRecording(path: string): Promise<Recording> {
  return Recording.open(path);
}
