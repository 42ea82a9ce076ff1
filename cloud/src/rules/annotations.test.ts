import { describe, expect, it } from 'vitest';
import { mergeAnnotations } from './annotations.js';

describe('mergeAnnotations', () => {
  it('sets, replaces and removes keys, and keeps the others', () => {
    const before = { reviewed: false, label: 'pick', notes: { a: 1, b: 2 } };
    expect(mergeAnnotations(before, { reviewed: true, label: null, score: 0.5, notes: { c: 3 } })).toEqual({ reviewed: true, notes: { c: 3 }, score: 0.5 });
    // The stored annotations are not changed in place.
    expect(before).toEqual({ reviewed: false, label: 'pick', notes: { a: 1, b: 2 } });
  });

  it('removing a key that is not there changes nothing; an empty patch keeps everything', () => {
    expect(mergeAnnotations({ a: 1 }, { b: null })).toEqual({ a: 1 });
    expect(mergeAnnotations({ a: 1 }, {})).toEqual({ a: 1 });
  });

  it('keeps values that are falsy but not null (false, 0, empty string, empty array)', () => {
    expect(mergeAnnotations({}, { f: false, z: 0, s: '', l: [] })).toEqual({ f: false, z: 0, s: '', l: [] });
  });

  it('treats __proto__ as an ordinary key, never as the prototype', () => {
    const patch = JSON.parse('{"__proto__": {"polluted": true}}') as Record<string, unknown>;
    const after = mergeAnnotations({}, patch);
    expect(Object.getPrototypeOf(after)).toBe(Object.prototype);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(JSON.stringify(after)).toBe('{"__proto__":{"polluted":true}}');
  });
});
