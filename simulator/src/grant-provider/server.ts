import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import {
  GRANT_EVENT,
  GrantRequestEnvelopeSchema,
  SIGNATURE_HEADER,
  parseBoundedJson,
  verifySignature,
  type Clock,
  type GrantAnswer,
} from '@fleet/protocol';
import type { Logger } from 'pino';
import type { GrantProviderConfig } from './config.js';
import { answerGrantRequest, type GrantDeps } from './grants.js';
import type { UploadStore } from './s3-store.js';

/** The spec's bound on a grant request and its answer. */
export const MAX_BODY_BYTES = 1024 * 1024;

/** The provider's error table: stable code, HTTP status. Bodies are `{error: {code, message}}`. */
export const PROVIDER_ERRORS = {
  validation_failed: 400,
  unauthenticated: 401,
  not_found: 404,
  method_not_allowed: 405,
  payload_too_large: 413,
  unsupported_media_type: 415,
  internal: 500,
} as const;
export type ProviderErrorCode = keyof typeof PROVIDER_ERRORS;

class ProviderError extends Error {
  constructor(
    readonly code: ProviderErrorCode,
    message: string,
  ) {
    super(message);
  }
}

export interface GrantProviderDeps {
  store: UploadStore;
  clock: Clock;
  logger: Logger;
  newGrantId?: GrantDeps['newGrantId'];
  /** PEM contents; required unless `insecureHttp`. */
  tls?: { cert: Buffer; key: Buffer };
}

function send(res: ServerResponse, status: number, body: unknown, close = false): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(text),
    'cache-control': 'no-store',
    ...(close ? { connection: 'close' } : {}),
  });
  res.end(text);
}

function sendError(res: ServerResponse, err: ProviderError): void {
  // After a refused body the rest of it is not read: the connection cannot be reused.
  send(res, PROVIDER_ERRORS[err.code], { error: { code: err.code, message: err.message } }, err.code === 'payload_too_large');
}

/** The raw body, refused past `MAX_BODY_BYTES` without reading (or keeping) the rest. */
async function readBody(req: IncomingMessage): Promise<Buffer> {
  const declared = Number(req.headers['content-length'] ?? 0);
  if (declared > MAX_BODY_BYTES) throw new ProviderError('payload_too_large', `the body is over ${MAX_BODY_BYTES} bytes`);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) throw new ProviderError('payload_too_large', `the body is over ${MAX_BODY_BYTES} bytes`);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

function header(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name.toLowerCase()];
  return Array.isArray(v) ? v.join(',') : v;
}

/**
 * The reference grant provider as an HTTP(S) server, not yet listening (the CLI listens).
 * POST (any path) takes a signed grant request; GET /healthz answers `{ok: true}`.
 * Order of checks: the signature header is present, the body is at most 1 MiB, the signature
 * and its timestamp are valid (401 otherwise), only then is the body parsed (bounded JSON) and
 * validated (400), and only then does anything reach the object store.
 */
export function buildGrantProviderServer(config: GrantProviderConfig, deps: GrantProviderDeps): Server {
  const { logger, clock } = deps;

  const handleGrant = async (req: IncomingMessage): Promise<GrantAnswer> => {
    const signature = header(req, SIGNATURE_HEADER);
    if (!signature) throw new ProviderError('unauthenticated', `missing ${SIGNATURE_HEADER}`);
    const body = await readBody(req);
    const verdict = verifySignature({ body, header: signature, secrets: config.secrets, nowS: Math.floor(clock.now() / 1000), toleranceS: config.signatureToleranceS });
    if (!verdict.ok) {
      const why = { malformed: 'malformed signature', stale: 'signature timestamp outside the tolerance', mismatch: 'signature does not match' }[verdict.reason];
      throw new ProviderError('unauthenticated', why);
    }
    const event = header(req, 'X-Service-Event');
    if (event !== undefined && event !== GRANT_EVENT) throw new ProviderError('validation_failed', `X-Service-Event must be ${GRANT_EVENT}`);
    const type = header(req, 'content-type') ?? '';
    if (!/^application\/json\s*(;|$)/i.test(type)) throw new ProviderError('unsupported_media_type', 'the body must be application/json');
    const parsed = parseBoundedJson(body.toString('utf8'));
    if (!parsed.ok) throw new ProviderError('validation_failed', parsed.message);
    const envelope = GrantRequestEnvelopeSchema.safeParse(parsed.value);
    if (!envelope.success) {
      const first = envelope.error.issues[0];
      throw new ProviderError('validation_failed', `invalid grant request${first ? ` at /${first.path.join('/')}: ${first.message}` : ''}`);
    }
    const destinationHeader = header(req, 'X-Service-Destination-Id');
    if (destinationHeader !== undefined && destinationHeader !== envelope.data.request.destination_id) {
      throw new ProviderError('validation_failed', 'X-Service-Destination-Id differs from request.destination_id');
    }
    return answerGrantRequest(envelope.data, config, deps);
  };

  const onRequest = (req: IncomingMessage, res: ServerResponse): void => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method === 'GET' && path === '/healthz') return send(res, 200, { ok: true });
    if (req.method !== 'POST') {
      res.setHeader('allow', 'POST');
      return sendError(res, new ProviderError(path === '/healthz' ? 'method_not_allowed' : 'not_found', 'POST a signed grant request'));
    }
    handleGrant(req).then(
      (answer) => send(res, 200, answer),
      (err: unknown) => {
        if (err instanceof ProviderError) {
          // The rest of a refused body is read and dropped, so the caller gets to read the answer.
          req.resume();
          logger.info({ code: err.code, event_id: header(req, 'X-Service-Event-Id') }, `grant request refused: ${err.message}`);
          return sendError(res, err);
        }
        // Never a stack trace to the caller; the cloud treats a 500 as a deferral anyway.
        logger.error({ err }, 'grant request failed');
        sendError(res, new ProviderError('internal', 'internal error'));
      },
    );
  };

  const server = config.insecureHttp ? createHttpServer(onRequest) : createHttpsServer({ cert: deps.tls?.cert, key: deps.tls?.key }, onRequest);
  // A caller has 15 s to send a whole request; the cloud sends 1 MiB at most and waits 10 s.
  server.requestTimeout = 15_000;
  server.headersTimeout = 10_000;
  return server;
}
