import { afterAll, expect, test } from 'vitest';

afterAll(() => {
  throw new Error('a module-level afterAll that fails');
});

test('passes', () => {
  expect(1).toBe(1);
});
