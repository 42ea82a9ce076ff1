import { defineConfig } from 'vitest/config';

// Workspace packages resolve to their TypeScript sources (the "source" export condition), so
// unit tests need no build; end-to-end tests spawn the built CLIs (`npm test` builds first).
const resolve = { conditions: ['source'] };

export default defineConfig({
  test: {
    reporters: ['default', './test/support/summary-reporter.ts'],
    projects: [
      {
        resolve,
        test: {
          name: 'unit',
          include: ['packages/*/src/**/*.test.ts', 'cloud/src/**/*.test.ts', 'agent/src/**/*.test.ts', 'simulator/src/**/*.test.ts'],
          testTimeout: 30_000,
        },
      },
      {
        resolve,
        test: {
          name: 'e2e',
          include: ['test/**/*.test.ts'],
          testTimeout: 120_000,
          hookTimeout: 60_000,
        },
      },
    ],
  },
});
