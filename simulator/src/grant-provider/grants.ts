import { randomBytes } from 'node:crypto';
import type { Clock, GrantAnswer, GrantFile, GrantRequestEnvelope } from '@fleet/protocol';
import type { Logger } from 'pino';
import type { GrantProviderConfig } from './config.js';
import { episodeKeyPrefix, planUploads, type FilePlan } from './layout.js';
import { describeStoreError, type InFlightUpload, type UploadStore } from './s3-store.js';

export interface GrantDeps {
  store: UploadStore;
  clock: Clock;
  logger: Logger;
  /** A fresh grant id; random by default. */
  newGrantId?: () => string;
}

export const newGrantId = (): string => `grt_${randomBytes(16).toString('base64url')}`;

/** The spec requires `retention` in every answer; the destination's registered one applies. */
const RETENTION = { local: 'keep' } as const;

export function deferral(retryAfterS: number): GrantAnswer {
  return { grant_id: null, destinations: [], retention: RETENTION, retry_after: retryAfterS };
}

/**
 * The in-flight upload to continue for `key`: the one the robot names in its `resume` block
 * when the store still has it, else the oldest the store has (so every re-ask picks the same).
 */
function pickUpload(key: string, inFlight: readonly InFlightUpload[], resumeIds: ReadonlySet<string>): string | undefined {
  const forKey = inFlight.filter((u) => u.key === key);
  const named = forKey.find((u) => resumeIds.has(u.uploadId));
  if (named) return named.uploadId;
  forKey.sort((a, b) => a.initiated.localeCompare(b.initiated) || a.uploadId.localeCompare(b.uploadId));
  return forKey[0]?.uploadId;
}

/**
 * The answer to a verified, valid grant request. Stateless: the objects are named by the request
 * alone, and an in-flight multipart upload is found in the store (ListMultipartUploads on the
 * episode's prefix), so a re-ask, another replica or a restarted provider answers the same
 * objects and upload ids, with fresh URLs and a new grant id. Any store failure is a deferral.
 * A check request (`check: true`) only lists: it never creates an upload.
 */
export async function answerGrantRequest(envelope: GrantRequestEnvelope, config: GrantProviderConfig, deps: GrantDeps): Promise<GrantAnswer> {
  const { store, clock, logger } = deps;
  const req = envelope.request;
  const prefix = episodeKeyPrefix(config.keyPrefix, envelope);
  const plans = planUploads(prefix, req.manifest.files, config);
  const log = logger.child({ episode_id: envelope.episode_id, destination_id: req.destination_id, check: req.check === true });
  if (!plans) {
    log.warn('a file is too large for S3 (over 10,000 parts of 5 GiB): deferring');
    return deferral(3600);
  }
  const signal = AbortSignal.timeout(config.storeTimeoutMs);
  const resumeIds = new Set((req.resume ?? []).filter((r) => r.destination_id === req.destination_id).flatMap((r) => r.uploads.map((u) => u.upload_id)));

  let uploadIds: Map<string, string>;
  // For the log: uploads continued as the robot named them, found without being named, created.
  const counts = { resumed: 0, found: 0, created: 0 };
  try {
    // Also the reachability probe: a store that cannot list cannot take the upload either.
    const inFlight = await store.listUploads(prefix, signal);
    uploadIds = new Map();
    for (const plan of plans) {
      if (plan.kind !== 'multipart') continue;
      const found = pickUpload(plan.key, inFlight, resumeIds);
      if (found) {
        uploadIds.set(plan.key, found);
        counts[resumeIds.has(found) ? 'resumed' : 'found'] += 1;
      } else if (req.check !== true) {
        uploadIds.set(plan.key, await store.createUpload(plan.key, signal));
        counts.created += 1;
      }
    }
  } catch (err) {
    log.warn({ err: describeStoreError(err) }, 'object store unavailable: deferring');
    return deferral(config.retryAfterS);
  }

  const now = new Date(clock.now());
  const files: GrantFile[] = [];
  // A check creates nothing, so a large file with no upload yet gets a PUT URL there.
  const multipart = (p: FilePlan): p is Extract<FilePlan, { kind: 'multipart' }> => p.kind === 'multipart' && uploadIds.has(p.key);
  for (const plan of plans) {
    if (!multipart(plan)) {
      files.push({ path: plan.file.path, put_url: await store.presignPut(plan.key, now) });
      continue;
    }
    const uploadId = uploadIds.get(plan.key)!;
    const partUrls: string[] = [];
    for (let n = 1; n <= plan.partCount; n++) partUrls.push(await store.presignPart(plan.key, uploadId, n, now));
    files.push({
      path: plan.file.path,
      upload_id: uploadId,
      part_size: plan.partSize,
      part_urls: partUrls,
      complete_url: await store.presignComplete(plan.key, uploadId, now),
    });
  }
  const grantId = (deps.newGrantId ?? newGrantId)();
  const protocol = files.some((f) => 'upload_id' in f) ? 's3-multipart' : 'http-put';
  const answer: GrantAnswer = {
    grant_id: grantId,
    expires_at: new Date(now.getTime() + config.urlLifetimeS * 1000).toISOString(),
    retry_after: null,
    retention: RETENTION,
    destinations: [{ destination_id: req.destination_id, protocol, object_key: prefix, files }],
  };
  // Part sizes grow to fit, but one PUT URL per file cannot shrink: an episode of a few thousand
  // files has no answer under the cloud's 1 MiB. Say so, rather than send one it will refuse.
  if (Buffer.byteLength(JSON.stringify(answer)) > MAX_ANSWER_BYTES) {
    log.error({ files: files.length }, 'the grant would exceed the 1 MiB answer limit (too many files in one episode): deferring');
    return deferral(3600);
  }
  log.info(
    { grant_id: grantId, protocol, files: files.length, object_key: prefix, uploads_resumed: counts.resumed, uploads_found: counts.found, uploads_created: counts.created },
    'grant issued',
  );
  return answer;
}

/** The spec's bound on a provider's answer. */
export const MAX_ANSWER_BYTES = 1024 * 1024;
