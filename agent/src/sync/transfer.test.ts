import { createHash, randomBytes } from 'node:crypto';
import { open, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Agent as HttpAgent } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { makeTempDir, removeTempDirs } from '../test-support.js';
import { TestStorage } from './test-storage.js';
import { checkReceipt, checkUploadUrl, completeMultipartXml, etagMd5, multipartUpload, partCount } from './transfer.js';
import { UploadError } from '../errors.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  await removeTempDirs();
});

describe('receipts', () => {
  it('reads the MD5 out of S3-style ETags only', () => {
    const md5 = createHash('md5').update('x').digest('hex');
    expect(etagMd5(`"${md5}"`)).toBe(md5);
    expect(etagMd5(md5.toUpperCase())).toBe(md5);
    expect(etagMd5(`W/"${md5}"`)).toBe(md5);
    expect(etagMd5(`"${md5}-3"`)).toBeNull();
    expect(etagMd5('"abc"')).toBeNull();
    expect(etagMd5(null)).toBeNull();
  });

  it('an echoed x-amz-checksum-sha256 decides before the ETag', () => {
    const body = Buffer.from('hello');
    const sent = { md5: createHash('md5').update(body).digest('hex'), sha256: createHash('sha256').update(body).digest('hex') };
    const b64 = createHash('sha256').update(body).digest('base64');
    expect(checkReceipt({ etag: null, checksumSha256: b64 }, sent, 'f')).toEqual({ ok: true });
    expect(checkReceipt({ etag: `"${sent.md5}"`, checksumSha256: 'AAAA' }, sent, 'f')).toMatchObject({ ok: false, mismatch: true });
    expect(checkReceipt({ etag: `"${sent.md5}"`, checksumSha256: null }, sent, 'f')).toEqual({ ok: true });
    expect(checkReceipt({ etag: `"${'0'.repeat(32)}"`, checksumSha256: null }, sent, 'f')).toMatchObject({ ok: false, mismatch: true });
    expect(checkReceipt({ etag: '"opaque-1"', checksumSha256: null }, sent, 'f')).toMatchObject({ ok: false, mismatch: false });
  });
});

describe('CompleteMultipartUpload', () => {
  it('lists the parts in order with quoted ETags, as the S3 API reference shows', () => {
    expect(completeMultipartXml([
      { partNumber: 1, etag: '"a"' },
      { partNumber: 2, etag: 'b' },
    ])).toBe(
      '<?xml version="1.0" encoding="UTF-8"?>\n<CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Part><PartNumber>1</PartNumber><ETag>&quot;a&quot;</ETag></Part><Part><PartNumber>2</PartNumber><ETag>&quot;b&quot;</ETag></Part></CompleteMultipartUpload>',
    );
  });
});

describe('URLs', () => {
  it('https always, http only with the opt-in, nothing else', () => {
    expect(checkUploadUrl('https://10.0.0.5:9000/b/k', false).host).toBe('10.0.0.5:9000');
    expect(() => checkUploadUrl('http://10.0.0.5/b/k', false)).toThrow(UploadError);
    expect(checkUploadUrl('http://10.0.0.5/b/k', true).protocol).toBe('http:');
    expect(() => checkUploadUrl('ftp://h/k', true)).toThrow(/unsupported upload URL scheme/);
  });
});

describe('multipartUpload', () => {
  it('has at most `parallel` parts on the wire at once and sends every byte once', async () => {
    const storage = await TestStorage.start();
    const dispatcher = new HttpAgent();
    cleanups.push(async () => {
      await dispatcher.close();
      await storage.close();
    });
    storage.behaviour.partDelayMs = 10;
    const dir = await makeTempDir();
    const file = join(dir, 'f.bin');
    const bytes = randomBytes(10 * 4096 + 7);
    await writeFile(file, bytes);
    const entry = storage.grantFile('f.bin', 'k', bytes.length, 4096);
    if (!('upload_id' in entry)) throw new Error('expected a multipart entry');
    const stored: number[] = [];
    const result = await multipartUpload({
      http: { dispatcher, allowHttp: true, timeoutMs: 5000 },
      job: {
        file,
        label: 'f.bin',
        size: bytes.length,
        expectedSha256: createHash('sha256').update(bytes).digest('hex'),
        uploadId: entry.upload_id,
        partSize: 4096,
        partUrls: entry.part_urls,
        completeUrl: entry.complete_url,
        done: new Map(),
      },
      parallel: 2,
      signal: new AbortController().signal,
      onFirstByte: () => undefined,
      onPart: async (p) => void stored.push(p.partNumber),
    });
    expect(partCount(bytes.length, 4096)).toBe(11);
    expect(storage.maxPartsInFlight).toBe(2);
    expect(stored.sort((a, b) => a - b)).toEqual(Array.from({ length: 11 }, (_, i) => i + 1));
    expect(result.parts.map((p) => p.partNumber)).toEqual(stored);
    expect(storage.objects.get('k')!.body.equals(bytes)).toBe(true);
  });
});

describe('a file changed while it is sent', () => {
  it('a part read after the file changed does not match the bytes hashed: file_changed, the upload is never completed', async () => {
    const storage = await TestStorage.start();
    const dispatcher = new HttpAgent();
    cleanups.push(async () => {
      await dispatcher.close();
      await storage.close();
    });
    const dir = await makeTempDir();
    const file = join(dir, 'f.bin');
    const bytes = randomBytes(6 * 4096);
    await writeFile(file, bytes);
    const entry = storage.grantFile('f.bin', 'k', bytes.length, 4096);
    if (!('upload_id' in entry)) throw new Error('expected a multipart entry');
    const stored: number[] = [];
    const upload = multipartUpload({
      http: { dispatcher, allowHttp: true, timeoutMs: 5000 },
      job: {
        file,
        label: 'f.bin',
        size: bytes.length,
        expectedSha256: createHash('sha256').update(bytes).digest('hex'),
        uploadId: entry.upload_id,
        partSize: 4096,
        partUrls: entry.part_urls,
        completeUrl: entry.complete_url,
        done: new Map(),
      },
      parallel: 1,
      signal: new AbortController().signal,
      onFirstByte: () => undefined,
      onPart: async (p) => {
        stored.push(p.partNumber);
        // The file was hashed before part 1 went out; part 5 is rewritten before it is read.
        if (p.partNumber === 1) {
          const fh = await open(file, 'r+');
          await fh.write(Buffer.alloc(10, 1), 0, 10, 4 * 4096 + 100);
          await fh.close();
        }
      },
    });
    const err = await upload.then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(UploadError);
    expect((err as UploadError).code).toBe('file_changed');
    // Which check sees the change first depends on the file hash, which runs alongside the
    // sends: if it had read part 5's bytes before the rewrite, the part's CRC differs from the
    // hashed one; if not (a loaded machine), the hash differs from the manifest's. Either way
    // the upload is refused and never completed.
    expect((err as UploadError).message).toMatch(/changed while it was sent|no longer matches its manifest/);
    expect(stored).toEqual([1, 2, 3, 4, 5, 6]);
    expect(storage.objects.has('k')).toBe(false);
  });
});


describe('part ETags', () => {
  it('a part ETag that contradicts the bytes sent is receipt_mismatch: the part is not noted and the upload is never completed', async () => {
    const storage = await TestStorage.start();
    const dispatcher = new HttpAgent();
    cleanups.push(async () => {
      await dispatcher.close();
      await storage.close();
    });
    storage.behaviour.etag = 'wrong';
    const dir = await makeTempDir();
    const file = join(dir, 'f.bin');
    const bytes = randomBytes(3 * 4096 + 5);
    await writeFile(file, bytes);
    const entry = storage.grantFile('f.bin', 'k', bytes.length, 4096);
    if (!('upload_id' in entry)) throw new Error('expected a multipart entry');
    const stored: number[] = [];
    const err = await multipartUpload({
      http: { dispatcher, allowHttp: true, timeoutMs: 5000 },
      job: {
        file,
        label: 'f.bin',
        size: bytes.length,
        expectedSha256: createHash('sha256').update(bytes).digest('hex'),
        uploadId: entry.upload_id,
        partSize: 4096,
        partUrls: entry.part_urls,
        completeUrl: entry.complete_url,
        done: new Map(),
      },
      parallel: 1,
      signal: new AbortController().signal,
      onFirstByte: () => undefined,
      onPart: async (p) => void stored.push(p.partNumber),
    }).then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(UploadError);
    expect((err as UploadError).code).toBe('receipt_mismatch');
    expect((err as UploadError).message).toMatch(/^PUT part 1 of f\.bin: the store's ETag "[0-9a-f]{32}" differs from the MD5 of the bytes sent$/);
    expect(stored).toEqual([]);
    expect(storage.requests.filter((q) => q.method === 'POST')).toEqual([]);
    expect(storage.objects.has('k')).toBe(false);
  });
});
