import { createServer, type AddressInfo, type Server } from 'node:net';
import { Readable } from 'node:stream';
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
  indexRetainedByTopic(aedes);
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

interface RetainedPacket {
  topic: string;
  payload: Buffer | string;
}

interface RetainedPersistence {
  storeRetained(packet: RetainedPacket): Promise<void>;
  createRetainedStreamCombi(patterns: string[]): Readable;
}

const isWildcard = (pattern: string) => pattern.includes('+') || pattern.includes('#');

/**
 * aedes' memory persistence answers every SUBSCRIBE by testing the pattern against every
 * retained message. Each robot keeps a retained status, and each robot subscribes on connect, so
 * a fleet of N robots connecting costs O(N²) topic matches on the event loop: connects slowed
 * from ~30/s to a few per second past 5,000 robots (bench/fleet.ts). Robots subscribe to exact
 * topics only, so those are looked up in a map kept beside the persistence's own; any pattern
 * with a wildcard (the cloud's own link) still goes through the persistence.
 */
function indexRetainedByTopic(aedes: Aedes): void {
  const persistence = (aedes as unknown as { persistence: RetainedPersistence }).persistence;
  const exact = new Map<string, RetainedPacket>();
  const store = persistence.storeRetained.bind(persistence);
  const combi = persistence.createRetainedStreamCombi.bind(persistence);
  persistence.storeRetained = (packet) => {
    // The same rule as the persistence: an empty payload clears the retained message.
    if (packet.payload.length === 0) exact.delete(packet.topic);
    else exact.set(packet.topic, { ...packet });
    return store(packet);
  };
  persistence.createRetainedStreamCombi = (patterns) => {
    if (patterns.some(isWildcard)) return combi(patterns);
    return Readable.from(patterns.flatMap((topic) => exact.get(topic) ?? []));
  };
}
