import type { Scheduler } from './time.js';

/**
 * Retry policy as data (a schedule of waits), shared by the cloud's webhook delivery and the
 * typed client (its requests, its commands and the event stream's reconnects). `schedule[i]` is the wait after the (i+1)-th failed attempt; past
 * its end the work is given up. `jitter` spreads waits by up to that fraction either way so a
 * fleet that failed together does not retry together.
 */
export interface RetryPolicy {
  schedule: readonly number[];
  /** 0 (none) to 1; a wait w becomes w × (1 ± jitter × random). */
  jitter?: number;
}

/**
 * The wait before the next attempt after `failedAttempts` failures, or null when the schedule is
 * exhausted. A server's `Retry-After` (ms) is honoured when it asks for longer than the schedule.
 */
export function nextRetryDelay(policy: RetryPolicy, failedAttempts: number, opts: { retryAfterMs?: number; random?: () => number } = {}): number | null {
  const base = policy.schedule[Math.max(0, failedAttempts - 1)];
  if (base === undefined) return null;
  return Math.round(Math.max(jitter(base, policy.jitter ?? 0, opts.random), opts.retryAfterMs ?? 0));
}

/**
 * `ms` spread uniformly over ms × (1 ± fraction) by `random()` (in [0, 1)), never negative; a
 * fraction of 0 (or below) is `ms` itself and draws nothing. The one jitter of every retry and
 * reconnect: the client's and the webhooks' schedules, the agent's replica retries and its
 * broker reconnects.
 */
export function jitter(ms: number, fraction: number, random: () => number = Math.random): number {
  const f = Math.min(1, Math.max(0, fraction));
  return f === 0 ? ms : Math.max(0, ms * (1 + f * (2 * random() - 1)));
}

/** `Retry-After` as milliseconds: delay-seconds or an HTTP date; undefined when absent or invalid. */
export function parseRetryAfter(value: string | string[] | undefined, now: number): number | undefined {
  const v = Array.isArray(value) ? value[0] : value;
  if (v === undefined) return undefined;
  if (/^\d{1,9}$/.test(v.trim())) return Number(v.trim()) * 1000;
  const at = Date.parse(v);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}

export interface RetryOptions<T> {
  policy: RetryPolicy;
  scheduler: Scheduler;
  /** Whether a failure (thrown) is worth another attempt; default: always. */
  shouldRetry?: (err: unknown) => boolean;
  /** A server's requested wait for this failure, in ms. */
  retryAfterOf?: (err: unknown) => number | undefined;
  random?: () => number;
  /** Told before each wait (for logs and progress). */
  onRetry?: (err: unknown, attempt: number, waitMs: number) => void;
  signal?: AbortSignal;
  /** For type inference only. */
  _?: T;
}

/** Runs `fn` until it resolves, a failure is not retryable, or the schedule is exhausted. */
export async function retry<T>(fn: (attempt: number) => Promise<T>, opts: RetryOptions<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn(attempt);
    } catch (err) {
      if (opts.signal?.aborted || (opts.shouldRetry && !opts.shouldRetry(err))) throw err;
      const retryAfterMs = opts.retryAfterOf?.(err);
      const wait = nextRetryDelay(opts.policy, attempt, { ...(retryAfterMs !== undefined ? { retryAfterMs } : {}), ...(opts.random ? { random: opts.random } : {}) });
      if (wait === null) throw err;
      opts.onRetry?.(err, attempt, wait);
      await new Promise<void>((resolve) => opts.scheduler.setTimeout(resolve, wait));
    }
  }
}
