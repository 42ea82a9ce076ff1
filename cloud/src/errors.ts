import { API_ERRORS, type ApiErrorCode } from '@fleet/protocol';

/**
 * The one error type handlers throw. The edge handler turns it into
 * `{error: {code, message, details?}}` with the status from the protocol's error table.
 */
export class ApiError extends Error {
  readonly status: number;
  constructor(
    readonly code: ApiErrorCode,
    message: string,
    readonly details?: Record<string, unknown>,
    readonly headers?: Record<string, string>,
  ) {
    super(message);
    this.name = 'ApiError';
    this.status = API_ERRORS[code];
  }
}

export const notFound = (what: string): ApiError => new ApiError('not_found', `${what} not found`);

/** Where a validation issue sits: the part of the request, then a JSON Pointer into it. */
export type IssueLocation = 'body' | 'querystring' | 'params' | 'headers';

/**
 * One offending field of a request, the same shape everywhere: `path` is a JSON Pointer
 * (RFC 6901: `/filter/robot_id`, `""` for the whole part) and `code` a stable word.
 */
export interface ValidationIssue {
  location: IssueLocation;
  path: string;
  code: string;
  message: string;
  keys?: string[];
}

/** Longest piece of caller input an error quotes (a key, a path segment). */
export const MAX_QUOTED_CHARS = 64;
/** Most keys one issue lists. */
const MAX_LISTED_KEYS = 10;

/** Caller input as an error may quote it: at most MAX_QUOTED_CHARS, marked when cut. */
export function quote(text: string): string {
  return text.length > MAX_QUOTED_CHARS ? `${text.slice(0, MAX_QUOTED_CHARS)}…` : text;
}

/** A JSON Pointer from path segments, each quoted at most MAX_QUOTED_CHARS. */
export function jsonPointer(segments: readonly PropertyKey[]): string {
  return segments.map((s) => `/${quote(String(s)).replace(/~/g, '~0').replace(/\//g, '~1')}`).join('');
}

/** Unknown keys (query parameters, body fields), the same issue on every route. */
export function unrecognizedKeys(location: IssueLocation, path: string, keys: readonly string[]): ValidationIssue {
  return {
    location,
    path,
    code: 'unrecognized_keys',
    message: keys.length === 1 ? 'unknown key' : `${keys.length} unknown keys`,
    keys: keys.slice(0, MAX_LISTED_KEYS).map(quote),
  };
}

/** 400 `validation_failed` with one issue. */
export function validationError(
  location: IssueLocation,
  path: string,
  message: string,
  code = 'invalid',
  extra?: Record<string, unknown>,
): ApiError {
  return new ApiError('validation_failed', `invalid ${location}: ${message}`, { issues: [{ location, path, code, message }], ...extra });
}
