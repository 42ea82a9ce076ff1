import * as byName from '@fleet/protocol';
import { expect, it } from 'vitest';
import * as bySource from './index.js';

// Tests across the workspace import this package by name. In a test that name must resolve to this
// very source (vitest.config.ts, the "source" condition of the SSR environment the tests run in),
// not to dist/: otherwise a change here is tested against whatever was built last.
it('resolves @fleet/protocol to its TypeScript source, not a build', () => {
  expect(byName).toBe(bySource);
});
