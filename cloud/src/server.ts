import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { FastifyBaseLogger } from 'fastify';
import { pino } from 'pino';
import type { AddressInfo } from 'node:net';
import type { Client } from 'aedes';
import { systemClock, type Clock } from '@fleet/protocol';
import { buildApp, type CloudApp } from './app.js';
import { bootstrapIfEmpty, type Bootstrapped } from './bootstrap.js';
import type { CloudConfig } from './config.js';
import { startEmbeddedBroker, type EmbeddedBroker } from './mqtt/broker.js';
import { PublishThrottle } from './mqtt/throttle.js';
import { loadSecretBox } from './secret-box.js';
import { openSqliteStore } from './store/index.js';
import { CLOUD_MQTT_USERNAME, robotBrokerHooks } from './robots/broker-auth.js';
import { RobotLink } from './robots/link.js';
import { EpisodeIngestor } from './episodes/ingest.js';
import { EgressClient } from './egress/client.js';
import { DeliveryWorker } from './webhooks/delivery.js';
import { SyncRouter } from './sync/router.js';
import type { RouteRow } from './store/index.js';
import type { Store } from './store/index.js';

export interface StartCloudOptions {
  clock?: Clock;
  logger?: FastifyBaseLogger;
  /** New episode assignments, once written: the MQTT side pushes them to their robots. */
  onAssigned?: (routes: RouteRow[]) => void | Promise<void>;
}

export interface RunningCloud {
  http: string;
  mqtt: string;
  store: Store;
  app: CloudApp;
  broker: EmbeddedBroker | null;
  bootstrapped: Bootstrapped | null;
  /** Stops accepting, lets in-flight requests finish, then closes the broker and the database. */
  close(): Promise<void>;
}

/** A port `serve` could not bind (taken, or not allowed); says which listener and where. */
export class ListenError extends Error {
  constructor(
    readonly listener: 'HTTP' | 'MQTT',
    readonly address: string,
    readonly code: string | undefined,
    options: { cause: unknown },
  ) {
    const why = code === 'EADDRINUSE' ? 'address already in use' : code === 'EACCES' ? 'permission denied' : code === 'EADDRNOTAVAIL' ? 'address not available' : (options.cause as Error)?.message ?? String(options.cause);
    super(`cannot listen for ${listener} on ${address}: ${why}${code ? ` (${code})` : ''}`, options);
    this.name = 'ListenError';
  }
}

async function listening<T>(listener: 'HTTP' | 'MQTT', host: string, port: number, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EADDRINUSE' || code === 'EACCES' || code === 'EADDRNOTAVAIL') {
      throw new ListenError(listener, `${host.includes(':') ? `[${host}]` : host}:${port}`, code, { cause: err });
    }
    throw err;
  }
}

/**
 * Everything `fleet-cloud serve` runs, in one process. Both ports are bound before the first
 * start creates its organization and admin key, so a start that cannot listen leaves no key.
 */
export async function startCloud(config: CloudConfig, opts: StartCloudOptions = {}): Promise<RunningCloud> {
  const clock = opts.clock ?? systemClock;
  const store = openSqliteStore(config.dataDir);
  let broker: EmbeddedBroker | null = null;
  let link: RobotLink | null = null;
  let egress: EgressClient | null = null;
  let worker: DeliveryWorker | null = null;
  let app: CloudApp | null = null;
  const logger = opts.logger ?? pino({ level: 'silent' });
  try {
    let linkUrl: string;
    let linkAuth: { username?: string; password?: string } = {};
    if (config.mqttUrl) {
      linkUrl = config.mqttUrl;
    } else {
      // The cloud's own client authenticates with a secret that lives only in this process.
      const cloudPassword = randomBytes(32).toString('base64url');
      const throttle = new PublishThrottle<Client>({
        messagesPerSecond: config.mqttMessagesPerSecond,
        bytesPerSecond: config.mqttBytesPerSecond,
        clock,
        isClosed: (client: Client) => client.closed,
      });
      const hooks = robotBrokerHooks(store, cloudPassword, (msg, extra) => logger.warn(extra, msg), { throttle });
      // Nobody is connected to a broker that has just started; robots republish on reconnect.
      await store.robots.markAllDisconnected();
      broker = await listening('MQTT', config.host, config.mqttPort, () => startEmbeddedBroker({ host: config.host, port: config.mqttPort, hooks }));
      linkUrl = broker.url;
      linkAuth = { username: CLOUD_MQTT_USERNAME, password: cloudPassword };
    }
    link = new RobotLink({ url: linkUrl, ...linkAuth, store, clock, logger, commandTimeoutMs: config.commandTimeoutMs });
    const ackVia = link;
    const secrets = loadSecretBox(config.dataDir, config.secretKey);
    egress = new EgressClient({
      allowLoopback: config.egressAllowLoopback,
      ...(config.egressCaFile ? { ca: readFileSync(config.egressCaFile, 'utf8') } : {}),
    });
    worker = new DeliveryWorker({ store, secrets, egress, clock, logger });
    const deliveries = worker;
    const sync = new SyncRouter({
      store,
      clock,
      ...(opts.onAssigned ? { onAssigned: opts.onAssigned } : {}),
      onError: (err, orgId) => logger.error({ err, org_id: orgId }, 'routing episodes failed'),
    });
    const ingestor = new EpisodeIngestor({
      store,
      clock,
      logger,
      ack: (robotId, ack) => ackVia.publishAck(robotId, ack),
      onIndexed: (orgIds) => {
        deliveries.notify();
        for (const orgId of orgIds) sync.schedule(orgId, 'new');
      },
    });
    link.onOutbox = (robotId, payload) => ingestor.submit(robotId, payload);
    await link.start();
    const brokerRef = broker;
    const linkRef = link;
    app = await buildApp(config, {
      store,
      secrets,
      deliveries,
      sync,
      clock,
      logger,
      robots: link,
      mqttPublicUrl: config.mqttPublicUrl ?? linkUrl.replace(/\/\/[^@/]*@/, '//'),
      readiness: async () => {
        if (brokerRef?.aedes.closed) throw new Error('MQTT broker closed');
        if (!linkRef.connected) throw new Error('no connection to the MQTT broker');
      },
    });
    const listeningApp = app;
    await listening('HTTP', config.host, config.httpPort, () => listeningApp.app.listen({ host: config.host, port: config.httpPort }));
    // Only now, with both ports bound: a start that fails to listen creates nothing.
    const bootstrapped = await bootstrapIfEmpty(store, clock, config.dataDir);
    deliveries.start();
    const egressRef = egress;
    const addr = app.app.server.address() as AddressInfo;
    const host = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
    const shownHost = host === '0.0.0.0' || host === '[::]' ? '127.0.0.1' : host;
    const running = app;
    return {
      http: `http://${shownHost}:${addr.port}`,
      mqtt: broker ? broker.url : config.mqttUrl!,
      store,
      app: running,
      broker,
      bootstrapped,
      async close() {
        // fastify closes the idle keep-alive connections once, when the shutdown starts. A
        // connection whose in-flight request finishes later would idle on until the client or
        // keepAliveTimeout (72 s) drops it and hold the exit that long; sweep them meanwhile.
        const sweep = setInterval(() => running.app.server.closeIdleConnections(), 50);
        try {
          await running.close();
        } finally {
          clearInterval(sweep);
        }
        // Write and acknowledge the reports already received; any that arrive meanwhile are
        // written too, and their robots resend until acknowledged (ingest is idempotent).
        await ingestor.drain();
        await linkRef.stop();
        await ingestor.drain();
        await sync.idle();
        await deliveries.stop();
        await egressRef.close();
        await brokerRef?.close();
        await store.close();
      },
    };
  } catch (err) {
    await app?.close().catch(() => undefined);
    await link?.stop().catch(() => undefined);
    await worker?.stop().catch(() => undefined);
    await egress?.close().catch(() => undefined);
    await broker?.close().catch(() => undefined);
    await store.close();
    throw err;
  }
}
