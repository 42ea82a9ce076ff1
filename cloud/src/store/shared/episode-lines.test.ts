import { describe, expect, it } from 'vitest';
import { indexedAttrs, MAX_INDEXED_ATTR_KEY, MAX_INDEXED_ATTR_VALUE, reportedAgain } from './episode-lines.js';

/** The index rules both engines apply, without a database. */
describe('indexedAttrs: what the attribute index holds of metadata and annotations', () => {
  it('strings as they are, anything else as its JSON text', () => {
    expect([...indexedAttrs({ site: 'lab-2', shift: 3, ok: true, tags: ['a', 'b'], none: null })]).toEqual([
      ['site', 'lab-2'],
      ['shift', '3'],
      ['ok', 'true'],
      ['tags', '["a","b"]'],
      ['none', 'null'],
    ]);
  });

  it('keys and values up to their bounds are indexed; longer ones are not', () => {
    const key = 'k'.repeat(MAX_INDEXED_ATTR_KEY);
    const value = 'v'.repeat(MAX_INDEXED_ATTR_VALUE);
    expect([...indexedAttrs({ [key]: 'x', a: value })]).toEqual([
      [key, 'x'],
      ['a', value],
    ]);
    expect([...indexedAttrs({ [`${key}k`]: 'x', a: `${value}v`, b: ['v'.repeat(MAX_INDEXED_ATTR_VALUE)] })]).toEqual([]);
  });
});

describe('reportedAgain: an indexed episode id reported again', () => {
  it.each([
    ['org_a', 'rbt_1', 'duplicate'],
    ['org_a', 'rbt_2', 'conflict'],
    ['org_b', 'rbt_1', 'conflict'],
  ] as const)('by %s / %s: %s', (orgId, robotId, verdict) => {
    expect(reportedAgain({ org_id: 'org_a', robot_id: 'rbt_1' }, orgId, robotId)).toBe(verdict);
  });
});
