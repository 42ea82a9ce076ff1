import { fmt } from './measure.js';

/**
 * One figure of a benchmark next to its baseline measured in the same run: what `npm run bench
 * -- all` collects from every module. `ratio` is figure / baseline (null without a baseline);
 * `note` says what the figure did (sizes, what the baseline is) in a few words.
 */
export interface SummaryRow {
  name: string;
  figure: number;
  unit: string;
  baseline: number | null;
  baselineUnit: string | null;
  /** What the baseline is, e.g. "raw SQLite batched insert, same rows". */
  baselineName?: string;
  ratio: number | null;
  /** The target for this row, as text (informational; nothing asserts it). */
  target?: string;
  note?: string;
}

/** A row; the ratio is computed when both sides are finite and the baseline is not 0. */
export function row(r: Omit<SummaryRow, 'ratio'> & { ratio?: number | null }): SummaryRow {
  const ratio =
    r.ratio !== undefined ? r.ratio : r.baseline !== null && Number.isFinite(r.figure) && Number.isFinite(r.baseline) && r.baseline !== 0 ? round(r.figure / r.baseline, 3) : null;
  return { ...r, figure: round(r.figure, 3), baseline: r.baseline === null ? null : round(r.baseline, 3), ratio };
}

export function round(x: number, digits = 3): number {
  const f = 10 ** digits;
  return Number.isFinite(x) ? Math.round(x * f) / f : x;
}

function num(x: number): string {
  if (!Number.isFinite(x)) return 'n/a';
  const a = Math.abs(x);
  return fmt(x, a >= 1000 ? 0 : a >= 10 ? 1 : a >= 1 ? 2 : 3);
}

/**
 * The plain-text summary: one line per row, aligned columns (numbers right, text left). Rows
 * compared with a reference run (bench/lib/reference.ts) get two more columns: the reference's
 * ratio and the change, marked `!` where it moved beyond the tolerance.
 */
export function summaryTable(rows: readonly (SummaryRow & { referenceRatio?: number | null; change?: number | null; moved?: boolean })[]): string {
  const compared = rows.some((r) => r.referenceRatio !== undefined);
  const header = ['figure', 'value', 'unit', 'baseline', 'unit', 'ratio', 'baseline is', ...(compared ? ['reference', 'change'] : [])];
  const cells = rows.map((r) => [
    r.name,
    num(r.figure),
    r.unit,
    r.baseline === null ? '-' : num(r.baseline),
    r.baselineUnit ?? '',
    r.ratio === null ? '-' : fmt(r.ratio, 3),
    r.baselineName ?? '',
    ...(compared
      ? [
          r.referenceRatio === null || r.referenceRatio === undefined ? '-' : fmt(r.referenceRatio, 3),
          r.change === null || r.change === undefined ? '-' : `${r.change > 0 ? '+' : ''}${fmt(r.change * 100, 0)} %${r.moved ? ' !' : ''}`,
        ]
      : []),
  ]);
  const right = new Set([1, 3, 5, 7]);
  const all = [header, ...cells];
  const widths = header.map((_, i) => Math.max(...all.map((c) => c[i]!.length)));
  const line = (c: readonly string[]) => c.map((x, i) => (right.has(i) ? x.padStart(widths[i]!) : x.padEnd(widths[i]!))).join('  ').trimEnd();
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...cells.map(line)].join('\n');
}

/** A benchmark that failed: a failed request or an incomplete run. The runner exits non-zero. */
export class BenchFailure extends Error {
  override name = 'BenchFailure';
}
