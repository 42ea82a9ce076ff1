import { beforeAll, describe, expect, test } from 'vitest';

describe('a suite whose beforeAll fails', () => {
  beforeAll(() => {
    throw new Error('a suite-level beforeAll that fails');
  });

  test('never runs', () => {
    expect(1).toBe(1);
  });
});

test('passes', () => {
  expect(1).toBe(1);
});
