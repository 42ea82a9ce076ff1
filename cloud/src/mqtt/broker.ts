import { createServer, type AddressInfo, type Server } from 'node:net';
import { Readable } from 'node:stream';
import { Aedes, type AedesOptions, type Client } from 'aedes';
import { MAX_MQTT_CONNECT_BYTES, MAX_MQTT_PACKET_BYTES, PacketSizeGuard } from './packet-size.js';

export interface EmbeddedBroker {
  readonly aedes: Aedes;
  /** mqtt://host:port that clients connect to. */
  readonly url: string;
  readonly port: number;
  /** Closes the live connection of `clientId`, if any (its credentials are checked again on reconnect). */
  disconnect(clientId: string): boolean;
  /** Whether `clientId` has a live, logged-in connection now. */
  isConnected(clientId: string): boolean;
  /** Calls `listener` with the client id of each logged-in connection that ends; returns the unsubscribe. */
  onDisconnect(listener: (clientId: string) => void): () => void;
  close(): Promise<void>;
}

export interface BrokerHooks {
  authenticate?: AedesOptions['authenticate'];
  authorizePublish?: AedesOptions['authorizePublish'];
  authorizeSubscribe?: AedesOptions['authorizeSubscribe'];
}

export interface EmbeddedBrokerOptions {
  host: string;
  port: number;
  hooks?: BrokerHooks;
  /** Largest packet accepted (default MAX_MQTT_PACKET_BYTES, mosquitto's `max_packet_size`). */
  maxPacketBytes?: number;
  /** Told when a connection is closed for a packet over the cap (`clientId` null before its CONNECT). */
  onOversizedPacket?: (clientId: string | null, bytes: number) => void;
  /**
   * A node of a cluster (mqtt/cluster.ts): its id, the emitter and persistence it shares with the
   * other nodes, their heartbeat, and a forward hook. Without it the broker keeps everything in memory.
   */
  cluster?: Pick<AedesOptions, 'id' | 'mq' | 'persistence' | 'heartbeatInterval' | 'authorizeForward'>;
}

/**
 * Runs aedes (MQTT 3.1.1) on a TCP port. Without hooks every connection is refused: the broker
 * admits only the clients the caller's `authenticate` accepts. A packet over `maxPacketBytes`
 * (a first packet, the CONNECT, over MAX_MQTT_CONNECT_BYTES) closes its connection as soon as
 * its header arrives, as mosquitto's `max_packet_size` does.
 */
export async function startEmbeddedBroker(opts: EmbeddedBrokerOptions): Promise<EmbeddedBroker> {
  const aedes = await Aedes.createBroker({
    authenticate:
      opts.hooks?.authenticate ??
      ((_client, _user, _pass, done) => {
        const err = Object.assign(new Error('not authorized'), { returnCode: 5 as const });
        done(err, false);
      }),
    ...(opts.hooks?.authorizePublish ? { authorizePublish: opts.hooks.authorizePublish } : {}),
    ...(opts.hooks?.authorizeSubscribe ? { authorizeSubscribe: opts.hooks.authorizeSubscribe } : {}),
    ...opts.cluster,
  });
  // The shared persistence answers exact topics with one lookup of its own.
  if (!opts.cluster) indexRetainedByTopic(aedes);
  const maxBytes = opts.maxPacketBytes ?? MAX_MQTT_PACKET_BYTES;
  const limits = { maxBytes, maxFirstPacketBytes: Math.min(maxBytes, MAX_MQTT_CONNECT_BYTES) };
  // noDelay: commands, replies and acks are small packets that must not wait for Nagle.
  const server: Server = createServer({ noDelay: true }, (socket) => {
    guardPacketSize(aedes.handle(socket) as unknown as GuardedClient, limits, opts.onOversizedPacket);
  });
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
  // aedes keeps its connected clients by id, untyped in its declarations.
  const clients = (aedes as unknown as { clients: Record<string, Client | undefined> }).clients;
  return {
    aedes,
    url: `mqtt://${host === '0.0.0.0' ? '127.0.0.1' : host}:${port}`,
    port,
    disconnect(clientId) {
      const client = clients[clientId];
      if (!client) return false;
      client.close();
      return true;
    },
    isConnected(clientId) {
      // A closing client stays registered until its will is published.
      const client = clients[clientId];
      return client !== undefined && !client.closed;
    },
    onDisconnect(listener) {
      const onClient = (client: Client) => listener(client.id);
      aedes.on('clientDisconnect', onClient);
      return () => void aedes.off('clientDisconnect', onClient);
    },
    async close() {
      await new Promise<void>((resolve) => aedes.close(() => resolve()));
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** What aedes' Client keeps of its mqtt-packet parser (untyped in its declarations). */
interface GuardedClient {
  id: string | null;
  _parser: { parse(buf: Buffer): number; emit(event: 'error', err: Error): boolean };
}

/**
 * aedes hands each batch read from the socket to mqtt-packet's parser, which has no size limit
 * and buffers a packet whole before it is handled (a 200 MB PUBLISH grew the process by as much
 * again). Each batch is measured first; a packet over the cap fails the connection like a
 * malformed one (aedes closes the socket and publishes the will) before its body is read.
 */
function guardPacketSize(client: GuardedClient, limits: ConstructorParameters<typeof PacketSizeGuard>[0], onOversized: EmbeddedBrokerOptions['onOversizedPacket']): void {
  const parser = client._parser;
  const parse = parser.parse.bind(parser);
  const guard = new PacketSizeGuard(limits);
  let refused = false;
  parser.parse = (buf) => {
    if (refused) return 0;
    const over = guard.feed(buf);
    if (over === null) return parse(buf);
    refused = true;
    onOversized?.(client.id, over);
    parser.emit('error', new Error(`a packet of at least ${over} bytes is over the broker's limit`));
    return 0;
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
 * The retained messages whose topics match `patterns`, as aedes hands them to a client that
 * subscribes. `aedes.subscribe` (an in-process subscription) gets live messages only.
 */
export async function* retainedMessages(aedes: Aedes, patterns: string[]): AsyncGenerator<{ topic: string; payload: Buffer }> {
  const persistence = (aedes as unknown as { persistence: RetainedPersistence }).persistence;
  for await (const packet of persistence.createRetainedStreamCombi(patterns) as AsyncIterable<RetainedPacket>) {
    yield { topic: packet.topic, payload: Buffer.isBuffer(packet.payload) ? packet.payload : Buffer.from(packet.payload) };
  }
}

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
