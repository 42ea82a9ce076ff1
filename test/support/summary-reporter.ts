import type { Reporter, SerializedError, TestModule, TestRunEndReason } from 'vitest/node';

/** The closing line's counts. */
export interface RunSummary {
  passed: number;
  failed: number;
  skipped: number;
}

/** What `countResults` reads of a vitest TestModule (a fake with these members stands in for it in tests). */
export interface CountedModule {
  state(): string;
  /** Errors of the module itself: collection errors, and failing module-level beforeAll/afterAll hooks. */
  errors(): readonly unknown[];
  children: {
    allTests(): Iterable<{ result(): { state: string } }>;
    /** Every suite of the module; a suite's errors() are its failing beforeAll/afterAll hooks. */
    allSuites(): Iterable<{ errors(): readonly unknown[] }>;
  };
}

/**
 * Counts tests by state, and counts as failed, besides failed tests: every module or suite that
 * has errors of its own (a failing beforeAll/afterAll, a module that could not be collected),
 * every unhandled error, and a module vitest says failed where nothing else explains it. A run
 * vitest calls failed never ends with `0 failed`.
 */
export function countResults(modules: Iterable<CountedModule>, unhandledErrors: readonly unknown[] = [], reason?: TestRunEndReason): RunSummary {
  const summary: RunSummary = { passed: 0, failed: 0, skipped: 0 };
  for (const mod of modules) {
    let failedHere = 0;
    for (const test of mod.children.allTests()) {
      const state = test.result().state;
      if (state === 'passed') summary.passed++;
      else if (state === 'failed') failedHere++;
      else summary.skipped++;
    }
    if (mod.errors().length > 0) failedHere++;
    for (const suite of mod.children.allSuites()) if (suite.errors().length > 0) failedHere++;
    if (mod.state() === 'failed' && failedHere === 0) failedHere = 1;
    summary.failed += failedHere;
  }
  summary.failed += unhandledErrors.length;
  if (reason === 'failed' && summary.failed === 0) summary.failed = 1;
  return summary;
}

export function formatSummary(s: RunSummary): string {
  return `vitest: ${s.passed} passed, ${s.failed} failed, ${s.skipped} skipped`;
}

/**
 * Ends the run with one plain line, `vitest: N passed, N failed, N skipped`, that any CI reads
 * without knowing vitest's own summary format. `failed` counts failed tests plus failures outside
 * any test (hooks, collection, unhandled errors), so it is 0 only when nothing failed.
 */
export default class SummaryReporter implements Reporter {
  onTestRunEnd(testModules: ReadonlyArray<TestModule>, unhandledErrors: ReadonlyArray<SerializedError>, reason: TestRunEndReason): void {
    process.stdout.write(`\n${formatSummary(countResults(testModules, unhandledErrors, reason))}\n`);
  }
}
