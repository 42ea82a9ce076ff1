/** Where an export is: what a progress line shows. */
export interface ExportProgress {
  /** Episodes of the manifest. */
  total: number;
  /** Episodes finished (staged now or before, on a resumed run). */
  done: number;
  /** Episodes skipped with a reason so far. */
  skipped: number;
  /** Frames written (on the grid). */
  frames: number;
  /** Recording bytes downloaded by this run. */
  bytes: number;
  /** Milliseconds since this run started. */
  elapsedMs: number;
  /** Episodes finished by this run (the rate counts only these). */
  doneThisRun: number;
  phase: 'manifest' | 'episodes' | 'assembling' | 'done';
}

function bytesText(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  if (n < 1024 * 1024 * 1024) return `${(n / 1024 / 1024).toFixed(1)} MiB`;
  return `${(n / 1024 / 1024 / 1024).toFixed(2)} GiB`;
}

function durationText(ms: number): string {
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
}

/**
 * One line: `episodes 12/100 (1 skipped)  frames 3,400  41.2 MiB  8.1 episodes/min  ETA 10m52s`.
 * The rate and the ETA count only what this run did (a resumed run starts its clock again).
 */
export function progressLine(p: ExportProgress): string {
  if (p.phase === 'manifest') return 'reading the manifest…';
  const minutes = p.elapsedMs / 60_000;
  const rate = minutes > 0 ? p.doneThisRun / minutes : 0;
  const left = p.total - p.done - p.skipped;
  const eta = rate > 0 && left > 0 ? `  ETA ${durationText((left / rate) * 60_000)}` : '';
  const parts = [
    `episodes ${p.done + p.skipped}/${p.total}${p.skipped > 0 ? ` (${p.skipped} skipped)` : ''}`,
    `frames ${p.frames.toLocaleString('en-US')}`,
    bytesText(p.bytes),
    `${rate.toFixed(1)} episodes/min`,
  ];
  const line = parts.join('  ') + eta;
  return p.phase === 'assembling' ? `${line}  assembling the dataset…` : line;
}
