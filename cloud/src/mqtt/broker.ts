import { createServer, type AddressInfo, type Server } from 'node:net';
import { Aedes, type AedesOptions, type Client } from 'aedes';

export interface EmbeddedBroker {
  readonly aedes: Aedes;
  /** mqtt://host:port that clients connect to. */
  readonly url: string;
  readonly port: number;
  /** Closes the live connection of `clientId`, if any (its credentials are checked again on reconnect). */
  disconnect(clientId: string): boolean;
  close(): Promise<void>;
}

export interface BrokerHooks {
  authenticate?: AedesOptions['authenticate'];
  authorizePublish?: AedesOptions['authorizePublish'];
  authorizeSubscribe?: AedesOptions['authorizeSubscribe'];
}

/**
 * Runs aedes (MQTT 3.1.1) on a TCP port. Without hooks every connection is refused: the broker
 * admits only the clients the caller's `authenticate` accepts.
 */
export async function startEmbeddedBroker(opts: { host: string; port: number; hooks?: BrokerHooks }): Promise<EmbeddedBroker> {
  const aedes = await Aedes.createBroker({
    authenticate:
      opts.hooks?.authenticate ??
      ((_client, _user, _pass, done) => {
        const err = Object.assign(new Error('not authorized'), { returnCode: 5 as const });
        done(err, false);
      }),
    ...(opts.hooks?.authorizePublish ? { authorizePublish: opts.hooks.authorizePublish } : {}),
    ...(opts.hooks?.authorizeSubscribe ? { authorizeSubscribe: opts.hooks.authorizeSubscribe } : {}),
  });
  // noDelay: commands, replies and acks are small packets that must not wait for Nagle.
  const server: Server = createServer({ noDelay: true }, aedes.handle);
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(opts.port, opts.host, () => {
        server.off('error', reject);
        resolve();
      });
    });
  } catch (err) {
    await new Promise<void>((resolve) => aedes.close(() => resolve()));
    throw err;
  }
  const port = (server.address() as AddressInfo).port;
  const host = opts.host.includes(':') ? `[${opts.host}]` : opts.host;
  return {
    aedes,
    url: `mqtt://${host === '0.0.0.0' ? '127.0.0.1' : host}:${port}`,
    port,
    disconnect(clientId) {
      // aedes keeps its connected clients by id, untyped in its declarations.
      const client = (aedes as unknown as { clients: Record<string, Client | undefined> }).clients[clientId];
      if (!client) return false;
      client.close();
      return true;
    },
    async close() {
      await new Promise<void>((resolve) => aedes.close(() => resolve()));
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
