import { z } from 'zod';

/**
 * An integer query parameter: decimal digits only. `z.coerce.number()` took `1e2`, `0x10`,
 * `" 5"` and `5.0` as numbers; a parameter given twice arrives as an array and is refused too.
 */
export function queryInt(min: number, max: number, fallback: number) {
  return z
    .string()
    .regex(/^[0-9]{1,16}$/, 'must be written in decimal digits')
    .optional()
    .transform((v) => (v === undefined ? fallback : Number(v)))
    .pipe(z.number().int().min(min).max(max))
    .describe(`integer ${min} to ${max}, default ${fallback}`);
}
