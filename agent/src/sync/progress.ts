import type { Clock } from '@fleet/protocol';

/** Rate is measured over this much of the recent past. */
export const RATE_WINDOW_MS = 5_000;
const BUCKET_MS = 250;

/**
 * Live progress of one replica upload (kept in memory by the uploader; the store has what is
 * durable): bytes handed to the connection of the episode's total, and the rate over the last
 * few seconds, counted in 250 ms buckets on the injected clock.
 */
export class ReplicaProgress {
  bytesSent: number;
  private readonly buckets: { at: number; bytes: number }[] = [];
  private readonly since: number;

  constructor(
    private readonly clock: Clock,
    readonly bytesTotal: number,
    /** Bytes already at the destination when this attempt started (complete files, accepted parts). */
    readonly bytesAlready: number,
    private readonly windowMs = RATE_WINDOW_MS,
  ) {
    this.bytesSent = bytesAlready;
    this.since = clock.now();
  }

  add(n: number): void {
    this.bytesSent = Math.min(this.bytesTotal, this.bytesSent + n);
    const at = Math.floor(this.clock.now() / BUCKET_MS) * BUCKET_MS;
    const last = this.buckets[this.buckets.length - 1];
    if (last?.at === at) last.bytes += n;
    else this.buckets.push({ at, bytes: n });
    this.trim();
  }

  /** Bytes per second over the last `windowMs` (or since the attempt started, when that is shorter). */
  rate(): number {
    this.trim();
    const now = this.clock.now();
    const span = Math.min(this.windowMs, now - this.since);
    if (span <= 0) return 0;
    let bytes = 0;
    for (const b of this.buckets) bytes += b.bytes;
    return (bytes * 1000) / span;
  }

  private trim(): void {
    const from = this.clock.now() - this.windowMs;
    while (this.buckets.length > 0 && this.buckets[0]!.at + BUCKET_MS <= from) this.buckets.shift();
  }
}

/** One replica in `fleet-agent status` (the control socket's `uploads`). */
export interface UploadProgressView {
  episode_id: string;
  destination_id: string;
  /** The replica's local state (`assigned`, `granted`, `syncing`, `synced`, …). */
  state: string;
  /** True while an attempt runs (a grant request or the transfer). */
  active: boolean;
  bytes_sent: number;
  bytes_total: number;
  /** Bytes per second over the last few seconds; 0 when not sending. */
  rate_bps: number;
  last_error: string | null;
  note: string | null;
  /** When the next attempt is due (ISO), null when running or finished. */
  next_attempt_at: string | null;
}
