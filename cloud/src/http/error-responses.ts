import { API_ERROR_CODES, API_ERRORS, ApiErrorBodySchema, type ApiErrorCode } from '@fleet/protocol';
import type { RoutePolicy } from './policy.js';

/**
 * The error answers of an operation in the OpenAPI document: one response per status with the
 * shared error body, its description naming the codes it carries, so client generators see the
 * envelope. A route declares the errors of its own handler in one line
 * (`response: {200: X, ...errorResponses('not_found', 'conflict')}`); those every route of a
 * policy shares (401, 403, 429, the Idempotency-Key's 409 and 422, ...) are added by
 * `addSharedErrors`. These schemas never shape an error body: the error edge writes it as text,
 * which Fastify sends without a serializer.
 */

/** A code answered with another status than the error table's (robot commands' 422 `validation_failed`). */
export interface ErrorAt {
  status: number;
  code: ApiErrorCode;
}

export interface ErrorResponse {
  description: string;
  content: { 'application/json': { schema: typeof ApiErrorBodySchema } };
}

type StatusOf<E> = E extends ApiErrorCode ? (typeof API_ERRORS)[E] : E extends { status: infer S extends number } ? S : never;

/** The codes behind each entry this module made (an entry a route wrote itself is left alone). */
const codesOf = new WeakMap<object, readonly ApiErrorCode[]>();

function errorResponse(codes: readonly ApiErrorCode[]): ErrorResponse {
  const ordered = API_ERROR_CODES.filter((c) => codes.includes(c));
  const entry: ErrorResponse = {
    description: `Error: ${ordered.map((c) => `\`${c}\``).join(', ')}`,
    content: { 'application/json': { schema: ApiErrorBodySchema } },
  };
  codesOf.set(entry, ordered);
  return entry;
}

function byStatus(errors: readonly (ApiErrorCode | ErrorAt)[]): Map<number, ApiErrorCode[]> {
  const out = new Map<number, ApiErrorCode[]>();
  for (const e of errors) {
    const { status, code } = typeof e === 'string' ? { status: API_ERRORS[e], code: e } : e;
    out.set(status, [...(out.get(status) ?? []), code]);
  }
  return out;
}

/** The responses for the errors a route's handler raises, keyed by status. */
export function errorResponses<const E extends readonly (ApiErrorCode | ErrorAt)[]>(...errors: E): { [S in StatusOf<E[number]>]: ErrorResponse } {
  const out: Record<number, ErrorResponse> = {};
  for (const [status, codes] of byStatus(errors)) out[status] = errorResponse(codes);
  return out;
}

/** The errors the pipeline can answer for any route with this policy and method (decisions.md, HTTP). */
export function sharedErrorCodes(policy: RoutePolicy, methods: readonly string[]): ApiErrorCode[] {
  // Any request can be malformed (an unknown query parameter, a bad URL), be rate limited, fail,
  // or arrive while the database is unreachable (503 not_ready with Retry-After).
  const codes: ApiErrorCode[] = ['validation_failed', 'rate_limited', 'internal', 'not_ready'];
  if (policy.auth === 'key') {
    codes.push('unauthenticated');
    if (policy.scope !== null) codes.push('insufficient_scope');
    if (policy.feature !== null) codes.push('entitlement_required');
    if (methods.includes('POST')) codes.push('idempotency_key_in_use', 'idempotency_key_reused');
  }
  if (methods.some((m) => m === 'POST' || m === 'PUT' || m === 'PATCH')) codes.push('payload_too_large', 'unsupported_media_type');
  return codes;
}

/**
 * Adds the policy's shared errors to a route's responses, merging them into the route's own
 * error entries of the same status, and a `default` for anything else (a proxy's answer, 408, 431).
 * Idempotent: Fastify calls onRoute again with the same schema for a GET's HEAD twin.
 */
export function addSharedErrors(response: Record<string, unknown>, policy: RoutePolicy, methods: readonly string[]): void {
  for (const [status, codes] of byStatus(sharedErrorCodes(policy, methods))) {
    const own = response[status];
    // A status the route answers with a body of its own is not an error of this route.
    if (own !== undefined && (typeof own !== 'object' || own === null || !codesOf.has(own))) continue;
    const ownCodes = own ? (codesOf.get(own) ?? []) : [];
    response[status] = errorResponse([...ownCodes, ...codes]);
  }
  response.default ??= {
    description: 'Any other error, with the same body',
    content: { 'application/json': { schema: ApiErrorBodySchema } },
  };
}
