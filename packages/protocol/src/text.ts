import { z } from 'zod';

// A UTF-16 surrogate without its partner: not a character, and not encodable as UTF-8.
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** The characters String.prototype.trim removes (ECMAScript WhiteSpace and LineTerminator). */
const TRIMMED = '\\t\\n\\v\\f\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff';

/**
 * humanText's refinements, as far as a portable `pattern` in the OpenAPI document can say them (a
 * refinement is code, which no JSON Schema generator reads): no NUL, and at least one character
 * `trim()` keeps. The white space is spelled out, not `\s`, whose meaning differs between
 * engines (Python's includes U+001C to U+001F). The lone-surrogate rule is left to the
 * refinement: Rust's regex engine (pydantic's, for the Python SDK's models) cannot name a
 * surrogate at all, and no UTF-8 client can send one except as a `\ud800` escape in JSON.
 * Validation stays the refinements; text.test.ts holds the two equal.
 */
export const HUMAN_TEXT_PATTERN = `^[^\\u0000]*[^\\u0000${TRIMMED}][^\\u0000]*$`;

/**
 * Text a person gives a thing (a name, a description, a reason): `min` to `max` characters, no
 * NUL, no lone surrogate, and not only white space. Such values sort, print and round-trip
 * through every store and client; the refused ones break one of those later, far from here.
 */
export function humanText(min: number, max: number) {
  return z
    .string()
    .min(min)
    .max(max)
    .refine((s) => !s.includes('\u0000'), 'must not contain NUL')
    .refine((s) => !LONE_SURROGATE.test(s), 'must be well-formed Unicode (no lone surrogate)')
    .refine((s) => s.trim().length > 0, 'must not be only white space')
    .meta({ pattern: HUMAN_TEXT_PATTERN });
}
