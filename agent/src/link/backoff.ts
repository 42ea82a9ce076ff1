import { jitter } from '@fleet/protocol';

/**
 * Delay before reconnect attempt `attempt` (0 for the first): doubles from `minMs` up to `maxMs`,
 * then takes a random point in its upper half, so a fleet that lost its broker together does not
 * come back in lockstep.
 */
export function reconnectDelay(attempt: number, minMs: number, maxMs: number, random: () => number = Math.random): number {
  const base = Math.min(maxMs, minMs * 2 ** Math.min(attempt, 30));
  // The upper half [base / 2, base]: three quarters of it, ± a third.
  return Math.max(minMs, Math.round(jitter((base * 3) / 4, 1 / 3, random)));
}
