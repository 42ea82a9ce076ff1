import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { bytesSource, httpRangeSource, isRecordingError, openMcap, type HttpRangeSource, type HttpRangeSourceOptions, type McapRecording, type RecordingErrorCode } from './index.js';
import { summaryOf, writeMcap, type WrittenMcap } from './test-mcaps.js';

/**
 * httpRangeSource against a real HTTP server (node:http) that serves a real MCAP with Range
 * support, the way S3 does (206 with Content-Range, 403 AccessDenied "Request has expired" for an
 * expired presigned link), and that can be told to misbehave.
 */

type Mode =
  | 'ok'
  /** 200 with the whole object (a server that ignores Range), streamed as the client reads. */
  | 'whole'
  | 'missing'
  /** 403 (S3's expired link) unless the link's token is the current one; `renew` gives it. */
  | 'expiring'
  /** The same as a 400 whose body says the token expired (how some stores word it). */
  | 'expiring400'
  | 'forbidden'
  /** 500 for the first two requests, then ok. */
  | 'flaky'
  | 'down'
  | 'wrongTotal'
  /** A 206 whose body is shorter than the range (with a Content-Length that says so). */
  | 'short'
  /** No answer at all (the request is left open). */
  | 'hang'
  /** A 206 whose body stops halfway (the connection stays open). */
  | 'stall';

interface Served {
  range: string | undefined;
  status: number;
  token: string | null;
}

const SECRET = 'X-Amz-Signature=s3cr3t';
let server: Server;
let base: string;
let file: WrittenMcap;
let bytes: Uint8Array;
let mode: Mode = 'ok';
let validToken = 't1';
let log: Served[] = [];
/** For each 200 answer once its connection closed: whether its body was written to the end (false: the client let go). */
let wholeFinished: boolean[] = [];

function answer(req: IncomingMessage, res: ServerResponse): void {
  const url = new URL(req.url ?? '/', 'http://x');
  const token = url.searchParams.get('token');
  const range = req.headers.range;
  const done = (status: number) => log.push({ range, status, token });
  if (mode === 'missing') {
    done(404);
    res.writeHead(404, { 'content-type': 'application/xml' }).end('<Error><Code>NoSuchKey</Code></Error>');
    return;
  }
  if (mode === 'forbidden' || ((mode === 'expiring' || mode === 'expiring400') && token !== validToken)) {
    const status = mode === 'expiring400' ? 400 : 403;
    done(status);
    const code = mode === 'expiring400' ? 'ExpiredToken' : 'AccessDenied';
    res.writeHead(status, { 'content-type': 'application/xml' }).end(`<Error><Code>${code}</Code><Message>${mode === 'forbidden' ? 'Access Denied' : 'Request has expired'}</Message></Error>`);
    return;
  }
  if (mode === 'down' || (mode === 'flaky' && log.filter((l) => l.status === 500).length < 2)) {
    done(500);
    res.writeHead(500).end('<Error><Code>InternalError</Code></Error>');
    return;
  }
  if (mode === 'whole') {
    done(200);
    // 64 MiB, written only as fast as the client takes it: a client that reads it shows as finished.
    const total = 64 * 1024 * 1024;
    const piece = Buffer.alloc(64 * 1024, 7);
    let sent = 0;
    res.on('close', () => wholeFinished.push(res.writableFinished));
    res.writeHead(200, { 'content-length': String(total) });
    const pump = () => {
      while (sent < total) {
        sent += piece.byteLength;
        if (!res.write(piece)) return void res.once('drain', pump);
      }
      res.end();
    };
    pump();
    return;
  }
  if (mode === 'hang') {
    done(0);
    return;
  }
  const m = /^bytes=(\d+)-(\d+)$/.exec(range ?? '');
  if (!m) {
    done(400);
    res.writeHead(400).end('a Range header, please');
    return;
  }
  const from = Number(m[1]);
  const to = Math.min(Number(m[2]), bytes.byteLength - 1);
  let body = Buffer.from(bytes.buffer, bytes.byteOffset + from, to - from + 1);
  const total = mode === 'wrongTotal' ? bytes.byteLength + 1 : bytes.byteLength;
  if (mode === 'short') body = body.subarray(0, Math.floor(body.byteLength / 2));
  done(206);
  res.writeHead(206, { 'content-range': `bytes ${from}-${to}/${total}`, 'content-length': String(body.byteLength), 'accept-ranges': 'bytes' });
  if (mode === 'stall') res.write(body.subarray(0, Math.floor(body.byteLength / 2)));
  else res.end(body);
}

beforeAll(async () => {
  // About 3 MB in ~45 zstd chunks of 64 KiB (before compression).
  file = await writeMcap({ count: 9000, compression: 'zstd', padBytes: 300 });
  bytes = file.bytes;
  server = createServer(answer);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise<void>((r) => server.close(() => r()));
});

afterEach(() => {
  mode = 'ok';
  validToken = 't1';
  log = [];
  wholeFinished = [];
});

const linkFor = (token: string) => `${base}/bucket/org/ep_1/bag_0.mcap?token=${token}&${SECRET}`;
const noSleep = async () => undefined;
const BLOCK = 64 * 1024;

function source(opts: Partial<HttpRangeSourceOptions> = {}): HttpRangeSource {
  return httpRangeSource({ url: linkFor('t1'), size: bytes.byteLength, blockSize: BLOCK, sleep: noSleep, ...opts });
}

/** The error a promise rejects with, checked to be a RecordingError of `code` that does not carry the link. */
async function failure(p: Promise<unknown>, code: RecordingErrorCode): Promise<Error> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(isRecordingError(err, code), `${String(err)} is ${code}`).toBe(true);
  const message = (err as Error).message;
  expect(message).not.toContain('s3cr3t');
  expect(message).not.toContain('/bucket/');
  expect(message).toContain('127.0.0.1');
  return err as Error;
}

async function all(r: McapRecording, opts: { startNs?: bigint } = {}): Promise<string[]> {
  const out: string[] = [];
  for await (const m of r.messages(['/a', '/b', '/c'], opts)) out.push(`${m.topic} ${m.logTimeNs} ${JSON.stringify(m.data)}`);
  return out;
}

describe('httpRangeSource over a real HTTP server', () => {
  it('reads a recording as from memory, by block-aligned Range GETs', async () => {
    const http = source();
    await using r = await openMcap(http, { name: 'bag_0.mcap' });
    await using mem = await openMcap(bytesSource(bytes));
    expect(await all(r)).toEqual(await all(mem));
    expect((await all(r)).length).toBe(file.messages.length);
    expect(log.length).toBeGreaterThan(0);
    for (const l of log) {
      const [a, b] = /^bytes=(\d+)-(\d+)$/.exec(l.range!)!.slice(1).map(Number) as [number, number];
      expect(a % BLOCK).toBe(0);
      expect((b + 1) % BLOCK === 0 || b === bytes.byteLength - 1).toBe(true);
    }
    expect(http.stats.requests).toBe(log.length);
    expect(http.stats.cacheHits).toBeGreaterThan(0);
  });

  it('a seek to the middle fetches the summary and the chunk it lands in, not the file', async () => {
    const summary = await summaryOf(bytes);
    const chunks = summary.chunkIndexes;
    const http = source();
    await using r = await openMcap(http);
    const target = chunks[Math.floor(chunks.length / 2)]!;
    const at = file.messages.find((m) => m.topic === '/a' && m.logTime >= target.messageStartTime)!;
    const first = await r.messages(['/a'], { startNs: at.logTime }).next();
    expect((first.value as { logTimeNs: bigint }).logTimeNs).toBe(at.logTime);
    // Opening reads the header's block and everything from the data section's end on (summary,
    // footer); the seek reads that chunk and its message indexes. Each span rounds out to blocks,
    // at most one more block at each end.
    const roundedSpan = (bytes: number) => Math.ceil(bytes / BLOCK) * BLOCK + BLOCK;
    const bound = BLOCK + roundedSpan(bytes.byteLength - Number(summary.dataEndOffset)) + roundedSpan(Number(target.chunkLength + target.messageIndexLength));
    expect(http.stats.bytesFetched).toBeLessThanOrEqual(bound);
    expect(bound).toBeLessThan(bytes.byteLength / 4);
  });

  it('concurrent reads of one block share a request; repeats come from the cache', async () => {
    const http = source();
    const [a, b] = await Promise.all([http.read(100n, 10n), http.read(200n, 50n)]);
    expect([...a]).toEqual([...bytes.subarray(100, 110)]);
    expect([...b]).toEqual([...bytes.subarray(200, 250)]);
    expect(http.stats.requests).toBe(1);
    await http.read(300n, 10n);
    expect([http.stats.requests, http.stats.cacheHits]).toEqual([1, 1]);
    // Blocks 0 (cached) and 1, 2 (missing): one GET for the run 1..2.
    expect([...(await http.read(BigInt(BLOCK - 5), BigInt(2 * BLOCK)))]).toEqual([...bytes.subarray(BLOCK - 5, 3 * BLOCK - 5)]);
    expect(log.map((l) => l.range)).toEqual([`bytes=0-${BLOCK - 1}`, `bytes=${BLOCK}-${3 * BLOCK - 1}`]);
  });

  it('a run of blocks is cached block by block: each serves later reads alone, byte-exact, with no request', async () => {
    const http = source();
    // Blocks 1..4 in one GET (a read from inside block 1 to inside block 4).
    const from = BLOCK + 123;
    const got = await http.read(BigInt(from), BigInt(3 * BLOCK));
    expect(Buffer.compare(Buffer.from(got), Buffer.from(bytes.subarray(from, from + 3 * BLOCK)))).toBe(0);
    expect(log.map((l) => l.range)).toEqual([`bytes=${BLOCK}-${5 * BLOCK - 1}`]);
    expect(http.stats.cachedBytes).toBe(4 * BLOCK);
    for (let i = 1; i <= 4; i++) {
      // Across each block's start (the read stays in block i-1..i), then one whole block.
      const whole = await http.read(BigInt(i * BLOCK), BigInt(BLOCK));
      expect(Buffer.compare(Buffer.from(whole), Buffer.from(bytes.subarray(i * BLOCK, (i + 1) * BLOCK)))).toBe(0);
    }
    const across = await http.read(BigInt(2 * BLOCK - 7), 14n);
    expect([...across]).toEqual([...bytes.subarray(2 * BLOCK - 7, 2 * BLOCK + 7)]);
    expect(http.stats.requests).toBe(1);
  });

  it('the LRU holds at most cacheBytes, evicting the least recently used block', async () => {
    const http = source({ cacheBytes: 4 * BLOCK });
    const blockAt = (i: number) => http.read(BigInt(i * BLOCK), 16n);
    for (let i = 0; i < 10; i++) {
      await blockAt(i);
      expect(http.stats.cachedBytes).toBeLessThanOrEqual(4 * BLOCK);
    }
    expect(http.stats.cachedBytes).toBe(4 * BLOCK);
    const before = http.stats.requests;
    await blockAt(9);
    await blockAt(6);
    expect(http.stats.requests).toBe(before);
    await blockAt(5);
    expect(http.stats.requests).toBe(before + 1);
    // Block 6 was used after 7, so 7 went when 5 came in.
    await blockAt(6);
    expect(http.stats.requests).toBe(before + 1);
    await blockAt(7);
    expect(http.stats.requests).toBe(before + 2);
  });

  it('a read larger than the cache is served whole, in one GET, and not cached', async () => {
    const http = source({ cacheBytes: 2 * BLOCK });
    const got = await http.read(10n, BigInt(8 * BLOCK));
    expect(Buffer.compare(Buffer.from(got), Buffer.from(bytes.subarray(10, 10 + 8 * BLOCK)))).toBe(0);
    expect([http.stats.requests, http.stats.bytesFetched, http.stats.cachedBytes]).toEqual([1, 9 * BLOCK, 0]);
  });

  it('a truncated recording opens through it with recover, as from memory', async () => {
    const cut = Number((await summaryOf(bytes)).chunkIndexes[20]!.chunkStartOffset) + 1000;
    const cutBytes = bytes.subarray(0, cut);
    const saved = bytes;
    bytes = cutBytes;
    try {
      await using r = await openMcap(source({ size: cut }), { recover: true });
      await using mem = await openMcap(bytesSource(cutBytes), { recover: true });
      expect(r.truncated).toBe(true);
      expect(await all(r)).toEqual(await all(mem));
      expect((await all(r)).length).toBeGreaterThan(1000);
    } finally {
      bytes = saved;
    }
  });
});

describe('httpRangeSource: what the storage answers', () => {
  it('200 (Range ignored): range_unsupported, and the body is cancelled unread', async () => {
    mode = 'whole';
    const http = source();
    await failure(http.read(0n, 100n), 'range_unsupported');
    expect(http.stats.bytesFetched).toBe(0);
    // The server could not write its 64 MiB: the client let go of the connection.
    await expect.poll(() => wholeFinished.length).toBe(1);
    expect(wholeFinished).toEqual([false]);
    // And openMcap keeps the code (the console says which problem it is).
    const err = await failure(openMcap(source(), { name: 'bag_0.mcap' }), 'range_unsupported');
    expect(err.message).toMatch(/^range_unsupported: bag_0\.mcap: 127\.0\.0\.1:\d+: answered the whole object/);
  });

  it('404: not_found, not retried', async () => {
    mode = 'missing';
    const http = source();
    await failure(http.read(0n, 100n), 'not_found');
    expect(http.stats.requests).toBe(1);
    await failure(openMcap(source(), { recover: true }), 'not_found');
  });

  it('403 for an expired link: renewed once, the read retried with the new link; concurrent reads share the renewal', async () => {
    mode = 'expiring';
    validToken = 't2';
    let renewals = 0;
    const http = source({
      renew: async () => {
        renewals++;
        return linkFor(`t${renewals + 1}`);
      },
    });
    const [a, b] = await Promise.all([http.read(0n, 10n), http.read(BigInt(5 * BLOCK), 10n)]);
    expect([...a, ...b]).toEqual([...bytes.subarray(0, 10), ...bytes.subarray(5 * BLOCK, 5 * BLOCK + 10)]);
    expect(renewals).toBe(1);
    // (The second 403 may come before or after the first retry: either way one renewal.)
    expect(log.map((l) => `${l.status} ${l.token}`).sort()).toEqual(['206 t2', '206 t2', '403 t1', '403 t1']);
    // A link that expires again later is renewed again.
    validToken = 't3';
    await http.read(BigInt(9 * BLOCK), 10n);
    expect(renewals).toBe(2);
  });

  it('a 400 that says the token expired is renewed too', async () => {
    mode = 'expiring400';
    validToken = 't2';
    const http = source({ renew: async () => linkFor('t2') });
    expect([...(await http.read(0n, 10n))]).toEqual([...bytes.subarray(0, 10)]);
  });

  it('403 even with a renewed link: forbidden, after one renewal; without renew, at once', async () => {
    mode = 'forbidden';
    let renewals = 0;
    const err = await failure(
      source({
        renew: async () => {
          renewals++;
          return linkFor('again');
        },
      }).read(0n, 10n),
      'forbidden',
    );
    expect(err.message).toMatch(/HTTP 403\) even with a renewed link/);
    expect([renewals, log.length]).toEqual([1, 2]);
    await failure(source().read(0n, 10n), 'forbidden');
    expect(log.length).toBe(3);
  });

  it('a renewal that fails: forbidden naming why', async () => {
    mode = 'expiring';
    validToken = 't2';
    const err = await failure(
      source({
        renew: async () => {
          throw new Error('read links: replica_not_verified');
        },
      }).read(0n, 10n),
      'forbidden',
    );
    expect(err.message).toMatch(/renewing it failed: read links: replica_not_verified/);
  });

  it('500 twice then 206: retried with a backoff, and read', async () => {
    mode = 'flaky';
    const waits: number[] = [];
    const http = source({
      sleep: async (ms) => {
        waits.push(ms);
      },
    });
    expect([...(await http.read(0n, 10n))]).toEqual([...bytes.subarray(0, 10)]);
    expect(log.map((l) => l.status)).toEqual([500, 500, 206]);
    expect(waits).toEqual([250, 500]);
  });

  it('5xx that lasts: fetch_failed naming the status after maxAttempts', async () => {
    mode = 'down';
    const err = await failure(source({ maxAttempts: 3 }).read(0n, 10n), 'fetch_failed');
    expect(err.message).toMatch(/HTTP 500/);
    expect(log.length).toBe(3);
  });

  it('a Content-Range total that is not the expected size: size_mismatch naming both', async () => {
    mode = 'wrongTotal';
    const err = await failure(source().read(0n, 10n), 'size_mismatch');
    expect(err.message).toContain(`the object is ${bytes.byteLength + 1} bytes, expected ${bytes.byteLength}`);
    expect(log.length).toBe(1);
  });

  it('a body shorter than the range: an error (retried), never a short read', async () => {
    mode = 'short';
    const http = source({ maxAttempts: 2 });
    const err = await failure(http.read(0n, 10n), 'fetch_failed');
    expect(err.message).toContain(`answered ${BLOCK / 2} of the ${BLOCK} bytes asked for`);
    expect(log.length).toBe(2);
  });

  it('an answer that never comes, or a body that stops: fetch_failed after idleTimeoutMs per try, not a hang', async () => {
    for (const m of ['hang', 'stall'] as const) {
      mode = m;
      log = [];
      const err = await failure(source({ idleTimeoutMs: 300, maxAttempts: 2 }).read(0n, 10n), 'fetch_failed');
      expect(err.message).toContain('nothing arrived for 300 ms');
      expect(log.length).toBe(2);
    }
  });

  it('no answer at all (nothing listening; in a browser, CORS): fetch_failed naming CORS as the likely cause', async () => {
    const closed = createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((r) => closed.close(() => r()));
    const seen: number[] = [];
    const http = httpRangeSource({ url: `http://127.0.0.1:${port}/bucket/k?${SECRET}`, size: 100, sleep: noSleep, onRequest: (i) => seen.push(i.status) });
    const err = await failure(http.read(0n, 10n), 'fetch_failed');
    expect(err.message).toMatch(/CORS/);
    expect(err.message).toMatch(/ECONNREFUSED/);
    expect(seen).toEqual([0, 0, 0, 0]);
  });

  it('an aborted signal rejects reads with its reason; close() ends the source', async () => {
    const ac = new AbortController();
    const http = source({ signal: ac.signal });
    await http.read(0n, 10n);
    ac.abort(new DOMException('left the page', 'AbortError'));
    await expect(http.read(BigInt(3 * BLOCK), 10n)).rejects.toMatchObject({ name: 'AbortError', message: 'left the page' });
    const other = source();
    await other.close();
    await expect(other.read(0n, 10n)).rejects.toSatisfy((e) => isRecordingError(e, 'unreadable'));
  });

  it('reports each request to onRequest with its range and status', async () => {
    const seen: { offset: number; length: number; status: number }[] = [];
    const http = source({ onRequest: (i) => seen.push(i) });
    await http.read(BigInt(BLOCK + 1), 10n);
    expect(seen).toEqual([{ offset: BLOCK, length: BLOCK, status: 206 }]);
  });
});
