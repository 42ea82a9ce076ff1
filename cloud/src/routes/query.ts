import { z } from 'zod';

/**
 * A regular expression source for the decimal integers from `min` to `max` (0 <= min <= max),
 * leading zeros allowed: the exact set an integer query parameter takes, so that the OpenAPI
 * document states the bound the API enforces instead of "any digits" (a fuzzer reading
 * `^[0-9]{1,16}$` rightly sends `limit=0` and expects it to be taken).
 */
export function decimalRangePattern(min: number, max: number): string {
  if (!Number.isSafeInteger(min) || !Number.isSafeInteger(max) || min < 0 || min > max) throw new Error(`bad range ${min}..${max}`);
  const alternatives: string[] = [];
  // One run of equal-length numbers at a time: 1..100 is 1..9, 10..99, 100..100.
  for (let digits = String(min).length; digits <= String(max).length; digits++) {
    const lo = Math.max(min, digits === 1 ? 0 : 10 ** (digits - 1));
    const hi = Math.min(max, 10 ** digits - 1);
    if (lo <= hi) alternatives.push(...sameLength(String(lo), String(hi)));
  }
  // Leading zeros are taken (`007` is 7), as Number() reads them.
  return `^0*(?:${alternatives.join('|')})$`;
}

/** Alternatives matching exactly the numbers lo..hi, both written with the same number of digits. */
function sameLength(lo: string, hi: string): string[] {
  if (lo.length === 0) return [''];
  const rest = lo.length - 1;
  const any = rest === 0 ? '' : rest === 1 ? '[0-9]' : `[0-9]{${rest}}`;
  if (lo === hi) return [lo];
  if (lo.slice(1) === '0'.repeat(rest) && hi.slice(1) === '9'.repeat(rest)) return [`${digitClass(lo[0]!, hi[0]!)}${any}`];
  if (lo[0] === hi[0]) return sameLength(lo.slice(1), hi.slice(1)).map((a) => `${lo[0]}${a}`);
  const out = sameLength(lo.slice(1), '9'.repeat(rest)).map((a) => `${lo[0]}${a}`);
  const first = Number(lo[0]) + 1;
  const last = Number(hi[0]) - 1;
  if (first <= last) out.push(`${digitClass(String(first), String(last))}${any}`);
  out.push(...sameLength('0'.repeat(rest), hi.slice(1)).map((a) => `${hi[0]}${a}`));
  return out;
}

function digitClass(from: string, to: string): string {
  return from === to ? from : `[${from}-${to}]`;
}

/**
 * An integer query parameter from `min` to `max`: decimal digits only (`z.coerce.number()` took
 * `1e2`, `0x10`, `" 5"` and `5.0` as numbers; a parameter given twice arrives as an array and is
 * refused too), its range stated in the pattern the document shows.
 */
export function queryIntText(min: number, max: number) {
  return z
    .string()
    .regex(new RegExp(decimalRangePattern(min, max)), `must be an integer from ${min} to ${max}, in decimal digits`)
    .transform(Number);
}

/** An optional integer query parameter with a default. */
export function queryInt(min: number, max: number, fallback: number) {
  return queryIntText(min, max)
    .optional()
    .transform((v) => v ?? fallback)
    .describe(`integer ${min} to ${max}, default ${fallback}`);
}
