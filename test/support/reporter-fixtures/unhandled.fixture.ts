import { setTimeout as sleep } from 'node:timers/promises';
import { expect, test } from 'vitest';

test('passes but leaves a rejection nobody handles', async () => {
  void Promise.reject(new Error('an unhandled rejection'));
  await sleep(50);
  expect(1).toBe(1);
});
