import { open, type FileHandle } from 'node:fs/promises';
import { McapIndexedReader } from '@mcap/core';
import { messageOf, SourceError } from './errors.js';

/**
 * A local MCAP recording opened with its index (summary and chunk indexes), so each topic is read
 * on its own, in log-time order, without scanning the file. A recording cut short by a crash has
 * no summary: it is `corrupt_recording` here (the export skips it; `mcap recover` can rebuild it).
 */

export interface RecordingChannel {
  id: number;
  topic: string;
  /** `fleet.JointState`, `foxglove.RawImage`, … ('' without a schema). */
  schemaName: string;
  /** `jsonschema`, `protobuf`, … ('' without a schema). */
  schemaEncoding: string;
  /** The schema itself when it is a JSON Schema (for checking a mapping's fields up front). */
  jsonSchema: unknown;
  /** `json`, `cdr`, `protobuf`, … */
  messageEncoding: string;
  /** From the file's statistics; undefined when it has none. */
  messageCount: bigint | undefined;
}

export interface RecordingMessage {
  topic: string;
  /** The message's log time (ns): the synthetic recorder stamps it with the robot's clock. */
  logTimeNs: bigint;
  /** The message's JSON, parsed. */
  data: unknown;
}

export interface ReadOptions {
  /** Inclusive bounds on log time (ns). */
  startNs?: bigint;
  endNs?: bigint;
  /** Newest first. */
  reverse?: boolean;
}

export class Recording {
  readonly channels: readonly RecordingChannel[];
  private closed = false;

  private constructor(
    readonly path: string,
    private readonly fh: FileHandle,
    private readonly reader: McapIndexedReader,
    private readonly validateCrcs: boolean,
  ) {
    const decoder = new TextDecoder();
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
        messageCount: reader.statistics?.channelMessageCounts.get(c.id),
      };
    });
  }

  /**
   * Opens the file; `corrupt_recording` with the reader's message when it has no usable index.
   * `checksummed`: the whole file was just checked against its SHA-256 (the export's fetch does
   * so), so the chunks' CRCs are not computed again (in JavaScript, a tenth of the export's time).
   */
  static async open(path: string, opts: { checksummed?: boolean } = {}): Promise<Recording> {
    let fh: FileHandle;
    try {
      fh = await open(path, 'r');
    } catch (err) {
      throw new SourceError('io', `${path}: ${messageOf(err)}`, { cause: err });
    }
    try {
      const size = BigInt((await fh.stat()).size);
      const reader = await McapIndexedReader.Initialize({
        readable: {
          size: async () => size,
          read: async (offset, length) => {
            if (offset + length > size) throw new Error(`read past the end of the file (${offset}+${length} > ${size})`);
            // Every byte is read into it below: no need to zero it first (chunks are up to MiBs).
            const buf = Buffer.allocUnsafe(Number(length));
            let done = 0;
            while (done < buf.length) {
              const { bytesRead } = await fh.read(buf, done, buf.length - done, Number(offset) + done);
              if (bytesRead === 0) throw new Error(`the file ended at ${Number(offset) + done}, expected ${size} bytes`);
              done += bytesRead;
            }
            return buf;
          },
        },
      });
      return new Recording(path, fh, reader, opts.checksummed !== true);
    } catch (err) {
      await fh.close().catch(() => undefined);
      throw new SourceError('corrupt_recording', `${path}: ${messageOf(err)}`, { cause: err });
    }
  }

  channel(topic: string): RecordingChannel | undefined {
    return this.channels.find((c) => c.topic === topic);
  }

  /**
   * The messages of `topics`, in log-time order (across topics too), each JSON-parsed. A chunk
   * that fails its CRC or a message that is not JSON ends the iteration with `corrupt_recording`.
   */
  async *messages(topics: readonly string[], opts: ReadOptions = {}): AsyncGenerator<RecordingMessage, void, void> {
    if (this.closed) throw new SourceError('io', `${this.path}: read after close`);
    const topicById = new Map(this.channels.filter((c) => topics.includes(c.topic)).map((c) => [c.id, c.topic]));
    if (topicById.size === 0) return;
    const decoder = new TextDecoder();
    const rawImages = new Set(this.channels.filter((c) => topicById.has(c.id) && c.schemaName === 'foxglove.RawImage').map((c) => c.id));
    const it = this.reader.readMessages({
      topics,
      ...(opts.startNs !== undefined ? { startTime: opts.startNs } : {}),
      ...(opts.endNs !== undefined ? { endTime: opts.endNs } : {}),
      reverse: opts.reverse ?? false,
      validateCrcs: this.validateCrcs,
    });
    for (;;) {
      let next: IteratorResult<{ channelId: number; logTime: bigint; data: Uint8Array }>;
      try {
        next = await it.next();
      } catch (err) {
        throw new SourceError('corrupt_recording', `${this.path}: ${messageOf(err)}`, { cause: err });
      }
      if (next.done === true) return;
      const m = next.value;
      const topic = topicById.get(m.channelId) ?? '';
      let data: unknown;
      try {
        data = rawImages.has(m.channelId) ? parseRawImage(m.data, decoder) : JSON.parse(decoder.decode(m.data));
      } catch (err) {
        throw new SourceError('corrupt_recording', `${this.path}: a message of ${topic} at ${m.logTime} ns is not JSON (${messageOf(err)})`);
      }
      yield { topic, logTimeNs: m.logTime, data };
    }
  }

  /** The first (or with `reverse`, last) message of a topic, or undefined when it has none. */
  async first(topic: string, reverse = false): Promise<RecordingMessage | undefined> {
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
    await this.fh.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

/** Opens the recording and lists its channels. */
export async function openRecording(path: string): Promise<Recording> {
  return Recording.open(path);
}

/** The base64 `data` of a `foxglove.RawImage` message, kept as its bytes (see `parseRawImage`). */
export interface Base64Bytes {
  base64: Buffer;
}

const DATA_KEY = Buffer.from('"data":"');

/**
 * A `foxglove.RawImage` JSON message, parsed without decoding its image as UTF-8 text: the
 * `"data":"…"` string (hundreds of KiB of base64, which has no quote or backslash) is cut out as
 * bytes, the rest parsed as JSON, and `data` set to `{base64}`. Anything else (no such key, an
 * escape inside it) is parsed whole.
 */
export function parseRawImage(bytes: Uint8Array, decoder: { decode(input: Uint8Array): string }): unknown {
  const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const key = buf.indexOf(DATA_KEY);
  const start = key + DATA_KEY.length;
  const end = key < 0 ? -1 : buf.indexOf(0x22, start);
  if (key < 0 || end < 0 || buf.subarray(start, end).includes(0x5c)) return JSON.parse(decoder.decode(bytes)) as unknown;
  const rest = JSON.parse(decoder.decode(buf.subarray(0, start)) + decoder.decode(buf.subarray(end))) as Record<string, unknown>;
  if (typeof rest !== 'object' || rest === null || rest.data !== '') return JSON.parse(decoder.decode(bytes)) as unknown;
  return { ...rest, data: { base64: buf.subarray(start, end) } satisfies Base64Bytes };
}
