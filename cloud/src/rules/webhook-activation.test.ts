import { describe, expect, it } from 'vitest';
import { activation } from './webhook-activation.js';

describe('activation: the bound on active webhook subscriptions', () => {
  it.each([
    ['new', 0, 3, 'activate'],
    ['new', 2, 3, 'activate'],
    ['new', 3, 3, 'limit'],
    ['new', 4, 3, 'limit'],
    ['disabled', 2, 3, 'activate'],
    ['disabled', 3, 3, 'limit'],
    ['active', 3, 3, 'unchanged'],
    ['active', 9, 3, 'unchanged'],
    ['new', 0, 0, 'limit'],
  ] as const)('%s with %i active of %i: %s', (status, active, max, expected) => {
    expect(activation(status, active, max)).toBe(expected);
  });
});
