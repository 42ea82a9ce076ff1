import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { compareWithReference, readReference } from './reference.js';
import { row, summaryTable, type SummaryRow } from './summary.js';

const r = (name: string, figure: number, baseline: number | null): SummaryRow => row({ name, figure, unit: 'req/s', baseline, baselineUnit: baseline === null ? null : 'req/s' });

describe('compareWithReference: the guard against regressions', () => {
  it('flags a ratio that moved by more than 20 % either way, and only those', () => {
    const reference = [r('a', 50, 100), r('b', 50, 100), r('c', 50, 100), r('d', 50, 100), r('e', 50, 100)];
    const run = [r('a', 60, 100), r('b', 61, 100), r('c', 40, 100), r('d', 39, 100), r('e', 100, 200)];
    const c = compareWithReference(run, reference);
    expect(c.rows.map((x) => [x.name, x.referenceRatio, x.change === null ? null : Math.round(x.change * 1000) / 1000, x.moved])).toEqual([
      ['a', 0.5, 0.2, false],
      ['b', 0.5, 0.22, true],
      ['c', 0.5, -0.2, false],
      ['d', 0.5, -0.22, true],
      // The figure doubled with its baseline: the same ratio, nothing moved.
      ['e', 0.5, 0, false],
    ]);
    expect(c.moved).toEqual(['b', 'd']);
    expect(c.missing).toEqual([]);
  });

  it('a row without a ratio, or new since the reference, is compared with nothing; a reference row this run lacks is listed', () => {
    const c = compareWithReference([r('new', 1, 2), r('plain', 5, null), r('zero', 1, 1)], [r('gone', 1, 2), r('plain', 5, null), r('zero', 0, 1)]);
    expect(c.rows.map((x) => [x.name, x.referenceRatio, x.change, x.moved])).toEqual([
      ['new', null, null, false],
      ['plain', null, null, false],
      ['zero', 0, null, false],
    ]);
    expect(c.missing).toEqual(['gone']);
  });

  it('the summary table shows the reference ratio and the change, marking a moved row', () => {
    const c = compareWithReference([r('x', 30, 100), r('y', 50, 100)], [r('x', 50, 100), r('y', 50, 100)]);
    const table = summaryTable(c.rows);
    expect(table.split('\n')[0]).toMatch(/reference\s+change$/);
    expect(table).toMatch(/^x .*0\.300 .*0\.500\s+-40 % !$/m);
    expect(table).toMatch(/^y .*0\.500 .*0\.500\s+0 %$/m);
    // Without a comparison the table is as before.
    expect(summaryTable([r('x', 30, 100)]).split('\n')[0]).toMatch(/baseline is$/);
  });
});

describe('readReference', () => {
  it('reads the rows of a results file and refuses anything else', () => {
    const dir = mkdtempSync(join(tmpdir(), 'bench-ref-'));
    try {
      const good = join(dir, 'ref.json');
      writeFileSync(good, JSON.stringify({ at: 'x', rows: [r('a', 1, 2), { name: 5 }] }));
      expect(readReference(good).map((x) => x.name)).toEqual(['a']);
      const bad = join(dir, 'bad.json');
      writeFileSync(bad, JSON.stringify({ rows: 'no' }));
      expect(() => readReference(bad)).toThrow(/no "rows" array/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
