import { createServer, request, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

/**
 * A small HTTP proxy between uploaders (and the grant provider) and the S3 server of the tests:
 * every request is read whole, then forwarded byte for byte with its headers unchanged (the
 * Host header too, so SigV4 signatures made for the proxy's address still verify at the
 * store). A test can hold a chosen request: it is read but neither forwarded nor answered until
 * the test releases it (forwarded then) or the client goes away (a killed agent). Every request
 * is logged with what the store answered.
 */

export interface ProxiedRequest {
  method: string;
  /** Path and query as sent. */
  url: string;
  /** The part number of an UploadPart, else null. */
  partNumber: number | null;
  /** The `uploadId` query parameter, else null. */
  uploadId: string | null;
  bodyBytes: number;
  /** The store's status once answered; null while held or when never forwarded. */
  status: number | null;
  /** Which phase of the test sent it (set with `phase`). */
  phase: string;
}

export interface HeldRequest {
  readonly request: ProxiedRequest;
  /** Resolves when the client closed its connection while the request was held. */
  readonly clientGone: Promise<void>;
  /** Forwards it to the store now; resolves with the store's status (null when the client was gone). */
  release(): Promise<number | null>;
}

export interface S3Proxy extends AsyncDisposable {
  /** `http://127.0.0.1:PORT`: give it to the grant provider as its S3 endpoint. */
  readonly endpoint: string;
  readonly requests: ProxiedRequest[];
  /** Requests whose body never ended (the client gave up mid-body): never forwarded, not in `requests`. */
  readonly incomplete: ProxiedRequest[];
  /** Labels the requests that arrive from now on (e.g. 'before', 'after-restart'). */
  phase(name: string): void;
  /**
   * Holds the next request matching `match` (only one); resolves with it once it arrived whole.
   * With `answer: true` the request is forwarded at once and the store's answer is what is held
   * (the store did the work; the client has not heard): it resolves once the store answered.
   */
  hold(match: (r: ProxiedRequest) => boolean, opts?: { answer?: boolean }): Promise<HeldRequest>;
  /**
   * Answers the next request matching `match` itself with `status` and an S3 `<Error>` body
   * (`code`), without forwarding it: a store failing one request. Matches once.
   */
  inject(match: (r: ProxiedRequest) => boolean, answer: { status: number; code: string; message?: string }): void;
  close(): Promise<void>;
}

/** Part PUTs (UploadPart) of the log. */
export const partPuts = (rs: readonly ProxiedRequest[]): ProxiedRequest[] => rs.filter((r) => r.method === 'PUT' && r.partNumber !== null);
/** CompleteMultipartUpload POSTs of the log. */
export const completes = (rs: readonly ProxiedRequest[]): ProxiedRequest[] => rs.filter((r) => r.method === 'POST' && r.uploadId !== null);

export async function startS3Proxy(target: string): Promise<S3Proxy> {
  const upstream = new URL(target);
  const requests: ProxiedRequest[] = [];
  const incomplete: ProxiedRequest[] = [];
  let phase = 'start';
  const waiting: { match: (r: ProxiedRequest) => boolean; answer: boolean; resolve: (h: HeldRequest) => void }[] = [];
  const injected: { match: (r: ProxiedRequest) => boolean; status: number; code: string; message: string }[] = [];
  const sockets = new Set<Socket>();

  const forward = (req: IncomingMessage, body: Buffer, res: ServerResponse, logged: ProxiedRequest): Promise<number | null> =>
    new Promise((resolve) => {
      if (res.destroyed || req.socket.destroyed) {
        resolve(null);
        return;
      }
      const out = request(
        { host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers: req.headers },
        (answer) => {
          logged.status = answer.statusCode ?? null;
          res.writeHead(answer.statusCode ?? 502, answer.headers);
          answer.pipe(res);
          resolve(logged.status);
        },
      );
      out.on('error', () => {
        if (!res.headersSent) res.writeHead(502);
        res.end();
        resolve(null);
      });
      out.end(body);
    });

  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('close', () => {
      if (req.complete) return;
      const u = new URL(req.url ?? '/', 'http://proxy');
      const pn = u.searchParams.get('partNumber');
      const bodyBytes = chunks.reduce((n, c) => n + c.length, 0);
      incomplete.push({ method: req.method ?? '', url: req.url ?? '', partNumber: pn === null ? null : Number(pn), uploadId: u.searchParams.get('uploadId'), bodyBytes, status: null, phase });
    });
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const u = new URL(req.url ?? '/', 'http://proxy');
      const pn = u.searchParams.get('partNumber');
      const logged: ProxiedRequest = {
        method: req.method ?? '',
        url: req.url ?? '',
        partNumber: pn === null ? null : Number(pn),
        uploadId: u.searchParams.get('uploadId'),
        bodyBytes: body.length,
        status: null,
        phase,
      };
      requests.push(logged);
      const j = injected.findIndex((x) => x.match(logged));
      if (j >= 0) {
        const [x] = injected.splice(j, 1);
        logged.status = x!.status;
        res.writeHead(x!.status, { 'content-type': 'application/xml' });
        res.end(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>${x!.code}</Code><Message>${x!.message}</Message></Error>`);
        return;
      }
      const i = waiting.findIndex((w) => w.match(logged));
      if (i < 0) {
        void forward(req, body, res, logged);
        return;
      }
      const [w] = waiting.splice(i, 1);
      const clientGone = new Promise<void>((resolve) => {
        if (req.socket.destroyed) resolve();
        req.socket.once('close', () => resolve());
      });
      if (!w!.answer) {
        w!.resolve({ request: logged, clientGone, release: () => forward(req, body, res, logged) });
        return;
      }
      // Forward now, keep the answer: the store's status and body are delivered on release.
      const out = request({ host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers: req.headers }, (answer) => {
        const parts: Buffer[] = [];
        answer.on('data', (c: Buffer) => parts.push(c));
        answer.on('end', () => {
          logged.status = answer.statusCode ?? null;
          w!.resolve({
            request: logged,
            clientGone,
            release: async () => {
              if (res.destroyed || req.socket.destroyed) return null;
              res.writeHead(answer.statusCode ?? 502, answer.headers);
              res.end(Buffer.concat(parts));
              return logged.status;
            },
          });
        });
      });
      out.on('error', () => res.destroy());
      out.end(body);
    });
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  const close = async () => {
    for (const s of sockets) s.destroy();
    await new Promise<void>((r) => server.close(() => r()));
  };
  return {
    endpoint: `http://127.0.0.1:${port}`,
    requests,
    incomplete,
    phase(name) {
      phase = name;
    },
    hold(match, opts = {}) {
      return new Promise((resolve) => waiting.push({ match, answer: opts.answer === true, resolve }));
    },
    inject(match, answer) {
      injected.push({ match, status: answer.status, code: answer.code, message: answer.message ?? answer.code });
    },
    close,
    [Symbol.asyncDispose]: close,
  };
}
