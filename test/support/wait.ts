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
