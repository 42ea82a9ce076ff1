import { z } from 'zod';

/**
 * Every error code the /v1 API answers with, and its HTTP status (decisions.md, HTTP conventions).
 * Clients branch on `code`, never on the message.
 */
export const API_ERRORS = {
  validation_failed: 400,
  unauthenticated: 401,
  insufficient_scope: 403,
  entitlement_required: 403,
  read_links_refused: 403,
  not_found: 404,
  method_not_allowed: 405,
  request_timeout: 408,
  conflict: 409,
  robot_deenrolled: 409,
  replica_not_verified: 409,
  idempotency_key_in_use: 409,
  payload_too_large: 413,
  unsupported_media_type: 415,
  headers_too_large: 431,
  idempotency_key_reused: 422,
  rate_limited: 429,
  internal: 500,
  read_links_unsupported: 501,
  provider_failed: 502,
  read_origin_not_allowed: 502,
  robot_offline: 503,
  not_ready: 503,
  command_timeout: 504,
  provider_timeout: 504,
} as const;

export type ApiErrorCode = keyof typeof API_ERRORS;
export const API_ERROR_CODES = Object.keys(API_ERRORS) as ApiErrorCode[];

export const ApiErrorBodySchema = z
  .object({
    error: z.object({
      code: z.string(),
      message: z.string(),
      details: z.record(z.string(), z.unknown()).optional(),
      // Optional only so that a client still reads an error from a proxy or an older server.
      request_id: z.string().optional().describe('The X-Request-Id of the request (always sent by this service); quote it when asking for support'),
    }),
  })
  .meta({ id: 'Error', description: 'Every error response has this body.' });
export type ApiErrorBody = z.infer<typeof ApiErrorBodySchema>;
