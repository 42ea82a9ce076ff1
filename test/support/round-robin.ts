import { connect, createServer, type Socket } from 'node:net';

/** A TCP front that hands each new connection to the next of several HTTP servers. */
export interface RoundRobin extends AsyncDisposable {
  /** `http://127.0.0.1:<port>` */
  readonly url: string;
  readonly port: number;
}

/**
 * What a load balancer in front of cloud replicas does, at its simplest: connection by
 * connection, in turn. It works on TCP, not HTTP, so whatever a test sends (a raw malformed
 * request, a slow body, a half-closed socket) reaches a replica as sent, and whatever the
 * replica answers or however it closes comes back as it was. `port` 0 picks a free one.
 */
export async function startRoundRobin(upstreams: () => readonly URL[], port = 0): Promise<RoundRobin> {
  let turn = 0;
  const open = new Set<Socket>();
  const server = createServer({ allowHalfOpen: true }, (client) => {
    const targets = upstreams();
    const target = targets[turn++ % targets.length]!;
    const upstream = connect({ host: target.hostname, port: Number(target.port), allowHalfOpen: true });
    for (const s of [client, upstream]) {
      open.add(s);
      s.once('close', () => open.delete(s));
    }
    client.pipe(upstream);
    upstream.pipe(client);
    // One side failing (a replica killed, a client gone) ends the other: no socket left hanging.
    client.once('error', () => upstream.destroy());
    upstream.once('error', () => client.destroy());
    client.once('close', () => upstream.destroy());
    upstream.once('close', () => client.destroy());
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const bound = (server.address() as { port: number }).port;
  return {
    url: `http://127.0.0.1:${bound}`,
    port: bound,
    async [Symbol.asyncDispose]() {
      for (const s of open) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
