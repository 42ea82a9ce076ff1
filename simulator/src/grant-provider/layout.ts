import type { GrantRequestEnvelope, ManifestFile } from '@fleet/protocol';
import { S3_MAX_PART_BYTES, S3_MAX_PARTS } from './config.js';

/**
 * Where an episode's files go and how each is uploaded. Everything here is a pure function of
 * the request and the configuration, so every re-ask (and every provider replica or restart)
 * names the same objects and cuts the same parts.
 */

/** What names an episode's place: the same fields in a grant request and in a read request. */
export type EpisodeIds = Pick<GrantRequestEnvelope, 'episode_id' | 'org_id'> & { request: { episode: { robot_id: string } } };

/**
 * `<prefix><org>/<robot>/<episode>/`: the episode's key prefix, reported as `object_key`.
 * The ids come from the signed envelope; a `/` or a `..` in one could not move the episode
 * outside its place, since each id is one escaped path segment.
 */
export function episodeKeyPrefix(keyPrefix: string, envelope: EpisodeIds): string {
  const seg = (s: string) => (s === '' || s === '.' || s === '..' ? encodeURIComponent(`_${s}`) : s.replace(/[/\\]/g, (c) => encodeURIComponent(c)));
  return `${keyPrefix}${seg(envelope.org_id)}/${seg(envelope.request.episode.robot_id)}/${seg(envelope.episode_id)}/`;
}

/** A manifest path is relative, `/`-separated and without `..` (protocol schema). */
export function objectKey(episodePrefix: string, file: ManifestFile): string {
  return `${episodePrefix}${file.path}`;
}

export interface UploadLimits {
  multipartThresholdBytes: number;
  partSizeBytes: number;
}

export type FilePlan = { kind: 'put'; file: ManifestFile; key: string } | { kind: 'multipart'; file: ManifestFile; key: string; partSize: number; partCount: number };

/** A presigned URL is about 600 bytes in a grant; the whole answer must stay under 1 MiB. */
const URL_BYTES = 600;
const MAX_URL_BYTES = 800 * 1024;

/**
 * One plan per manifest file: a single PUT below the threshold, parts at or above it. The part
 * size is the configured one, raised (doubling, deterministically) when a file would need more
 * than 10,000 parts or the episode's part URLs would not fit in a 1 MiB answer. Null when a
 * file cannot be uploaded at all (over 10,000 parts of 5 GiB).
 */
export function planUploads(episodePrefix: string, files: readonly ManifestFile[], limits: UploadLimits): FilePlan[] | null {
  const big = files.filter((f) => f.size_bytes > 0 && f.size_bytes >= limits.multipartThresholdBytes);
  let partSize = limits.partSizeBytes;
  const partsOf = (f: ManifestFile, size: number) => Math.ceil(f.size_bytes / Math.max(size, Math.ceil(f.size_bytes / S3_MAX_PARTS)));
  const totalUrls = (size: number) => big.reduce((n, f) => n + partsOf(f, size) + 1, 0) + (files.length - big.length);
  while (totalUrls(partSize) * URL_BYTES > MAX_URL_BYTES && partSize < S3_MAX_PART_BYTES) partSize = Math.min(partSize * 2, S3_MAX_PART_BYTES);
  const plans: FilePlan[] = [];
  for (const file of files) {
    const key = objectKey(episodePrefix, file);
    if (!big.includes(file)) {
      plans.push({ kind: 'put', file, key });
      continue;
    }
    const size = Math.max(partSize, Math.ceil(file.size_bytes / S3_MAX_PARTS));
    if (size > S3_MAX_PART_BYTES) return null;
    plans.push({ kind: 'multipart', file, key, partSize: size, partCount: Math.ceil(file.size_bytes / size) });
  }
  return plans;
}
