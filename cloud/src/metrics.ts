import { createHash, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import { isOutboxKind, type CommandReply, type RobotCommandName } from '@fleet/protocol';
import type { CloudConfig } from './config.js';
import { ApiError } from './errors.js';
import type { GaugeStore, IngestResult } from './store/index.js';

/** The robot link's command sender (the routes' `CommandSender`, restated to keep imports one-way). */
export interface CommandSender {
  send(robotId: string, command: RobotCommandName, cmdId: string, args?: Record<string, unknown>): Promise<CommandReply>;
}

/** How a robot command sent over the link ended. */
export type CommandOutcome = 'ok' | 'refused' | 'timeout' | 'offline' | 'error';
export type OutboxAckResult = 'ok' | 'refused' | 'later';
export type WebhookDeliveryResult = 'delivered' | 'retry' | 'dead' | 'disabled';

/**
 * What the rest of the cloud reports to the metrics: one call per event, cheap enough for every
 * request. `NO_METRICS` does nothing, for a cloud that serves none (the default).
 */
export interface CloudMetrics {
  readonly enabled: boolean;
  /** One HTTP request answered: `route` is the route's pattern (`/v1/robots/:id`), never the raw URL. */
  httpRequest(method: string, route: string | undefined, statusCode: number, seconds: number): void;
  /** One ingest transaction: the result of each report in it. */
  ingestBatch(results: readonly IngestResult[]): void;
  /** One acknowledgment sent to a robot's outbox; `kind` is `invalid` when the envelope could not be read. */
  outboxAck(kind: string, result: OutboxAckResult): void;
  command(command: RobotCommandName, outcome: CommandOutcome, seconds: number): void;
  webhookDelivery(result: WebhookDeliveryResult): void;
  /** A grant request forwarded to a destination's grant provider, and what came of it. */
  grantForward(destinationId: string, result: 'granted' | 'deferred'): void;
  /** A deferral handed to a robot; `destinationId` only when it names a routed destination. */
  grantDeferral(destinationId: string | null, reason: string): void;
  /** The Prometheus text exposition (gauges read from the store now). */
  scrape(): Promise<string>;
}

export const NO_METRICS: CloudMetrics = {
  enabled: false,
  httpRequest: () => undefined,
  ingestBatch: () => undefined,
  outboxAck: () => undefined,
  command: () => undefined,
  webhookDelivery: () => undefined,
  grantForward: () => undefined,
  grantDeferral: () => undefined,
  scrape: () => Promise.resolve(''),
};

/** Robot commands wait up to 120 s; HTTP requests include them. */
const LATENCY_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120];
const BATCH_BUCKETS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000];

/**
 * The cloud's metrics on a registry of their own (several apps in one process, as in tests,
 * do not share prom-client's global one), with Node's process metrics beside them.
 */
export class PromCloudMetrics implements CloudMetrics {
  readonly enabled = true;
  readonly registry = new Registry();
  private readonly http: Histogram<'method' | 'route' | 'status_code'>;
  private readonly reports: Counter<'result'>;
  private readonly batch: Histogram;
  private readonly acks: Counter<'kind' | 'result'>;
  private readonly commands: Counter<'command' | 'outcome'>;
  private readonly commandSeconds: Histogram<'command'>;
  private readonly deliveries: Counter<'outcome'>;
  private readonly forwards: Counter<'destination_id' | 'result'>;
  private readonly deferrals: Counter<'destination_id' | 'reason'>;

  constructor(gauges: GaugeStore) {
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry });
    this.http = new Histogram({
      name: 'fleet_http_request_duration_seconds',
      help: 'HTTP requests by method, route pattern and status code',
      labelNames: ['method', 'route', 'status_code'],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    new Gauge({
      name: 'fleet_robots_connected',
      help: 'Robots whose MQTT connection is up',
      registers,
      async collect() {
        this.set(await gauges.connectedRobots());
      },
    });
    this.reports = new Counter({ name: 'fleet_episode_reports_total', help: 'Episode reports ingested, by result (inserted, duplicate, conflict)', labelNames: ['result'], registers });
    this.batch = new Histogram({ name: 'fleet_episode_ingest_batch_size', help: 'Episode reports per ingest transaction', buckets: BATCH_BUCKETS, registers });
    this.acks = new Counter({ name: 'fleet_outbox_acks_total', help: 'Acknowledgments sent to robot outboxes, by message kind and result', labelNames: ['kind', 'result'], registers });
    this.commands = new Counter({ name: 'fleet_robot_commands_total', help: 'Robot commands sent over the MQTT link, by command and outcome', labelNames: ['command', 'outcome'], registers });
    this.commandSeconds = new Histogram({
      name: 'fleet_robot_command_duration_seconds',
      help: 'Time from sending a robot command to its answer (or timeout)',
      labelNames: ['command'],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    new Gauge({
      name: 'fleet_webhook_queue_depth',
      help: 'Webhook deliveries waiting in their subscriptions queues',
      registers,
      async collect() {
        this.set(await gauges.pendingDeliveries());
      },
    });
    this.deliveries = new Counter({ name: 'fleet_webhook_deliveries_total', help: 'Webhook delivery attempts by outcome (delivered, retry, dead, disabled)', labelNames: ['outcome'], registers });
    this.forwards = new Counter({ name: 'fleet_grant_forwards_total', help: 'Grant requests forwarded to grant providers, by destination and result', labelNames: ['destination_id', 'result'], registers });
    this.deferrals = new Counter({ name: 'fleet_grant_deferrals_total', help: 'Grant deferrals handed to robots, by destination and reason', labelNames: ['destination_id', 'reason'], registers });
    new Gauge({
      name: 'fleet_replicas',
      help: 'Routed episode replicas by state (assigned: no grant yet)',
      labelNames: ['state'],
      registers,
      async collect() {
        for (const [state, n] of Object.entries(await gauges.replicasByState())) this.set({ state }, n);
      },
    });
  }

  httpRequest(method: string, route: string | undefined, statusCode: number, seconds: number): void {
    // Unrouted requests (404s, refused URLs) share one label, so scanners cannot grow the series.
    this.http.observe({ method, route: route ?? 'unmatched', status_code: String(statusCode) }, seconds);
  }

  ingestBatch(results: readonly IngestResult[]): void {
    this.batch.observe(results.length);
    for (const r of results) this.reports.inc({ result: r });
  }

  outboxAck(kind: string, result: OutboxAckResult): void {
    // A kind this cloud does not know is a newer agent's: one label for all of them.
    this.acks.inc({ kind: kind === 'invalid' || isOutboxKind(kind) ? kind : 'other', result });
  }

  command(command: RobotCommandName, outcome: CommandOutcome, seconds: number): void {
    this.commands.inc({ command, outcome });
    this.commandSeconds.observe({ command }, seconds);
  }

  webhookDelivery(result: WebhookDeliveryResult): void {
    this.deliveries.inc({ outcome: result });
  }

  grantForward(destinationId: string, result: 'granted' | 'deferred'): void {
    this.forwards.inc({ destination_id: destinationId, result });
  }

  grantDeferral(destinationId: string | null, reason: string): void {
    this.deferrals.inc({ destination_id: destinationId ?? 'none', reason });
  }

  scrape(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}

/** The metrics a cloud with this configuration keeps: none unless a listener or a token is set. */
export function metricsFor(config: CloudConfig, gauges: GaugeStore): CloudMetrics {
  return config.metricsListen !== undefined || metricsToken(config) !== null ? new PromCloudMetrics(gauges) : NO_METRICS;
}

/** The bearer token /metrics requires, from FLEET_METRICS_TOKEN or the token file; null when none. */
export function metricsToken(config: CloudConfig): string | null {
  if (config.metricsToken) return config.metricsToken;
  if (!config.metricsTokenFile) return null;
  const token = readFileSync(config.metricsTokenFile, 'utf8').trim();
  if (token.length < 16) throw new Error(`the metrics token in ${config.metricsTokenFile} must be at least 16 characters`);
  return token;
}

/**
 * Checks an Authorization header against the token in constant time (both are hashed first, so
 * their lengths do not show either). Throws 401 `unauthenticated` when it does not match.
 */
export function checkMetricsToken(token: string | null, authorization: string | undefined): void {
  if (token === null) return;
  const given = /^Bearer (\S+)$/i.exec(authorization ?? '')?.[1] ?? '';
  const digest = (s: string) => createHash('sha256').update(s).digest();
  if (!timingSafeEqual(digest(given), digest(token))) throw new ApiError('unauthenticated', 'the metrics endpoint needs its bearer token');
}

/** Wraps the link's command sender so each command's outcome and latency are counted. */
export function measuredCommands(sender: CommandSender, metrics: CloudMetrics): CommandSender {
  if (!metrics.enabled) return sender;
  return {
    async send(robotId, command, cmdId, args): Promise<CommandReply> {
      const started = performance.now();
      const seconds = () => (performance.now() - started) / 1000;
      try {
        const reply = await sender.send(robotId, command, cmdId, args);
        metrics.command(command, reply.ok ? 'ok' : 'refused', seconds());
        return reply;
      } catch (err) {
        const code = err instanceof ApiError ? err.code : null;
        metrics.command(command, code === 'command_timeout' ? 'timeout' : code === 'robot_offline' ? 'offline' : 'error', seconds());
        throw err;
      }
    },
  };
}

export interface MetricsListener {
  /** `http://host:port/metrics` */
  readonly url: string;
  close(): Promise<void>;
}

/**
 * `/metrics` on a listener of its own (`--metrics-listen`), apart from the API: no API key, no
 * rate limit, the token when one is set. Anything but GET or HEAD of /metrics is refused.
 */
export async function startMetricsListener(opts: { host: string; port: number; metrics: CloudMetrics; token: string | null; onError?: (err: unknown) => void }): Promise<MetricsListener> {
  const answer = (res: ServerResponse, status: number, code: string, message: string, headers: Record<string, string> = {}) => {
    res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', ...headers });
    res.end(JSON.stringify({ error: { code, message } }));
  };
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? '').split('?')[0];
    if (path !== '/metrics') return answer(res, 404, 'not_found', 'only /metrics is served here');
    if (req.method !== 'GET' && req.method !== 'HEAD') return answer(res, 405, 'method_not_allowed', 'use GET', { allow: 'GET, HEAD' });
    try {
      checkMetricsToken(opts.token, req.headers.authorization);
    } catch (err) {
      return answer(res, 401, 'unauthenticated', (err as Error).message, { 'www-authenticate': 'Bearer' });
    }
    opts.metrics.scrape().then(
      (text) => {
        res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' });
        res.end(req.method === 'HEAD' ? undefined : text);
      },
      (err: unknown) => {
        opts.onError?.(err);
        answer(res, 500, 'internal', 'collecting the metrics failed');
      },
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, opts.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const addr = server.address() as AddressInfo;
  const host = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  return {
    url: `http://${host}:${addr.port}/metrics`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
