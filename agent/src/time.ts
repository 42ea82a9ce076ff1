import type { Clock, ManualClock } from '@fleet/protocol';

/** An opaque timer returned by a {@link Scheduler}. */
export type TimerHandle = object;

/**
 * How the agent waits (ARCHITECTURE.md, Time): every component that waits takes one of these
 * with its clock, so tests move time by hand instead of sleeping.
 */
export interface Scheduler {
  setTimeout(fn: () => void, ms: number): TimerHandle;
  clearTimeout(handle: TimerHandle): void;
}

export const systemScheduler: Scheduler = {
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

class ManualTimerRef {
  constructor(readonly id: number) {}
}

interface ManualTimer {
  at: number;
  seq: number;
  fn: () => void;
}

/**
 * A scheduler driven by a {@link ManualClock}: `advance(ms)` moves the clock and fires every
 * timer that falls due, in time order, each with the clock set to its own due time.
 */
export class ManualScheduler implements Scheduler {
  private readonly timers = new Map<number, ManualTimer>();
  private nextId = 1;

  constructor(readonly clock: ManualClock) {}

  setTimeout(fn: () => void, ms: number): TimerHandle {
    const id = this.nextId++;
    this.timers.set(id, { at: this.clock.now() + Math.max(0, ms), seq: id, fn });
    return new ManualTimerRef(id);
  }

  clearTimeout(handle: TimerHandle): void {
    if (handle instanceof ManualTimerRef) this.timers.delete(handle.id);
  }

  /** Timers not yet fired. */
  get pending(): number {
    return this.timers.size;
  }

  advance(ms: number): void {
    const end = this.clock.now() + ms;
    for (;;) {
      let next: [number, ManualTimer] | undefined;
      for (const entry of this.timers) {
        const t = entry[1];
        if (t.at > end) continue;
        if (!next || t.at < next[1].at || (t.at === next[1].at && t.seq < next[1].seq)) next = entry;
      }
      if (!next) break;
      this.timers.delete(next[0]);
      if (next[1].at > this.clock.now()) this.clock.set(next[1].at);
      next[1].fn();
    }
    this.clock.set(end);
  }
}

/** The clock and scheduler a component gets from its caller. */
export interface TimeSource {
  clock: Clock;
  scheduler: Scheduler;
}
