import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { open, stat, type FileHandle } from 'node:fs/promises';
import { request, type Dispatcher } from 'undici';
import type { UploadPartRow, UploadReceipt } from '../store/types.js';
import { FileHashError, UploadError } from '../errors.js';
import { hashFile, HASH_BLOCK, SentCrcs, type FileDigest } from './file-hash.js';
import { PieceBody, PiecePool } from './piece-body.js';
import { meteredRange, pieceSize, type RateLimiter } from './rate-limit.js';

/**
 * The HTTP side of an upload: bytes go from the episode file straight to the URLs of a grant
 * (never through the cloud), hashed as they are sent, so verification needs no read-back.
 */

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
export function checkReceipt(receipt: Pick<UploadReceipt, 'etag' | 'checksumSha256'>, sent: { md5: string | null; sha256: string }, what: string): ReceiptCheck {
  if (receipt.checksumSha256 !== null) {
    const ours = Buffer.from(sent.sha256, 'hex').toString('base64');
    return receipt.checksumSha256 === ours ? { ok: true } : { ok: false, mismatch: true, message: `${what}: the store's x-amz-checksum-sha256 differs from the bytes sent` };
  }
  const md5 = etagMd5(receipt.etag);
  if (md5 === null) {
    return { ok: false, mismatch: false, note: receipt.etag === null ? `${what}: the store answered no ETag` : `${what}: the store's ETag is not an MD5 of the body` };
  }
  if (sent.md5 === null) return { ok: false, mismatch: false, note: `${what}: no MD5 of the bytes sent to compare the store's ETag with` };
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
 * Whether a receipt asks for the MD5 of the bytes sent: only an ETag in the MD5 form with no
 * echoed SHA-256 can be compared with it. MD5 is the slowest hash the agent would run (about
 * 40 % of SHA-256's rate with SHA extensions), so it is computed only then.
 */
export function receiptWantsMd5(receipt: Pick<UploadReceipt, 'etag' | 'checksumSha256'>): boolean {
  return receipt.checksumSha256 === null && etagMd5(receipt.etag) !== null;
}

/** Bytes read from an episode file at a time: large reads keep the per-chunk costs (stream, hash, socket) small. */
const READ_CHUNK = 1024 * 1024;

/** The hex MD5 of a file, read in large chunks (a local read, never from the store). */
export async function fileMd5(file: string, signal?: AbortSignal): Promise<string> {
  const md5 = createHash('md5');
  for await (const chunk of createReadStream(file, { highWaterMark: READ_CHUNK, ...(signal ? { signal } : {}) })) md5.update(chunk as Buffer);
  return md5.digest('hex');
}

/** Why a file's digest does not verify what was sent, or null when it does. */
function digestProblem(d: FileDigest, sent: SentCrcs, expectedSha256: string, label: string): UploadError | null {
  if (d.sha256 !== expectedSha256) return new UploadError('file_changed', `${label} no longer matches its manifest (sha256 ${d.sha256}); not uploaded`);
  const block = sent.firstMismatch(d.crcs);
  if (block >= 0) return new UploadError('file_changed', `${label} changed while it was sent (block ${block} differs from the bytes hashed); not uploaded`);
  return null;
}

function hashError(err: unknown, label: string): UploadError {
  if (err instanceof FileHashError) return new UploadError('file_changed', `${label}: ${err.message}`);
  if (err instanceof UploadError) return err;
  return new UploadError('file_unreadable', `${label} could not be read to hash it: ${err instanceof Error ? err.message : String(err)}`);
}

export interface PutResult {
  bytes: number;
  /** Hex SHA-256 of the bytes sent (checked against the manifest before the last byte went out). */
  sha256: string;
  /** Hex MD5 of the file, only when the store's ETag is an MD5 to compare it with; else null. */
  md5: string | null;
  receipt: UploadReceipt;
}

/**
 * One streamed PUT of a whole file with its Content-Length; never holds the file in memory.
 * The bytes are hashed once (SHA-256) on the way out; when the store answers an ETag in the MD5
 * form, the file's MD5 is computed afterwards by a local read, so stores that prove nothing cost
 * no second hash and stores that do cost one local pass, not a slower send.
 */
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
  const size = args.size;
  const digest = hashFile(file, size, Math.max(1, size), args.signal);
  // Awaited before the last piece goes out; a failure before that is the request's to report.
  digest.catch(() => undefined);
  const sent = new SentCrcs(size, Math.max(1, size));
  let failure: UploadError | undefined;
  const fh = await open(file, 'r');
  const pool = new PiecePool(pieceSize(http));
  const pieces = meteredRange(
    async (at, n) => {
      const buf = await readRange(fh, at, n, label, pool.take(n));
      if (at === 0) args.onFirstByte();
      sent.add(at, buf);
      return buf;
    },
    size,
    { limiter: http.limiter, onBytes: args.onBytes, signal: args.signal },
  );
  // The last piece is held back until the file's digest is known: when it does not verify, the
  // body fails before its last byte and the store never has a complete object of a changed file.
  async function* body(): AsyncGenerator<Buffer> {
    let held: Buffer | undefined;
    for await (const p of pieces) {
      if (held) yield held;
      held = p;
    }
    let d: FileDigest;
    try {
      d = await digest;
    } catch (err) {
      throw (failure = hashError(err, label));
    }
    const problem = digestProblem(d, sent, args.expectedSha256, label);
    if (problem) throw (failure = problem);
    if (held) yield held;
  }
  const stream = new PieceBody(body(), pool);
  try {
    const res = await request(url, {
      method: 'PUT',
      body: stream,
      headers: { 'content-length': String(size), 'content-type': 'application/octet-stream' },
      dispatcher: http.dispatcher,
      signal: args.signal,
      headersTimeout: http.timeoutMs,
      bodyTimeout: http.timeoutMs,
    });
    const text = await readCapped(res.body);
    if (res.statusCode < 200 || res.statusCode >= 300) throw statusError(res.statusCode, text, `PUT ${label}`);
    stream.settle(true);
    if (failure) throw failure;
    const receipt: UploadReceipt = { status: res.statusCode, etag: header(res.headers, 'etag'), checksumSha256: header(res.headers, 'x-amz-checksum-sha256') };
    return {
      bytes: size,
      sha256: (await digest).sha256,
      md5: receiptWantsMd5(receipt) ? await fileMd5(file, args.signal) : null,
      receipt,
    };
  } catch (err) {
    throw networkError(failure ?? err, `PUT ${label}`);
  } finally {
    stream.settle(false);
    await fh.close();
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
 * An S3 multipart upload straight to presigned URLs: `parallel` parts on the wire at once, each
 * streamed from its range of the file (memory: the pieces in flight, whatever the part size),
 * parts already done skipped, each part's ETag checked against its MD5 (computed only when the
 * ETag is one) and noted through `onPart` as it is accepted; then the CompleteMultipartUpload
 * POST, only when the file's SHA-256 (hashed beside the upload, see file-hash.ts) matches the
 * manifest and the bytes sent are the bytes hashed.
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
}): Promise<MultipartResult> {
  const { http, job, signal } = args;
  const count = partCount(job.size, job.partSize);
  if (job.partUrls.length !== count) throw new UploadError('grant_invalid', `${job.label}: the grant has ${job.partUrls.length} part URLs for ${count} parts of ${job.partSize} bytes`);
  for (const u of job.partUrls) checkUploadUrl(u, http.allowHttp);
  checkUploadUrl(job.completeUrl, http.allowHttp);
  const digest = hashFile(job.file, job.size, job.partSize, signal);
  digest.catch(() => undefined);
  const sent = new SentCrcs(job.size, job.partSize);
  const parts = new Map<number, UploadPartRow>(job.done);
  const running = new Set<Promise<void>>();
  let failure: unknown;
  let firstSent = false;
  const fh = await open(job.file, 'r');
  // One pool for the parts in flight: a part's buffers serve the next part once it is answered.
  const pool = new PiecePool(pieceSize(http));
  try {
    for (let n = 1; n <= count && failure === undefined; n++) {
      if (signal.aborted) throw new UploadError('aborted', 'the agent is stopping');
      const start = (n - 1) * job.partSize;
      const length = Math.min(job.partSize, job.size - start);
      const already = job.done.get(n);
      if (already && already.size === length) continue;
      while (running.size >= args.parallel) await Promise.race(running);
      if (failure !== undefined) break;
      if (!firstSent) {
        firstSent = true;
        args.onFirstByte();
      }
      const body: PartBody = { fh, start, length, sent, label: job.label, pool };
      const p = sendPart(http, job.partUrls[n - 1]!, body, n, signal, args.onBytes)
        .then(async (part) => {
          await args.onPart(part);
          parts.set(n, part);
        })
        .catch((err: unknown) => {
          failure ??= err;
        })
        .finally(() => running.delete(p));
      running.add(p);
    }
    await Promise.all(running);
    if (failure !== undefined) throw networkError(failure, job.label);
    let d: FileDigest;
    try {
      d = await digest;
    } catch (err) {
      throw hashError(err, job.label);
    }
    const problem = digestProblem(d, sent, job.expectedSha256, job.label);
    if (problem) throw new UploadError(problem.code, problem.message.replace('not uploaded', 'upload not completed'));
    const ordered = [...parts.values()].sort((a, b) => a.partNumber - b.partNumber);
    const receipt = await complete(http, job, ordered, signal);
    return { bytes: job.size, sha256: d.sha256, parts: ordered, receipt };
  } finally {
    await Promise.allSettled([...running]);
    await fh.close();
  }
}

/** Where a part's bytes come from: a range of the open episode file, read as the connection takes it. */
interface PartBody {
  fh: FileHandle;
  start: number;
  length: number;
  sent: SentCrcs;
  label: string;
  pool: PiecePool;
}

/** Reads `n` bytes at `at` into `buf` (a buffer nothing else uses now; fresh when not given). */
async function readRange(fh: FileHandle, at: number, n: number, label: string, buf: Buffer = Buffer.allocUnsafe(n)): Promise<Buffer> {
  let read = 0;
  while (read < n) {
    const { bytesRead } = await fh.read(buf, read, n - read, at + read);
    if (bytesRead === 0) throw new UploadError('file_changed', `${label} is shorter than its manifest says`);
    read += bytesRead;
  }
  return buf;
}

/** The MD5 of a range of the file, read again locally (only when the store's ETag is one to compare with). */
async function rangeMd5(fh: FileHandle, start: number, length: number, label: string): Promise<string> {
  const md5 = createHash('md5');
  // One buffer for the whole range: update() has consumed a block before the next read.
  const buf = Buffer.allocUnsafe(Math.min(HASH_BLOCK, Math.max(1, length)));
  for (let at = 0; at < length; at += HASH_BLOCK) {
    const n = Math.min(HASH_BLOCK, length - at);
    md5.update(await readRange(fh, start + at, n, label, buf.subarray(0, n)));
  }
  return md5.digest('hex');
}

async function sendPart(http: UploadHttp, url: string, part: PartBody, n: number, signal: AbortSignal, onBytes?: (n: number) => void): Promise<UploadPartRow> {
  const what = `part ${n} of ${part.label}`;
  const read = async (at: number, len: number) => {
    const buf = await readRange(part.fh, part.start + at, len, part.label, part.pool.take(len));
    part.sent.add(part.start + at, buf);
    return buf;
  };
  const body = new PieceBody(meteredRange(read, part.length, { limiter: http.limiter, onBytes, signal }), part.pool);
  try {
    const res = await request(url, {
      method: 'PUT',
      body,
      headers: { 'content-length': String(part.length) },
      dispatcher: http.dispatcher,
      signal,
      headersTimeout: http.timeoutMs,
      bodyTimeout: http.timeoutMs,
    });
    const text = await readCapped(res.body);
    if (res.statusCode < 200 || res.statusCode >= 300) throw statusError(res.statusCode, text, `PUT ${what}`);
    // A 2xx answer comes after the whole body was read: its buffers serve the next part.
    body.settle(true);
    const etag = header(res.headers, 'etag');
    // CompleteMultipartUpload needs every part's ETag: without one the upload cannot finish.
    if (etag === null) throw new UploadError('receipt_missing', `PUT ${what}: the store answered no ETag`);
    // Computed only when the ETag is an MD5 to compare with (a local read of the part's range).
    const md5 = etagMd5(etag) === null ? null : await rangeMd5(part.fh, part.start, part.length, part.label);
    if (md5 !== null) {
      const check = checkReceipt({ etag, checksumSha256: null }, { md5, sha256: '' }, `PUT ${what}`);
      if (!check.ok && check.mismatch) throw new UploadError('receipt_mismatch', check.message);
    }
    return { partNumber: n, size: part.length, etag, md5 };
  } catch (err) {
    throw networkError(err, `PUT ${what}`);
  } finally {
    body.settle(false);
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
