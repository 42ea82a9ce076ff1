/**
 * The clock every component takes from its caller (docs/architecture.md, Time). Production passes
 * `systemClock`; tests pass a clock they move by hand, so nothing that expires or retries is
 * tested by sleeping.
 */
export interface Clock {
  /** Milliseconds since the Unix epoch. */
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

/** A clock that only moves when a test moves it. */
export class ManualClock implements Clock {
  constructor(private ms: number = Date.parse('2026-01-01T00:00:00Z')) {}
  now(): number {
    return this.ms;
  }
  advance(ms: number): void {
    this.ms += ms;
  }
  set(ms: number): void {
    this.ms = ms;
  }
}

export const SECOND = 1000;
export const MINUTE = 60 * SECOND;
export const HOUR = 60 * MINUTE;
export const DAY = 24 * HOUR;

export function iso(ms: number): string {
  return new Date(ms).toISOString();
}

/** An opaque timer returned by a {@link Scheduler}. */
export type TimerHandle = object;

/**
 * How the agent waits : every component that waits takes one of these
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

/**
 * Runs `fn` every `ms` on `scheduler` until the returned stop function is called; each run is
 * scheduled after the previous one was started, so a slow `fn` never piles up.
 */
export function every(scheduler: Scheduler, ms: number, fn: () => void): () => void {
  let handle: TimerHandle | null = null;
  let stopped = false;
  const arm = (): void => {
    handle = scheduler.setTimeout(() => {
      if (stopped) return;
      arm();
      fn();
    }, ms);
  };
  arm();
  return () => {
    stopped = true;
    if (handle) scheduler.clearTimeout(handle);
  };
}
