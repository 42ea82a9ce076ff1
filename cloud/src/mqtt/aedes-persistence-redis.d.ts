// aedes-persistence-redis ships no declarations: what the cluster node uses of it.
declare module 'aedes-persistence-redis' {
  import type { Redis, RedisOptions } from 'ioredis';

  /** aedes types its persistence as `any`; the node only hands this one to aedes. */
  type Persistence = object;

  interface RedisPersistenceOptions extends RedisOptions {
    /** A connection of the caller's (instead of one made from the options). */
    conn?: Redis;
    /** How many queued QoS 1 messages an offline session keeps (default 1,000). */
    maxSessionDelivery?: number;
    /** Seconds a queued message lives (0: forever). */
    packetTTL?: (packet: unknown) => number;
  }

  function aedesPersistenceRedis(opts?: RedisPersistenceOptions): Persistence;
  export default aedesPersistenceRedis;
}
