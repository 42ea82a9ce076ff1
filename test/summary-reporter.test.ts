import { join } from 'node:path';
import { describe, expect, test } from 'vitest';
import { REPO_ROOT } from './support/cloud.js';
import { runProcess } from './support/process.js';
import { countResults, type CountedModule } from './support/summary-reporter.js';

const FIXTURES = join(REPO_ROOT, 'test', 'support', 'reporter-fixtures');
const VITEST = join(REPO_ROOT, 'node_modules', 'vitest', 'vitest.mjs');

/** Runs vitest with only the summary reporter on one fixture file; its exit code and closing line. */
async function runFixture(name: string): Promise<{ code: number | null; line: string | undefined }> {
  // The child is a vitest run of its own, not a worker of this one.
  const env: Record<string, string | undefined> = {};
  for (const k of Object.keys(process.env)) if (k.startsWith('VITEST') || k === 'TEST' || k === 'NODE_ENV') env[k] = undefined;
  const r = await runProcess(process.execPath, [VITEST, 'run', '--root', FIXTURES, `${name}.fixture.ts`], { cwd: REPO_ROOT, env, timeoutMs: 60_000 });
  return { code: r.code, line: r.stdout.split('\n').find((l) => l.startsWith('vitest: ')) };
}

function fakeModule(o: { tests?: string[]; errors?: number; suiteErrors?: number[]; state?: string }): CountedModule {
  return {
    state: () => o.state ?? 'passed',
    errors: () => Array.from({ length: o.errors ?? 0 }, () => ({ message: 'module error' })),
    children: {
      allTests: () => (o.tests ?? []).map((state) => ({ result: () => ({ state }) })),
      allSuites: () => (o.suiteErrors ?? []).map((n) => ({ errors: () => Array.from({ length: n }, () => ({ message: 'hook error' })) })),
    },
  };
}

describe('countResults', () => {
  test('counts tests by state', () => {
    expect(countResults([fakeModule({ tests: ['passed', 'passed', 'failed', 'skipped', 'pending'] })], [], 'failed')).toEqual({ passed: 2, failed: 1, skipped: 2 });
  });

  test('a module whose tests passed but whose afterAll failed is a failure', () => {
    expect(countResults([fakeModule({ tests: ['passed', 'passed'], errors: 1, state: 'failed' })])).toEqual({ passed: 2, failed: 1, skipped: 0 });
  });

  test('a suite with a failing hook is a failure, its skipped tests stay skipped', () => {
    expect(countResults([fakeModule({ tests: ['passed', 'skipped'], suiteErrors: [0, 1], state: 'failed' })])).toEqual({ passed: 1, failed: 1, skipped: 1 });
  });

  test('a module that could not be collected is a failure', () => {
    expect(countResults([fakeModule({ errors: 1, state: 'failed' })])).toEqual({ passed: 0, failed: 1, skipped: 0 });
  });

  test('a module vitest marks failed without any error to show for it is still a failure', () => {
    expect(countResults([fakeModule({ tests: ['passed'], state: 'failed' })])).toEqual({ passed: 1, failed: 1, skipped: 0 });
  });

  test('every unhandled error is a failure', () => {
    expect(countResults([fakeModule({ tests: ['passed'] })], [{ message: 'a' }, { message: 'b' }])).toEqual({ passed: 1, failed: 2, skipped: 0 });
  });

  test('a run vitest calls failed never counts 0 failed', () => {
    expect(countResults([fakeModule({ tests: ['passed'] })], [], 'failed')).toEqual({ passed: 1, failed: 1, skipped: 0 });
  });

  test('a clean run counts 0 failed', () => {
    expect(countResults([fakeModule({ tests: ['passed', 'skipped'] })], [], 'passed')).toEqual({ passed: 1, failed: 0, skipped: 1 });
  });
});

describe('the closing line of a real vitest run', () => {
  test.each([
    ['passing', 0, 'vitest: 1 passed, 0 failed, 1 skipped'],
    ['failing-test', 1, 'vitest: 1 passed, 1 failed, 0 skipped'],
    ['after-all', 1, 'vitest: 1 passed, 1 failed, 0 skipped'],
    ['before-all', 1, 'vitest: 1 passed, 1 failed, 1 skipped'],
    ['unhandled', 1, 'vitest: 1 passed, 1 failed, 0 skipped'],
  ])('%s: exit %i, %s', async (fixture, code, line) => {
    expect(await runFixture(fixture)).toEqual({ code, line });
  });
});
