import type { Clock } from '@fleet/protocol';
import type { Scheduler } from '../time.js';

/**
 * The agent's upload bandwidth limit (`--upload-limit`): one token bucket, on the injected clock,
 * shared by every PUT body and every part body of every upload the agent runs, so the sum of
 * their rates stays at the limit. Implemented as a virtual-time schedule (GCRA): each `take(n)`
 * reserves the next `n / rate` seconds of the link, in call order, and resolves when its turn
 * comes; up to `burstBytes` may go out ahead of schedule after an idle spell.
 */
export class RateLimiter {
  /** When the link is free again at the configured rate (ms on the injected clock). */
  private tat = Number.NEGATIVE_INFINITY;
  private readonly msPerByte: number;
  private readonly toleranceMs: number;
  private waiters = 0;
  private grantedBytes = 0;

  constructor(
    private readonly opts: {
      bytesPerSecond: number;
      clock: Clock;
      scheduler: Scheduler;
      /** Bytes that may go out at once after an idle spell (default: 1/20 s of the rate, at least 16 KiB). */
      burstBytes?: number;
    },
  ) {
    if (!(opts.bytesPerSecond > 0) || !Number.isFinite(opts.bytesPerSecond)) throw new RangeError('bytesPerSecond must be a positive number');
    this.msPerByte = 1000 / opts.bytesPerSecond;
    const burst = opts.burstBytes ?? Math.max(16 * 1024, Math.round(opts.bytesPerSecond / 20));
    this.toleranceMs = burst * this.msPerByte;
  }

  get bytesPerSecond(): number {
    return this.opts.bytesPerSecond;
  }

  /** Streams waiting for their turn now (tests use it to move a manual clock only when needed). */
  get waiting(): number {
    return this.waiters;
  }

  /**
   * Bytes whose turn has come so far, counted the moment each turn is let go (on the injected
   * clock's time): tests read the pace off it, where a body's own count comes a read later.
   */
  get granted(): number {
    return this.grantedBytes;
  }

  /** Resolves when `n` bytes may be sent; rejects when `signal` aborts first (the turn is not given back). */
  take(n: number, signal?: AbortSignal): Promise<void> {
    const now = this.opts.clock.now();
    const start = Math.max(this.tat, now);
    this.tat = start + n * this.msPerByte;
    const delay = this.tat - this.toleranceMs - now;
    if (delay <= 0) {
      this.grantedBytes += n;
      return Promise.resolve();
    }
    if (signal?.aborted) return Promise.reject(abortReason(signal));
    this.waiters += 1;
    return new Promise<void>((resolve, reject) => {
      const onAbort = () => {
        this.opts.scheduler.clearTimeout(handle);
        this.waiters -= 1;
        reject(abortReason(signal!));
      };
      const handle = this.opts.scheduler.setTimeout(() => {
        signal?.removeEventListener('abort', onAbort);
        this.waiters -= 1;
        this.grantedBytes += n;
        resolve();
      }, delay);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }
}

function abortReason(signal: AbortSignal): Error {
  return signal.reason instanceof Error ? signal.reason : new Error('aborted');
}

/** Bytes a metered body hands on at a time when a limit applies (the limit's granularity). */
const LIMITED_PIECE = 64 * 1024;

/** The largest piece meteredRange hands on under `meter` (the size of a body's read buffers). */
export function pieceSize(meter: Pick<Meter, 'limiter'>): number {
  return meter.limiter ? LIMITED_PIECE : 1024 * 1024;
}

/** What a metered body does with its bytes: wait for the limit (when there is one), then count them. */
export interface Meter {
  limiter?: RateLimiter | undefined;
  onBytes?: ((n: number) => void) | undefined;
  signal?: AbortSignal | undefined;
}

/**
 * A body read piece by piece as the connection takes it (`read(at, n)` answers bytes at offset
 * `at` of the body): each piece waits for the limiter and is counted as it is handed on. Handed to
 * undici as an async iterable, the next piece is read only once the connection took the previous
 * one, so memory is the pieces in flight, whatever the body's length.
 */
export async function* meteredRange(read: (at: number, n: number) => Promise<Buffer> | Buffer, length: number, meter: Meter): AsyncGenerator<Buffer> {
  const piece = pieceSize(meter);
  for (let at = 0; at < length; at += piece) {
    const n = Math.min(piece, length - at);
    if (meter.limiter) await meter.limiter.take(n, meter.signal);
    const p = await read(at, n);
    meter.onBytes?.(p.length);
    yield p;
  }
}
