import { validationError } from '../errors.js';
import type { OpaqueIds, OpaqueKind } from '../opaque-ids.js';

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
  if (value === null) throw undecodable();
  return value;
}

/**
 * A cursor that is a position in a counter shared by every organization (the episode index's
 * seq, the attempt log's id): sealed as an opaque handle, so it tells a tenant nothing of other
 * tenants' rows. Anything that does not decode is 400 validation_failed.
 */
export function decodeRowCursor(ids: OpaqueIds, kind: OpaqueKind, cursor: string): number {
  const n = ids.decode(kind, cursor);
  if (n === null) throw undecodable();
  return n;
}

const undecodable = () => validationError('querystring', '/cursor', 'the cursor does not decode', 'invalid_cursor');
