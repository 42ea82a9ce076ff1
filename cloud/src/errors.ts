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
