import { connect, createServer, type Socket } from 'node:net';
import { closeAll, listenLoopback, splice } from './tcp.js';

/**
 * A TCP proxy on 127.0.0.1 in front of one address, whose link can be cut: what a robot's network
 * going away looks like to both ends, without root or network namespaces. `cut()` drops every
 * open connection and from then on accepts new ones without forwarding a byte (packets into the
 * void: the client's connect or keepalive times out); `heal()` drops those and forwards again.
 */
export interface TcpProxy extends AsyncDisposable {
  /** `host:port` of the proxy's own listener. */
  readonly port: number;
  readonly isCut: boolean;
  /** Connections forwarded so far. */
  readonly forwarded: number;
  cut(): void;
  heal(): void;
  close(): Promise<void>;
}

export async function startTcpProxy(target: { host: string; port: number }, port = 0): Promise<TcpProxy> {
  const live = new Set<Socket>();
  const held = new Set<Socket>();
  let cut = false;
  let forwarded = 0;
  const server = createServer((client) => {
    client.on('error', () => undefined);
    if (cut) {
      // Accepted and left unanswered: whatever the client sends goes nowhere.
      held.add(client);
      client.once('close', () => held.delete(client));
      client.resume();
      return;
    }
    forwarded++;
    splice(client, connect({ host: target.host, port: target.port }), live);
  });
  const bound = await listenLoopback(server, port);
  const close = () => closeAll(server, [...live, ...held]);
  return {
    port: bound,
    get isCut() {
      return cut;
    },
    get forwarded() {
      return forwarded;
    },
    cut() {
      cut = true;
      for (const s of live) s.destroy();
    },
    heal() {
      cut = false;
      for (const s of held) s.destroy();
    },
    close,
    [Symbol.asyncDispose]: close,
  };
}
