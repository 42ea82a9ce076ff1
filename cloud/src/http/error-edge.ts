import { randomFillSync } from 'node:crypto';
import { maxHeaderSize, type IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { hasZodFastifySchemaValidationErrors, isResponseSerializationError } from 'fastify-type-provider-zod';
import { API_ERRORS, type ApiErrorCode } from '@fleet/protocol';
import { ApiError, quote, unrecognizedKeys, validationError, type IssueLocation, type ValidationIssue } from '../errors.js';
import { isStoreUnavailable } from '../store/shared/unavailable.js';

/**
 * The one edge where anything thrown becomes the documented error body
 * `{error: {code, message, details?, request_id}}`. Framework errors (the router's, the body
 * parser's, Node's own for malformed requests) go through here too, so no `FST_ERR_*` code or
 * framework shape reaches a client, and no message quotes unbounded input.
 */

/** A client's own `X-Request-Id` is kept when it looks like an id; otherwise one is made. */
const CLIENT_REQUEST_ID = /^[A-Za-z0-9._:-]{8,128}$/;

export function requestIdFor(req: IncomingMessage): string {
  const given = req.headers['x-request-id'];
  if (typeof given === 'string' && CLIENT_REQUEST_ID.test(given)) return given;
  return newRequestId();
}

/**
 * Request ids: 12 random bytes each, as base64url. The bytes come from a pool filled by one
 * CSPRNG call per 512 ids: a call per request cost more than the rest of id handling together.
 */
const ID_BYTES = 12;
const idPool = Buffer.allocUnsafe(ID_BYTES * 512);
let idOffset = idPool.length;

function newRequestId(): string {
  if (idOffset === idPool.length) {
    randomFillSync(idPool);
    idOffset = 0;
  }
  const id = idPool.toString('base64url', idOffset, idOffset + ID_BYTES);
  idOffset += ID_BYTES;
  return `req_${id}`;
}

function errorBody(code: ApiErrorCode, message: string, requestId: string, details?: Record<string, unknown>): string {
  return JSON.stringify({ error: { code, message, ...(details ? { details } : {}), request_id: requestId } });
}

export function sendError(reply: FastifyReply, err: ApiError): FastifyReply {
  void reply.header('X-Request-Id', reply.request.id);
  if (err.headers) void reply.headers(err.headers);
  return reply.code(err.status).type('application/json; charset=utf-8').send(errorBody(err.code, err.message, reply.request.id, err.details));
}

/**
 * For Fastify's `frameworkErrors`: failures the router raises before any route or hook runs
 * (an undecodable URL, a path parameter beyond maxParamLength).
 */
export function sendFrameworkError(err: FastifyError, request: FastifyRequest, reply: FastifyReply): void {
  void sendError(reply, toApiError(err, request));
}

/** Fastify framework codes and what the client is told instead. */
const FRAMEWORK_ERRORS: Record<string, () => ApiError> = {
  FST_ERR_BAD_URL: () => validationError('params', '', 'the URL is not valid (a bad percent-encoding?)', 'invalid_url'),
  FST_ERR_MAX_PARAM_LENGTH: () => validationError('params', '', 'a path parameter is too long', 'too_long'),
  FST_ERR_CTP_BODY_TOO_LARGE: () => new ApiError('payload_too_large', 'request body too large'),
  FST_ERR_CTP_INVALID_MEDIA_TYPE: () => new ApiError('unsupported_media_type', 'request bodies must be application/json'),
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: () => validationError('headers', '/content-length', 'Content-Length does not match the body', 'invalid_content_length'),
  FST_ERR_CTP_EMPTY_JSON_BODY: () => validationError('body', '', 'the body is empty', 'required'),
  FST_ERR_CTP_INVALID_CONTENT_TYPE: () => new ApiError('unsupported_media_type', 'request bodies must be application/json'),
};

/** Maps anything thrown to the documented error; the unknown becomes `internal` and is logged. */
export function toApiError(err: FastifyError | Error, request: FastifyRequest): ApiError {
  if (err instanceof ApiError) return err;
  if (hasZodFastifySchemaValidationErrors(err)) {
    const location = (err.validationContext ?? 'body');
    return new ApiError('validation_failed', `invalid ${location}`, { issues: err.validation.map((v) => zodIssue(location, v)) });
  }
  if (isResponseSerializationError(err)) {
    request.log.error({ err, issues: err.cause.issues }, 'response did not match its schema');
    return new ApiError('internal', 'internal error');
  }
  const fe = err as FastifyError;
  const mapped = fe.code ? FRAMEWORK_ERRORS[fe.code] : undefined;
  if (mapped) return mapped();
  const status = fe.statusCode ?? 500;
  if (status === 413) return new ApiError('payload_too_large', 'request body too large');
  if (status === 415) return new ApiError('unsupported_media_type', 'request bodies must be application/json');
  if (status >= 400 && status < 500) {
    request.log.info({ err }, 'request refused by the framework');
    return new ApiError('validation_failed', 'the request is malformed');
  }
  if (isStoreUnavailable(err)) {
    // A database restart or failover: nothing about the request is wrong, and a retry will do.
    request.log.warn({ err }, 'the database is not reachable; answered 503 not_ready');
    return new ApiError('not_ready', 'the service cannot reach its database; try again shortly', undefined, { 'Retry-After': String(STORE_RETRY_AFTER_S) });
  }
  request.log.error({ err }, 'unhandled error');
  return new ApiError('internal', 'internal error');
}

/** What a 503 `not_ready` for an unreachable database tells the client to wait, in seconds. */
export const STORE_RETRY_AFTER_S = 5;

/** One issue of fastify-type-provider-zod in the project's issue shape. */
function zodIssue(location: IssueLocation, v: { keyword: string; instancePath: string; message?: string; params: Record<string, unknown> }): ValidationIssue {
  // The provider writes the root as "/"; a JSON Pointer to the whole document is "".
  const path = v.instancePath === '/' ? '' : v.instancePath;
  const keys = (v.params as { keys?: unknown }).keys;
  if (v.keyword === 'unrecognized_keys' && Array.isArray(keys)) return unrecognizedKeys(location, path, keys.map(String));
  // zod's messages name the expected shape; the few that quote input are cut to size.
  return { location, path: quote(path), code: v.keyword, message: quote(v.message ?? 'invalid') };
}

/**
 * For Fastify's `clientErrorHandler`: a request Node's HTTP parser refused before Fastify saw it
 * (headers over the size limit, a malformed request line, a request that took too long). The
 * socket gets the same error body as everything else, then closes.
 */
export function handleClientError(err: NodeJS.ErrnoException, socket: Socket): void {
  if (!socket.writable || err.code === 'ECONNRESET') {
    socket.destroy();
    return;
  }
  const [code, status, message]: [ApiErrorCode, number, string] =
    err.code === 'HPE_HEADER_OVERFLOW' && requestLineOverflowed(err)
      ? ['validation_failed', 400, 'the URL is too long (a path or query parameter beyond its maxLength?)']
      : err.code === 'HPE_HEADER_OVERFLOW'
      ? ['headers_too_large', API_ERRORS.headers_too_large, 'request headers too large']
      : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? ['request_timeout', API_ERRORS.request_timeout, 'the request was not received in time']
        : ['validation_failed', 400, 'the request is malformed'];
  const requestId = newRequestId();
  const body = errorBody(code, message, requestId);
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_TEXT[status] ?? 'Bad Request'}\r\nConnection: close\r\nContent-Type: application/json; charset=utf-8\r\n` +
      `X-Request-Id: ${requestId}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
}

/**
 * Node counts the request line toward its header size limit, so a URL past it (a parameter far
 * beyond its documented maxLength) was answered 431 as if a header were too large. It is the
 * URL when the packet being parsed starts a request whose line has not ended within the limit.
 */
function requestLineOverflowed(err: NodeJS.ErrnoException): boolean {
  const raw = (err as { rawPacket?: unknown }).rawPacket;
  if (!Buffer.isBuffer(raw) || !REQUEST_LINE_START.test(raw.subarray(0, 32).toString('latin1'))) return false;
  const eol = raw.indexOf('\r\n');
  return eol === -1 || eol >= maxHeaderSize;
}

const REQUEST_LINE_START = /^[A-Z]{1,16} \//;

const STATUS_TEXT: Record<number, string> = { 400: 'Bad Request', 408: 'Request Timeout', 431: 'Request Header Fields Too Large' };
