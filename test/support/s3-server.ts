import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { CreateBucketCommand, DeleteBucketCorsCommand, GetObjectCommand, ListObjectsCommand, PutBucketCorsCommand, S3Client, type CORSRule } from '@aws-sdk/client-s3';
import { cleanEnv, makeTempDir, REPO_ROOT } from './cloud.js';
import { MOTO_CREDENTIALS, spawnMoto } from './moto-server.js';
import { spawnProcess, type SpawnedProcess } from './process.js';

const MAIN = join(REPO_ROOT, 'test', 'support', 's3-server-main.js');

/*
 * Two implementations behind one interface: s3rver (the default) and moto's server
 * (`implementation: 'moto'`, or FLEET_TEST_S3=moto for a whole run: the `test:moto` pass).
 * What moto checks and how a Python test uses it: moto-server.ts.
 *
 * What the S3 server of the tests (@20minutes/s3rver 4.0.4, a maintained fork of s3rver) does,
 * as observed; an uploader written against it must not rely on more than real S3 gives:
 * - SigV4 is checked, for presigned query-string URLs and signed headers alike: a changed
 *   signature, key, upload id or part number is 403 `SignatureDoesNotMatch`; an expired URL is
 *   403 `AccessDenied`. (s3rver 3.7.1 from npm accepts any well-formed SigV4 signature, which is
 *   why it is not used.) Presigned URLs sign only `host`: any Content-Type may be sent.
 * - Errors are S3's XML, `<Error><Code>…</Code><Message>…</Message>…</Error>`, with S3's status.
 * - ETags: PUT object and UploadPart answer `ETag: "<md5 hex of the bytes>"` (quoted). The
 *   CompleteMultipartUpload answer has NO ETag header; its XML body has
 *   `<ETag>&quot;<md5 hex of the whole object>&quot;</ETag>` (XML-escaped quotes), where real S3
 *   gives `"<md5 of the part md5s>-<part count>"`. GET/HEAD then answer the same whole-object md5.
 * - Complete does not check the part ETags it is sent, nor the 5 MiB part minimum, nor that the
 *   listed parts cover the file (real S3 answers InvalidPart / EntityTooSmall): tests of those
 *   rules cannot rely on this server.
 * - ListMultipartUploads and ListParts are not implemented by s3rver; s3-server-main.js answers
 *   ListMultipartUploads (prefix filter, no pagination) from s3rver's upload directory after
 *   s3rver's own signature check. ListParts stays unimplemented.
 * - CORS (`corsOrigins` option, `setCors`): set with PutBucketCors, as on a customer's bucket. s3rver
 *   matches the rule by origin and method, answers a preflight (OPTIONS) with
 *   `Access-Control-Allow-Origin: *` where S3 echoes the origin (the same for a request without
 *   credentials, which is all a presigned GET is), an actual request with the origin echoed,
 *   the exposed headers and `Access-Control-Allow-Credentials: true`, and keeps the CORS headers
 *   on its error answers (an expired link's 403 stays readable by the page), as S3 does. Without
 *   a rule, no CORS headers: a browser's cross-origin fetch fails as a network error. (moto
 *   takes the rule too, but answers a preflight 200 with or without one: CORS tests use s3rver.)
 * - The request log (`requestLog: true`, s3rver only): what a browser or tool asked of the store,
 *   read from the server process (s3-server-main.js), never the query string.
 * - Credentials are fixed by s3rver: access key id and secret are both `S3RVER`.
 */

export interface S3Object {
  key: string;
  size: number;
  etag: string;
}

export type S3Implementation = 's3rver' | 'moto';

/** One request the store answered (`requests()`), logged once its response closed. */
export interface S3Request {
  /** 1, 2, … in the order responses closed, per server process (a restart starts again at 1). */
  seq: number;
  method: string;
  /** The path as sent (percent-encoded), without the query string (a presigned URL's signature is a secret). */
  path: string;
  /** The Range header, or null. */
  range: string | null;
  /** The Origin header (a browser's cross-origin request), or null. */
  origin: string | null;
  status: number;
  /** Body bytes written to the client (headers not counted); fewer than the body when the client went away. */
  bytes: number;
  /** False when the connection closed before the whole answer was written (a cancelled body). */
  complete: boolean;
}

/**
 * The bucket CORS rule a browser needs to play recordings straight from the bucket (the
 * console's player): GET and HEAD from the given origins, the `Range` request header, and the
 * answer headers a range reader reads exposed. In the shape of `aws s3api put-bucket-cors`.
 */
export function playbackCorsRule(origins: readonly string[]): CORSRule {
  return {
    AllowedOrigins: [...origins],
    AllowedMethods: ['GET', 'HEAD'],
    AllowedHeaders: ['Range'],
    ExposeHeaders: ['Content-Range', 'Content-Length', 'ETag', 'Accept-Ranges'],
    MaxAgeSeconds: 600,
  };
}

export interface S3ServerProcess extends AsyncDisposable {
  readonly implementation: S3Implementation;
  /** `http://127.0.0.1:PORT`, path-style addressing. */
  readonly endpoint: string;
  readonly bucket: string;
  readonly region: string;
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
  /** Where s3rver keeps its data (removed on dispose); moto keeps its in memory and leaves this empty. */
  readonly dataDir: string;
  readonly process: SpawnedProcess;
  /** AWS_ENDPOINT_URL_S3, credentials and region as a Python (boto3) or CLI child reads them. */
  awsEnv(): Record<string, string>;
  /** Every object in the bucket, by key. */
  listObjects(): Promise<S3Object[]>;
  /** The object's bytes and ETag header, or null when it does not exist. */
  getObject(key: string): Promise<{ body: Buffer; etag: string } | null>;
  /**
   * The file s3rver keeps the object's bytes in (read it to know what the store holds without a
   * request that would show in the request log); null with moto, which keeps them in memory.
   */
  objectFile(key: string): string | null;
  /** Sets the bucket's CORS to `playbackCorsRule(origins)` (PutBucketCors), or removes it with null (DeleteBucketCors). Kept across `stop()`/`start()`. */
  setCors(origins: readonly string[] | null): Promise<void>;
  /**
   * The requests answered since the server (re)started or since `clearRequests()`, oldest first.
   * Needs `requestLog: true` (s3rver only). A request appears once its response closed: wait for
   * the one you expect rather than reading once.
   */
  requests(): Promise<S3Request[]>;
  /** Forgets the requests logged so far: `requests()` returns only later ones. */
  clearRequests(): Promise<void>;
  /** Stops the server: the store is unreachable until `start()`. s3rver keeps the data; moto loses it. */
  stop(): Promise<void>;
  /** Starts it again on the same port: s3rver with the same data, moto with the bucket empty again. */
  start(): Promise<void>;
  /** Stops it and removes its data. */
  close(): Promise<void>;
}

export interface StartS3ServerOptions {
  bucket?: string;
  /** Origins allowed by the bucket's CORS rule (`playbackCorsRule`); none by default. */
  corsOrigins?: readonly string[];
  /** Keep a log of the requests (`requests()`); s3rver only. */
  requestLog?: boolean;
  /** Default: FLEET_TEST_S3 when set, else `s3rver`. */
  implementation?: S3Implementation;
}

/** The implementation a run asked for: FLEET_TEST_S3 (`s3rver` or `moto`), s3rver when unset. */
export function s3ImplementationOfRun(): S3Implementation {
  const v = process.env.FLEET_TEST_S3;
  if (v === undefined || v === '' || v === 's3rver') return 's3rver';
  if (v === 'moto') return 'moto';
  throw new Error(`FLEET_TEST_S3=${v}: expected s3rver or moto`);
}

async function spawnS3(dataDir: string, bucket: string, port: number, requestLog: boolean): Promise<{ proc: SpawnedProcess; endpoint: string }> {
  const proc = spawnProcess(process.execPath, [MAIN, dataDir, bucket, String(port), JSON.stringify({ requestLog })], { name: 's3rver', cwd: REPO_ROOT, env: cleanEnv() });
  try {
    const line = await proc.waitForStdout((l) => l.startsWith('{"endpoint"'), { description: 'the {"endpoint":…} line' });
    return { proc, endpoint: (JSON.parse(line) as { endpoint: string }).endpoint };
  } catch (err) {
    await proc.kill('SIGKILL');
    throw err;
  }
}

/**
 * Starts an S3-compatible server as its own process on a free loopback port, with one bucket
 * created and a temp directory for its data. `await using s3 = await startS3Server()`; s3rver
 * unless `implementation` or FLEET_TEST_S3 says `moto`.
 */
export async function startS3Server(opts: StartS3ServerOptions = {}): Promise<S3ServerProcess> {
  const implementation = opts.implementation ?? s3ImplementationOfRun();
  const bucket = opts.bucket ?? 'episodes';
  const requestLog = opts.requestLog ?? false;
  if (requestLog && implementation !== 's3rver') throw new Error('startS3Server: the request log is s3rver only (implementation: "s3rver")');
  const region = 'us-east-1';
  const credentials = implementation === 'moto' ? { ...MOTO_CREDENTIALS } : { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' };
  const tmp = await makeTempDir('fleet-s3-');
  const dataDir = join(tmp.path, 'data');
  await mkdir(dataDir);
  const clientOf = (endpoint: string) => new S3Client({ endpoint, region, forcePathStyle: true, credentials, maxAttempts: 1 });
  // The CORS rule in force, set again after each start (moto forgets it; s3rver keeps it on disk,
  // and setting it again is harmless).
  let corsOrigins: readonly string[] | null = opts.corsOrigins && opts.corsOrigins.length > 0 ? [...opts.corsOrigins] : null;
  const applyCors = async (c: S3Client) => {
    if (corsOrigins === null) await c.send(new DeleteBucketCorsCommand({ Bucket: bucket }));
    else await c.send(new PutBucketCorsCommand({ Bucket: bucket, CORSConfiguration: { CORSRules: [playbackCorsRule(corsOrigins)] } }));
  };
  // s3rver makes the bucket from its command line; moto's starts empty and gets it through the
  // AWS SDK, as a customer's would, after every start (its store is in memory).
  const spawn = async (port: number): Promise<{ proc: SpawnedProcess; endpoint: string }> => {
    const started = implementation === 's3rver' ? await spawnS3(dataDir, bucket, port, requestLog) : await spawnMoto(port);
    const admin = clientOf(started.endpoint);
    try {
      if (implementation === 'moto') await admin.send(new CreateBucketCommand({ Bucket: bucket }));
      if (corsOrigins !== null) await applyCors(admin);
    } catch (err) {
      await started.proc.kill('SIGKILL');
      throw err;
    } finally {
      admin.destroy();
    }
    return started;
  };
  let running: { proc: SpawnedProcess; endpoint: string };
  try {
    running = await spawn(0);
  } catch (err) {
    await tmp[Symbol.asyncDispose]();
    throw err;
  }
  const endpoint = running.endpoint;
  const port = Number(new URL(endpoint).port);
  let stopped = false;
  const client = clientOf(endpoint);
  // `clearRequests()` keeps the last seq seen; a restarted process counts from 1 again.
  let logSince = 0;
  let logPid = running.proc.pid;
  const readLog = async (): Promise<{ last: number; requests: S3Request[] }> => {
    if (!requestLog) throw new Error('startS3Server: start with requestLog: true to read the request log');
    if (logPid !== running.proc.pid) {
      logPid = running.proc.pid;
      logSince = 0;
    }
    const res = await fetch(`${endpoint}/_fleet-test/requests?since=${logSince}`);
    if (!res.ok) throw new Error(`the S3 server's request log answered ${res.status}: ${await res.text()}`);
    return (await res.json()) as { last: number; requests: S3Request[] };
  };

  const stop = async () => {
    if (stopped) return;
    stopped = true;
    await running.proc.kill('SIGTERM');
  };
  const close = async () => {
    client.destroy();
    try {
      await stop();
    } finally {
      await tmp[Symbol.asyncDispose]();
    }
  };

  return {
    implementation,
    endpoint,
    bucket,
    region,
    ...credentials,
    dataDir,
    get process() {
      return running.proc;
    },
    awsEnv() {
      return {
        AWS_ENDPOINT_URL_S3: endpoint,
        AWS_ACCESS_KEY_ID: credentials.accessKeyId,
        AWS_SECRET_ACCESS_KEY: credentials.secretAccessKey,
        AWS_DEFAULT_REGION: region,
        AWS_REGION: region,
      };
    },
    async listObjects() {
      // ListObjects (v1), paged by the last key (both implementations): s3rver's v2 continuation token is made with DES,
      // which Node 20's OpenSSL 3 refuses, so any v2 listing of more than one page fails there
      // with InternalError (the 30-minute soak's bucket passed 1,000 objects and met it).
      const out: S3Object[] = [];
      let marker: string | undefined;
      for (;;) {
        const page = await client.send(new ListObjectsCommand({ Bucket: bucket, MaxKeys: 500, ...(marker ? { Marker: marker } : {}) }));
        const contents = page.Contents ?? [];
        for (const o of contents) out.push({ key: o.Key!, size: o.Size ?? 0, etag: o.ETag ?? '' });
        if (!page.IsTruncated || contents.length === 0) return out;
        marker = contents[contents.length - 1]!.Key!;
      }
    },
    async getObject(key) {
      try {
        const res = await client.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
        return { body: Buffer.from(await res.Body!.transformToByteArray()), etag: res.ETag ?? '' };
      } catch (err) {
        if ((err as { name?: string }).name === 'NoSuchKey') return null;
        throw err;
      }
    },
    objectFile(key) {
      // s3rver's filesystem store: <dir>/<bucket>/<key>._S3rver_object
      return implementation === 's3rver' ? join(dataDir, bucket, `${key}._S3rver_object`) : null;
    },
    async setCors(origins) {
      corsOrigins = origins && origins.length > 0 ? [...origins] : null;
      await applyCors(client);
    },
    async requests() {
      return (await readLog()).requests;
    },
    async clearRequests() {
      logSince = (await readLog()).last;
    },
    stop,
    async start() {
      if (!stopped) return;
      running = await spawn(port);
      stopped = false;
    },
    close,
    [Symbol.asyncDispose]: close,
  };
}
