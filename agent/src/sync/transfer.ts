import { createHash, type Hash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { open, stat } from 'node:fs/promises';
import { Transform, type TransformCallback } from 'node:stream';
import { request, type Dispatcher } from 'undici';
import type { UploadPartRow, UploadReceipt } from '../store/types.js';
import { MeteredStream, meteredBuffer, type RateLimiter } from './rate-limit.js';

/**
 * The HTTP side of an upload: bytes go from the episode file straight to the URLs of a grant
 * (never through the cloud), hashed as they are sent, so verification needs no read-back.
 */

/** Why an upload attempt failed; `code` goes into the replica's one-line error. */
export class UploadError extends Error {
  override readonly name = 'UploadError';
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** How uploads reach the storage: the HTTPS trust, the plain-HTTP opt-in, time limits. */
export interface UploadHttp {
  dispatcher: Dispatcher;
  allowHttp: boolean;
  /** No answer headers this long after the body was sent, or no body progress this long: failed. */
  timeoutMs: number;
  /** The agent's upload bandwidth limit, shared by every body it sends (`--upload-limit`); none when absent. */
  limiter?: RateLimiter | undefined;
}

/** Refuses a URL the agent must not send to; returns it parsed. */
export function checkUploadUrl(raw: string, allowHttp: boolean): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new UploadError('grant_invalid', 'an upload URL is not a URL');
  }
  if (url.protocol === 'https:') return url;
  if (url.protocol === 'http:') {
    if (allowHttp) return url;
    throw new UploadError('insecure_url', `plain http upload URL refused for ${url.host} (start the agent with --allow-http-uploads to allow it)`);
  }
  throw new UploadError('grant_invalid', `unsupported upload URL scheme ${url.protocol}`);
}

const MD5_ETAG = /^"?([0-9a-fA-F]{32})"?$/;

/** The hex MD5 an ETag stands for, or null when it is not the MD5 form (multipart, KMS, other stores). */
export function etagMd5(etag: string | null): string | null {
  const m = etag === null ? null : MD5_ETAG.exec(etag.trim().replace(/^W\//, ''));
  return m ? m[1]!.toLowerCase() : null;
}

export type ReceiptCheck = { ok: true } | { ok: false; mismatch: true; message: string } | { ok: false; mismatch: false; note: string };

/**
 * Compares a receipt with what was sent: an echoed `x-amz-checksum-sha256` first, else an ETag
 * that is the body's MD5. A receipt of another form proves nothing (`mismatch: false`).
 */
export function checkReceipt(receipt: Pick<UploadReceipt, 'etag' | 'checksumSha256'>, sent: { md5: string; sha256: string }, what: string): ReceiptCheck {
  if (receipt.checksumSha256 !== null) {
    const ours = Buffer.from(sent.sha256, 'hex').toString('base64');
    return receipt.checksumSha256 === ours ? { ok: true } : { ok: false, mismatch: true, message: `${what}: the store's x-amz-checksum-sha256 differs from the bytes sent` };
  }
  const md5 = etagMd5(receipt.etag);
  if (md5 === null) {
    return { ok: false, mismatch: false, note: receipt.etag === null ? `${what}: the store answered no ETag` : `${what}: the store's ETag is not an MD5 of the body` };
  }
  return md5 === sent.md5 ? { ok: true } : { ok: false, mismatch: true, message: `${what}: the store's ETag ${receipt.etag ?? ''} differs from the MD5 of the bytes sent` };
}

function header(headers: Record<string, string | string[] | undefined>, name: string): string | null {
  const v = headers[name];
  return Array.isArray(v) ? (v[0] ?? null) : (v ?? null);
}

function networkError(err: unknown, what: string): UploadError {
  if (err instanceof UploadError) return err;
  const e = err as { code?: unknown; message?: unknown; cause?: { code?: unknown; message?: unknown } };
  const code = typeof e.cause?.code === 'string' ? e.cause.code : typeof e.code === 'string' ? e.code : 'error';
  const message = typeof e.cause?.message === 'string' ? e.cause.message : typeof e.message === 'string' ? e.message : String(err);
  return new UploadError('network', `${what}: ${code} ${message}`);
}

/** Reads at most `max` bytes of an answer body (error documents are small; the rest is dropped). */
async function readCapped(body: AsyncIterable<Buffer> & { destroy?: () => void }, max = 64 * 1024): Promise<string> {
  const chunks: Buffer[] = [];
  let n = 0;
  for await (const chunk of body) {
    if (n < max) chunks.push(chunk.subarray(0, max - n));
    n += chunk.length;
  }
  return Buffer.concat(chunks).toString('utf8');
}

/**
 * Hashes what passes through and holds the last chunk back until the whole file's SHA-256 is
 * known: when it differs from the manifest the stream fails before the request's last byte, so
 * the store never receives a complete body of a file that changed after finalize.
 */
class SendHasher extends Transform {
  readonly sha256: Hash = createHash('sha256');
  readonly md5: Hash = createHash('md5');
  bytes = 0;
  private held: Buffer | undefined;
  first = false;

  constructor(
    private readonly expectedSha256: string,
    private readonly onFirstByte: () => void,
    private readonly label: string,
  ) {
    super();
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, done: TransformCallback): void {
    this.sha256.update(chunk);
    this.md5.update(chunk);
    this.bytes += chunk.length;
    if (!this.first) {
      this.first = true;
      this.onFirstByte();
    }
    const out = this.held;
    this.held = chunk;
    done(null, out);
  }

  override _flush(done: TransformCallback): void {
    const digest = this.sha256.copy().digest('hex');
    if (digest !== this.expectedSha256) {
      done(new UploadError('file_changed', `${this.label} no longer matches its manifest (sha256 ${digest}); not uploaded`));
      return;
    }
    done(null, this.held);
  }
}

export interface PutResult {
  bytes: number;
  sha256: string;
  md5: string;
  receipt: UploadReceipt;
}

/** One streamed PUT of a whole file with its Content-Length; never holds the file in memory. */
export async function putFile(args: {
  http: UploadHttp;
  url: string;
  file: string;
  label: string;
  size: number;
  expectedSha256: string;
  signal: AbortSignal;
  onFirstByte: () => void;
  /** Bytes handed to the connection, as they go (progress). */
  onBytes?: (n: number) => void;
}): Promise<PutResult> {
  const { http, file, label } = args;
  const url = checkUploadUrl(args.url, http.allowHttp);
  const hasher = new SendHasher(args.expectedSha256, args.onFirstByte, label);
  const meter = new MeteredStream({ limiter: http.limiter, onBytes: args.onBytes, signal: args.signal });
  const source = createReadStream(file, { highWaterMark: 256 * 1024 });
  source.on('error', (err) => hasher.destroy(err));
  source.pipe(hasher);
  let failure: unknown;
  hasher.on('error', (err) => {
    failure ??= err;
    meter.destroy(err);
  });
  meter.on('error', (err) => (failure ??= err));
  hasher.pipe(meter);
  try {
    const res = await request(url, {
      method: 'PUT',
      body: meter,
      headers: { 'content-length': String(args.size), 'content-type': 'application/octet-stream' },
      dispatcher: http.dispatcher,
      signal: args.signal,
      headersTimeout: http.timeoutMs,
      bodyTimeout: http.timeoutMs,
    });
    const text = await readCapped(res.body);
    if (res.statusCode < 200 || res.statusCode >= 300) throw statusError(res.statusCode, text, `PUT ${label}`);
    if (failure) throw networkError(failure, `PUT ${label}`);
    return {
      bytes: hasher.bytes,
      sha256: hasher.sha256.digest('hex'),
      md5: hasher.md5.digest('hex'),
      receipt: { status: res.statusCode, etag: header(res.headers, 'etag'), checksumSha256: header(res.headers, 'x-amz-checksum-sha256') },
    };
  } catch (err) {
    source.destroy();
    meter.destroy();
    throw networkError(failure ?? err, `PUT ${label}`);
  }
}

function statusError(status: number, body: string, what: string): UploadError {
  const code = /<Code>([^<]{1,128})<\/Code>/.exec(body)?.[1];
  // S3 (and compatible stores) answer an expired presigned URL 403 AccessDenied "Request has expired".
  const message = /<Message>([^<]{1,256})<\/Message>/.exec(body)?.[1];
  if (status === 403 && code === 'AccessDenied' && message !== undefined && /expired/i.test(message)) {
    return new UploadError('url_expired', `${what} answered 403 AccessDenied (${message})`);
  }
  return new UploadError(status >= 500 ? 'upload_failed' : 'upload_rejected', `${what} answered ${status}${code ? ` ${code}` : ''}`);
}

/** The file a multipart grant names, and what is already done for its upload id. */
export interface MultipartJob {
  file: string;
  label: string;
  size: number;
  expectedSha256: string;
  uploadId: string;
  partSize: number;
  partUrls: readonly string[];
  completeUrl: string;
  /** Parts already accepted for this upload id (skipped, but read again for the file's SHA-256). */
  done: ReadonlyMap<number, UploadPartRow>;
}

export interface MultipartResult {
  bytes: number;
  sha256: string;
  parts: UploadPartRow[];
  receipt: UploadReceipt;
}

/** Parts a file of `size` has at `partSize` (an empty file has one empty part). */
export function partCount(size: number, partSize: number): number {
  return Math.max(1, Math.ceil(size / partSize));
}

/**
 * An S3 multipart upload straight to presigned URLs: parts of `partSize` read from the file in
 * order (so the file's SHA-256 is of the bytes sent), `parallel` of them on the wire at once
 * (memory: at most `parallel` part buffers), parts already done skipped, each part's ETag
 * checked against its MD5 and noted through `onPart` as it is accepted; then the
 * CompleteMultipartUpload POST, only when the whole file matched its manifest.
 */
export async function multipartUpload(args: {
  http: UploadHttp;
  job: MultipartJob;
  parallel: number;
  signal: AbortSignal;
  onFirstByte: () => void;
  onPart: (part: UploadPartRow) => Promise<void>;
  /** Bytes handed to the connection, as they go (progress; a part that fails was counted too). */
  onBytes?: (n: number) => void;
  /** Test hook: called with the part buffers held at once whenever it changes. */
  onBuffers?: (held: number) => void;
}): Promise<MultipartResult> {
  const { http, job, signal } = args;
  const count = partCount(job.size, job.partSize);
  if (job.partUrls.length !== count) throw new UploadError('grant_invalid', `${job.label}: the grant has ${job.partUrls.length} part URLs for ${count} parts of ${job.partSize} bytes`);
  for (const u of job.partUrls) checkUploadUrl(u, http.allowHttp);
  checkUploadUrl(job.completeUrl, http.allowHttp);
  const sha256 = createHash('sha256');
  const parts = new Map<number, UploadPartRow>(job.done);
  const running = new Set<Promise<void>>();
  let failure: unknown;
  let held = 0;
  let firstSent = false;
  const pool: Buffer[] = [];
  const fh = await open(job.file, 'r');
  try {
    for (let n = 1; n <= count && failure === undefined; n++) {
      if (signal.aborted) throw new UploadError('aborted', 'the agent is stopping');
      // Wait for a slot before reading, so at most `parallel` buffers exist at once.
      while (running.size >= args.parallel) await Promise.race(running);
      if (failure !== undefined) break;
      const start = (n - 1) * job.partSize;
      const length = Math.min(job.partSize, job.size - start);
      // Part buffers are reused once their part is accepted: allocating a new one per part leaves
      // the garbage collector behind on external memory and the RSS grows well past `parallel` parts.
      const whole = pool.pop() ?? Buffer.allocUnsafe(job.partSize);
      const buf = whole.subarray(0, length);
      held += 1;
      args.onBuffers?.(held);
      let read = 0;
      while (read < length) {
        const { bytesRead } = await fh.read(buf, read, length - read, start + read);
        if (bytesRead === 0) break;
        read += bytesRead;
      }
      if (read !== length) throw new UploadError('file_changed', `${job.label} is shorter than its manifest says`);
      sha256.update(buf);
      const already = job.done.get(n);
      if (already && already.size === length) {
        held -= 1;
        pool.push(whole);
        continue;
      }
      if (!firstSent) {
        firstSent = true;
        args.onFirstByte();
      }
      const url = job.partUrls[n - 1]!;
      const p = sendPart(http, url, buf, n, job.label, signal, args.onBytes)
        .then(async (part) => {
          // Accepted: the whole body was written, so the buffer is free again.
          pool.push(whole);
          await args.onPart(part);
          parts.set(n, part);
        })
        .catch((err: unknown) => {
          failure ??= err;
        })
        .finally(() => {
          held -= 1;
          args.onBuffers?.(held);
          running.delete(p);
        });
      running.add(p);
    }
    await Promise.all(running);
    if (failure !== undefined) throw networkError(failure, job.label);
    const digest = sha256.digest('hex');
    if (digest !== job.expectedSha256) throw new UploadError('file_changed', `${job.label} no longer matches its manifest (sha256 ${digest}); upload not completed`);
    const ordered = [...parts.values()].sort((a, b) => a.partNumber - b.partNumber);
    const receipt = await complete(http, job, ordered, signal);
    return { bytes: job.size, sha256: digest, parts: ordered, receipt };
  } finally {
    await Promise.allSettled([...running]);
    await fh.close();
  }
}

async function sendPart(http: UploadHttp, url: string, buf: Buffer, n: number, label: string, signal: AbortSignal, onBytes?: (n: number) => void): Promise<UploadPartRow> {
  const what = `part ${n} of ${label}`;
  const md5 = createHash('md5').update(buf).digest('hex');
  const sha = createHash('sha256').update(buf).digest('hex');
  try {
    const res = await request(url, {
      method: 'PUT',
      body: meteredBuffer(buf, { limiter: http.limiter, onBytes, signal }),
      headers: { 'content-length': String(buf.length) },
      dispatcher: http.dispatcher,
      signal,
      headersTimeout: http.timeoutMs,
      bodyTimeout: http.timeoutMs,
    });
    const text = await readCapped(res.body);
    if (res.statusCode < 200 || res.statusCode >= 300) throw statusError(res.statusCode, text, `PUT ${what}`);
    const etag = header(res.headers, 'etag');
    // CompleteMultipartUpload needs every part's ETag: without one the upload cannot finish.
    if (etag === null) throw new UploadError('receipt_missing', `PUT ${what}: the store answered no ETag`);
    const check = checkReceipt({ etag, checksumSha256: header(res.headers, 'x-amz-checksum-sha256') }, { md5, sha256: sha }, `PUT ${what}`);
    if (!check.ok && check.mismatch) throw new UploadError('receipt_mismatch', check.message);
    return { partNumber: n, size: buf.length, etag, md5, sha256: sha };
  } catch (err) {
    throw networkError(err, `PUT ${what}`);
  }
}

function xmlEscape(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;').replace(/'/g, '&apos;');
}

/** The CompleteMultipartUpload document (S3 API reference), parts in ascending order. */
export function completeMultipartXml(parts: readonly Pick<UploadPartRow, 'partNumber' | 'etag'>[]): string {
  const items = parts.map((p) => {
    const etag = p.etag.startsWith('"') ? p.etag : `"${p.etag}"`;
    return `<Part><PartNumber>${p.partNumber}</PartNumber><ETag>${xmlEscape(etag)}</ETag></Part>`;
  });
  return `<?xml version="1.0" encoding="UTF-8"?>\n<CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/">${items.join('')}</CompleteMultipartUpload>`;
}

async function complete(http: UploadHttp, job: MultipartJob, parts: readonly UploadPartRow[], signal: AbortSignal): Promise<UploadReceipt> {
  const what = `complete ${job.label}`;
  const body = completeMultipartXml(parts);
  try {
    const res = await request(job.completeUrl, {
      method: 'POST',
      body,
      headers: { 'content-type': 'application/xml', 'content-length': String(Buffer.byteLength(body)) },
      dispatcher: http.dispatcher,
      signal,
      headersTimeout: http.timeoutMs,
      bodyTimeout: http.timeoutMs,
    });
    const text = await readCapped(res.body);
    if (res.statusCode < 200 || res.statusCode >= 300) throw statusError(res.statusCode, text, `POST ${what}`);
    // S3 may answer 200 and then report the failure in the body (the S3 API reference says so).
    if (/<Error>/.test(text)) {
      const code = /<Code>([^<]{1,128})<\/Code>/.exec(text)?.[1] ?? 'Error';
      const message = /<Message>([^<]{1,512})<\/Message>/.exec(text)?.[1] ?? '';
      throw new UploadError('complete_failed', `POST ${what} answered ${res.statusCode} with an error document: ${code}${message ? ` ${message}` : ''}`);
    }
    const etag = /<ETag>([^<]{1,256})<\/ETag>/.exec(text)?.[1]?.replace(/&quot;/g, '"') ?? header(res.headers, 'etag');
    return { status: res.statusCode, etag, checksumSha256: header(res.headers, 'x-amz-checksum-sha256') };
  } catch (err) {
    throw networkError(err, `POST ${what}`);
  }
}

/** The size of an episode file now, or an error saying it is gone or changed. */
export async function checkFileSize(file: string, label: string, expected: number): Promise<void> {
  let size: number;
  try {
    size = (await stat(file)).size;
  } catch {
    throw new UploadError('file_missing', `${label} is missing from the episode directory`);
  }
  if (size !== expected) throw new UploadError('file_changed', `${label} is ${size} bytes, its manifest says ${expected}`);
}
