import { validationError } from '../errors.js';

/** Cursors are opaque: base64url of a JSON value the route alone understands. */
export function encodeCursor(value: unknown): string {
  return Buffer.from(JSON.stringify(value)).toString('base64url');
}

/** Decodes and checks a cursor; anything that does not decode is 400 validation_failed. */
export function decodeCursor<T>(cursor: string, check: (v: unknown) => T | null): T {
  let value: T | null = null;
  try {
    value = check(JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')));
  } catch {
    value = null;
  }
  if (value === null) {
    throw validationError('querystring', '/cursor', 'the cursor does not decode', 'invalid_cursor');
  }
  return value;
}
