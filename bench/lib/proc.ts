import { readFileSync, writeFileSync } from 'node:fs';

/** VmRSS and VmHWM (peak) of a process, in MiB (Linux /proc). */
export function memoryMb(pid: number): { rss: number; hwm: number } {
  const text = readFileSync(`/proc/${pid}/status`, 'utf8');
  const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? Number.NaN) / 1024;
  return { rss: field('VmRSS'), hwm: field('VmHWM') };
}

/**
 * Resets the kernel's peak RSS (VmHWM) of a process we started to its current RSS, so a later
 * VmHWM is the peak of what ran in between. False when the kernel refuses (then VmHWM is the
 * peak since the process started, and a growth computed from it can only be larger).
 */
export function resetPeakRss(pid: number): boolean {
  try {
    writeFileSync(`/proc/${pid}/clear_refs`, '5');
    return true;
  } catch {
    return false;
  }
}

/** The p-th percentile (nearest rank) of ascending values; NaN when empty. */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i]!;
}
