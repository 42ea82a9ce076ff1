import { createHash, randomBytes } from 'node:crypto';
import { constants, createReadStream, createWriteStream } from 'node:fs';
import { copyFile, mkdir, rename, rm, stat } from 'node:fs/promises';
import { dirname, join, resolve, sep } from 'node:path';
import { Readable, Transform, Writable, type TransformCallback } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { fileURLToPath } from 'node:url';
import { GetObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { messageOf, SourceError, type SourceErrorCode } from './errors.js';
import type { ManifestEpisode, ManifestFile } from './manifest.js';

/**
 * Fetching an episode's files from the customer's own storage into a local work directory. The
 * platform never knows the bucket: the user maps each destination id to where its objects live.
 *
 * - `s3://bucket[/prefix]`: file `path` is the object `prefix + object_key + path` (a non-empty
 *   prefix gets a trailing `/` if it has none). The grant provider's own key prefix is already
 *   part of `object_key`, so the prefix is usually empty.
 * - `file:///dir`: file `path` is `dir/<object_key>/<path>` (the object key joined under `dir` as a
 *   relative path, as a bucket mirrored with `aws s3 sync s3://bucket /dir` lays it out). An
 *   object key with a `..` segment is refused (`io`), so nothing outside `dir` is read.
 *
 * Every file is written to `<name>.tmp-<random>` while its SHA-256 and size are computed, compared
 * with the manifest, then renamed: a partial download never looks complete. A file already at its
 * final name is re-hashed and reused when it matches (resume after an interrupted export).
 */

export type SourceUrl = { kind: 's3'; bucket: string; prefix: string } | { kind: 'file'; dir: string };

export function parseSourceUrl(url: string): SourceUrl {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new SourceError('io', `source ${JSON.stringify(url)} is not a URL (s3://bucket[/prefix] or file:///dir)`);
  }
  if (u.protocol === 's3:') {
    if (u.hostname === '') throw new SourceError('io', `source ${url} names no bucket`);
    let prefix = decodeURIComponent(u.pathname.replace(/^\//, ''));
    if (prefix !== '' && !prefix.endsWith('/')) prefix += '/';
    return { kind: 's3', bucket: u.hostname, prefix };
  }
  if (u.protocol === 'file:') return { kind: 'file', dir: fileURLToPath(u) };
  throw new SourceError('io', `source ${url}: only s3:// and file:// are supported`);
}

/** Where one episode is read from. */
export interface ResolvedLocation {
  destinationId: string;
  state: string;
  objectKey: string;
  source: SourceUrl;
}

/** Location states whose bytes are complete at the destination, best first. */
const READABLE_STATES = ['verified', 'synced'] as const;

/**
 * The location to read the episode from: the first (in manifest order) `verified` one whose
 * destination has a source, else the first `synced` one. `no_location` otherwise. A source under
 * `*` serves every destination without one of its own.
 */
export function resolveLocation(line: ManifestEpisode, sources: Readonly<Record<string, string | SourceUrl>>): ResolvedLocation {
  for (const state of READABLE_STATES) {
    for (const loc of line.locations) {
      const given = sources[loc.destination_id] ?? sources['*'];
      if (loc.state !== state || given === undefined || loc.object_key === null) continue;
      return { destinationId: loc.destination_id, state, objectKey: loc.object_key, source: typeof given === 'string' ? parseSourceUrl(given) : given };
    }
  }
  const seen = line.locations.map((l) => `${l.destination_id} (${l.state}${l.destination_id in sources || '*' in sources ? '' : ', no source'})`).join(', ');
  throw new SourceError('no_location', `episode ${line.id}: no verified or synced location with a source${seen === '' ? ' (it has no location)' : `; it has ${seen}`}`);
}

/** The S3 key or local path of one file of the episode. */
export function objectAddress(loc: ResolvedLocation, path: string): string {
  if (loc.source.kind === 's3') return `${loc.source.prefix}${loc.objectKey}${path}`;
  const rel = `${loc.objectKey}/${path}`;
  if (rel.split(/[/\\]/).includes('..')) throw new SourceError('io', `object key ${JSON.stringify(loc.objectKey)} leaves the source directory`);
  const dir = resolve(loc.source.dir);
  const full = resolve(dir, ...rel.split('/').filter((s) => s !== ''));
  if (!full.startsWith(dir + sep)) throw new SourceError('io', `object key ${JSON.stringify(loc.objectKey)} leaves the source directory`);
  return full;
}

export interface S3SourceOptions {
  /** Default `us-east-1` (S3-compatible stores usually ignore it). */
  region?: string;
  /** For S3-compatible stores (MinIO, Ceph, s3rver): `http://host:port`. */
  endpoint?: string;
  /** Path-style addressing (`endpoint/bucket/key`); what most S3-compatible stores need. */
  forcePathStyle?: boolean;
  /** Static credentials; without them the SDK's default chain (env, profile, IMDS, …) is used. */
  credentials?: { accessKeyId: string; secretAccessKey: string; sessionToken?: string };
  /** SDK attempts per request (its own retry of throttling and 5xx). SDK default 3. */
  maxAttempts?: number;
}

export interface EpisodeFetcherOptions {
  /** Destination id → `s3://bucket[/prefix]` or `file:///dir`. */
  sources: Readonly<Record<string, string>>;
  s3?: S3SourceOptions;
}

export interface FetchedFile {
  /** The manifest's path. */
  path: string;
  /** Where it is now, verified. */
  localPath: string;
  sizeBytes: number;
  /** It was already there (a previous run) and still matched. */
  reused: boolean;
}

export interface FetchedEpisode {
  location: ResolvedLocation;
  files: FetchedFile[];
}

export interface FetchOptions {
  signal?: AbortSignal;
  /**
   * Called with each chunk's size as it arrives from the store (S3), or as the local copy is
   * hashed (file://), so progress moves while a large object is still streaming. A file reused
   * from an earlier run is not counted; the bytes of a download that then fails are.
   */
  onBytes?: (n: number) => void;
}

export class EpisodeFetcher {
  private s3: S3Client | undefined;
  private readonly sources: Readonly<Record<string, SourceUrl>>;

  constructor(private readonly opts: EpisodeFetcherOptions) {
    // Parsed once, up front: a bad source URL fails the export before any download.
    this.sources = Object.fromEntries(Object.entries(opts.sources).map(([id, url]) => [id, parseSourceUrl(url)]));
  }

  /**
   * Every file of the episode into `workDir` (at its manifest path), verified. Files are fetched
   * one after the other; run several episodes at once for throughput.
   */
  async fetchEpisode(line: ManifestEpisode, workDir: string, opts: FetchOptions = {}): Promise<FetchedEpisode> {
    const location = resolveLocation(line, this.sources);
    const files: FetchedFile[] = [];
    for (const file of line.files) files.push(await this.fetchFile(location, file, workDir, opts));
    return { location, files };
  }

  /** Closes the S3 client's connections. */
  destroy(): void {
    this.s3?.destroy();
    this.s3 = undefined;
  }

  private async fetchFile(location: ResolvedLocation, file: ManifestFile, workDir: string, { signal, onBytes }: FetchOptions): Promise<FetchedFile> {
    const localPath = join(workDir, ...file.path.split('/'));
    if (await matchesManifest(localPath, file)) return { path: file.path, localPath, sizeBytes: file.size_bytes, reused: true };
    await mkdir(dirname(localPath), { recursive: true });
    const tmp = `${localPath}.tmp-${randomBytes(6).toString('hex')}`;
    const address = objectAddress(location, file.path);
    const where = location.source.kind === 's3' ? `s3://${location.source.bucket}/${address}` : address;
    try {
      if (location.source.kind === 's3') {
        const body = await this.openS3(location.source.bucket, address, where, signal);
        const digest = new DigestingStream(file, where, onBytes);
        await pipeline(body, digest, createWriteStream(tmp, { flags: 'wx' }), { signal });
        digest.check();
      } else {
        // A local file: copied by the kernel (copy_file_range), then the copy is what is hashed
        // and used, so a source changing meanwhile cannot slip past the check.
        await copyFile(address, tmp, constants.COPYFILE_EXCL);
        const digest = new DigestingStream(file, where, onBytes);
        await pipeline(createReadStream(tmp), digest, new Writable({ write: (_c, _e, done) => done() }), { signal });
        digest.check();
      }
      await rename(tmp, localPath);
    } catch (err) {
      await rm(tmp, { force: true });
      if (err instanceof SourceError) throw err;
      throw fromStoreError(err, where);
    }
    return { path: file.path, localPath, sizeBytes: file.size_bytes, reused: false };
  }

  private async openS3(bucket: string, key: string, where: string, signal?: AbortSignal): Promise<Readable> {
    this.s3 ??= new S3Client({
      region: this.opts.s3?.region ?? 'us-east-1',
      ...(this.opts.s3?.endpoint !== undefined ? { endpoint: this.opts.s3.endpoint } : {}),
      forcePathStyle: this.opts.s3?.forcePathStyle ?? false,
      ...(this.opts.s3?.credentials !== undefined ? { credentials: this.opts.s3.credentials } : {}),
      ...(this.opts.s3?.maxAttempts !== undefined ? { maxAttempts: this.opts.s3.maxAttempts } : {}),
    });
    const res = await this.s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }), { abortSignal: signal });
    if (!(res.Body instanceof Readable)) throw new SourceError('io', `${where}: the S3 answer has no readable body`);
    return res.Body;
  }
}

/** Counts and hashes the bytes going through; stops early once there are more than the manifest says. */
class DigestingStream extends Transform {
  private readonly hash = createHash('sha256');
  private bytes = 0;

  constructor(
    private readonly file: ManifestFile,
    private readonly where: string,
    private readonly onBytes?: (n: number) => void,
  ) {
    super();
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, done: TransformCallback): void {
    this.bytes += chunk.byteLength;
    this.onBytes?.(chunk.byteLength);
    if (this.bytes > this.file.size_bytes) {
      done(new SourceError('size_mismatch', `${this.where}: more than the manifest's ${this.file.size_bytes} bytes`));
      return;
    }
    this.hash.update(chunk);
    done(null, chunk);
  }

  check(): void {
    if (this.bytes !== this.file.size_bytes) throw new SourceError('size_mismatch', `${this.where}: ${this.bytes} bytes, the manifest says ${this.file.size_bytes}`);
    const sha = this.hash.digest('hex');
    if (sha !== this.file.sha256) throw new SourceError('checksum_mismatch', `${this.where}: sha256 ${sha}, the manifest says ${this.file.sha256}`);
  }
}

/** A file already at its final name is reused only if its size and hash still match. */
async function matchesManifest(localPath: string, file: ManifestFile): Promise<boolean> {
  try {
    if ((await stat(localPath)).size !== file.size_bytes) return false;
  } catch {
    return false;
  }
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(localPath)) hash.update(chunk as Buffer);
  return hash.digest('hex') === file.sha256;
}

/** The report's reason for a failed read: the SDK's error name / HTTP status, or Node's errno. */
export function storeErrorCode(err: unknown): SourceErrorCode {
  const e = err as { name?: unknown; code?: unknown; Code?: unknown; $metadata?: { httpStatusCode?: unknown } };
  const name = typeof e.name === 'string' ? e.name : typeof e.Code === 'string' ? e.Code : '';
  const status = e.$metadata?.httpStatusCode;
  if (name === 'NoSuchKey' || name === 'NotFound' || name === 'NoSuchBucket' || status === 404 || e.code === 'ENOENT') return 'missing';
  if (name === 'AccessDenied' || name === 'Forbidden' || status === 403 || e.code === 'EACCES' || e.code === 'EPERM') return 'denied';
  return 'io';
}

function fromStoreError(err: unknown, where: string): SourceError {
  const e = err as { name?: unknown; $metadata?: { httpStatusCode?: unknown } };
  const status = typeof e.$metadata?.httpStatusCode === 'number' ? ` (HTTP ${e.$metadata.httpStatusCode})` : '';
  const name = typeof e.name === 'string' && e.name !== 'Error' ? `${e.name}: ` : '';
  return new SourceError(storeErrorCode(err), `${where}: ${name}${messageOf(err)}${status}`, { cause: err });
}
