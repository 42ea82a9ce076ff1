/** The provider's error table: stable code, HTTP status. Bodies are `{error: {code, message}}`. */
export const PROVIDER_ERRORS = {
  validation_failed: 400,
  unauthenticated: 401,
  not_found: 404,
  method_not_allowed: 405,
  payload_too_large: 413,
  unsupported_media_type: 415,
  internal: 500,
  /** A read request to a provider started without read links (`reads: false`, `--no-read-links`). */
  not_implemented: 501,
} as const;
export type ProviderErrorCode = keyof typeof PROVIDER_ERRORS;

/** A refusal with its code; the message goes to the caller, so it never carries a URL or a secret. */
export class ProviderError extends Error {
  constructor(
    readonly code: ProviderErrorCode,
    message: string,
  ) {
    super(message);
  }
}
