/**
 * The S3 server's bucket CORS rule (`corsOrigins`, `setCors`) and request log (`requestLog`),
 * as the console's player meets them: a page on another origin in Debian's chromium fetches a
 * presigned GET URL with a Range header. What the page can read of the answer is what the
 * browser let through, so each case checks the headers the player reads (Content-Range for the
 * object's size, Content-Length, ETag, Accept-Ranges), not only the status.
 */
import { createServer, type Server } from 'node:http';
import { GetObjectCommand, HeadObjectCommand, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { launchBrowser, type TestBrowser } from './support/browser.js';
import { holdExclusive } from './support/exclusive.js';
import { playbackCorsRule, startS3Server, type S3Request, type S3ServerProcess } from './support/s3-server.js';

const BODY = Buffer.from(Array.from({ length: 1000 }, (_, i) => i % 251));
const KEY = 'org/ep_1/bag/bag_0.mcap';

/** What the page saw of a fetch: the status and the headers the player reads, or the error's text. */
type Seen = { status: number; headers: Record<string, string | null>; bytes: number[] } | { error: string };

let lock: AsyncDisposable;
let browser: TestBrowser;
let pageServer: Server;
let origin: string;
let s3: S3ServerProcess;
let client: S3Client;
let page: Page;

beforeAll(async () => {
  // One chromium at a time across the run's workers (console/test/harness.ts takes the same lock).
  lock = await holdExclusive('console-browser');
  pageServer = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/html' });
    res.end('<!doctype html><title>another origin</title>');
  });
  await new Promise<void>((r) => pageServer.listen(0, '127.0.0.1', r));
  origin = `http://127.0.0.1:${(pageServer.address() as { port: number }).port}`;
  s3 = await startS3Server({ implementation: 's3rver', requestLog: true, corsOrigins: [origin] });
  client = new S3Client({ endpoint: s3.endpoint, region: s3.region, forcePathStyle: true, credentials: { accessKeyId: s3.accessKeyId, secretAccessKey: s3.secretAccessKey }, maxAttempts: 1 });
  await client.send(new PutObjectCommand({ Bucket: s3.bucket, Key: KEY, Body: BODY }));
  browser = await launchBrowser();
  page = (await browser.newPage()).page;
  await page.goto(origin);
}, 300_000);

afterAll(async () => {
  await browser?.close();
  client?.destroy();
  await s3?.close();
  await new Promise<void>((r) => (pageServer ? pageServer.close(() => r()) : r()));
  await lock?.[Symbol.asyncDispose]();
});

const presign = (opts: { signingDate?: Date } = {}) => getSignedUrl(client, new GetObjectCommand({ Bucket: s3.bucket, Key: KEY }), { expiresIn: 600, ...opts });

/** fetch(url, {headers}) in the page on the other origin. */
function fetchInPage(url: string, headers: Record<string, string>): Promise<Seen> {
  return page.evaluate(
    async ([u, h]) => {
      try {
        // Not from chromium's HTTP cache: each case is about what the store answers now.
        const init = { headers: h, cache: 'no-store' };
        const res = await fetch(u, init);
        const headers: Record<string, string | null> = {};
        for (const k of ['content-range', 'content-length', 'etag', 'accept-ranges']) headers[k] = res.headers.get(k);
        return { status: res.status, headers, bytes: [...new Uint8Array(await res.arrayBuffer())].slice(0, 16) };
      } catch (err) {
        return { error: String(err) };
      }
    },
    [url, headers] as const,
  );
}

/** The log entries after `clearRequests()` once `count` of them are there (a response is logged when it closed). */
async function logged(count: number): Promise<S3Request[]> {
  let got: S3Request[] = [];
  await expect.poll(async () => (got = await s3.requests()).length).toBeGreaterThanOrEqual(count);
  return got;
}

describe('the S3 server: bucket CORS for the player, and the request log', () => {
  test('the rule is GET and HEAD, header Range, and exposes what a range reader reads', () => {
    expect(playbackCorsRule(['https://fleet.example.com'])).toEqual({
      AllowedOrigins: ['https://fleet.example.com'],
      AllowedMethods: ['GET', 'HEAD'],
      AllowedHeaders: ['Range'],
      ExposeHeaders: ['Content-Range', 'Content-Length', 'ETag', 'Accept-Ranges'],
      MaxAgeSeconds: 600,
    });
  });

  test('a cross-origin Range GET of a presigned URL: 206, its headers readable, logged without the query string', async () => {
    const url = await presign();
    await s3.clearRequests();
    const seen = await fetchInPage(url, { Range: 'bytes=10-19' });
    expect(seen).toEqual({
      status: 206,
      headers: { 'content-range': 'bytes 10-19/1000', 'content-length': '10', etag: expect.stringMatching(/^"[0-9a-f]{32}"$/) as string, 'accept-ranges': 'bytes' },
      bytes: [...BODY.subarray(10, 20)],
    });
    // `bytes=10-19` is a CORS-safelisted Range: chromium sends it without a preflight.
    const log = await logged(1);
    expect(log).toEqual([{ seq: expect.any(Number) as number, method: 'GET', path: `/${s3.bucket}/${KEY}`, range: 'bytes=10-19', origin, status: 206, bytes: 10, complete: true }]);
    const signature = new URL(url).searchParams.get('X-Amz-Signature')!;
    expect(signature).toMatch(/^[0-9a-f]{64}$/);
    expect(JSON.stringify(log)).not.toContain(signature);
  });

  test('a Range that needs a preflight (a suffix range is not safelisted): the OPTIONS passes, then the GET', async () => {
    const url = await presign();
    await s3.clearRequests();
    const seen = await fetchInPage(url, { Range: 'bytes=-10' });
    expect(seen).toMatchObject({ status: 206, headers: { 'content-range': expect.stringMatching(/^bytes \d+-\d+\/1000$/) as string, 'accept-ranges': 'bytes' } });
    const log = await logged(2);
    expect(log.map((r) => [r.method, r.status, r.origin])).toEqual([
      ['OPTIONS', 200, origin],
      ['GET', 206, origin],
    ]);
  });

  test('a request header the rule does not allow fails its preflight: the page gets a network error', async () => {
    const url = await presign();
    await s3.clearRequests();
    const seen = await fetchInPage(url, { Range: 'bytes=0-9', 'X-Not-Allowed': '1' });
    expect(seen).toEqual({ error: expect.stringContaining('Failed to fetch') as string });
    expect((await logged(1)).map((r) => [r.method, r.status])).toEqual([['OPTIONS', 403]]);
  });

  test("an expired link's 403 keeps its CORS headers: the page reads the status (the player renews the link)", async () => {
    const url = await presign({ signingDate: new Date(Date.now() - 3600_000) });
    const seen = await fetchInPage(url, { Range: 'bytes=0-9' });
    expect(seen).toMatchObject({ status: 403 });
  });

  test('without a CORS rule the same GET is a network error to the page; setting the rule again lets it through', async () => {
    const url = await presign();
    await s3.setCors(null);
    try {
      expect(await fetchInPage(url, { Range: 'bytes=0-9' })).toEqual({ error: expect.stringContaining('Failed to fetch') as string });
    } finally {
      await s3.setCors([origin]);
    }
    expect(await fetchInPage(url, { Range: 'bytes=0-9' })).toMatchObject({ status: 206 });
    // Another origin than the rule's is refused.
    await s3.setCors(['http://127.0.0.1:1']);
    try {
      expect(await fetchInPage(url, { Range: 'bytes=0-9' })).toEqual({ error: expect.stringContaining('Failed to fetch') as string });
    } finally {
      await s3.setCors([origin]);
    }
  });

  test('the log counts the body bytes sent, a HEAD as 0, and a body the client cancelled as incomplete', async () => {
    // Larger than what loopback socket buffers take in before the client stops reading.
    const big = Buffer.alloc(32 * 1024 * 1024, 3);
    await client.send(new PutObjectCommand({ Bucket: s3.bucket, Key: 'big.bin', Body: big }));
    const url = await getSignedUrl(client, new GetObjectCommand({ Bucket: s3.bucket, Key: 'big.bin' }), { expiresIn: 600 });
    const headUrl = await getSignedUrl(client, new HeadObjectCommand({ Bucket: s3.bucket, Key: 'big.bin' }), { expiresIn: 600 });
    await s3.clearRequests();
    const head = await fetch(headUrl, { method: 'HEAD' });
    expect(head.headers.get('content-length')).toBe(String(big.length));
    const res = await fetch(url);
    const reader = res.body!.getReader();
    await reader.read();
    await reader.cancel();
    const log = await logged(2);
    expect(log[0]).toMatchObject({ method: 'HEAD', status: 200, bytes: 0, complete: true });
    expect(log[1]).toMatchObject({ method: 'GET', status: 200, range: null, complete: false });
    expect(log[1]!.bytes).toBeLessThan(big.length);
  });
});
