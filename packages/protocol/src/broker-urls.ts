import { z } from 'zod';

/** At most this many broker addresses in a list (a cluster's nodes, or one broker). */
export const MAX_BROKER_URLS = 16;

/** One broker address: mqtt:// or mqtts://. */
export const BrokerUrlSchema = z.url({ protocol: /^mqtts?$/ });

/** Splits a comma-separated list of broker addresses; spaces around each are dropped. */
export function splitBrokerUrls(list: string): string[] {
  return list
    .split(',')
    .map((u) => u.trim())
    .filter((u) => u.length > 0);
}

/**
 * A comma-separated list of broker addresses (`mqtt://a:1883,mqtt://b:1883`), as a flag or an
 * environment variable gives it, or a list already split: one to MAX_BROKER_URLS addresses, each
 * mqtt:// or mqtts://, none twice.
 */
export const BrokerUrlListSchema = z
  .union([z.string().max(4096).transform(splitBrokerUrls), z.array(z.string()).max(MAX_BROKER_URLS + 1)])
  .pipe(
    z
      .array(BrokerUrlSchema)
      .min(1, 'at least one broker address')
      .max(MAX_BROKER_URLS, `at most ${MAX_BROKER_URLS} broker addresses`)
      .refine((urls) => new Set(urls).size === urls.length, 'a broker address is listed twice'),
  );

/** FNV-1a, 32 bits, over a string's UTF-16 code units: a fast, stable spread (robots over nodes, rendezvous scores), not a secret. */
export function fnv1a(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}

/** fnv1a with murmur3's finalizer: every input bit moves every output bit (fnv1a alone mixes its last characters weakly). */
function mixedHash(s: string): number {
  let h = fnv1a(s);
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b) >>> 0;
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35) >>> 0;
  h ^= h >>> 16;
  return h >>> 0;
}

/**
 * The list a robot is handed at enrollment: the cluster's nodes in an order of the robot's own,
 * highest rendezvous score (the robot id and the address hashed together) first. Robots try their
 * list in order, so a fleet spreads over the nodes instead of all landing on the first, and the
 * robots of a node that goes away spread evenly over the others: each robot's next address is its
 * own, not the dead node's neighbour in the configured order (a rotation sent every robot of a
 * dead node to one node, which then held twice its share: past the open-files limit of one
 * process at 100,000 robots on 7 nodes). Adding a node moves only the robots whose first choice
 * it becomes. One address is handed out as it is.
 */
export function brokerUrlsForRobot(robotId: string, urls: readonly string[]): string[] {
  if (urls.length <= 1) return [...urls];
  const scored = urls.map((url) => ({ url, score: mixedHash(`${robotId}\n${url}`) }));
  scored.sort((a, b) => b.score - a.score || (a.url < b.url ? -1 : 1));
  return scored.map((s) => s.url);
}

/** A broker node as mqtt.js's `servers` option takes it. */
export interface MqttServer {
  host: string;
  port: number;
  protocol: 'mqtt' | 'mqtts';
}

/**
 * mqtt.js options for a list of broker addresses: the first address as the URL, and with more
 * than one, every address in `servers` (mqtt.js tries the next one at each reconnect). The
 * addresses' user and password, if any, are not carried into `servers`; pass the account apart.
 */
export function mqttServers(urls: readonly string[]): { url: string; servers?: MqttServer[] } {
  const first = urls[0];
  if (first === undefined) throw new Error('no broker address');
  if (urls.length === 1) return { url: first };
  return { url: first, servers: urls.map(mqttServer) };
}

/** One broker address as host, port (the scheme's default when absent) and scheme. */
export function mqttServer(url: string): MqttServer {
  const parsed = new URL(url);
  const protocol = parsed.protocol === 'mqtts:' ? 'mqtts' : 'mqtt';
  return { host: parsed.hostname, port: parsed.port ? Number(parsed.port) : protocol === 'mqtts' ? 8883 : 1883, protocol };
}
