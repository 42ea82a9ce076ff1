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
