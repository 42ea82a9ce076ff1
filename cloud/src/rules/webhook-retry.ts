import { HOUR, MINUTE } from '@fleet/protocol';

/** Waits after the 1st … 6th failed webhook delivery attempt (spec, Delivery semantics 4): 7 attempts in all. */
export const RETRY_SCHEDULE_MS: readonly number[] = [MINUTE, 5 * MINUTE, 30 * MINUTE, 2 * HOUR, 12 * HOUR, 24 * HOUR];

/** Statuses that are retried (spec): 408, 425, 429 and every 5xx; anything else non-2xx dead-letters. */
export function isRetryableStatus(status: number): boolean {
  return status === 408 || status === 425 || status === 429 || status >= 500;
}
