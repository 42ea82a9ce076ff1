import { READ_LINK_MAX_TTL_S, type Clock, type ReadRequestEnvelope } from '@fleet/protocol';
import type { Logger } from 'pino';
import type { GrantProviderConfig } from './config.js';
import { ProviderError } from './errors.js';
import { episodeKeyPrefix } from './layout.js';
import { describeStoreError, type UploadStore } from './s3-store.js';

export interface ReadDeps {
  store: UploadStore;
  clock: Clock;
  logger: Logger;
}

/** What this provider answers: a `ReadAnswer` of the protocol, without its open ends. */
export type ReadLinksAnswer = { files: { path: string; url: string; expires_at: string }[] } | { refused: { message: string } };

/**
 * Where the replica's files are: under the `object_key` the cloud recorded from our grant when
 * it has one (the replica stays readable where it was written), else under the layout's prefix
 * for the episode (what a grant would have answered). Either way the prefix must lie inside the
 * configured key prefix and climb nowhere: the provider signs reads only in the part of the
 * bucket it writes, whatever a signed request names. Null when it does not.
 */
export function readKeyPrefix(keyPrefix: string, envelope: ReadRequestEnvelope): string | null {
  const given = envelope.request.object_key;
  if (given === null) return episodeKeyPrefix(keyPrefix, envelope);
  const segments = given.split('/');
  if (!given.startsWith(keyPrefix) || given.startsWith('/') || given.includes('\\') || segments.includes('..') || segments.includes('.')) return null;
  return given;
}

/** How long the links live: what the cloud asks, at most our URL lifetime and the protocol's hour. */
export function readLinkLifetimeS(envelope: ReadRequestEnvelope, config: GrantProviderConfig): number {
  return Math.min(envelope.request.expires_in_s, config.urlLifetimeS, READ_LINK_MAX_TTL_S);
}

/**
 * The answer to a verified, valid read request: one presigned GET per requested file, in the
 * order asked, all expiring together. Presigning is computed locally: nothing reaches the store,
 * so a link to an object that is not there is answered too (the GET then says 404). The URLs are
 * bearer secrets: they are returned, never logged.
 */
export async function answerReadRequest(envelope: ReadRequestEnvelope, config: GrantProviderConfig, deps: ReadDeps): Promise<ReadLinksAnswer> {
  const { store, clock, logger } = deps;
  const req = envelope.request;
  const log = logger.child({ episode_id: envelope.episode_id, destination_id: req.destination_id });
  const prefix = readKeyPrefix(config.keyPrefix, envelope);
  if (prefix === null) {
    log.warn({ object_key: req.object_key }, 'read request refused: the object key is outside the configured key prefix');
    return { refused: { message: "the replica's object key is outside this provider's key prefix" } };
  }
  const lifetimeS = readLinkLifetimeS(envelope, config);
  const now = new Date(clock.now());
  const expiresAt = new Date(now.getTime() + lifetimeS * 1000).toISOString();
  const files: Extract<ReadLinksAnswer, { files: unknown }>['files'] = [];
  try {
    for (const f of req.files) files.push({ path: f.path, url: await store.presignGet(`${prefix}${f.path}`, now, lifetimeS), expires_at: expiresAt });
  } catch (err) {
    // No credentials to sign with (the SDK's default chain found none), most likely.
    log.error({ err: describeStoreError(err) }, 'read links could not be presigned');
    throw new ProviderError('internal', 'the read links could not be presigned');
  }
  log.info({ files: files.length, object_key: prefix, expires_in_s: lifetimeS }, 'read links issued');
  return { files };
}
