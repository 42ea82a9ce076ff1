import { parseArgs, type ParseArgsConfig } from 'node:util';
import type { SummaryRow } from './summary.js';

/**
 * One benchmark: `npm run bench -- <name> [--duration S] [--connections N] [--warmup S] ...`.
 * `run` prints its own tables and returns its figures as summary rows (`npm run bench -- all`
 * collects them); it throws when a request failed or the run is incomplete.
 */
export interface BenchModule {
  description: string;
  run(argv: string[]): Promise<SummaryRow[]>;
}

export interface CommonArgs {
  /** Seconds per measured run (default 10). */
  duration: number;
  /** Concurrent connections (default 50). */
  connections: number;
  /** Seconds of unreported warm-up per target (default 1). */
  warmup: number;
  /** Values of the options a benchmark declared itself. */
  extra: Record<string, string | boolean | undefined>;
}

type Extra = NonNullable<ParseArgsConfig['options']>;

function positive(name: string, raw: string | undefined, fallback: number, min: number): number {
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (!Number.isFinite(n) || n < min) throw new Error(`--${name} must be a number >= ${min}, got ${raw}`);
  return n;
}

/** The options every benchmark shares, plus its own. Unknown options are an error. */
export function parseBenchArgs(argv: string[], extra: Extra = {}): CommonArgs {
  const { values } = parseArgs({
    args: argv,
    strict: true,
    allowPositionals: false,
    options: {
      duration: { type: 'string' },
      connections: { type: 'string' },
      warmup: { type: 'string' },
      ...extra,
    },
  });
  const v = values as Record<string, string | boolean | undefined>;
  const str = (k: string) => (typeof v[k] === 'string' ? v[k] : undefined);
  const duration = positive('duration', str('duration'), 10, 1);
  const rest: Record<string, string | boolean | undefined> = {};
  for (const k of Object.keys(extra)) rest[k] = v[k];
  return {
    duration,
    connections: Math.floor(positive('connections', str('connections'), 50, 1)),
    warmup: positive('warmup', str('warmup'), 1, 0),
    extra: rest,
  };
}
