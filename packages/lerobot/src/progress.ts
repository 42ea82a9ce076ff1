/** Where an export is: what a progress line shows. */
export interface ExportProgress {
  /** Episodes of the manifest. */
  total: number;
  /** Episodes finished (staged now or before, on a resumed run). */
  done: number;
  /** Episodes skipped with a reason so far. */
  skipped: number;
  /** Frames on the grid: those of finished episodes plus those encoded so far of the ones in progress. */
  frames: number;
  /** Recording bytes downloaded by this run, counted as they arrive (a file half read counts half). */
  bytes: number;
  /** Milliseconds since this run started. */
  elapsedMs: number;
  /** Episodes finished by this run (the rate counts only these). */
  doneThisRun: number;
  phase: ExportPhase;
  /** Episodes in progress, by what they are doing (phase `episodes`). */
  working: Readonly<Record<EpisodeStep, number>>;
}

/**
 * The export's phases, in order:
 * - `manifest`: reading the snapshot's manifest (and saving it in the work directory);
 * - `episodes`: fetching, decoding and encoding episodes (see `working`);
 * - `assembling`: laying the staged episodes out as the dataset (concatenating videos);
 * - `done`: the dataset is complete.
 */
export type ExportPhase = 'manifest' | 'episodes' | 'assembling' | 'done';

/**
 * What an episode in progress is doing:
 * - `downloading`: its files stream from the source, hashed on the way;
 * - `decoding`: its recording is opened and its vector streams read onto the grid;
 * - `encoding`: its camera frames are decoded from the recording and encoded to video, one
 *   frame at a time through the same pipe (so decoding and encoding go together here).
 */
export type EpisodeStep = 'downloading' | 'decoding' | 'encoding';

export const EPISODE_STEPS: readonly EpisodeStep[] = ['downloading', 'decoding', 'encoding'];

/** Milliseconds between two progress lines. */
export const PROGRESS_INTERVAL_MS = 1000;

/**
 * What the progress ticker runs on: a clock and a one-shot timer, the same shape as the
 * `Clock` and `Scheduler` of @fleet/protocol (`ManualClock`, `ManualScheduler` fit), without
 * depending on it. The default is the system's.
 */
export interface ProgressClock {
  now(): number;
}

export interface ProgressScheduler {
  setTimeout(fn: () => void, ms: number): object;
  clearTimeout(handle: object): void;
}

export const systemProgressClock: ProgressClock = { now: () => Date.now() };

export const systemProgressScheduler: ProgressScheduler = {
  // unref: a ticker left behind by a caller that forgot to stop must not keep Node alive.
  setTimeout: (fn, ms) => setTimeout(fn, ms).unref(),
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

/**
 * Calls `tick` every `ms` on `scheduler` until stopped; each timer is armed when the previous one
 * fires, so a slow tick never piles up.
 */
export function startTicker(scheduler: ProgressScheduler, ms: number, tick: () => void): () => void {
  let handle: object | null = null;
  let stopped = false;
  const arm = (): void => {
    handle = scheduler.setTimeout(() => {
      if (stopped) return;
      arm();
      tick();
    }, ms);
  };
  arm();
  return () => {
    stopped = true;
    if (handle !== null) scheduler.clearTimeout(handle);
  };
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
 * One line: `episodes 12/100 (1 skipped)  frames 3,400  41.2 MiB  8.1 episodes/min  ETA 10m52s
 * downloading 1, encoding 1`. The rate and the ETA count only what this run did (a resumed run
 * starts its clock again).
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
  if (p.phase === 'assembling') return `${line}  assembling the dataset…`;
  const busy = EPISODE_STEPS.filter((s) => p.working[s] > 0).map((s) => `${s} ${p.working[s]}`);
  return p.phase === 'episodes' && busy.length > 0 ? `${line}  ${busy.join(', ')}` : line;
}
