import { connect, createServer, type Socket } from 'node:net';
import { closeAll, listenLoopback, splice } from './tcp.js';

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
    splice(client, connect({ host: target.hostname, port: Number(target.port), allowHalfOpen: true }), open);
  });
  const bound = await listenLoopback(server, port);
  return {
    url: `http://127.0.0.1:${bound}`,
    port: bound,
    [Symbol.asyncDispose]: () => closeAll(server, open),
  };
}
