/**
 * A small seeded generator (mulberry32): the simulator's choices (when to start an episode, which
 * outcome) repeat exactly for the same seed, so a run that shows a problem can be replayed.
 */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Picks a key of `weights` with probability proportional to its weight. */
export function weightedPick<K extends string>(weights: Readonly<Record<K, number>>, random: () => number): K {
  const entries = Object.entries(weights) as [K, number][];
  const total = entries.reduce((sum, [, w]) => sum + Math.max(0, w), 0);
  if (total <= 0) throw new Error('weightedPick: every weight is zero');
  let r = random() * total;
  for (const [key, w] of entries) {
    r -= Math.max(0, w);
    if (r < 0) return key;
  }
  return entries[entries.length - 1]![0];
}
