import type { Server, Socket } from 'node:net';

/**
 * Joins a client connection to its upstream both ways and tracks both in `open` until they
 * close. One side closing or failing (a replica killed, a client gone) ends the other: no
 * socket is left hanging.
 */
export function splice(client: Socket, upstream: Socket, open: Set<Socket>): void {
  for (const s of [client, upstream]) {
    open.add(s);
    s.once('close', () => open.delete(s));
    s.on('error', () => s.destroy());
  }
  client.pipe(upstream);
  upstream.pipe(client);
  client.once('close', () => upstream.destroy());
  upstream.once('close', () => client.destroy());
}

/** Listens on 127.0.0.1:`port` (0: a free one); resolves with the port bound. */
export async function listenLoopback(server: Server, port: number): Promise<number> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  return (server.address() as { port: number }).port;
}

/** Ends every socket in `open`, then the server. */
export async function closeAll(server: Server, open: Iterable<Socket>): Promise<void> {
  for (const s of [...open]) s.destroy();
  await new Promise<void>((resolve) => server.close(() => resolve()));
}
