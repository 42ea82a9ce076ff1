import { setTimeout as sleep } from 'node:timers/promises';

/**
 * Polls `probe` until it returns something other than undefined. The timeout is only a failure
 * bound (never an assertion about how long something takes); its error says what was awaited.
 */
export async function waitFor<T>(
  probe: () => Promise<T | undefined> | T | undefined,
  opts: { timeoutMs?: number; intervalMs?: number; description?: string | (() => string) } = {},
): Promise<T> {
  const timeoutMs = opts.timeoutMs ?? 15_000;
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      const v = await probe();
      if (v !== undefined) return v;
    } catch (err) {
      lastError = err;
    }
    if (Date.now() > deadline) {
      const what = typeof opts.description === 'function' ? opts.description() : (opts.description ?? 'a condition');
      const cause = lastError instanceof Error ? ` (last error: ${lastError.message})` : '';
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${cause}`);
    }
    await sleep(opts.intervalMs ?? 50);
  }
}

/**
 * For a real-time window another process judges (a key or token that expires): runs `attempt`
 * with a deadline `windowMs` ahead and returns what it observed once the attempt also finished
 * before that deadline. An attempt that ends after it (a loaded machine was slower than the
 * window) proves nothing either way, so it is run again with twice the window, up to
 * `maxWindowMs`. The attempt must not assert; the caller asserts on what it returns, knowing it
 * all happened before the deadline.
 */
export async function beforeDeadline<T>(
  attempt: (deadline: Date) => Promise<T>,
  opts: { windowMs: number; maxWindowMs?: number; description?: string },
): Promise<{ value: T; deadline: Date }> {
  const maxWindowMs = opts.maxWindowMs ?? 60_000;
  for (let windowMs = opts.windowMs; ; windowMs *= 2) {
    const deadline = new Date(Date.now() + windowMs);
    const value = await attempt(deadline);
    if (Date.now() < deadline.getTime()) return { value, deadline };
    if (windowMs * 2 > maxWindowMs) throw new Error(`${opts.description ?? 'the attempt'} did not fit in a ${windowMs} ms window`);
  }
}

/** Waits until the wall clock is past `deadline` (a condition, not a fixed sleep). */
export async function untilPast(deadline: Date, intervalMs = 50): Promise<void> {
  while (Date.now() <= deadline.getTime()) await sleep(intervalMs);
}
