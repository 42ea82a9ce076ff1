import type { Clock } from '@fleet/protocol';
import type { SharedCounterStore } from './store/index.js';

/** The name of the limit in a 429's `details.limit`. */
export const FAILED_LOGIN_LIMIT = 'failed_logins_per_ip';

export interface FailedLoginLimitOptions {
  /** Failed logins one address may have in a window; the next attempt is refused. */
  maxFailures: number;
  windowMs: number;
  clock: Clock;
  /** Which door is counted (the HTTP API's keys, the broker's passwords): each has its own budget. */
  kind: 'http' | 'mqtt';
  /** Counters every replica shares (PostgreSQL); without it this process counts in memory. */
  shared?: SharedCounterStore;
  /** Told when the shared counter cannot be reached (the failure then goes uncounted). */
  onError?: (err: unknown) => void;
  /** How many addresses are remembered; the oldest go first. */
  maxAddresses?: number;
}

interface Window {
  start: number;
  count: number;
}

/**
 * Failed logins per client address, in fixed windows on the injected clock: after `maxFailures`
 * failures within a window, every attempt from that address is refused until the window ends.
 * Only failures are counted, so a client that logs in does not spend anyone's budget, and
 * checking an attempt costs no database round trip: the window of a blocked address is
 * remembered here. With PostgreSQL the failures go to the shared rate counters (as the request
 * rate limits do), so the count holds across replicas: a replica that has not blocked the
 * address yet lets one more attempt through, whose failure tells it the count.
 */
export class FailedLoginLimiter {
  private readonly windows = new Map<string, Window>();
  private readonly blockedUntil = new Map<string, number>();
  private readonly maxAddresses: number;

  constructor(private readonly opts: FailedLoginLimitOptions) {
    this.maxAddresses = opts.maxAddresses ?? 10_000;
  }

  get maxFailures(): number {
    return this.opts.maxFailures;
  }

  /** Seconds until `address` may try again, or null when it may try now. */
  retryAfterS(address: string): number | null {
    const until = this.blockedUntil.get(address);
    if (until === undefined) return null;
    const now = this.opts.clock.now();
    if (until <= now) {
      this.blockedUntil.delete(address);
      return null;
    }
    return Math.max(1, Math.ceil((until - now) / 1000));
  }

  /** Counts a failed login from `address`. Never rejects: an uncounted failure is better than a 500. */
  async failed(address: string): Promise<void> {
    const now = this.opts.clock.now();
    let window: Window;
    if (this.opts.shared) {
      try {
        const r = await this.opts.shared.hit(`login:${this.opts.kind}:${address}`, now, this.opts.windowMs);
        window = { start: r.windowStart, count: r.count };
      } catch (err) {
        this.opts.onError?.(err);
        return;
      }
    } else {
      window = this.countLocally(address, now);
    }
    if (window.count >= this.opts.maxFailures) remember(this.blockedUntil, address, window.start + this.opts.windowMs, this.maxAddresses);
  }

  private countLocally(address: string, now: number): Window {
    const w = this.windows.get(address);
    if (w && w.start + this.opts.windowMs > now) {
      w.count++;
      return w;
    }
    const fresh = { start: now, count: 1 };
    remember(this.windows, address, fresh, this.maxAddresses);
    return fresh;
  }
}

/** Sets `key` as the newest entry; the oldest go when the map is full. */
function remember<V>(map: Map<string, V>, key: string, value: V, max: number): void {
  map.delete(key);
  while (map.size >= max) map.delete(map.keys().next().value!);
  map.set(key, value);
}
