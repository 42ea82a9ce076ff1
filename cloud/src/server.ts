import { readFileSync } from 'node:fs';
import type { FastifyBaseLogger } from 'fastify';
import { pino } from 'pino';
import type { AddressInfo } from 'node:net';
import type { Client } from 'aedes';
import { Lifecycle, retry, systemScheduler, type Clock, type Scheduler, type TimeSource } from '@fleet/protocol';
import { buildApp, type AppParts, type CloudApp } from './app.js';
import { bootstrapIfEmpty, type Bootstrapped } from './bootstrap.js';
import { parseListen, type BrokerNodeConfig, type CloudConfig } from './config.js';
import { metricsFor, metricsToken, startMetricsListener } from './metrics.js';
import { ApiError } from './errors.js';
import type { SecretBox } from './secret-box.js';
import { EventHub } from './streams/hub.js';
import { ReadLinker } from './sync/read-links.js';
import { startEmbeddedBroker, type EmbeddedBroker } from './mqtt/broker.js';
import { CLUSTER_DISCONNECT_TOPIC, startClusterNode, type ClusterNode } from './mqtt/cluster.js';
import { PublishThrottle } from './mqtt/throttle.js';
import { FailedLoginLimiter } from './login-limit.js';
import { DynsecControl, DynsecRobotAccounts } from './mqtt/dynsec.js';
import { BrokerAccountSchema } from './mqtt/dynsec-config.js';
import { robotStatusEvent } from './rules/events.js';
import { loadSecretBox } from './secret-box.js';
import { openStore } from './store/index.js';
import { isStoreUnavailable } from './store/shared/unavailable.js';
import { robotBrokerHooks } from './robots/broker-auth.js';
import { RobotLink } from './robots/link.js';
import { CredentialRotator, offlineFleetAdmin } from './robots/credentials.js';
import { EpisodeIngestor } from './episodes/ingest.js';
import { OutboxRouter } from './robots/outbox-router.js';
import { GrantRelay } from './sync/grant-relay.js';
import { EpisodePrunedHandler, LocalMissingHandler } from './sync/local-copy-ingest.js';
import { ReplicaStateHandler } from './sync/replica-ingest.js';
import { SyncService } from './sync/sync-service.js';
import { EgressClient } from './egress/client.js';
import { DeliveryWorker } from './webhooks/delivery.js';
import { SyncRouter } from './sync/router.js';
import type { RouteRow } from './store/index.js';
import type { Store } from './store/index.js';

export interface StartCloudOptions {
  /** The time every part reads (`serve` passes the system's). */
  clock: Clock;
  /** Every part's timers and waits: the database at start, background work, timeouts. */
  scheduler: Scheduler;
  logger?: FastifyBaseLogger;
  /** New episode assignments, once written: the MQTT side pushes them to their robots. */
  onAssigned?: (routes: RouteRow[]) => void | Promise<void>;
}

export interface RunningCloud {
  http: string;
  mqtt: string;
  /** The separate metrics listener's URL (`--metrics-listen`), when there is one. */
  metrics: string | null;
  store: Store;
  app: CloudApp;
  broker: EmbeddedBroker | null;
  bootstrapped: Bootstrapped | null;
  /** Stops accepting, lets in-flight requests finish, then closes the broker and the database. */
  close(): Promise<void>;
}

/** The process's secret key is not the one the database's sealed secrets were sealed with. */
export class SecretKeyMismatchError extends Error {
  constructor(readonly fingerprint: string) {
    super(
      `the secret key (fingerprint ${fingerprint}) is not the one this database's stored secrets were sealed with; give every replica the same FLEET_SECRET_KEY (or the data directory's secret.key it was first started with)`,
    );
    this.name = 'SecretKeyMismatchError';
  }
}

/** A port `serve` could not bind (taken, or not allowed); says which listener and where. */
export class ListenError extends Error {
  constructor(
    readonly listener: 'HTTP' | 'MQTT' | 'metrics',
    readonly address: string,
    readonly code: string | undefined,
    options: { cause: unknown },
  ) {
    const why = code === 'EADDRINUSE' ? 'address already in use' : code === 'EACCES' ? 'permission denied' : code === 'EADDRNOTAVAIL' ? 'address not available' : (options.cause as Error)?.message ?? String(options.cause);
    super(`cannot listen for ${listener} on ${address}: ${why}${code ? ` (${code})` : ''}`, options);
    this.name = 'ListenError';
  }
}

async function listening<T>(listener: 'HTTP' | 'MQTT' | 'metrics', host: string, port: number, fn: () => Promise<T>): Promise<T> {
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

interface BrokerPart {
  broker: EmbeddedBroker | null;
  /** The broker's addresses for the link: one, or a cluster's nodes (the link moves to the next when its connection is lost). */
  linkUrls: readonly string[];
  linkAuth: { username?: string; password?: string };
}

/** `--mqtt-account-file`: `{username, password}` as `fleet-cloud broker-config` wrote it. */
export function readBrokerAccount(file: string): { username: string; password: string } {
  const parsed = BrokerAccountSchema.safeParse(JSON.parse(readFileSync(file, 'utf8')));
  if (!parsed.success) throw new Error(`${file} is not a broker account file (username, password): ${parsed.error.issues.map((i) => i.path.join('.')).join(', ')}`);
  return parsed.data;
}

/**
 * Opens the store; PostgreSQL that does not accept connections yet (a cloud started together
 * with its database, or during a failover) is waited for, up to `databaseWaitS`, with a log line
 * per attempt. Any other failure (a wrong password, a missing database) fails at once.
 */
export async function openStoreWaiting(
  config: Pick<CloudConfig, 'dataDir' | 'databaseUrl' | 'databaseWaitS'>,
  time: TimeSource,
  logger: FastifyBaseLogger,
): Promise<Store> {
  const { clock, scheduler } = time;
  const open = () => openStore({ dataDir: config.dataDir, databaseUrl: config.databaseUrl, clock, scheduler });
  if (!config.databaseUrl || config.databaseWaitS === 0) return open();
  return retry(open, {
    policy: { schedule: waitSchedule(config.databaseWaitS * 1000) },
    scheduler,
    shouldRetry: isStoreUnavailable,
    onRetry: (err, attempt, waitMs) =>
      logger.warn({ err: { message: err instanceof Error ? err.message : String(err) }, attempt, retry_in_ms: waitMs }, 'the database does not accept connections yet; waiting'),
  });
}

/** Waits of 0.5 s doubling to 5 s, that add up to `totalMs`. */
function waitSchedule(totalMs: number): number[] {
  const waits: number[] = [];
  let left = totalMs;
  for (let w = 500; left > 0; w = Math.min(w * 2, 5000)) {
    waits.push(Math.min(w, left));
    left -= w;
  }
  return waits;
}

/** The shared-subscription group of the replicas behind one external broker. */
const REPLICA_SHARE_GROUP = 'fleet-cloud';

/**
 * Everything `fleet-cloud serve` runs, in one process: one ordered list of parts, started in
 * order and closed in reverse (a failed start closes what had started). Both ports are bound
 * before the first start creates its organization and admin key, so a start that cannot listen
 * leaves no key.
 */
export async function startCloud(config: CloudConfig, opts: StartCloudOptions): Promise<RunningCloud> {
  const { clock, scheduler } = opts;
  const logger = opts.logger ?? pino({ level: 'silent' });
  const life = new Lifecycle((name, err) => logger.error({ err, part: name }, 'closing failed'));
  try {
    const store = await life.add('store', async () => {
      const s = await openStoreWaiting(config, { clock, scheduler }, logger);
      s.startBackground?.();
      return { value: s, close: () => s.close() };
    });
    const secrets = loadSecretBox(config.dataDir, config.secretKey);
    // Replicas (or a restart with another FLEET_SECRET_KEY) must use the key the stored secrets
    // were sealed with; a different one could open none of them, so refuse to start.
    if ((await store.checkSecretKey(secrets.fingerprint())) === 'different') throw new SecretKeyMismatchError(secrets.fingerprint());
    const metrics = metricsFor(config, store.gauges);

    // The MQTT broker: embedded (with robot credentials, topic ACL and a per-robot throttle), or external.
    const { broker, linkUrls, linkAuth } = await life.add<BrokerPart>('broker', async () => {
      if (config.mqttUrl) {
        // Other replicas may be serving: presence in the store stays as it is (no markAllDisconnected).
        const linkAuth = config.mqttAccountFile ? readBrokerAccount(config.mqttAccountFile) : {};
        return { value: { broker: null, linkUrls: config.mqttUrl, linkAuth }, close: async () => undefined };
      }
      const throttle = new PublishThrottle<Client>({
        messagesPerSecond: config.mqttMessagesPerSecond,
        bytesPerSecond: config.mqttBytesPerSecond,
        clock,
        scheduler,
        isClosed: (client: Client) => client.closed,
      });
      // Refused robot passwords per client address, as refused API keys are on the HTTP side.
      const failures = new FailedLoginLimiter({
        kind: 'mqtt',
        maxFailures: config.failedLoginsPerWindow,
        windowMs: config.failedLoginWindowS * 1000,
        clock,
        ...(store.sharedCounters ? { shared: store.sharedCounters } : {}),
        onError: (err) => logger.error({ err }, 'counting a failed mqtt login failed'),
      });
      // The robot link works inside the broker (no connection of its own): no client logs in as the cloud.
      const hooks = robotBrokerHooks(store, null, (msg, extra) => logger.warn(extra, msg), { throttle, clock, failures });
      // Nobody is connected to a broker that has just started; robots republish on reconnect.
      // Each robot shown connected until now goes offline in the event log too.
      await store.robots.markAllDisconnected({ at: clock.now(), logChange: robotStatusEvent });
      const b = await listening('MQTT', config.host, config.mqttPort, () =>
        startEmbeddedBroker({
          host: config.host,
          port: config.mqttPort,
          hooks,
          onOversizedPacket: (clientId, bytes) => logger.warn({ client_id: clientId, bytes }, 'mqtt connection closed: packet over the size limit'),
        }),
      );
      return {
        value: { broker: b, linkUrls: [b.url], linkAuth: {} },
        close: () => b.close(),
      };
    });

    // Robot accounts on the external broker (mosquitto's dynamic security plugin).
    const dynsec = !config.mqttAccountFile || config.mqttBroker !== 'mosquitto' ? null : await life.add('broker accounts', async () => {
      const control = new DynsecControl({ url: linkUrls[0]!, username: linkAuth.username!, password: linkAuth.password!, logger, timeoutMs: config.commandTimeoutMs, scheduler });
      await control.start();
      return { value: { control, accounts: new DynsecRobotAccounts(control) }, close: () => control.stop() };
    });
    const accounts = dynsec?.accounts ?? null;

    const egress = await life.add('egress', async () => {
      const e = egressFor(config, scheduler);
      return { value: e, close: () => e.close() };
    });

    const deliveries = await life.add('webhook deliveries', async () => {
      const w = new DeliveryWorker({ store, secrets, egress, clock, scheduler, logger, metrics });
      w.start();
      return { value: w, close: () => w.stop() };
    });

    // The event streams of the HTTP API, woken by what this process appends to the event log
    // (the app ends them when it closes); another replica's events come with the poll.
    const streams = eventHubFor(config, { store, clock, scheduler, logger, secrets });

    // The robot link: presence, commands, the durable outboxes routed by message kind, and sync
    // (assignments pushed as routes are decided, grant requests relayed to grant providers).
    const relay = new GrantRelay({ store, egress, secrets, clock, logger, retryAfterS: config.grantRetryAfterS, metrics });
    const readLinks = new ReadLinker({ store, egress, secrets, clock, logger, readOrigins: config.readOrigins });
    const { link, router, rotator } = await life.add('robot link', async () => {
      const l = new RobotLink({
        urls: linkUrls,
        ...linkAuth,
        store,
        clock,
        scheduler,
        logger,
        commandTimeoutMs: config.commandTimeoutMs,
        ...(config.mqttUrl ? { shareGroup: REPLICA_SHARE_GROUP } : {}),
        // Presence from the connections themselves: the embedded broker's, or mosquitto's log of them.
        // On the embedded broker the link works inside it, without a connection of its own.
        ...(broker ? { sessions: broker, inProcess: broker.aedes } : { brokerLog: true }),
      });
      // A cluster closes a robot's connection on whichever node holds it, told on its control topic.
      const sessions = broker ?? (config.mqttBroker === 'fleet-cluster' ? clusterSessions(l, logger) : null);
      const rot = new CredentialRotator({ store, clock, secrets, link: l, sessions, accounts, logger });
      l.on('robotOnline', (robotId) => rot.robotOnline(robotId));
      l.on('statusLogged', (orgId) => streams.notify([orgId]));
      const syncService = new SyncService({ store, relay, publish: (robotId, msg) => l.publishSync(robotId, msg), logger });
      const r = new SyncRouter({
        store,
        clock,
        onAssigned: async (routes) => {
          await syncService.pushAssignments(routes);
          await opts.onAssigned?.(routes);
        },
        onError: (err, orgId) => logger.error({ err, org_id: orgId }, 'routing episodes failed'),
      });
      const ingestor = new EpisodeIngestor({
        store,
        clock,
        logger,
        metrics,
        onIndexed: (orgIds) => {
          deliveries.notify();
          streams.notify(orgIds);
          for (const orgId of orgIds) r.schedule(orgId, 'new');
        },
      });
      const appended = () => {
        deliveries.notify();
        streams.notify();
      };
      const replicas = new ReplicaStateHandler({ store, clock, logger, onApplied: appended });
      const outbox = new OutboxRouter({
        logger,
        metrics,
        ack: (robotId, ack) => l.publishAck(robotId, ack),
        handlers: {
          'episode.report': ingestor,
          'replica.state': replicas,
          'episode.pruned': new EpisodePrunedHandler({ store, clock, logger, onApplied: appended }),
          'episode.local_missing': new LocalMissingHandler({ store, clock, logger }),
        },
      });
      l.onOutbox = (robotId, payload) => outbox.submit(robotId, payload);
      l.onSyncRequest = (robotId, payload) => syncService.submit(robotId, payload);
      await l.start();
      // Episodes indexed while no cloud ran (or whose routing pass a crash cut short) get routed.
      for (const org of await store.orgs.list()) r.schedule(org.id, 'new');
      return {
        value: { link: l, router: r, rotator: rot },
        close: async () => {
          await rot.drain();
          // Answer the messages and requests already received; any that arrive meanwhile are
          // handled too, and their robots resend until acknowledged (every handler is idempotent).
          await outbox.drain();
          await syncService.drain();
          await l.stop();
          await outbox.drain();
          await syncService.drain();
          await r.idle();
        },
      };
    });

    const app = await life.add('http', async () => {
      const a = await buildApp(config, {
        store,
        secrets,
        deliveries,
        sync: router,
        relay,
        readLinks,
        clock,
        scheduler,
        // The shutdown's sweep of idle connections, on the system's time: a shutdown must end.
        shutdownScheduler: systemScheduler,
        logger,
        streams,
        robots: link,
        metrics,
        fleet: rotator,
        mqttPublicUrls: config.mqttPublicUrl ?? linkUrls.map((u) => u.replace(/\/\/[^@/]*@/, '//')),
        readiness: async () => {
          if (broker?.aedes.closed) throw new Error('MQTT broker closed');
          if (!link.connected) throw new Error('no connection to the MQTT broker');
          // Enrollment, rotation and de-enrollment need the broker's account API.
          if (dynsec && !dynsec.control.connected) throw new Error('no connection to the broker\'s dynamic security API');
        },
      });
      try {
        await listening('HTTP', config.host, config.httpPort, () => a.app.listen({ host: config.host, port: config.httpPort }));
      } catch (err) {
        await a.close();
        throw err;
      }
      return {
        value: a,
        close: () => a.close(),
      };
    });

    // Operators' /metrics on a listener of its own, bound before the first start creates anything.
    const metricsListener = config.metricsListen === undefined ? null : await life.add('metrics', async () => {
      const { host, port } = parseListen(config.metricsListen!);
      const l = await listening('metrics', host, port, () => startMetricsListener({ host, port, metrics, token: metricsToken(config), onError: (err) => logger.error({ err }, 'metrics scrape failed') }));
      return { value: l, close: () => l.close() };
    });

    // Only now, with both ports bound: a start that fails to listen creates nothing.
    const bootstrapped = await bootstrapIfEmpty(store, clock, config.dataDir);
    const addr = app.app.server.address() as AddressInfo;
    const host = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
    const shownHost = host === '0.0.0.0' || host === '[::]' ? '127.0.0.1' : host;
    return {
      http: `http://${shownHost}:${addr.port}`,
      mqtt: broker ? broker.url : linkUrls[0]!,
      metrics: metricsListener?.url ?? null,
      store,
      app,
      broker,
      bootstrapped,
      close: () => life.close(),
    };
  } catch (err) {
    await life.close();
    throw err;
  }
}

/** The outbound client the config describes (its deadlines on `scheduler`). */
export interface RunningBrokerNode {
  id: string;
  mqtt: string;
  node: ClusterNode;
  close(): Promise<void>;
}

/**
 * `fleet-cloud broker-node`: one node of the broker cluster, answering logins and ACLs from the
 * cloud's store (robots) and the account file (the cloud's replicas), as the embedded broker does.
 */
export async function startBrokerNode(config: BrokerNodeConfig, opts: { clock: Clock; scheduler: Scheduler; logger: FastifyBaseLogger }): Promise<RunningBrokerNode> {
  const { clock, scheduler, logger } = opts;
  const account = readBrokerAccount(config.accountFile);
  const life = new Lifecycle((name, err) => logger.error({ err, part: name }, 'closing failed'));
  try {
    const store = await life.add('store', async () => {
      const s = await openStoreWaiting(config, { clock, scheduler }, logger);
      return { value: s, close: () => s.close() };
    });
    const throttle = new PublishThrottle<Client>({
      messagesPerSecond: config.mqttMessagesPerSecond,
      bytesPerSecond: config.mqttBytesPerSecond,
      clock,
      scheduler,
      isClosed: (client: Client) => client.closed,
    });
    const failures = new FailedLoginLimiter({
      kind: 'mqtt',
      maxFailures: config.failedLoginsPerWindow,
      windowMs: config.failedLoginWindowS * 1000,
      clock,
      ...(store.sharedCounters ? { shared: store.sharedCounters } : {}),
      onError: (err) => logger.error({ err }, 'counting a failed mqtt login failed'),
    });
    const log = (msg: string, extra: object) => logger.warn(extra, msg);
    const hooks = robotBrokerHooks(store, account.password, log, { throttle, clock, failures, cloudUsername: account.username });
    const node = await life.add('broker node', async () => {
      const n = await listening('MQTT', config.host, config.port, () =>
        startClusterNode({
          host: config.host,
          port: config.port,
          redisUrl: config.redisUrl,
          ...(config.nodeId ? { nodeId: config.nodeId } : {}),
          heartbeatMs: config.heartbeatMs,
          hooks,
          clock,
          scheduler,
          log: (msg, extra) => logger.info(extra, msg),
          onOversizedPacket: (clientId, bytes) => logger.warn({ client_id: clientId, bytes }, 'mqtt connection closed: packet over the size limit'),
        }),
      );
      return { value: n, close: () => n.close() };
    });
    return { id: node.id, mqtt: node.broker.url, node, close: () => life.close() };
  } catch (err) {
    await life.close();
    throw err;
  }
}

/** Closes robots' connections on a fleet-cluster (every node closes the id it holds). */
function clusterSessions(link: RobotLink, logger: FastifyBaseLogger): { disconnect(robotId: string): boolean } {
  return {
    disconnect(robotId) {
      link.publishToBroker(CLUSTER_DISCONNECT_TOPIC, robotId).catch((err: unknown) => logger.warn({ err, robot_id: robotId }, 'telling the cluster to close a robot connection failed'));
      return true;
    },
  };
}

function egressFor(config: CloudConfig, scheduler: Scheduler): EgressClient {
  return new EgressClient({
    allowLoopback: config.egressAllowLoopback,
    ...(config.egressCaFile ? { ca: readFileSync(config.egressCaFile, 'utf8') } : {}),
    scheduler,
  });
}

/** The event hub the config describes. */
export function eventHubFor(config: CloudConfig, deps: TimeSource & { store: Store; logger: FastifyBaseLogger; secrets: SecretBox }): EventHub {
  return new EventHub({
    store: deps.store,
    clock: deps.clock,
    scheduler: deps.scheduler,
    logger: deps.logger,
    pollMs: config.eventStreamPollMs,
    heartbeatMs: config.eventStreamHeartbeatMs,
    maxStreamsPerOrg: config.eventStreamsPerOrg,
    ids: deps.secrets.opaqueIds(),
  });
}

const noRobotLink: AppParts['robots'] = {
  send: () => Promise.reject(new ApiError('robot_offline', 'this cloud has no MQTT link')),
};

/** The parts of an app without a broker, and how to close the ones it owns. */
export interface OfflineAppParts {
  parts: AppParts;
  close(): Promise<void>;
}

/**
 * The app's parts for a cloud without a broker or delivery worker: `fleet-cloud openapi`, and
 * the unit tests (through test-support.ts, on a clock they move). No robot is online,
 * rotations stay pending, nothing wakes a delivery worker; routing pushes nothing to robots.
 * Each part is built once here, as `startCloud` builds its own, and the app builds none.
 */
export function offlineAppParts(
  config: CloudConfig,
  base: TimeSource & { store: Store; secrets: SecretBox; logger?: FastifyBaseLogger; shutdownScheduler: Scheduler },
): OfflineAppParts {
  const { store, secrets, clock, scheduler } = base;
  const logger = base.logger ?? pino({ level: 'silent' });
  const egress = egressFor(config, scheduler);
  const sync = new SyncRouter({ store, clock, onError: (err, orgId) => logger.error({ err, org_id: orgId }, 'routing episodes failed') });
  return {
    parts: {
      store,
      secrets,
      clock,
      scheduler,
      shutdownScheduler: base.shutdownScheduler,
      ...(base.logger ? { logger: base.logger } : {}),
      robots: noRobotLink,
      fleet: offlineFleetAdmin,
      mqttPublicUrls: config.mqttPublicUrl ?? [`mqtt://${config.host}:${config.mqttPort}`],
      deliveries: { notify: () => undefined },
      sync,
      relay: new GrantRelay({ store, egress, secrets, clock, logger }),
      readLinks: new ReadLinker({ store, egress, secrets, clock, logger, readOrigins: config.readOrigins }),
      metrics: metricsFor(config, store.gauges),
      streams: eventHubFor(config, { store, clock, scheduler, logger, secrets }),
    },
    close: () => egress.close(),
  };
}
