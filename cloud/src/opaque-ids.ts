import { createCipheriv, createDecipheriv, type Cipher, type Decipher } from 'node:crypto';
import { base32Decode, base32Encode } from './ids.js';

/** What a handle names; part of the sealed block, so one kind's handle never decodes as another's. */
const KINDS = { delivery: 1, attempt: 2, episodeCursor: 3, event: 4 } as const;
export type OpaqueKind = keyof typeof KINDS;

const PREFIX: Record<OpaqueKind, string> = { delivery: 'dlv_', attempt: 'att_', episodeCursor: '', event: 'evt_' };
const VERSION = 1;

/**
 * Handles for rows the database numbers with one counter for every organization (events,
 * webhook deliveries and attempts, the episode index's `seq`): the API shows a handle, never the
 * number, so a tenant cannot count another's traffic between two of its own rows, and a handle
 * stays unique across organizations (receivers dedupe on an event id).
 *
 * A handle is one AES-256 block (a keyed permutation of 128 bits) holding a version, the kind and
 * the number, under a key derived from the installation's secret key: every replica makes and
 * reads the same handle for the same row, a handle is stable for as long as the row lives, and
 * decoding checks 7 fixed bytes, so a made-up handle is refused (one in 2^56 would pass as a
 * number the organization's own scoping then still confines to its rows).
 */
export class OpaqueIds {
  /**
   * One cipher each way, used for every handle: ECB without padding turns each 16-byte block
   * into one output block at once and keeps no state between blocks, and setting up a cipher
   * (its key schedule) cost 5-9 us against ~1 us for the block itself (a page of deliveries, an
   * event stream and every webhook attempt of a real event make handles).
   */
  private readonly cipher: Cipher;
  private readonly decipher: Decipher;

  constructor(key: Buffer) {
    if (key.length !== 32) throw new Error('opaque id key must be 32 bytes');
    this.cipher = createCipheriv('aes-256-ecb', key, null).setAutoPadding(false);
    this.decipher = createDecipheriv('aes-256-ecb', key, null).setAutoPadding(false);
  }

  encode(kind: OpaqueKind, n: number): string {
    if (!Number.isSafeInteger(n) || n < 0) throw new Error(`not a row number: ${n}`);
    const block = Buffer.alloc(16);
    block[0] = VERSION;
    block[1] = KINDS[kind];
    block.writeBigUInt64BE(BigInt(n), 8);
    const sealed = this.cipher.update(block);
    return kind === 'episodeCursor' ? sealed.toString('base64url') : PREFIX[kind] + base32Encode(sealed);
  }

  /** The number behind a handle of this kind; null for anything else. */
  decode(kind: OpaqueKind, handle: string): number | null {
    const prefix = PREFIX[kind];
    if (!handle.startsWith(prefix)) return null;
    const body = handle.slice(prefix.length);
    const sealed = kind === 'episodeCursor' ? (/^[A-Za-z0-9_-]{22}$/.test(body) ? Buffer.from(body, 'base64url') : null) : base32Decode(body);
    if (sealed?.length !== 16) return null;
    const block = this.decipher.update(sealed);
    if (block[0] !== VERSION || block[1] !== KINDS[kind] || block.readUIntBE(2, 6) !== 0) return null;
    const n = block.readBigUInt64BE(8);
    return n <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(n) : null;
  }

  /** The wire id of a position in the event log: `evt_0` before the first event, else the event's handle. */
  eventId(n: number): string {
    return n === 0 ? 'evt_0' : this.encode('event', n);
  }

  /**
   * The log position a wire event id names: a handle, `evt_0`, or an earlier version's `evt_<n>`
   * (a client's Last-Event-ID from before the upgrade still resumes; it can only ever read its own
   * organization's events). Null for anything else.
   */
  parseEventId(id: string): number | null {
    return logPosition(id) ?? this.decode('event', id);
  }

  /**
   * The id a stored delivery shows (the X-Service-Event-Id header, the delivery log): the log's
   * `evt_<n>`, as the store keeps it, becomes the event's handle, the same id the event stream
   * shows; a test event's own id (`evt_test_…`) is shown as it is.
   */
  publicEventId(stored: string): string {
    const n = logPosition(stored);
    return n ? this.encode('event', n) : stored;
  }
}

/** The position an event id as the store writes it names (`evt_<n>`, `evt_0` before the first). */
function logPosition(id: string): number | null {
  const m = /^evt_(0|[1-9][0-9]{0,15})$/.exec(id);
  if (!m) return null;
  const n = Number(m[1]);
  return Number.isSafeInteger(n) ? n : null;
}
