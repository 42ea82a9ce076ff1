import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import {
  GRANT_EVENT,
  GrantRequestEnvelopeSchema,
  READ_EVENT,
  ReadRequestEnvelopeSchema,
  SIGNATURE_HEADER,
  parseBoundedJson,
  verifySignature,
  type Clock,
  type GrantAnswer,
  type ReadAnswer,
} from '@fleet/protocol';
import type { Logger } from 'pino';
import type { z } from 'zod';
import type { GrantProviderConfig } from './config.js';
import { PROVIDER_ERRORS, ProviderError } from './errors.js';
import { answerGrantRequest, type GrantDeps } from './grants.js';
import { answerReadRequest } from './reads.js';
import type { UploadStore } from './s3-store.js';

export { PROVIDER_ERRORS, type ProviderErrorCode } from './errors.js';

/** The spec's bound on a grant or read request and its answer. */
export const MAX_BODY_BYTES = 1024 * 1024;

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
 * POST (any path) takes a signed grant request, or a signed read request (`X-Service-Event:
 * read.request`); GET /healthz answers `{ok: true}`.
 * Order of checks, the same for both: the signature header is present, the body is at most
 * 1 MiB, the signature and its timestamp are valid (401 otherwise), only then is the event
 * looked at (a read request to a provider without reads is 501), the body parsed (bounded JSON)
 * and validated (400), and only then does anything reach the object store or the presigner.
 */
export function buildGrantProviderServer(config: GrantProviderConfig, deps: GrantProviderDeps): Server {
  const { logger, clock } = deps;

  /**
   * The signed body, parsed and checked against `schema`: every refusal comes before anything
   * acts on it. `afterSignature` runs once the signature is good, before the body is parsed.
   */
  const verified = async <S extends z.ZodType<{ request: { destination_id: string } }>>(
    req: IncomingMessage,
    what: string,
    schema: S,
    afterSignature: () => void,
  ): Promise<z.output<S>> => {
    const signature = header(req, SIGNATURE_HEADER);
    if (!signature) throw new ProviderError('unauthenticated', `missing ${SIGNATURE_HEADER}`);
    const body = await readBody(req);
    const verdict = verifySignature({ body, header: signature, secrets: config.secrets, nowS: Math.floor(clock.now() / 1000), toleranceS: config.signatureToleranceS });
    if (!verdict.ok) {
      const why = { malformed: 'malformed signature', stale: 'signature timestamp outside the tolerance', mismatch: 'signature does not match' }[verdict.reason];
      throw new ProviderError('unauthenticated', why);
    }
    afterSignature();
    const type = header(req, 'content-type') ?? '';
    if (!/^application\/json\s*(;|$)/i.test(type)) throw new ProviderError('unsupported_media_type', 'the body must be application/json');
    const parsed = parseBoundedJson(body.toString('utf8'));
    if (!parsed.ok) throw new ProviderError('validation_failed', parsed.message);
    const envelope = schema.safeParse(parsed.value);
    if (!envelope.success) {
      const first = envelope.error.issues[0];
      throw new ProviderError('validation_failed', `invalid ${what}${first ? ` at /${first.path.join('/')}: ${first.message}` : ''}`);
    }
    const destinationHeader = header(req, 'X-Service-Destination-Id');
    if (destinationHeader !== undefined && destinationHeader !== envelope.data.request.destination_id) {
      throw new ProviderError('validation_failed', 'X-Service-Destination-Id differs from request.destination_id');
    }
    return envelope.data;
  };

  const handle = async (req: IncomingMessage, event: string | undefined): Promise<GrantAnswer | ReadAnswer> => {
    if (event === READ_EVENT) {
      const envelope = await verified(req, 'read request', ReadRequestEnvelopeSchema, () => {
        // After the signature: only the cloud learns how this provider is configured.
        if (!config.reads) throw new ProviderError('not_implemented', 'this provider does not issue read links');
      });
      return answerReadRequest(envelope, config, deps);
    }
    const envelope = await verified(req, 'grant request', GrantRequestEnvelopeSchema, () => {
      // No header at all is a grant request, as before read requests existed.
      if (event !== undefined && event !== GRANT_EVENT) throw new ProviderError('validation_failed', `X-Service-Event must be ${GRANT_EVENT} or ${READ_EVENT}`);
    });
    return answerGrantRequest(envelope, config, deps);
  };

  const onRequest = (req: IncomingMessage, res: ServerResponse): void => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method === 'GET' && path === '/healthz') return send(res, 200, { ok: true });
    if (req.method !== 'POST') {
      res.setHeader('allow', 'POST');
      return sendError(res, new ProviderError(path === '/healthz' ? 'method_not_allowed' : 'not_found', 'POST a signed grant or read request'));
    }
    const event = header(req, 'X-Service-Event');
    const kind = event === READ_EVENT ? 'read' : 'grant';
    handle(req, event).then(
      // The answer holds presigned URLs: sent, never logged.
      (answer) => send(res, 200, answer),
      (err: unknown) => {
        if (err instanceof ProviderError) {
          // The rest of a refused body is read and dropped, so the caller gets to read the answer.
          req.resume();
          logger.info({ code: err.code, event_id: header(req, 'X-Service-Event-Id') }, `${kind} request refused: ${err.message}`);
          return sendError(res, err);
        }
        // Never a stack trace to the caller; the cloud treats a 500 as a deferral anyway.
        logger.error({ err }, `${kind} request failed`);
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
