import type { FastifyBaseLogger, FastifyInstance, RawReplyDefaultExpression, RawRequestDefaultExpression, RawServerDefault } from 'fastify';
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
 * What the /v1 resource modules use, as decorators of the fastify instance: each is decorated in
 * app.ts where the component that owns it is built (the store and clock given to the app, the
 * event hub, the sync router, the grant relay, …), and a module takes what it needs from `app`.
 * A decorator missing at registration is an error at start (fastify's `hasDecorator` checks in
 * registerV1), not an undefined at the first request.
 */
declare module 'fastify' {
  interface FastifyInstance {
    cloudConfig: CloudConfig;
    store: Store;
    clock: Clock;
    lastUsed: LastUsedTracker;
    /** Sends robot commands and waits for the reply (the MQTT RobotLink in production). */
    robotCommands: CommandSender;
    /** De-enrollment's broker disconnect and credential rotation (the CredentialRotator in production). */
    fleetAdmin: FleetAdmin;
    /** The broker address handed to enrolling robots. */
    mqttPublicUrl: string;
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
}

/** The decorators every /v1 module may read (registerV1 checks each is there). */
export const V1_DECORATORS = [
  'cloudConfig',
  'store',
  'clock',
  'lastUsed',
  'robotCommands',
  'fleetAdmin',
  'mqttPublicUrl',
  'secrets',
  'deliveries',
  'egressAllowLoopback',
  'sync',
  'relay',
  'readLinks',
  'streams',
] as const;

export interface CommandSender {
  send(robotId: string, command: RobotCommandName, cmdId: string, args?: Record<string, unknown>): Promise<CommandReply>;
}

export type V1Plugin = (app: ZodApp) => Promise<void>;
