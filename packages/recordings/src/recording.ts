import { McapIndexedReader, type McapTypes } from '@mcap/core';
import { loadDecompressHandlers } from '@mcap/support';
import type { ByteSource } from './byte-source.js';
import { decoderFor, type MessageDecoder } from './decoders.js';
import { RecordingError, isRecordingError, messageOf, type RecordingErrorCode } from './errors.js';
import { ScannedMcap, type ScanOutcome } from './recover.js';

/**
 * An MCAP recording opened by its index (summary, chunk indexes), so each topic is read on its
 * own, in log-time order, without scanning the file; chunks compressed with lz4, zstd or bz2 are
 * undone by Foxglove's wasm decompressors (the same in Node and in the browser). A recording cut
 * short by a crash has no summary: `unreadable`, unless opened with `recover: true`, which
 * rebuilds an index in memory by scanning the file once (recover.ts) and plays what is whole.
 */

export interface RecordingChannel {
  id: number;
  topic: string;
  /** `sensor_msgs/msg/JointState`, `foxglove.RawImage`, … ('' without a schema). */
  schemaName: string;
  /** `ros2msg`, `ros2idl`, `protobuf`, `jsonschema`, … ('' without a schema). */
  schemaEncoding: string;
  /** The schema itself when it is a JSON Schema (for checking a mapping's fields up front). */
  jsonSchema: unknown;
  /** `cdr`, `protobuf`, `json`, … */
  messageEncoding: string;
  /** From the file's statistics; undefined when it has none. */
  messageCount: bigint | undefined;
  /** The channel's metadata (rosbag2 puts `offered_qos_profiles` and `topic_type_hash` there). */
  metadata: ReadonlyMap<string, string>;
}

export interface DecodedMessage {
  topic: string;
  channelId: number;
  /** Log time, ns (rosbag2: when the recorder received it). */
  logTimeNs: bigint;
  publishTimeNs: bigint;
  sequence: number;
  /** The message's encoded size. */
  sizeBytes: number;
  /** The decoded message (see decoders.ts for the shapes). */
  data: unknown;
}

export interface ReadOptions {
  /** Inclusive bounds on log time (ns). */
  startNs?: bigint;
  endNs?: bigint;
  /** Newest first. */
  reverse?: boolean;
}

export interface OpenOptions {
  /** Check each chunk's CRC (default true). Off when the whole file was just checked against a digest. */
  validateCrcs?: boolean;
  /** A name for messages (the file's path; never a presigned URL, a bearer secret). */
  name?: string;
  /**
   * When the file cannot be opened by its index (no footer or summary: the recorder was
   * interrupted), scan it from the start instead and play the chunks that are whole
   * (`truncated`). Also scans a whole file whose summary indexes no chunk but which has messages
   * (an unchunked file). Without it such a file is `unreadable`.
   */
  recover?: boolean;
}

/** What a recording reads through: the file's own index, or one rebuilt by a scan. */
interface McapIndex {
  readonly profile: string;
  readonly channelsById: ReadonlyMap<number, McapTypes.Channel>;
  readonly schemasById: ReadonlyMap<number, McapTypes.Schema>;
  readonly startNs: bigint | undefined;
  readonly endNs: bigint | undefined;
  messageCount(channelId: number): bigint | undefined;
  readMessages(args: { topics: readonly string[]; startTime?: bigint; endTime?: bigint; reverse: boolean; validateCrcs: boolean }): AsyncGenerator<McapTypes.Message, void, void>;
}

function indexOf(reader: McapIndexedReader): McapIndex {
  return {
    profile: reader.header.profile,
    channelsById: reader.channelsById,
    schemasById: reader.schemasById,
    startNs: reader.statistics?.messageStartTime,
    endNs: reader.statistics?.messageEndTime,
    messageCount: (id) => reader.statistics?.channelMessageCounts.get(id),
    readMessages: (args) => reader.readMessages(args),
  };
}

function scannedIndexOf(scan: ScannedMcap): McapIndex {
  return {
    profile: scan.profile,
    channelsById: scan.channelsById,
    schemasById: scan.schemasById,
    startNs: scan.startNs,
    endNs: scan.endNs,
    messageCount: (id) => scan.counts.get(id) ?? 0n,
    readMessages: (args) => scan.readMessages(args),
  };
}

/** The codes a byte source's own failure keeps through the reader (the rest become `unreadable`). */
const SOURCE_CODES: ReadonlySet<RecordingErrorCode> = new Set(['fetch_failed', 'not_found', 'forbidden', 'size_mismatch', 'range_unsupported']);

/**
 * A failure while reading, as the recording's error: a source's own code (an HTTP source's
 * `not_found`, …) is kept, anything else is `unreadable`; an abort is passed on as it is.
 */
function readError(name: string, err: unknown): unknown {
  if (err instanceof Error && err.name === 'AbortError') return err;
  if (isRecordingError(err) && SOURCE_CODES.has(err.code)) return new RecordingError(err.code, `${name}: ${err.message.replace(/^[a-z_]+: /, '')}`, { cause: err });
  return new RecordingError('unreadable', `${name}: ${messageOf(err)}`, { cause: err });
}

export class McapRecording implements AsyncDisposable {
  readonly channels: readonly RecordingChannel[];
  /** The MCAP header's profile (`ros2`, `protobuf`, '' …). */
  readonly profile: string;
  /** Start and end log time of the whole file, from its statistics or the scan (undefined without them, or without messages). */
  readonly startNs: bigint | undefined;
  /** With `truncated`, the log time of the last whole message. */
  readonly endNs: bigint | undefined;
  /**
   * The file was cut short inside its data section (opened with `recover`): it plays up to its
   * last whole chunk. `recovery` says where the scan stopped and why. (A file cut only inside its
   * summary has every message: it is scanned, not truncated.)
   */
  readonly truncated: boolean;
  /** Set when the file was opened by scanning it (`recover`) rather than by its index. */
  readonly recovery: ScanOutcome | undefined;
  private readonly decoders = new Map<number, MessageDecoder>();
  private closed = false;

  private constructor(
    readonly name: string,
    private readonly source: ByteSource,
    private readonly reader: McapIndex,
    private readonly validateCrcs: boolean,
    recovery: ScanOutcome | undefined,
  ) {
    const decoder = new TextDecoder();
    this.profile = reader.profile;
    this.startNs = reader.startNs;
    this.endNs = reader.endNs;
    this.recovery = recovery;
    this.truncated = recovery !== undefined && !recovery.complete;
    this.channels = [...reader.channelsById.values()].map((c) => {
      const schema = reader.schemasById.get(c.schemaId);
      let jsonSchema: unknown = undefined;
      if (schema?.encoding === 'jsonschema') {
        try {
          jsonSchema = JSON.parse(decoder.decode(schema.data));
        } catch {
          // A schema that is not JSON only means the fields cannot be checked before reading.
        }
      }
      return {
        id: c.id,
        topic: c.topic,
        schemaName: schema?.name ?? '',
        schemaEncoding: schema?.encoding ?? '',
        jsonSchema,
        messageEncoding: c.messageEncoding,
        messageCount: reader.messageCount(c.id),
        metadata: c.metadata,
      };
    });
  }

  /**
   * Opens the recording by its index; `unreadable` with the reader's message when it has none
   * (or, with `recover`, when a scan finds no header either). A byte source's own failure keeps
   * its code (`not_found`, `fetch_failed`, … of an HTTP source).
   */
  static async open(source: ByteSource, opts: OpenOptions = {}): Promise<McapRecording> {
    const name = opts.name ?? 'recording';
    const size = BigInt(source.size);
    const validateCrcs = opts.validateCrcs ?? true;
    try {
      const decompressHandlers = await loadDecompressHandlers();
      let indexed: McapIndexedReader;
      try {
        indexed = await McapIndexedReader.Initialize({
          readable: { size: async () => size, read: (offset, length) => source.read(offset, length) },
          decompressHandlers,
        });
      } catch (err) {
        // A source that cannot be read is not a file without an index: no scan would do better.
        if (opts.recover !== true || (isRecordingError(err) && SOURCE_CODES.has(err.code)) || (err instanceof Error && err.name === 'AbortError')) throw err;
        let scan: ScannedMcap;
        try {
          scan = await ScannedMcap.scan(source, decompressHandlers);
        } catch (scanErr) {
          if (isRecordingError(scanErr) || (scanErr instanceof Error && scanErr.name === 'AbortError')) throw scanErr;
          throw new Error(`${messageOf(err)}; scanning it: ${messageOf(scanErr)}`, { cause: err });
        }
        return new McapRecording(name, source, scannedIndexOf(scan), validateCrcs, scan.outcome);
      }
      // A summary that indexes no chunk while the file has messages (written unchunked): only a scan finds them.
      if (opts.recover === true && indexed.chunkIndexes.length === 0 && (indexed.statistics === undefined || indexed.statistics.messageCount > 0n)) {
        const scan = await ScannedMcap.scan(source, decompressHandlers);
        return new McapRecording(name, source, scannedIndexOf(scan), validateCrcs, scan.outcome);
      }
      return new McapRecording(name, source, indexOf(indexed), validateCrcs, undefined);
    } catch (err) {
      await source.close?.().catch(() => undefined);
      throw readError(name, err);
    }
  }

  channel(topic: string): RecordingChannel | undefined {
    return this.channels.find((c) => c.topic === topic);
  }

  /**
   * The decoder of a channel, built on first use: a schema that does not parse fails only the
   * topics that use it (`schema_invalid`), and an encoding not decoded is `unsupported_encoding`.
   */
  decoder(channelId: number): MessageDecoder {
    let d = this.decoders.get(channelId);
    if (d === undefined) {
      const c = this.reader.channelsById.get(channelId);
      if (c === undefined) throw new RecordingError('unreadable', `${this.name}: no channel ${channelId}`);
      const schema = this.reader.schemasById.get(c.schemaId);
      d = decoderFor(c.topic, c.messageEncoding, schema);
      this.decoders.set(channelId, d);
    }
    return d;
  }

  /**
   * The messages of `topics`, decoded, in log-time order (across topics too). A chunk that fails
   * its CRC or does not decompress ends the iteration with `unreadable`; a message that does not
   * decode with `message_invalid` naming topic and schema.
   */
  async *messages(topics: readonly string[], opts: ReadOptions = {}): AsyncGenerator<DecodedMessage, void, void> {
    if (this.closed) throw new RecordingError('unreadable', `${this.name}: read after close`);
    const topicById = new Map(this.channels.filter((c) => topics.includes(c.topic)).map((c) => [c.id, c.topic]));
    if (topicById.size === 0) return;
    // Decoders first: a schema that does not parse fails before any chunk is read.
    for (const id of topicById.keys()) this.decoder(id);
    const it = this.reader.readMessages({
      topics,
      ...(opts.startNs !== undefined ? { startTime: opts.startNs } : {}),
      ...(opts.endNs !== undefined ? { endTime: opts.endNs } : {}),
      reverse: opts.reverse ?? false,
      validateCrcs: this.validateCrcs,
    });
    for (;;) {
      let next: IteratorResult<McapTypes.Message>;
      try {
        next = await it.next();
      } catch (err) {
        throw readError(this.name, err);
      }
      if (next.done === true) return;
      const m = next.value;
      let data: unknown;
      try {
        data = this.decoder(m.channelId)(m.data);
      } catch (err) {
        if (isRecordingError(err)) throw new RecordingError(err.code, `${this.name}: ${err.message.replace(/^[a-z_]+: /, '')} (at ${m.logTime} ns)`, { cause: err });
        throw err;
      }
      yield {
        topic: topicById.get(m.channelId) ?? '',
        channelId: m.channelId,
        logTimeNs: m.logTime,
        publishTimeNs: m.publishTime,
        sequence: m.sequence,
        sizeBytes: m.data.byteLength,
        data,
      };
    }
  }

  /** The first (or with `reverse`, last) message of a topic, or undefined when it has none. */
  async first(topic: string, reverse = false): Promise<DecodedMessage | undefined> {
    const it = this.messages([topic], { reverse });
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
    await this.source.close?.();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

/** Opens an MCAP recording from any byte source. */
export function openMcap(source: ByteSource, opts: OpenOptions = {}): Promise<McapRecording> {
  return McapRecording.open(source, opts);
}
