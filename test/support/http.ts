import { createHash } from 'node:crypto';
import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { createServer } from 'node:net';

/** A response's JSON body; throws with the status and body unless it is 2xx. */
export async function okJson<T>(res: Response): Promise<T> {
  const text = await res.text();
  if (res.status >= 300) throw new Error(`HTTP ${res.status}: ${text}`);
  return (text ? JSON.parse(text) : undefined) as T;
}

/** A loopback port free right now (for a process that must be told its port before it starts). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

/** A store that takes every PUT like S3 does (200, ETag = the MD5 of the body) and keeps nothing. */
export async function startMd5PutStore(): Promise<{ url: string; close(): Promise<void> }> {
  const server = createHttpServer((req: IncomingMessage, res: ServerResponse) => {
    const md5 = createHash('md5');
    req.on('data', (c: Buffer) => md5.update(c));
    req.on('end', () => {
      res.writeHead(200, { etag: `"${md5.digest('hex')}"` });
      res.end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}`,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}
