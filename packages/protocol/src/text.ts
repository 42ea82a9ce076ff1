import { z } from 'zod';

// A UTF-16 surrogate without its partner: not a character, and not encodable as UTF-8.
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

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
    .refine((s) => s.trim().length > 0, 'must not be only white space');
}
