import { defineConfig } from 'vitest/config';
import SpreadBrowserFiles from './test/support/sequencer.js';

// Workspace packages resolve to their TypeScript sources (the "source" export condition), so
// unit tests need no build; end-to-end tests spawn the built CLIs (`npm test` builds first).
const resolve = { conditions: ['source'] };
// Tests run in Vite's SSR environment, which ignores `resolve.conditions` (client only): it takes
// this list instead of its defaults. Vitest also hands the list to Node (--conditions), so Vite's
// "module" is left out: Node would load packages' bundler-only builds (@aws-sdk's dist-es) with it.
const ssr = { resolve: { conditions: ['source', 'node', 'development|production'] } };

// expect.poll waits on real sockets, reconnects and child processes: vitest's default of 1 s is a
// window a loaded machine misses. The timeout is only a failure bound; polls still end as soon as
// their condition holds.
const expect = { poll: { timeout: 15_000 } };

export default defineConfig({
  test: {
    // Two files at a time: most end-to-end time is spent waiting on sockets, child processes and
    // timers, not on the CPU, and vitest's default on a 2-core machine is one (cores - 1).
    maxWorkers: 2,
    // The browser files spread out among the others rather than all first (test/support/sequencer.ts).
    sequence: { sequencer: SpreadBrowserFiles },
    reporters: ['default', './test/support/summary-reporter.ts'],
    // One PostgreSQL server for the run (every engine's store suite, FLEET_TEST_DATABASE=postgres).
    globalSetup: ['./test/support/global-setup.ts'],
    projects: [
      {
        resolve,
        ssr,
        test: {
          name: 'unit',
          include: ['packages/*/src/**/*.test.ts', 'cloud/src/**/*.test.ts', 'agent/src/**/*.test.ts', 'simulator/src/**/*.test.ts', 'bench/lib/**/*.test.ts'],
          testTimeout: 30_000,
          expect,
        },
      },
      {
        resolve,
        ssr,
        test: {
          name: 'e2e',
          // The root's test/ only (the pattern is rooted): console/test is the browser project.
          include: ['test/**/*.test.ts'],
          testTimeout: 120_000,
          hookTimeout: 60_000,
          expect,
        },
      },
      {
        resolve,
        ssr,
        test: {
          // The console in Debian's chromium against a real cloud (console/test/harness.ts). Not
          // selected by test:postgres or test:replicas (they name their projects), so it runs once,
          // in the SQLite pass of `npm test`.
          name: 'browser',
          // One chromium at a time: two on two cores starve the cloud each drives. Not with
          // `maxWorkers: 1`, which puts the project in a group of its own that runs after the
          // others on one worker while the other idles (3 minutes of the run): the harness takes
          // a lock across workers instead (test/support/exclusive.ts), so a browser file shares
          // the two workers with the rest, and the sequencer spreads the files out so that one
          // rarely waits for another's chromium (its beforeAll may).
          include: ['console/test/**/*.test.ts'],
          testTimeout: 120_000,
          hookTimeout: 300_000,
          expect,
        },
      },
    ],
  },
});
