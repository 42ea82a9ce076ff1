import { Readable } from 'node:stream';
import type { Redis } from 'ioredis';

/**
 * Where a cluster node keeps its clients' wills in Redis, in place of aedes-persistence-redis's
 * own will methods. That one keeps every will key of the cluster in one Redis list: each connect
 * and each disconnect runs an LREM over it (O(wills): about 1 ms at 30,000 robots, Redis doing
 * nothing else), and every node, every four heartbeats, reads the whole list and GETs every will
 * to find those of dead nodes. At 100,000 robots a killed node's 14,000 robots could not connect
 * again in 10 minutes: their connects queued behind those LREMs. Here each node's wills are one
 * hash (`fleet:wills:<node>`, a field per client) and a set names the nodes that have one:
 * putting and deleting a will is O(1), and finding a dead node's wills reads that node's hash
 * only (nothing while every node is alive).
 */
export const WILL_NODES_KEY = 'fleet:will-nodes';
export const willsKey = (brokerId: string): string => `fleet:wills:${brokerId}`;

/** A will as aedes hands it over and reads it back. */
export interface StoredWill {
  clientId: string;
  brokerId: string;
  topic: string;
  payload: Buffer;
  qos?: number;
  retain?: boolean;
  [field: string]: unknown;
}

/** The will methods of an aedes persistence (aedes 1.x awaits each). */
export interface WillMethods {
  putWill(client: { id: string }, packet: Record<string, unknown>): Promise<void>;
  getWill(client: { id: string }): Promise<StoredWill | null>;
  delWill(client: { id: string; brokerId?: string }): Promise<StoredWill | null>;
  streamWill(brokers?: Record<string, number>): Readable;
}

function encode(packet: Record<string, unknown>): string {
  const payload = packet.payload;
  const bytes = Buffer.isBuffer(payload) ? payload : typeof payload === 'string' ? Buffer.from(payload) : Buffer.alloc(0);
  return JSON.stringify({ ...packet, payload: bytes.toString('base64') });
}

function decode(text: string): StoredWill {
  const o = JSON.parse(text) as StoredWill & { payload: string };
  return { ...o, payload: Buffer.from(o.payload, 'base64') };
}

/** Removes a node from the set once its hash is empty, in one step (a node back under the same id adds itself again). */
const FORGET_NODE = "if redis.call('hlen', KEYS[2]) == 0 then return redis.call('srem', KEYS[1], ARGV[1]) end return 0";

/** Wills read per HSCAN step. */
const SCAN_COUNT = 500;

/**
 * Puts the will methods on `persistence` (aedes-persistence-redis), on `redis`, for the node
 * `self()` names (known once aedes has made its id).
 */
export function installWillStore(persistence: object, redis: Redis, self: () => string): WillMethods {
  const methods: WillMethods = {
    async putWill(client, packet) {
      const node = self();
      packet.clientId = client.id;
      packet.brokerId = node;
      await redis.multi().hset(willsKey(node), client.id, encode(packet)).sadd(WILL_NODES_KEY, node).exec();
    },
    async getWill(client) {
      const text = await redis.hget(willsKey(self()), client.id);
      return text === null ? null : decode(text);
    },
    async delWill(client) {
      // aedes deletes a connecting client's earlier will with the client itself (no brokerId): this node's.
      const key = willsKey(client.brokerId ?? self());
      const out = await redis.multi().hget(key, client.id).hdel(key, client.id).exec();
      const text = out?.[0]?.[1];
      return typeof text === 'string' ? decode(text) : null;
    },
    streamWill(brokers) {
      return Readable.from(
        (async function* () {
          for (const node of await redis.smembers(WILL_NODES_KEY)) {
            if (brokers?.[node] !== undefined) continue;
            let cursor = '0';
            do {
              const [next, flat] = await redis.hscan(willsKey(node), cursor, 'COUNT', SCAN_COUNT);
              cursor = next;
              for (let i = 1; i < flat.length; i += 2) yield decode(flat[i]!);
            } while (cursor !== '0');
            if (node !== self()) await redis.eval(FORGET_NODE, 2, WILL_NODES_KEY, willsKey(node), node);
          }
        })(),
      );
    },
  };
  Object.assign(persistence, methods);
  return methods;
}
