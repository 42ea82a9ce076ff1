import { createHash, randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Agent as HttpAgent } from 'undici';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { EpisodeRow, UploadFileRow, UploadPartRow } from '../store/types.js';
import { makeTempDir, removeTempDirs } from '../test-support.js';
import { verifyReplica } from './replica-upload.js';
import { TestStorage } from './test-storage.js';
import { multipartUpload, putFile } from './transfer.js';

/**
 * verifyReplica over what real uploads to an S3-like store leave behind (the rows the uploader
 * stores), and over the same rows with a receipt that contradicts the bytes sent: a contradiction
 * is a failure, never `verified`, whichever part it is in.
 */

const PART = 4096;
const md5 = (b: Buffer) => createHash('md5').update(b).digest('hex');
const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');
/** A well-formed MD5 ETag of other bytes than were sent. */
const WRONG = `"${md5(Buffer.from('other bytes'))}"`;

let storage: TestStorage;
let dispatcher: HttpAgent;
let dir: string;

beforeEach(async () => {
  storage = await TestStorage.start();
  dispatcher = new HttpAgent();
  dir = await makeTempDir();
});
afterEach(async () => {
  await dispatcher.close();
  await storage.close();
  await removeTempDirs();
});

const http = () => ({ dispatcher, allowHttp: true, timeoutMs: 10_000 });

function episodeOf(files: Record<string, Buffer>): EpisodeRow {
  const manifest = Object.entries(files).map(([path, b]) => ({ path, size_bytes: b.length, sha256: sha256(b) }));
  return { id: 'ep_verify', manifest: { files: manifest, total_bytes: manifest.reduce((n, f) => n + f.size_bytes, 0) } } as unknown as EpisodeRow;
}

/** Uploads `bytes` in parts to the test storage and returns the row the uploader stores for it. */
async function uploadMultipart(path: string, bytes: Buffer): Promise<UploadFileRow> {
  const file = join(dir, path);
  await writeFile(file, bytes);
  const entry = storage.grantFile(path, `k/${path}`, bytes.length, PART);
  if (!('upload_id' in entry)) throw new Error('expected a multipart entry');
  const result = await multipartUpload({
    http: http(),
    job: { file, label: path, size: bytes.length, expectedSha256: sha256(bytes), uploadId: entry.upload_id, partSize: PART, partUrls: entry.part_urls, completeUrl: entry.complete_url, done: new Map() },
    parallel: 2,
    signal: new AbortController().signal,
    onFirstByte: () => undefined,
    onPart: async () => undefined,
  });
  return { path, uploadId: entry.upload_id, partSize: PART, complete: true, bytesSent: result.bytes, sha256Sent: result.sha256, md5Sent: null, receipt: result.receipt, parts: result.parts };
}

/** Uploads `bytes` in one PUT and returns the row the uploader stores for it. */
async function uploadPut(path: string, bytes: Buffer): Promise<UploadFileRow> {
  const file = join(dir, path);
  await writeFile(file, bytes);
  const result = await putFile({ http: http(), url: storage.putUrl(`k/${path}`), file, label: path, size: bytes.length, expectedSha256: sha256(bytes), signal: new AbortController().signal, onFirstByte: () => undefined });
  return { path, uploadId: null, partSize: null, complete: true, bytesSent: result.bytes, sha256Sent: result.sha256, md5Sent: result.md5, receipt: result.receipt, parts: [] };
}

/** `row` with part `n`'s store ETag replaced. */
function withPartEtag(row: UploadFileRow, n: number, etag: string): UploadFileRow {
  return { ...row, parts: row.parts.map((p): UploadPartRow => (p.partNumber === n ? { ...p, etag } : p)) };
}

describe('verifyReplica', () => {
  it('verifies a multipart upload whose every part ETag is the MD5 of the part sent, and a PUT whose ETag is the MD5 of the file', async () => {
    const big = randomBytes(3 * PART + 10);
    const small = randomBytes(100);
    const rows = [await uploadMultipart('big.bin', big), await uploadPut('small.bin', small)];
    expect(rows[0]!.parts.map((p) => [p.partNumber, p.etag, p.md5])).toEqual(
      [0, 1, 2, 3].map((i) => {
        const part = md5(big.subarray(i * PART, (i + 1) * PART));
        return [i + 1, `"${part}"`, part];
      }),
    );
    expect(verifyReplica(episodeOf({ 'big.bin': big, 'small.bin': small }), rows)).toEqual({ ok: true });
  });

  it.each([1, 2, 4])('a part ETag that contradicts the bytes sent (part %i of 4) is receipt_mismatch, not verified', async (n) => {
    const big = randomBytes(3 * PART + 10);
    const row = withPartEtag(await uploadMultipart('big.bin', big), n, WRONG);
    expect(verifyReplica(episodeOf({ 'big.bin': big }), [row])).toEqual({
      ok: false,
      code: 'receipt_mismatch',
      message: expect.stringContaining(`part ${n} of big.bin: the store's ETag ${WRONG} differs from the MD5 of the bytes sent`) as unknown,
    });
  });

  it('a contradicting part ETag after a part whose ETag proves nothing is still receipt_mismatch', async () => {
    const big = randomBytes(3 * PART + 10);
    const row = withPartEtag(withPartEtag(await uploadMultipart('big.bin', big), 1, '"0123456789abcdef-kms"'), 3, WRONG);
    expect(verifyReplica(episodeOf({ 'big.bin': big }), [row])).toMatchObject({ ok: false, code: 'receipt_mismatch' });
  });

  it('a contradicting part ETag in the second file of an episode is receipt_mismatch', async () => {
    const a = randomBytes(2 * PART);
    const b = randomBytes(2 * PART + 1);
    const rows = [await uploadMultipart('a.bin', a), withPartEtag(await uploadMultipart('b.bin', b), 3, WRONG)];
    expect(verifyReplica(episodeOf({ 'a.bin': a, 'b.bin': b }), rows)).toMatchObject({ ok: false, code: 'receipt_mismatch' });
  });

  it.each([
    ['a part dropped', (r: UploadFileRow) => ({ ...r, parts: r.parts.filter((p) => p.partNumber !== 2) }), /part 2 is missing/],
    ['the last part short', (r: UploadFileRow) => ({ ...r, parts: r.parts.map((p, i, all) => (i === all.length - 1 ? { ...p, size: p.size - 1 } : p)) }), /they hold \d+ of its \d+ bytes/],
    ['a part too many', (r: UploadFileRow) => ({ ...r, parts: [...r.parts, { ...r.parts[0]!, partNumber: r.parts.length + 1 }] }), /they hold \d+ of its \d+ bytes/],
  ])('multipart parts that are not the whole file (%s) are incomplete, not verified', async (_what, change, message) => {
    const big = randomBytes(3 * PART + 10);
    const row = change(await uploadMultipart('big.bin', big));
    expect(verifyReplica(episodeOf({ 'big.bin': big }), [row])).toEqual({ ok: false, code: 'incomplete', message: expect.stringMatching(message) as unknown });
  });

  it('a single PUT whose ETag contradicts the file sent is receipt_mismatch', async () => {
    const small = randomBytes(100);
    const row = await uploadPut('small.bin', small);
    expect(verifyReplica(episodeOf({ 'small.bin': small }), [{ ...row, receipt: { ...row.receipt!, etag: WRONG } }])).toMatchObject({ ok: false, code: 'receipt_mismatch' });
  });

  it('part ETags that are not MD5s prove nothing: synced with a note, not verified', async () => {
    storage.behaviour.etag = 'opaque';
    const big = randomBytes(2 * PART + 1);
    const row = await uploadMultipart('big.bin', big);
    expect(row.parts.every((p) => p.md5 === null)).toBe(true);
    expect(verifyReplica(episodeOf({ 'big.bin': big }), [row])).toEqual({ ok: true, note: expect.stringMatching(/^not verified: part 1 of big\.bin: the store's ETag is not an MD5 of the body/) as unknown });
  });
});
