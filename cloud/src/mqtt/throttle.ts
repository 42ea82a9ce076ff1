import type { Clock, Scheduler, TimerHandle } from '@fleet/protocol';

export interface ThrottleOptions<K> {
  /** Sustained PUBLISH packets per second per client. */
  messagesPerSecond: number;
  /** Sustained payload bytes per second per client. */
  bytesPerSecond: number;
  /** How many seconds of the rate a quiet client may spend at once (bucket size). Default 2. */
  burstSeconds?: number;
  clock: Clock;
  /** Paces the release of held packets. */
  scheduler: Scheduler;
  /**
   * Whether a client has gone. Its held packets are then dropped, not released: a status held
   * from before a disconnect must not land after the broker published the client's will.
   */
  isClosed?: (client: K) => boolean;
}

interface Pending {
  bytes: number;
  release: () => void;
}

interface Bucket {
  messages: number;
  bytes: number;
  at: number;
  queue: Pending[];
  timer: TimerHandle | null;
}

/**
 * Per-client token buckets (messages and bytes) for what robots publish. A PUBLISH over the
 * budget is held, in arrival order, until the bucket has refilled: nothing is dropped. The
 * broker does not read a client's socket while a packet of its batch is held (aedes reads the
 * next batch only when every packet of the last one is handled), so a flooding robot is slowed
 * by TCP backpressure while the others' packets are handled as they come.
 *
 * A message larger than the byte bucket passes once the bucket is full and leaves it in debt,
 * so any message the broker accepts gets through eventually.
 */
export class PublishThrottle<K extends object = object> {
  private readonly buckets = new WeakMap<K, Bucket>();
  private readonly clock: Clock;
  private readonly scheduler: Scheduler;
  private readonly messageCap: number;
  private readonly byteCap: number;

  constructor(private readonly opts: ThrottleOptions<K>) {
    this.clock = opts.clock;
    this.scheduler = opts.scheduler;
    const burst = opts.burstSeconds ?? 2;
    this.messageCap = Math.max(1, opts.messagesPerSecond * burst);
    this.byteCap = Math.max(1, opts.bytesPerSecond * burst);
  }

  /** Calls `release` once `client` may publish `bytes` more; at once while under budget. */
  admit(client: K, bytes: number, release: () => void): void {
    let b = this.buckets.get(client);
    if (!b) {
      b = { messages: this.messageCap, bytes: this.byteCap, at: this.clock.now(), queue: [], timer: null };
      this.buckets.set(client, b);
    }
    b.queue.push({ bytes, release });
    if (b.queue.length === 1) this.drain(client, b);
  }

  /** Packets held for `client` now. */
  held(client: K): number {
    return this.buckets.get(client)?.queue.length ?? 0;
  }

  private refill(b: Bucket): void {
    const now = this.clock.now();
    const elapsed = Math.max(0, now - b.at) / 1000;
    b.at = now;
    b.messages = Math.min(this.messageCap, b.messages + elapsed * this.opts.messagesPerSecond);
    b.bytes = Math.min(this.byteCap, b.bytes + elapsed * this.opts.bytesPerSecond);
  }

  private drain(client: K, b: Bucket): void {
    b.timer = null;
    if (this.opts.isClosed?.(client)) {
      b.queue.length = 0;
      this.buckets.delete(client);
      return;
    }
    this.refill(b);
    while (b.queue.length > 0) {
      const next = b.queue[0]!;
      const needBytes = Math.min(next.bytes, this.byteCap);
      if (b.messages < 1 || b.bytes < needBytes) {
        const waitS = Math.max((1 - b.messages) / this.opts.messagesPerSecond, (needBytes - b.bytes) / this.opts.bytesPerSecond);
        // Bounded so that a clock moved by hand (tests) is noticed soon.
        const waitMs = Math.min(1000, Math.max(5, Math.ceil(waitS * 1000)));
        b.timer = this.scheduler.setTimeout(() => this.drain(client, b), waitMs);
        return;
      }
      b.messages -= 1;
      b.bytes -= next.bytes;
      b.queue.shift();
      next.release();
    }
  }
}
