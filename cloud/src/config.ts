import { BlockList, isIP } from 'node:net';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { BrokerUrlListSchema } from '@fleet/protocol';

const port = z.coerce.number().int().min(0).max(65535);
/** `host:port` or `[v6]:port`. */
const METRICS_LISTEN = /^(\[[0-9a-fA-F:.]+\]|[^\s:[\]]+):(\d{1,5})$/;

/** The host and port of a `metricsListen` value. */
export function parseListen(value: string): { host: string; port: number } {
  const m = METRICS_LISTEN.exec(value);
  const port = m ? Number(m[2]) : NaN;
  if (!m || port > 65535) throw new Error(`not host:port: ${value}`);
  return { host: m[1]!.replace(/^\[|\]$/g, ''), port };
}

const LOOPBACK_V4 = new BlockList();
LOOPBACK_V4.addSubnet('127.0.0.0', 8, 'ipv4');
/** `scheme://authority` and nothing after it (no path, not even `/`, no query or fragment). */
const BARE_ORIGIN = /^[a-z][a-z0-9+.-]*:\/\/[^/?#\s]+$/i;

/** 127.0.0.0/8, ::1 and localhost: where an `http:` read origin may point (tests, local development). */
function isLoopbackHost(hostname: string): boolean {
  const host = hostname.replace(/^\[|\]$/g, '');
  if (host === 'localhost') return true;
  const family = isIP(host);
  return family === 4 ? LOOPBACK_V4.check(host, 'ipv4') : family === 6 && host === '::1';
}

/**
 * A read origin as the operator wrote it (`--read-origin`, FLEET_READ_ORIGINS) in the form a
 * browser compares (`https://Bucket.example:443` is `https://bucket.example`): an exact origin
 * `scheme://host[:port]`, https, or http for a loopback host only; no path, no wildcard, no
 * credentials. Throws with the reason otherwise.
 */
export function readOriginOf(value: string): string {
  const refuse = (why: string) => new Error(`${JSON.stringify(value.slice(0, 200))} is not a read origin: ${why}`);
  if (value.includes('*')) throw refuse('wildcards are not allowed; name each origin');
  if (!BARE_ORIGIN.test(value)) throw refuse('it must be scheme://host[:port] with no path (not even a trailing /), query or fragment');
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw refuse('not a valid URL');
  }
  if (url.username !== '' || url.password !== '') throw refuse('it must not carry credentials');
  if (url.protocol === 'http:') {
    if (!isLoopbackHost(url.hostname)) throw refuse('http is allowed only for a loopback host (127.0.0.0/8, ::1, localhost); use https');
  } else if (url.protocol !== 'https:') {
    throw refuse('the scheme must be https (or http for a loopback host)');
  }
  return url.origin;
}

const ReadOrigin = z.string().transform((value, ctx) => {
  try {
    return readOriginOf(value);
  } catch (err) {
    ctx.addIssue({ code: 'custom', message: (err as Error).message });
    return z.NEVER;
  }
});

/**
 * The workspace's built console, found from this module's own place: `cloud/src/config.ts` in
 * tests and `cloud/dist/config.js` at run time are both two levels below the repository root.
 */
export const DEFAULT_CONSOLE_DIR = fileURLToPath(new URL('../../console/dist/', import.meta.url));

/**
 * Everything the cloud can be told, with its default. Flags and FLEET_* variables are merged by
 * the CLI and parsed here once; nothing below the entry point reads process.env.
 */
export const CloudConfigSchema = z.strictObject({
  /** Where the SQLite index and the first-start admin key live. */
  dataDir: z.string().min(1).default('./data'),
  /** Keep the index in PostgreSQL (several replicas may share it) instead of SQLite in dataDir. */
  databaseUrl: z.url({ protocol: /^postgres(ql)?$/ }).optional(),
  /**
   * With databaseUrl: how long a starting cloud waits for PostgreSQL to accept connections
   * (started together with it, or in a failover) before it gives up; 0 gives up at once.
   */
  databaseWaitS: z.coerce.number().int().min(0).max(3600).default(60),
  /** HTTP and MQTT listen address. Loopback by default; use 0.0.0.0 to serve a fleet. */
  host: z.string().min(1).default('127.0.0.1'),
  httpPort: port.default(8080),
  mqttPort: port.default(1883),
  /**
   * Use this external broker instead of the embedded one (mqtt:// or mqtts://); a comma-separated
   * list for the nodes of a cluster: the cloud connects to the first and moves to the next when
   * its connection is lost.
   */
  mqttUrl: BrokerUrlListSchema.optional(),
  /**
   * With mqttUrl: the cloud's broker account (`fleet-cloud broker-config` writes it). The cloud
   * logs in with it and keeps robot accounts and ACLs in mosquitto's dynamic security plugin.
   */
  mqttAccountFile: z.string().min(1).optional(),
  /**
   * With mqttUrl: which broker it is. `mosquitto` (one mosquitto 2; robot accounts in its dynamic
   * security plugin, driven by the cloud) or `fleet-cluster` (nodes of `fleet-cloud broker-node`
   * on one Redis, which read robot accounts from this cloud's database themselves).
   */
  mqttBroker: z.enum(['mosquitto', 'fleet-cluster']).default('mosquitto'),
  /**
   * The broker address given to enrolling robots when it differs from the one the cloud uses; a
   * comma-separated list for the nodes of a cluster (each robot gets them all, starting at one
   * picked from its id).
   */
  mqttPublicUrl: BrokerUrlListSchema.optional(),
  /** How long a robot command waits for the robot's answer before 504 command_timeout. */
  commandTimeoutMs: z.coerce.number().int().min(100).max(120_000).default(10_000),
  /** Largest request body accepted; larger is 413 payload_too_large. */
  bodyLimitBytes: z.coerce.number().int().min(1024).max(64 * 1024 * 1024).default(1024 * 1024),
  /**
   * How long a client may take to send a whole request (headers and body); past it the
   * connection is answered 408 and closed, so a client that stalls its body cannot hold it.
   */
  requestTimeoutMs: z.coerce.number().int().min(1000).max(300_000).default(15_000),
  /** Requests per minute per client address on the /v1 routes that take no API key (enrollment). */
  ipRequestsPerMinute: z.coerce.number().int().min(1).default(300),
  /**
   * Failed logins (a refused API key; a refused MQTT password on the embedded broker) one client
   * address may have per window; its next attempts are refused (429 / CONNACK 3) until the
   * window ends. Each door counts on its own.
   */
  failedLoginsPerWindow: z.coerce.number().int().min(1).default(20),
  /** The window of failedLoginsPerWindow, in seconds (at most an hour: older counters are purged). */
  failedLoginWindowS: z.coerce.number().int().min(1).max(3600).default(60),
  /** What one robot may publish on the embedded broker: PUBLISH packets per second (sustained). */
  mqttMessagesPerSecond: z.coerce.number().int().min(1).default(100),
  /** …and payload bytes per second (sustained); bursts of two seconds' worth pass at once. */
  mqttBytesPerSecond: z.coerce.number().int().min(1024).default(1024 * 1024),
  /** When a grant request fails (timeout, error status, invalid answer), the robot asks again this much later. */
  grantRetryAfterS: z.coerce.number().int().min(1).max(86_400).default(60),
  /**
   * The built web console (`npm run build -w console`), served at /console/. A directory without
   * an index.html is not an error: /console/ then says the console is not built.
   */
  consoleDir: z.string().min(1).default(DEFAULT_CONSOLE_DIR),
  logLevel: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  /** Base64 of 32 bytes that seals stored secrets; by default <dataDir>/secret.key (created 0600). */
  secretKey: z.base64().refine((k) => Buffer.from(k, 'base64').length === 32, 'must be 32 bytes').optional(),
  /** Tests and local development only: webhooks (and later grant providers) may be on 127.0.0.1/::1. */
  egressAllowLoopback: z.boolean().default(false),
  /** Extra CA certificate (PEM file) trusted for outbound HTTPS (tests, private CAs). */
  egressCaFile: z.string().min(1).optional(),
  /**
   * Origins read links may point at (`--read-origin`, repeatable; FLEET_READ_ORIGINS,
   * comma-separated): the customers' buckets the console's player reads from. They are the only
   * origins besides its own the console's Content-Security-Policy lets a page connect to or load
   * images from, and a provider's link elsewhere is refused (502 `read_origin_not_allowed`).
   */
  readOrigins: z.array(ReadOrigin).max(64).default([]).transform((origins) => [...new Set(origins)]),
  /** Read-links calls per minute per organization (each one is a request to the destination's provider). */
  readLinksPerMinutePerOrg: z.coerce.number().int().min(1).default(600),
  /** How often buffered api-key last-use times are written. */
  lastUsedFlushMs: z.coerce.number().int().min(10).default(15_000),
  /**
   * The lease of an in-flight Idempotency-Key claim. The process running the request renews it
   * every third of the lease; if the process dies, a retry through another replica is refused
   * (409 idempotency_key_in_use) until the lease runs out, then runs.
   */
  idempotencyLeaseMs: z.coerce.number().int().min(1000).max(600_000).default(15_000),
  /**
   * Serve /metrics on its own listener, `host:port` (port 0 picks one), and not on the API's
   * port. Metrics are off unless this or a token is given: they count every organization's
   * traffic, which is the operator's to see, not a tenant's.
   */
  metricsListen: z.string().refine((v) => Number(METRICS_LISTEN.exec(v)?.[2] ?? NaN) <= 65535, 'must be host:port, e.g. 127.0.0.1:9464').optional(),
  /**
   * How often each organization with open event streams reads the event log (one read per
   * organization, shared by all its streams). Events this process appends wake it at once; the
   * poll brings those of other replicas.
   */
  eventStreamPollMs: z.coerce.number().int().min(10).max(60_000).default(500),
  /** A comment line on every open event stream this often, so that proxies keep it open. */
  eventStreamHeartbeatMs: z.coerce.number().int().min(10).max(300_000).default(15_000),
  /** Open event streams per organization on one process; one more is answered 429 rate_limited. */
  eventStreamsPerOrg: z.coerce.number().int().min(1).max(100_000).default(200),
  /** A file holding the bearer token /metrics requires (trimmed); with no listener, /metrics is on the API's port. */
  metricsTokenFile: z.string().min(1).optional(),
  /** The token itself; only from FLEET_METRICS_TOKEN (a flag would show it in the process list). */
  metricsToken: z.string().min(16, 'must be at least 16 characters').optional(),
}).refine((c) => !c.mqttAccountFile || c.mqttUrl, { message: 'needs --mqtt-url (the account is for an external broker)', path: ['mqttAccountFile'] })
  .refine((c) => c.mqttBroker !== 'fleet-cluster' || (c.mqttUrl && c.mqttAccountFile), { message: 'fleet-cluster needs --mqtt-url (a node) and --mqtt-account-file (the cloud\'s account on the nodes)', path: ['mqttBroker'] })
  .refine((c) => !(c.metricsTokenFile && c.metricsToken), { message: 'give a metrics token file or FLEET_METRICS_TOKEN, not both', path: ['metricsToken'] });

export type CloudConfig = Readonly<z.output<typeof CloudConfigSchema>>;
export type CloudConfigInput = z.input<typeof CloudConfigSchema>;

export function parseCloudConfig(input: CloudConfigInput): CloudConfig {
  return Object.freeze(CloudConfigSchema.parse(input));
}

/**
 * `fleet-cloud broker-node`: one node of a broker cluster (mqtt/cluster.ts). It reads robot
 * accounts from the cloud's database and lets the cloud's replicas in with their account file.
 */
export const BrokerNodeConfigSchema = z.strictObject({
  dataDir: z.string().min(1).default('./data'),
  databaseUrl: z.url({ protocol: /^postgres(ql)?$/ }).optional(),
  databaseWaitS: z.coerce.number().int().min(0).max(3600).default(60),
  host: z.string().min(1).default('127.0.0.1'),
  port: port.default(1883),
  /** The Redis every node of the cluster shares. */
  redisUrl: z.url({ protocol: /^rediss?$/ }),
  /** Unique in the cluster; by default a random one per start. */
  nodeId: z.string().regex(/^[A-Za-z0-9_.-]{1,64}$/, 'letters, digits, _ . - (at most 64)').optional(),
  /** A node silent for three heartbeats is dead: its robots' wills go out and their connections are reported ended. */
  heartbeatMs: z.coerce.number().int().min(100).max(600_000).default(5000),
  /** The cloud replicas' account (`{username, password}`, as `fleet-cloud broker-config` writes it). */
  accountFile: z.string().min(1),
  mqttMessagesPerSecond: z.coerce.number().int().min(1).default(100),
  mqttBytesPerSecond: z.coerce.number().int().min(1024).default(1024 * 1024),
  failedLoginsPerWindow: z.coerce.number().int().min(1).default(20),
  failedLoginWindowS: z.coerce.number().int().min(1).max(3600).default(60),
  logLevel: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
});
export type BrokerNodeConfig = Readonly<z.output<typeof BrokerNodeConfigSchema>>;
