import { describe, expect, test } from 'vitest';
import fc from 'fast-check';
import { findJsonBoundsViolation, JSON_LIMITS, parseBoundedJson, safeJsonStringify } from './json.js';

const nested = (depth: number): unknown => {
  let v: unknown = 1;
  for (let i = 0; i < depth; i++) v = i % 2 === 0 ? [v] : { k: v };
  return v;
};

describe('findJsonBoundsViolation', () => {
  test('accepts exactly the maximum depth and refuses one more, naming where', () => {
    expect(findJsonBoundsViolation(nested(JSON_LIMITS.maxDepth))).toBeNull();
    const v = findJsonBoundsViolation(nested(JSON_LIMITS.maxDepth + 1));
    expect(v).toMatchObject({ limit: 'depth', max: 32 });
    expect(v!.path.split('/').length - 1).toBe(JSON_LIMITS.maxDepth);
  });

  test('walks 100,000 levels without recursion', () => {
    expect(findJsonBoundsViolation(nested(100_000))).toMatchObject({ limit: 'depth' });
  });

  test('refuses too many keys and too long arrays', () => {
    const wide = Object.fromEntries(Array.from({ length: JSON_LIMITS.maxObjectKeys + 1 }, (_, i) => [`k${i}`, i]));
    expect(findJsonBoundsViolation({ a: wide })).toMatchObject({ limit: 'keys', path: '/a' });
    expect(findJsonBoundsViolation([[new Array(JSON_LIMITS.maxArrayLength + 1).fill(0)]])).toMatchObject({ limit: 'array_length', path: '/0/0' });
    expect(findJsonBoundsViolation(new Array(JSON_LIMITS.maxArrayLength).fill({}))).toBeNull();
  });

  test('escapes pointer segments and caps long keys', () => {
    const key = 'a/b~'.repeat(100);
    const v = findJsonBoundsViolation({ [key]: nested(40) });
    expect(v!.path.startsWith('/a~1b~0')).toBe(true);
    expect(v!.path.length).toBeLessThan(40 * 70);
  });
});

describe('parseBoundedJson', () => {
  test('never quotes the input in its message', () => {
    const r = parseBoundedJson(`{"secret": ak_${'x'.repeat(5000)}}`);
    expect(r.ok).toBe(false);
    if (!r.ok) {
      expect(r.reason).toBe('invalid_json');
      expect(r.message).not.toContain('ak_');
      expect(r.message.length).toBeLessThan(80);
    }
  });

  test('refuses the 8 KB document that used to break every later read', () => {
    const r = parseBoundedJson(`{"a":${'['.repeat(4100)}${']'.repeat(4100)}}`);
    expect(r).toMatchObject({ ok: false, reason: 'bounds', violation: { limit: 'depth' } });
  });
});

describe('safeJsonStringify', () => {
  test('writes what JSON.stringify writes for JSON-shaped values', () => {
    const json = fc.jsonValue();
    fc.assert(
      fc.property(json, (v) => {
        expect(safeJsonStringify(v)).toBe(JSON.stringify(v));
      }),
    );
  });

  test('serializes a value too deep for JSON.stringify, and it parses back', () => {
    const deep = nested(200_000);
    expect(() => JSON.stringify(deep)).toThrow(RangeError);
    const text = safeJsonStringify(deep);
    expect(text.length).toBeGreaterThan(400_000);
    expect(text.startsWith('{"k":[{"k":[') || text.startsWith('[{"k":[{"k"')).toBe(true);
    // The iterative path keeps JSON.stringify's rules: undefined dropped in objects, null in arrays.
    const mixed = { a: undefined, b: [undefined, () => 1, Number.NaN], c: { toJSON: () => 'x' }, d: nested(100_000) };
    const out = safeJsonStringify(mixed);
    expect(out.startsWith('{"b":[null,null,null],"c":"x","d":')).toBe(true);
  });

  test('still refuses circular structures', () => {
    const a: Record<string, unknown> = {};
    a.self = a;
    expect(() => safeJsonStringify(a)).toThrow(TypeError);
  });
});
