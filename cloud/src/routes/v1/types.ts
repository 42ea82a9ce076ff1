import fp from 'fastify-plugin';
import type { FastifyBaseLogger, FastifyInstance, FastifyPluginAsync, RawReplyDefaultExpression, RawRequestDefaultExpression, RawServerDefault } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import type { Clock, CommandReply, RobotCommandName } from '@fleet/protocol';
import type { LastUsedTracker } from '../../auth.js';
import type { FleetAdmin } from '../../robots/credentials.js';
import type { SecretBox } from '../../secret-box.js';
import type { CloudConfig } from '../../config.js';
import type { Store } from '../../store/index.js';
import type { EventHub } from '../../streams/hub.js';
import type { GrantRelay } from '../../sync/grant-relay.js';
import type { ReadLinker } from '../../sync/read-links.js';
import type { SyncRouter } from '../../sync/router.js';

export type ZodApp = FastifyInstance<
  RawServerDefault,
  RawRequestDefaultExpression,
  RawReplyDefaultExpression,
  FastifyBaseLogger,
  ZodTypeProvider
>;

/**
 * What the /v1 resource modules use: built once by the composition root (`startCloud`, or
 * test-support.ts), handed through `buildApp` and given to each module as its plugin options.
 * A module names the parts it takes (`v1Plugin<'store' | 'clock'>`), so a part missing is a
 * type error, and no module reads a decorator of the instance.
 */
export interface V1Parts {
  cloudConfig: CloudConfig;
  store: Store;
  clock: Clock;
  lastUsed: LastUsedTracker;
  /** Sends robot commands and waits for the reply (the MQTT RobotLink in production). */
  robotCommands: CommandSender;
  /** De-enrollment's broker disconnect and credential rotation (the CredentialRotator in production). */
  fleetAdmin: FleetAdmin;
  /** The broker address handed to enrolling robots. */
  /** The broker addresses enrolling robots are given (one, or a cluster's nodes). */
  mqttPublicUrls: readonly string[];
  /** Seals stored secrets (webhook and destination signing secrets) and makes opaque ids. */
  secrets: SecretBox;
  /** Wakes the webhook delivery worker. */
  deliveries: { notify(): void };
  /** Tests and local development: webhook URLs may point at loopback. */
  egressAllowLoopback: boolean;
  /** Routes the backlog after rules or destinations change (in the background). */
  sync: Pick<SyncRouter, 'schedule'>;
  /** Forwards grant requests to grant providers (the destination check uses it). */
  relay: Pick<GrantRelay, 'forward'>;
  /** Asks a destination's provider for read links of an episode's files (POST …/read-links). */
  readLinks: Pick<ReadLinker, 'issue'>;
  /** The event streams of this process (GET /v1/events/stream). */
  streams: EventHub;
}

export interface CommandSender {
  send(robotId: string, command: RobotCommandName, cmdId: string, args?: Record<string, unknown>): Promise<CommandReply>;
}

/** A /v1 resource module: a fastify plugin whose options are the parts it takes. */
export type V1Plugin<K extends keyof V1Parts = keyof V1Parts> = FastifyPluginAsync<Pick<V1Parts, K>, RawServerDefault, ZodTypeProvider>;

/**
 * Makes a /v1 module a fastify plugin (fastify-plugin metadata: its name, the fastify major it
 * is written for). It is not encapsulated: its routes join the /v1 context as they did when the
 * modules were plain functions, behind the same hooks, in registration order.
 */
export function v1Plugin<K extends keyof V1Parts = never>(name: string, routes: (app: ZodApp, parts: Pick<V1Parts, K>) => Promise<void>): V1Plugin<K> {
  return fp(routes, { name: `fleet-v1-${name}`, fastify: '5.x' });
}
