import { defineConfig } from 'vitest/config';

// The reporter under test alone, run by test/summary-reporter.test.ts on the fixtures here (they
// are not part of the suite: the suite's projects include only `*.test.ts`).
export default defineConfig({
  test: {
    include: ['*.fixture.ts'],
    reporters: [new URL('../summary-reporter.ts', import.meta.url).pathname],
  },
});
