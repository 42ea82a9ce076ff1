import autocannon from 'autocannon';

/** Load shared by every target of one run, so the figures compare. */
export interface LoadOptions {
  durationS: number;
  connections: number;
  /** Unreported run before the measured one (JIT, connection pools, SQLite page cache). */
  warmupS: number;
}

export interface Target {
  label: string;
  url: string;
  method?: 'GET' | 'POST';
  headers?: Record<string, string>;
  body?: string;
}

export interface Figures {
  label: string;
  requests: number;
  rps: number;
  p50_ms: number;
  p99_ms: number;
}

function once(target: Target, durationS: number, connections: number): Promise<autocannon.Result> {
  return autocannon({
    url: target.url,
    method: target.method ?? 'GET',
    headers: target.headers ?? {},
    ...(target.body !== undefined ? { body: target.body } : {}),
    connections,
    duration: durationS,
  });
}

/**
 * Measures one target with autocannon. A run with errors or non-2xx answers measured
 * something else (a 401 is cheap): it throws instead of printing figures.
 */
export async function measure(target: Target, load: LoadOptions): Promise<Figures> {
  if (load.warmupS > 0) await once(target, load.warmupS, load.connections);
  const r = await once(target, load.durationS, load.connections);
  if (r.errors > 0 || r.non2xx > 0 || r['2xx'] === 0) {
    throw new Error(`${target.label}: ${r['2xx']} 2xx, ${r.non2xx} non-2xx, ${r.errors} errors (${r.timeouts} timeouts); figures would be meaningless`);
  }
  return { label: target.label, requests: r['2xx'], rps: r.requests.average, p50_ms: r.latency.p50, p99_ms: r.latency.p99 };
}

export interface Ratio {
  rps: number;
  p50: number;
  p99: number;
}

/** subject / baseline for each figure (throughput below 1 and latency above 1 mean slower). */
export function ratio(subject: Figures, baseline: Figures): Ratio {
  const r = (a: number, b: number) => (b === 0 ? Number.NaN : Math.round((a / b) * 1000) / 1000);
  return { rps: r(subject.rps, baseline.rps), p50: r(subject.p50_ms, baseline.p50_ms), p99: r(subject.p99_ms, baseline.p99_ms) };
}

/** A small fixed-width table: the first column left-aligned, the others right-aligned. */
export function table(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const all = [header, ...rows];
  const widths = header.map((_, i) => Math.max(...all.map((r) => (r[i] ?? '').length)));
  const line = (r: readonly string[]) => r.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}

export const fmt = (n: number, digits = 2): string => (Number.isFinite(n) ? n.toFixed(digits) : 'n/a');
