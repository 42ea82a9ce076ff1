import Fastify, { type FastifyBaseLogger, type FastifyError, type FastifyInstance } from 'fastify';
import fastifySwagger from '@fastify/swagger';
import fastifySwaggerUi from '@fastify/swagger-ui';
import {
  jsonSchemaTransform,
  jsonSchemaTransformObject,
  validatorCompiler,
  type ZodTypeProvider,
} from 'fastify-type-provider-zod';
import { z } from 'zod';
import { every, HOUR, type Clock, type Scheduler } from '@fleet/protocol';
import { Authenticator, LastUsedTracker } from './auth.js';
import { FailedLoginLimiter } from './login-limit.js';
import { lazyChildLoggerFactory } from './logger.js';
import type { CloudConfig } from './config.js';
import { ApiError } from './errors.js';
import { handleClientError, requestIdFor, sendFrameworkError } from './http/error-edge.js';
import { addSharedErrors } from './http/error-responses.js';
import { withoutUnusedSchemas } from './http/openapi-components.js';
import { registerConsole } from './http/console.js';
import { installPipeline } from './http/pipeline.js';
import { boundedSerializerCompiler } from './http/serializer.js';
import type { CatalogEntry } from './http/policy.js';
import { installRateLimits } from './http/rate-limit.js';
import { ConnectionTracker } from './http/shutdown.js';
import { registerV1, type CommandSender, type V1Parts, type ZodApp } from './routes/v1/index.js';
import type { FleetAdmin } from './robots/credentials.js';
import type { SecretBox } from './secret-box.js';
import type { SyncRouter } from './sync/router.js';
import type { GrantRelay } from './sync/grant-relay.js';
import type { ReadLinker } from './sync/read-links.js';
import type { EventHub } from './streams/hub.js';
import { checkMetricsToken, measuredCommands, metricsToken, type CloudMetrics } from './metrics.js';
import type { Store } from './store/index.js';

export const API_VERSION = '1.0.0';

/**
 * The parts the HTTP app serves with, each built once by the composition root (`startCloud`;
 * test-support.ts for the unit tests) and handed down: the app builds none of them.
 */
export interface AppParts {
  store: Store;
  /** Encrypts stored responses and secrets. */
  secrets: SecretBox;
  clock: Clock;
  /** Paces background work (last-use flushes, the idempotency purge). */
  scheduler: Scheduler;
  /**
   * Paces the shutdown's sweep of idle connections: the system's, even where a test drives the
   * rest by hand, so that a shutdown always ends.
   */
  shutdownScheduler: Scheduler;
  /** A pino logger; without one the app logs nothing. */
  logger?: FastifyBaseLogger;
  /** Sends robot commands (the robot link). */
  robots: CommandSender;
  /** De-enrollment disconnects and credential rotations (the credential rotator). */
  fleet: FleetAdmin;
  /** The broker address handed to enrolling robots. */
  /** The broker addresses enrolling robots are given (one, or a cluster's nodes). */
  mqttPublicUrls: readonly string[];
  /** Wakes the webhook delivery worker when something is queued. */
  deliveries: { notify(): void };
  /** Routes episodes to destinations (the routes schedule passes after rules and destinations change). */
  sync: SyncRouter;
  /** Forwards grant requests (the destination check). */
  relay: Pick<GrantRelay, 'forward'>;
  /** Read links of episodes' files. */
  readLinks: Pick<ReadLinker, 'issue'>;
  /** Extra readiness checks (the MQTT broker); /readyz answers 503 while any fails. */
  readiness?: () => Promise<void>;
  /** Where requests and commands are counted. */
  metrics: CloudMetrics;
  /** The event streams (GET /v1/events/stream). The app ends its streams when it closes. */
  streams: EventHub;
}

export interface CloudApp {
  app: FastifyInstance;
  /** Every /v1 route with the policy it declared. */
  catalog: readonly CatalogEntry[];
  lastUsed: LastUsedTracker;
  /** The episode router the routes schedule passes on (rules and destinations changed). */
  sync: SyncRouter;
  /** The event streams; `notify` when this process appended events. */
  streams: EventHub;
  /** Stops background work and flushes buffers; closes the HTTP server (not the store). */
  close(): Promise<void>;
}

/** Builds the HTTP app without listening (tests call `app.inject`; the CLI calls `listen`). */
export async function buildApp(config: CloudConfig, deps: AppParts): Promise<CloudApp> {
  const { store, clock, scheduler, secrets, sync, relay, readLinks, streams, metrics } = deps;
  const lastUsed = new LastUsedTracker(store, config.lastUsedFlushMs, (err) => {
    fastify.log.error({ err }, 'flushing api key last-use times failed');
  }, scheduler);
  const failedLogins = new FailedLoginLimiter({
    kind: 'http',
    maxFailures: config.failedLoginsPerWindow,
    windowMs: config.failedLoginWindowS * 1000,
    clock,
    ...(store.sharedCounters ? { shared: store.sharedCounters } : {}),
    onError: (err) => fastify.log.error({ err }, 'counting a failed login failed'),
  });
  const authenticator = new Authenticator(store, clock, lastUsed, undefined, failedLogins);
  const fastify = Fastify({
    // Request loggers (one per request, with its id) are built only when something is logged.
    ...(deps.logger ? { loggerInstance: deps.logger, childLoggerFactory: lazyChildLoggerFactory } : { logger: false }),
    bodyLimit: config.bodyLimitBytes,
    // A client gets requestTimeoutMs to send its whole request (node answers 408 and closes),
    // checked every second rather than node's default 30 s.
    requestTimeout: config.requestTimeoutMs,
    http: { headersTimeout: config.requestTimeoutMs, requestTimeout: config.requestTimeoutMs, connectionsCheckingInterval: 1000 },
    genReqId: requestIdFor,
    requestIdHeader: false,
    return503OnClosing: true,
    forceCloseConnections: 'idle',
    routerOptions: { ignoreTrailingSlash: false, maxParamLength: 256 },
    // The router's own refusals (a bad URL, an over-long parameter) come before any hook, so
    // authentication is decided here first: a request without a valid key gets 401, not 400.
    frameworkErrors: (err, request, reply) => {
      const check = request.url.startsWith('/v1/') ? authenticator.authenticate(request.headers.authorization, request.ip) : Promise.resolve();
      check.then(
        () => sendFrameworkError(err, request, reply),
        (authErr: Error) => sendFrameworkError(authErr as FastifyError, request, reply),
      );
    },
    clientErrorHandler: handleClientError,
  });
  const connections = new ConnectionTracker(fastify.server);
  // The route pattern, not the URL: one series per route whatever ids the paths carry.
  if (metrics.enabled) fastify.addHook('onResponse', async (request, reply) => metrics.httpRequest(request.method, request.routeOptions.url, reply.statusCode, reply.elapsedTime / 1000));
  fastify.setValidatorCompiler(validatorCompiler);
  fastify.setSerializerCompiler(boundedSerializerCompiler);
  const app = fastify.withTypeProvider<ZodTypeProvider>() as unknown as ZodApp;

  const catalog = installPipeline(fastify, {
    store,
    clock,
    scheduler,
    authenticator,
    secrets,
    idempotencyLeaseMs: config.idempotencyLeaseMs,
  });
  decorateOpenApi(fastify);
  await installRateLimits(fastify, { clock, unauthenticatedPerMinutePerIp: config.ipRequestsPerMinute, ...(store.sharedCounters ? { shared: store.sharedCounters } : {}) });

  await fastify.register(fastifySwagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Robot Fleet and Episode Data API',
        version: API_VERSION,
        description: 'Robot commands, episodes, datasets, cloud sync and webhooks. Errors: `{error: {code, message, details?, request_id}}`; branch on `code`.',
        // The service is not open source: no SPDX license applies (decisions.md, OpenAPI document).
        license: { name: 'Proprietary', identifier: 'LicenseRef-Proprietary' },
      },
      // Relative: the document is served by the API it describes, wherever that is deployed.
      servers: [{ url: '/', description: 'The cloud serving this document' }],
      components: {
        securitySchemes: { apiKey: { type: 'http', scheme: 'bearer', description: 'An API key, `ak_…`' } },
      },
    },
    transform: jsonSchemaTransform,
    transformObject: (input) => withoutUnusedSchemas(jsonSchemaTransformObject(input)),
  });
  await fastify.register(fastifySwaggerUi, { routePrefix: '/docs', uiConfig: { url: '/v1/openapi.json' } });

  // Before the server stops: open streams never finish by themselves, and close waits for every
  // request in flight.
  fastify.addHook('preClose', async () => streams.close());

  // What the /v1 modules take, as their plugin options: the parts handed to the app, the
  // robot link's command sender counted in the metrics, and this app's last-use tracker.
  const v1Parts: V1Parts = {
    cloudConfig: config,
    egressAllowLoopback: config.egressAllowLoopback,
    store,
    clock,
    lastUsed,
    secrets,
    sync,
    relay,
    readLinks,
    streams,
    robotCommands: measuredCommands(deps.robots, metrics),
    fleetAdmin: deps.fleet,
    deliveries: deps.deliveries,
    mqttPublicUrls: deps.mqttPublicUrls,
  };
  await fastify.register(
    async (v1) => {
      await registerV1(v1, v1Parts);
      v1.get(
        '/openapi.json',
        { config: { policy: { auth: 'none' } }, schema: { hide: true } },
        async () => fastify.swagger(),
      );
    },
    { prefix: '/v1' },
  );

  app.get('/healthz', { schema: { hide: true } }, async () => ({ status: 'ok' }));
  app.get('/readyz', { schema: { hide: true } }, async () => {
    try {
      await store.ping();
      await deps.readiness?.();
    } catch (err) {
      throw new ApiError('not_ready', `not ready: ${(err as Error).message}`);
    }
    return { status: 'ready' };
  });

  // With no listener of its own, /metrics is on this port behind its token (outside /v1: no
  // API key, no rate limit). With neither, metrics are off and the path is a 404.
  const token = metricsToken(config);
  if (metrics.enabled && config.metricsListen === undefined && token !== null) {
    app.get('/metrics', { schema: { hide: true } }, async (request, reply) => {
      checkMetricsToken(token, request.headers.authorization);
      return reply.type('text/plain; version=0.0.4; charset=utf-8').send(await metrics.scrape());
    });
  }

  await registerConsole(fastify, { dir: config.consoleDir, readOrigins: config.readOrigins });

  await fastify.ready();
  lastUsed.start();
  // Completed Idempotency-Key entries older than 24 h and dead claims are dropped hourly.
  const stopPurge = every(scheduler, HOUR, () => {
    store.idempotency.purgeExpired(clock.now()).catch((err: unknown) => fastify.log.error({ err }, 'idempotency purge failed'));
    // Rate windows are one minute; an hour-old counter is long over.
    store.sharedCounters?.purge(clock.now() - HOUR).catch((err: unknown) => fastify.log.error({ err }, 'rate counter purge failed'));
  });
  return {
    app: fastify,
    catalog,
    lastUsed,
    sync,
    streams,
    async close() {
      stopPurge();
      // fastify closes the idle keep-alive connections once, when the shutdown starts; one whose
      // request finishes later, and one that never sent a request, would hold the close until
      // their clients leave (see ConnectionTracker). Swept meanwhile, on the shutdown's scheduler
      // (the system's, even where a test drives the rest by hand): a shutdown must end.
      const stopSweep = every(deps.shutdownScheduler, 50, () => connections.dropUnused());
      try {
        await fastify.close();
      } finally {
        stopSweep();
      }
      await sync.idle();
      await lastUsed.stop();
    },
  };
}

/**
 * Adds what every /v1 operation shares to its OpenAPI entry: the bearer requirement, the policy
 * in words, a tag per resource and the errors its policy can answer. Runs before @fastify/swagger's own
 * onRoute hook, which copies the schema.
 */
function decorateOpenApi(fastify: FastifyInstance): void {
  fastify.addHook('onRoute', (route) => {
    const policy = route.config?.policy;
    if (!policy || !route.url.startsWith('/v1/')) return;
    const schema = (route.schema ??= {}) as Record<string, unknown>;
    if (schema.hide) return;
    schema.tags ??= [route.url.split('/')[2]];
    addSharedErrors((schema.response ??= {}) as Record<string, unknown>, policy, typeof route.method === 'string' ? [route.method] : route.method);
    if (policy.auth === 'key') {
      schema.security = [{ apiKey: [] }];
      const lines = [
        `Scope: ${policy.scope === null ? 'any valid key' : typeof policy.scope === 'string' ? policy.scope : policy.scope.join(' or ')}.`,
        `Entitlement: ${policy.feature ?? 'none'}.`,
        ...(policy.meter ? [`Meter: ${policy.meter}.`] : []),
      ];
      // Fastify calls onRoute again for the HEAD twin of a GET, with the same schema object.
      const policyLine = lines.join(' ');
      const description = typeof schema.description === 'string' ? schema.description : undefined;
      if (!description?.endsWith(policyLine)) schema.description = [description, policyLine].filter(Boolean).join('\n\n');
      schema['x-required-scope'] = policy.scope;
      schema['x-entitlement'] = policy.feature;
      if (policy.meter) schema['x-meter'] = policy.meter;
    } else {
      schema.security = [];
    }
    if (route.method === 'POST' || (Array.isArray(route.method) && route.method.includes('POST'))) {
      schema.headers ??= z.looseObject({
        // The pattern the pipeline enforces (printable ASCII, no space), stated in the document.
        'idempotency-key': z
          .string()
          .regex(/^[\x21-\x7e]{1,255}$/)
          .optional()
          .describe('1 to 255 printable ASCII characters; replays the stored response for 24 h'),
      });
    }
  });
}
