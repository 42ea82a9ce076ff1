import { performance } from 'node:perf_hooks';

/** Figures of one closed-loop run: each worker sends its next request when the last one answered. */
export interface LoopFigures {
  label: string;
  /** Requests in flight at all times. */
  concurrency: number;
  requests: number;
  /** Completed requests per second over the measured run. */
  per_s: number;
  p50_ms: number;
  p99_ms: number;
  max_ms: number;
}

function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i]!;
}

async function loop(concurrency: number, durationMs: number, op: (worker: number, n: number) => Promise<void>, record: boolean): Promise<{ latencies: number[]; elapsedMs: number }> {
  const latencies: number[] = [];
  const start = performance.now();
  const deadline = start + durationMs;
  let n = 0;
  const worker = async (w: number) => {
    while (performance.now() < deadline) {
      const t0 = performance.now();
      await op(w, n++);
      if (record) latencies.push(performance.now() - t0);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, (_, w) => worker(w)));
  return { latencies, elapsedMs: performance.now() - start };
}

/**
 * Runs `op` from `concurrency` workers for `durationS` seconds (after an unreported warm-up) and
 * reports latency percentiles and throughput. The same runner measures every target of a
 * benchmark, so its own overhead is in every figure alike. An `op` that throws aborts the run:
 * figures with failures in them would measure something else.
 */
export async function closedLoop(label: string, opts: { concurrency: number; durationS: number; warmupS: number }, op: (worker: number, n: number) => Promise<void>): Promise<LoopFigures> {
  if (opts.warmupS > 0) await loop(opts.concurrency, opts.warmupS * 1000, op, false);
  const { latencies, elapsedMs } = await loop(opts.concurrency, opts.durationS * 1000, op, true);
  latencies.sort((a, b) => a - b);
  const round = (x: number) => Math.round(x * 1000) / 1000;
  return {
    label,
    concurrency: opts.concurrency,
    requests: latencies.length,
    per_s: round(latencies.length / (elapsedMs / 1000)),
    p50_ms: round(percentile(latencies, 50)),
    p99_ms: round(percentile(latencies, 99)),
    max_ms: round(latencies[latencies.length - 1] ?? Number.NaN),
  };
}
