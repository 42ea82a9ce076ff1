import { every, type Clock, type Scheduler } from '@fleet/protocol';
import type { IdempotencyClaim, IdempotencyStore } from '../store/index.js';

/**
 * The in-flight Idempotency-Key claims of this process, kept alive while their requests run.
 * A claim is stored with a short lease (`leaseMs`): if the process dies, a retry through any
 * other replica takes the key over once the lease is out. While the process lives, one timer
 * renews every claim it holds, all in one statement, a third of a lease apart; the timer runs
 * only while there is a claim to renew.
 */
export class IdempotencyClaims {
  private readonly live = new Set<IdempotencyClaim>();
  private stopTimer: (() => void) | null = null;
  private renewing = false;

  constructor(
    private readonly opts: {
      store: IdempotencyStore;
      clock: Clock;
      scheduler: Scheduler;
      leaseMs: number;
      onError: (err: unknown) => void;
    },
  ) {}

  get leaseMs(): number {
    return this.opts.leaseMs;
  }

  /** How often held claims are renewed: three renewals fit in a lease, so one late or failed renewal loses nothing. */
  get renewEveryMs(): number {
    return Math.max(100, Math.floor(this.opts.leaseMs / 3));
  }

  /** How many claims this process holds. */
  get size(): number {
    return this.live.size;
  }

  hold(claim: IdempotencyClaim): void {
    this.live.add(claim);
    this.stopTimer ??= every(this.opts.scheduler, this.renewEveryMs, () => this.renew());
  }

  drop(claim: IdempotencyClaim): void {
    this.live.delete(claim);
    if (this.live.size === 0) this.stopRenewing();
  }

  close(): void {
    this.live.clear();
    this.stopRenewing();
  }

  private stopRenewing(): void {
    this.stopTimer?.();
    this.stopTimer = null;
  }

  private renew(): void {
    // A renewal still under way (a slow database) is not doubled; the next tick comes soon.
    if (this.renewing || this.live.size === 0) return;
    this.renewing = true;
    this.opts.store
      .renew([...this.live], this.opts.clock.now(), this.opts.leaseMs)
      .catch(this.opts.onError)
      .finally(() => {
        this.renewing = false;
      });
  }
}
