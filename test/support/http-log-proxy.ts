import { createServer, request, type IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';

/**
 * A pass-through HTTP front that logs what crossed it: a browser talks to the front as if it were
 * the server behind it (requests and answers streamed through unchanged, the Host header too, so
 * redirects and the server's own view of its origin stay the front's), and the test reads how
 * many body bytes went each way per request. Used in front of the cloud to check that a page
 * playing a recording from the bucket never sends or receives the recording through the cloud.
 * Long-lived answers (the event stream) are logged when they end.
 */

export interface LoggedHttpRequest {
  /** 1, 2, … in the order the exchanges ended. */
  seq: number;
  method: string;
  /** The path without its query string. */
  path: string;
  status: number | null;
  /** Request body bytes the client sent. */
  requestBytes: number;
  /** Answer body bytes the server sent (a compressed answer counts as sent). */
  responseBytes: number;
  contentType: string | null;
}

export interface HttpLogProxy extends AsyncDisposable {
  /** `http://127.0.0.1:PORT`: the origin a client uses instead of the target's. */
  readonly url: string;
  /** The exchanges that ended since the start or the last `clear()`, oldest first. */
  requests(): LoggedHttpRequest[];
  clear(): void;
  close(): Promise<void>;
}

/** Bound on the log: a page left open polls forever. */
const LOG_MAX = 50_000;

export async function startHttpLogProxy(target: string): Promise<HttpLogProxy> {
  const upstream = new URL(target);
  let log: LoggedHttpRequest[] = [];
  let seq = 0;
  const sockets = new Set<Socket>();

  const server = createServer((req, res) => {
    let requestBytes = 0;
    let responseBytes = 0;
    let status: number | null = null;
    let contentType: string | null = null;
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      log.push({ seq: ++seq, method: req.method ?? '', path: (req.url ?? '/').split('?')[0]!, status, requestBytes, responseBytes, contentType });
      if (log.length > LOG_MAX) log.splice(0, log.length - LOG_MAX);
    };
    const out = request({ host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers: req.headers }, (answer: IncomingMessage) => {
      status = answer.statusCode ?? null;
      contentType = typeof answer.headers['content-type'] === 'string' ? answer.headers['content-type'] : null;
      res.writeHead(answer.statusCode ?? 502, answer.rawHeaders);
      answer.on('data', (c: Buffer) => (responseBytes += c.length));
      answer.pipe(res);
      answer.on('error', () => res.destroy());
    });
    out.on('error', () => {
      if (!res.headersSent) {
        status = 502;
        res.writeHead(502);
      }
      res.end();
    });
    req.on('data', (c: Buffer) => (requestBytes += c.length));
    req.pipe(out);
    // The client went away (a closed tab, a cancelled fetch): the upstream request goes too.
    res.on('close', () => {
      out.destroy();
      finish();
    });
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    for (const s of sockets) s.destroy();
    await new Promise<void>((r) => server.close(() => r()));
  };
  return {
    url,
    requests: () => [...log],
    clear() {
      log = [];
    },
    close,
    [Symbol.asyncDispose]: close,
  };
}
