import { MCAP_MAGIC, McapRecordBuilder, McapStreamReader, Opcode, type DecompressHandlers, type McapTypes } from '@mcap/core';
import type { ByteSource } from './byte-source.js';
import { messageOf } from './errors.js';

/**
 * A recording without its summary (the recorder was interrupted: no chunk indexes, no footer)
 * read by scanning it once from the start, record by record, in bounded pieces: each chunk is
 * decompressed once to learn its schema and channel records and its messages' times, and only an
 * index is kept (where each chunk is, its time span, its channels). The scan stops at the first
 * record that is incomplete (where the file was cut) or does not parse, decompress or pass its
 * CRC; everything before it is served, by reading only the chunks a request overlaps.
 *
 * Messages written outside chunks (an unchunked file) are indexed the same way, in runs of
 * consecutive records up to GROUP_BYTES, so the index stays small for those too.
 *
 * Records are framed here by their 9-byte prefix (opcode, length) only to know where each one
 * starts and whether it is whole; their contents are parsed by @mcap/core's McapStreamReader.
 */

/** How much of the file the scan reads at a time (more when one record is larger). */
const PIECE_BYTES = 4 * 1024 * 1024;
/** The largest record the scan reads whole; a larger one ends the scan (a corrupt length, or more than a browser should hold). */
export const MAX_RECORD_BYTES = 256 * 1024 * 1024;
/** The span of one run of top-level messages in the index. */
const GROUP_BYTES = 4 * 1024 * 1024;
const RECORD_PREFIX = 9;
// The opcodes as numbers: the scan reads them from bytes.
const HEADER = Opcode.HEADER as number;
const FOOTER = Opcode.FOOTER as number;
const SCHEMA = Opcode.SCHEMA as number;
const CHANNEL = Opcode.CHANNEL as number;
const MESSAGE = Opcode.MESSAGE as number;
const CHUNK = Opcode.CHUNK as number;
const DATA_END = Opcode.DATA_END as number;

interface IndexEntry {
  /** File offset of the entry's first record and the bytes of its records (a chunk, or a run of top-level records). */
  offset: number;
  length: number;
  startNs: bigint;
  endNs: bigint;
  channels: Set<number>;
}

export interface ScanOutcome {
  /** The file offset where the scan stopped: the end of the last whole record it kept. */
  stoppedAt: bigint;
  /** Why it stopped, in words. */
  reason: string;
  /**
   * The scan reached the end of the data section (its DataEnd record, or the footer): every
   * message is there, only the index was missing, cut off or unusable.
   */
  complete: boolean;
}

/** What one top-level record adds; merged into the index only once the record read whole. */
interface Pending {
  schemas: McapTypes.Schema[];
  channels: McapTypes.Channel[];
  counts: Map<number, bigint>;
  startNs: bigint | undefined;
  endNs: bigint | undefined;
}

const newPending = (): Pending => ({ schemas: [], channels: [], counts: new Map(), startNs: undefined, endNs: undefined });

/** The file read forward in pieces: at most one piece (or one record) held. */
class Window {
  private start = 0;
  private buf = new Uint8Array(0);
  constructor(
    private readonly source: ByteSource,
    private readonly size: number,
  ) {}

  async bytes(offset: number, n: number): Promise<Uint8Array> {
    const end = this.start + this.buf.byteLength;
    if (offset >= this.start && offset + n <= end) return this.buf.subarray(offset - this.start, offset - this.start + n);
    const len = Math.min(this.size - offset, Math.max(n, PIECE_BYTES));
    const next = new Uint8Array(len);
    let have = 0;
    if (offset >= this.start && offset < end) {
      const tail = this.buf.subarray(offset - this.start);
      next.set(tail);
      have = tail.byteLength;
    }
    next.set(await this.source.read(BigInt(offset + have), BigInt(len - have)), have);
    this.start = offset;
    this.buf = next;
    return next.subarray(0, n);
  }
}

const OPCODE_NAMES: Record<number, string> = Object.fromEntries(
  Object.entries(Opcode)
    .filter(([k, v]) => typeof v === 'number' && k !== 'MIN' && k !== 'MAX')
    .map(([k, v]) => [v, k.toLowerCase().replace(/_/g, ' ')]),
);
const recordName = (op: number) => OPCODE_NAMES[op] ?? `unknown (opcode 0x${op.toString(16).padStart(2, '0')})`;

export class ScannedMcap {
  readonly schemasById = new Map<number, McapTypes.Schema>();
  readonly channelsById = new Map<number, McapTypes.Channel>();
  readonly counts = new Map<number, bigint>();
  startNs: bigint | undefined;
  endNs: bigint | undefined;
  profile = '';
  private readonly entries: IndexEntry[] = [];
  private prelude: Uint8Array | undefined;

  private constructor(
    private readonly source: ByteSource,
    private readonly decompressHandlers: DecompressHandlers,
    readonly outcome: ScanOutcome,
  ) {}

  /** The number of chunks (and runs of top-level messages) found whole. */
  get indexedEntries(): number {
    return this.entries.length;
  }

  /**
   * Scans `source` from the start. Throws (with the reason) only when there is nothing to play:
   * not an MCAP, or no whole header record.
   */
  static async scan(source: ByteSource, decompressHandlers: DecompressHandlers): Promise<ScannedMcap> {
    const size = Number(source.size);
    const win = new Window(source, size);
    if (size < MCAP_MAGIC.length) throw new Error(`the file is ${size} bytes, shorter than the MCAP magic`);
    const magic = await win.bytes(0, MCAP_MAGIC.length);
    if (!MCAP_MAGIC.every((b, i) => magic[i] === b)) throw new Error('the file does not start with the MCAP magic');
    const stream = new McapStreamReader({ includeChunks: true, decompressHandlers, validateCrcs: true });
    stream.append(magic);

    const outcome: ScanOutcome = { stoppedAt: BigInt(MCAP_MAGIC.length), reason: '', complete: false };
    const r = new ScannedMcap(source, decompressHandlers, outcome);
    let pos = MCAP_MAGIC.length;
    let header = false;
    let group: IndexEntry | undefined;
    const closeGroup = () => {
      if (group) r.entries.push(group);
      group = undefined;
    };
    for (;;) {
      if (pos === size) {
        outcome.reason = 'the file ends after a whole record, without a footer';
        break;
      }
      if (pos + RECORD_PREFIX > size) {
        outcome.reason = `the file ends inside a record's prefix at offset ${pos}`;
        break;
      }
      const prefix = await win.bytes(pos, RECORD_PREFIX);
      const op = prefix[0]!;
      const len = new DataView(prefix.buffer, prefix.byteOffset, RECORD_PREFIX).getBigUint64(1, true);
      if (op === 0) {
        // Not an MCAP opcode: typically the zeros a file system leaves after a crash.
        outcome.reason = `invalid opcode 0x00 at offset ${pos}`;
        break;
      }
      if (!header && op !== HEADER) throw new Error(`the first record is ${recordName(op)}, not a header`);
      if (op === FOOTER) {
        outcome.reason = 'the scan reached the footer';
        outcome.complete = true;
        break;
      }
      if (op === DATA_END) {
        outcome.reason = `the data section ends at offset ${pos} (the summary after it is not read)`;
        outcome.complete = true;
        break;
      }
      const total = BigInt(RECORD_PREFIX) + len;
      if (BigInt(pos) + total > BigInt(size)) {
        outcome.reason = `the file ends inside a ${recordName(op)} record at offset ${pos} (${len} bytes, ${size - pos - RECORD_PREFIX} there)`;
        break;
      }
      if (total > BigInt(MAX_RECORD_BYTES)) {
        outcome.reason = `a ${recordName(op)} record of ${len} bytes at offset ${pos}, more than the ${MAX_RECORD_BYTES} read at once`;
        break;
      }
      const n = Number(total);
      const bytes = await win.bytes(pos, n);
      const p = newPending();
      try {
        stream.append(bytes);
        for (let rec; (rec = stream.nextRecord()) !== undefined; ) {
          switch (rec.type) {
            case 'Header':
              header = true;
              r.profile = rec.profile;
              break;
            case 'Schema':
              p.schemas.push(rec);
              break;
            case 'Channel':
              p.channels.push(rec);
              break;
            case 'Message': {
              p.counts.set(rec.channelId, (p.counts.get(rec.channelId) ?? 0n) + 1n);
              if (p.startNs === undefined || rec.logTime < p.startNs) p.startNs = rec.logTime;
              if (p.endNs === undefined || rec.logTime > p.endNs) p.endNs = rec.logTime;
              break;
            }
            default:
              break;
          }
        }
      } catch (err) {
        outcome.reason = `the ${recordName(op)} record at offset ${pos} cannot be read: ${messageOf(err)}`;
        break;
      }
      if (!header) throw new Error('the first record does not parse as a header');

      // The record read whole: what it holds joins the index.
      for (const s of p.schemas) r.schemasById.set(s.id, s);
      for (const c of p.channels) r.channelsById.set(c.id, c);
      for (const [id, k] of p.counts) r.counts.set(id, (r.counts.get(id) ?? 0n) + k);
      if (p.startNs !== undefined && (r.startNs === undefined || p.startNs < r.startNs)) r.startNs = p.startNs;
      if (p.endNs !== undefined && (r.endNs === undefined || p.endNs > r.endNs)) r.endNs = p.endNs;
      const channels = new Set(p.counts.keys());
      if (op === CHUNK) {
        closeGroup();
        if (p.startNs !== undefined && p.endNs !== undefined) r.entries.push({ offset: pos, length: n, startNs: p.startNs, endNs: p.endNs, channels });
      } else if (op === MESSAGE && p.startNs !== undefined && p.endNs !== undefined) {
        if (group && pos + n - group.offset > GROUP_BYTES) closeGroup();
        if (group) {
          group.length = pos + n - group.offset;
          if (p.startNs < group.startNs) group.startNs = p.startNs;
          if (p.endNs > group.endNs) group.endNs = p.endNs;
          for (const c of channels) group.channels.add(c);
        } else {
          group = { offset: pos, length: n, startNs: p.startNs, endNs: p.endNs, channels };
        }
      } else if (op !== SCHEMA && op !== CHANNEL) {
        // Schema and channel records may sit inside a run (read again with it, harmlessly); anything else (an attachment) ends it.
        closeGroup();
      }
      pos += n;
      outcome.stoppedAt = BigInt(pos);
    }
    closeGroup();
    if (!header) throw new Error(`no whole header record (${outcome.reason})`);
    return r;
  }

  /**
   * Messages of `topics` within the bounds, in log-time order (newest first with `reverse`),
   * reading only the entries that overlap; entries whose spans overlap are merged.
   */
  async *readMessages(args: { topics: readonly string[]; startTime?: bigint; endTime?: bigint; reverse?: boolean; validateCrcs?: boolean }): AsyncGenerator<McapTypes.Message, void, void> {
    const lo = args.startTime ?? this.startNs;
    const hi = args.endTime ?? this.endNs;
    if (lo === undefined || hi === undefined) return;
    const reverse = args.reverse ?? false;
    const ids = new Set([...this.channelsById.values()].filter((c) => args.topics.includes(c.topic)).map((c) => c.id));
    const selected = this.entries.filter((e) => e.endNs >= lo && e.startNs <= hi && [...e.channels].some((c) => ids.has(c)));
    // Stable: entries with the same bound keep file order.
    selected.sort((a, b) => (reverse ? cmp(b.endNs, a.endNs) : cmp(a.startNs, b.startNs)));

    // One stream reader for the whole read, told every channel first: a chunk's messages may
    // use a channel whose record is in an earlier chunk, and the reader refuses those otherwise.
    const stream = new McapStreamReader({ noMagicPrefix: true, decompressHandlers: this.decompressHandlers, validateCrcs: args.validateCrcs ?? true });
    stream.append(this.channelPrelude());
    while (stream.nextRecord() !== undefined);

    interface Cursor {
      messages: McapTypes.Message[];
      at: number;
      order: number;
    }
    const open: Cursor[] = [];
    const timeOf = (c: Cursor) => c.messages[c.at]!.logTime;
    const before = (a: Cursor, b: Cursor) => {
      const ta = timeOf(a);
      const tb = timeOf(b);
      return ta === tb ? a.order < b.order : reverse ? ta > tb : ta < tb;
    };
    let next = 0;
    for (;;) {
      let best: Cursor | undefined;
      for (const c of open) if (best === undefined || before(c, best)) best = c;
      // Open every entry that may hold a message before the best one at hand.
      while (next < selected.length && (best === undefined || (reverse ? selected[next]!.endNs >= timeOf(best) : selected[next]!.startNs <= timeOf(best)))) {
        const e = selected[next]!;
        const order = next++;
        const messages: McapTypes.Message[] = [];
        stream.append(await this.source.read(BigInt(e.offset), BigInt(e.length)));
        for (let rec; (rec = stream.nextRecord()) !== undefined; ) {
          if (rec.type === 'Message' && ids.has(rec.channelId) && rec.logTime >= lo && rec.logTime <= hi) messages.push(rec);
        }
        if (messages.length === 0) continue;
        // A chunk's messages need not be in time order (the spec allows it); the sort is stable.
        messages.sort((a, b) => cmp(a.logTime, b.logTime));
        if (reverse) messages.reverse();
        const c = { messages, at: 0, order };
        open.push(c);
        if (best === undefined || before(c, best)) best = c;
      }
      if (best === undefined) return;
      yield best.messages[best.at]!;
      best.at++;
      if (best.at === best.messages.length) open.splice(open.indexOf(best), 1);
    }
  }

  /** The channel records, as bytes for a stream reader. */
  private channelPrelude(): Uint8Array {
    if (this.prelude === undefined) {
      const b = new McapRecordBuilder();
      for (const c of this.channelsById.values()) b.writeChannel(c);
      this.prelude = b.buffer.slice();
    }
    return this.prelude;
  }
}

const cmp = (a: bigint, b: bigint) => (a < b ? -1 : a > b ? 1 : 0);
