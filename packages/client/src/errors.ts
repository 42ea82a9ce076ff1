import { API_ERRORS, API_KEY_PATTERN, parseRetryAfter, type ApiErrorCode } from '@fleet/protocol/browser';

/**
 * The `code` of a {@link FleetApiError}: one of the API's documented error codes, or
 * `http_error` when the answer had no error body of ours (a proxy's page, a newer server's code
 * this client does not know; the raw code is then in `serverCode`).
 */
export type FleetErrorCode = ApiErrorCode | 'http_error';

export const FLEET_ERROR_CODES = Object.keys(API_ERRORS) as ApiErrorCode[];

function isApiErrorCode(code: unknown): code is ApiErrorCode {
  return typeof code === 'string' && Object.hasOwn(API_ERRORS, code);
}

/** A non-2xx answer from /v1: branch on `code`, never on `message`. */
export class FleetApiError extends Error {
  readonly status: number;
  readonly code: FleetErrorCode;
  readonly details: Record<string, unknown> | undefined;
  /** The X-Request-Id of the request: quote it when asking for support. */
  readonly requestId: string | null;
  /** The same as `requestId`, spelled as in the error body. */
  readonly request_id: string | null;
  /** The code as the server sent it (differs from `code` only for `http_error`). */
  readonly serverCode: string | null;
  /** `Retry-After` in milliseconds, when the server sent one (429). */
  readonly retryAfterMs: number | undefined;

  constructor(init: {
    status: number;
    code: string | undefined;
    message: string;
    details?: Record<string, unknown> | undefined;
    requestId: string | null;
    retryAfterMs?: number | undefined;
  }) {
    super(init.message);
    this.name = 'FleetApiError';
    this.status = init.status;
    this.code = isApiErrorCode(init.code) ? init.code : 'http_error';
    this.serverCode = init.code ?? null;
    this.details = init.details;
    this.requestId = init.requestId;
    this.request_id = init.requestId;
    this.retryAfterMs = init.retryAfterMs;
  }
}

/** No HTTP answer at all (connection refused, reset, DNS), after the retries the policy allows. */
export class FleetConnectionError extends Error {
  constructor(
    message: string,
    readonly method: string,
    readonly url: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'FleetConnectionError';
  }
}

/** What an API key must look like, in words. */
export const API_KEY_FORMAT = 'ak_ followed by 16 to 128 letters, digits, _ or -';

/**
 * Why `key` is not an API key, in words that never quote it (it may be a real key with a typo);
 * null when it has the format of one. Surrounding whitespace is not counted (it is trimmed).
 */
export function apiKeyProblem(key: string): string | null {
  const k = key.trim();
  if (API_KEY_PATTERN.test(k)) return null;
  if (k === '') return 'it is empty';
  if (!k.startsWith('ak_')) return `it does not start with ak_ (${k.length} characters)`;
  const rest = k.slice(3);
  if (/[^A-Za-z0-9_-]/.test(rest)) {
    const what = /\s/.test(rest) ? ' (a space or a line break)' : /["'`\u2018\u2019\u201c\u201d]/.test(rest) ? ' (a quote)' : '';
    return `it contains a character other than letters, digits, _ and -${what}`;
  }
  return `it has ${rest.length} characters after ak_, not 16 to 128`;
}

/**
 * The API key given to the client is not one (a truncated paste, a quote or a space in it): it
 * was not sent. The message says what is wrong and never contains the key.
 */
export class MalformedApiKeyError extends Error {
  readonly code = 'malformed_api_key';
  constructor(readonly problem: string) {
    super(`malformed API key: expected ${API_KEY_FORMAT}; ${problem}`);
    this.name = 'MalformedApiKeyError';
  }
}

/** An export or manifest stream that broke the NDJSON contract (a line too long, not JSON). */
export class FleetStreamError extends Error {
  constructor(
    readonly reason: 'line_too_long' | 'invalid_json',
    message: string,
  ) {
    super(message);
    this.name = 'FleetStreamError';
  }
}

/** `err` is a FleetApiError, with that `code` when one is given. */
export function isFleetApiError<C extends FleetErrorCode>(err: unknown, code?: C): err is FleetApiError & { code: C } {
  return err instanceof FleetApiError && (code === undefined || err.code === code);
}

interface ErrorBody {
  error?: { code?: string; message?: string; details?: Record<string, unknown>; request_id?: string };
}

/** The FleetApiError of a non-2xx answer and its parsed body (anything: a proxy's page is no error body). */
export function apiErrorOf(response: Response, body: unknown): FleetApiError {
  const err = typeof body === 'object' && body !== null ? (body as ErrorBody).error : undefined;
  const retryAfterMs = parseRetryAfter(response.headers.get('retry-after') ?? undefined, Date.now());
  return new FleetApiError({
    status: response.status,
    code: err?.code,
    message: err?.message ?? `HTTP ${response.status}`,
    details: err?.details,
    requestId: err?.request_id ?? response.headers.get('x-request-id'),
    retryAfterMs,
  });
}
