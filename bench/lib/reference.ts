import { readFileSync } from 'node:fs';
import type { SummaryRow } from './summary.js';

/**
 * The guard against regressions: `npm run bench -- all` compares each ratio of its run with the
 * same row of a committed reference run (bench/reference.json, a copy of a `latest.json` taken
 * on purpose, in the commit that says why). A ratio is compared, not a raw figure: both sides of
 * a ratio are measured in the same run, so a slower or busier machine moves it far less than it
 * moves the figures themselves.
 */

/** How far a ratio may move from the reference's before the summary flags it (20 %). */
export const REFERENCE_TOLERANCE = 0.2;

export interface Compared {
  /** The reference run's ratio for the same row name; null when the reference has no such row or no ratio. */
  referenceRatio: number | null;
  /** ratio / referenceRatio - 1 (null when either is missing or the reference's is 0). */
  change: number | null;
  /** The change is larger than the tolerance, either way. */
  moved: boolean;
}

export interface ReferenceComparison {
  rows: (SummaryRow & Compared)[];
  /** Rows whose ratio moved by more than the tolerance. */
  moved: string[];
  /** Reference rows this run has no row for (a benchmark not run, or a row renamed). */
  missing: string[];
}

export function compareWithReference(rows: readonly SummaryRow[], reference: readonly SummaryRow[], tolerance = REFERENCE_TOLERANCE): ReferenceComparison {
  const byName = new Map(reference.map((r) => [r.name, r]));
  const out = rows.map((r) => {
    const ref = byName.get(r.name);
    const referenceRatio = ref?.ratio ?? null;
    const change = r.ratio !== null && referenceRatio !== null && referenceRatio !== 0 ? r.ratio / referenceRatio - 1 : null;
    return { ...r, referenceRatio, change, moved: change !== null && Math.abs(change) > tolerance };
  });
  const names = new Set(rows.map((r) => r.name));
  return { rows: out, moved: out.filter((r) => r.moved).map((r) => r.name), missing: reference.map((r) => r.name).filter((n) => !names.has(n)) };
}

/** The rows of a results file (`latest.json` as `bench -- all` writes it); a clear error for anything else. */
export function readReference(path: string): SummaryRow[] {
  const parsed = JSON.parse(readFileSync(path, 'utf8')) as { rows?: unknown };
  if (!Array.isArray(parsed.rows)) throw new Error(`${path} has no "rows" array: not a bench -- all results file`);
  return parsed.rows.filter(
    (r): r is SummaryRow => typeof r === 'object' && r !== null && typeof (r as SummaryRow).name === 'string' && ((r as SummaryRow).ratio === null || typeof (r as SummaryRow).ratio === 'number'),
  );
}
