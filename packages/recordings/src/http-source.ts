import type { ByteSource } from './byte-source.js';
import { RecordingError, messageOf } from './errors.js';

/**
 * A recording read straight from object storage by HTTP Range GETs (`fetch`, so the same in the
 * browser and in Node): the MCAP reader asks for small ranges (header, footer, summary, message
 * indexes) and whole chunks, so the file is read by its index without being downloaded.
 *
 * - Reads are rounded out to blocks (`blockSize`); the blocks of one read that are not cached are
 *   fetched together, with one `Range: bytes=a-b` GET per contiguous run of them.
 * - Blocks are kept in an LRU bounded by bytes (`cacheBytes`): a player seeking back and forth,
 *   and the reader's many small index reads, cost no second request. Reads of the same block at
 *   the same time share one request. A run larger than the whole cache is not cached at all
 *   (keeping it would only evict everything else).
 * - The link is a presigned URL, a bearer secret: no error message, stat or hook carries it,
 *   only its host. When it expires (403, or a 400 whose body says the request expired) `renew`
 *   gives a fresh one, once per request; concurrent requests share the renewal.
 * - 5xx answers, network errors, stalls (`idleTimeoutMs` without a byte) and bodies cut short
 *   are retried, `maxAttempts` tries in all, with a short backoff (`sleep` is injectable). 404,
 *   403 after renewal, a 200 (the storage ignored the Range: its body is cancelled, never read)
 *   and a size that is not the expected one are not retried.
 */

export interface HttpRangeRequestInfo {
  /** The first byte asked for, and how many. */
  offset: number;
  length: number;
  /** The answer's HTTP status; 0 when there was none (network error, CORS). */
  status: number;
}

export interface HttpRangeStats {
  /** HTTP requests sent (retries and renewals included). */
  requests: number;
  /** Body bytes received. */
  bytesFetched: number;
  /** Blocks served from the cache. */
  cacheHits: number;
  /** Bytes held by the cache now (at most `cacheBytes`). */
  cachedBytes: number;
}

export interface HttpRangeSourceOptions {
  /** The current read link (a presigned GET URL). */
  url: string;
  /** The object's size in bytes, as the manifest says; the storage's answers must agree. */
  size: number;
  /** A fresh link for the same object, called when the current one is refused as expired. */
  renew?: () => Promise<string>;
  /** Default: the global `fetch`. */
  fetch?: typeof fetch;
  /** Default 256 KiB. */
  blockSize?: number;
  /**
   * The LRU's bound. Default 16 MiB: what a player reads twice is near in time (a seek's frames,
   * readouts and plot window share the chunk at the playhead; playing, the plot window reads a
   * few seconds ahead of where the forward read gets later), about 9 s of a 1.75 MB/s recording.
   * More is fewer second fetches for more of a tab's memory.
   */
  cacheBytes?: number;
  /** Aborts every request (and later reads reject with the signal's reason). */
  signal?: AbortSignal;
  /** Tries per request for 5xx, network errors, stalls and short bodies (default 4, at most 10). */
  maxAttempts?: number;
  /** A request that receives nothing (no answer, no body bytes) for this long is a failed try. Default 30 s. */
  idleTimeoutMs?: number;
  /** The wait between tries (default: a timer; tests make it immediate). */
  sleep?: (ms: number, signal: AbortSignal) => Promise<void>;
  /** Called after each request with what it asked and the status it got (tests, benchmarks). */
  onRequest?: (info: HttpRangeRequestInfo) => void;
}

export interface HttpRangeSource extends ByteSource {
  readonly size: number;
  /** The link's host (what error messages name). */
  readonly host: string;
  readonly stats: Readonly<HttpRangeStats>;
  /** Aborts requests in flight and drops the cache; later reads reject. */
  close(): Promise<void>;
}

export const DEFAULT_BLOCK_SIZE = 256 * 1024;
export const DEFAULT_CACHE_BYTES = 16 * 1024 * 1024;
const DEFAULT_MAX_ATTEMPTS = 4;
const DEFAULT_IDLE_TIMEOUT_MS = 30_000;
/** Of a 400's body, what is read to see whether it says the request expired. */
const ERROR_BODY_BYTES = 4096;
/** How S3 (`Request has expired`), GCS (`ExpiredToken`) and others word an expired signature. */
const EXPIRED = /expired/i;

const defaultSleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason as Error);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal.reason as Error);
    };
    const t = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });

/** A failure worth another try (5xx, no answer, a body cut short): the error said if tries run out. */
class Transient extends Error {
  constructor(readonly error: RecordingError) {
    super(error.message);
  }
}

/** A refusal that a fresh link may cure (403, or a 400 saying the request expired). */
class Expired extends Error {
  constructor(readonly status: number) {
    super(`HTTP ${status}`);
  }
}

/** The host of a link, for messages: never its path or query (the signature). */
function hostOf(url: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new TypeError('httpRangeSource: url is not an absolute URL');
  }
  if (u.protocol !== 'https:' && u.protocol !== 'http:') throw new TypeError(`httpRangeSource: url must be http(s), not ${u.protocol}`);
  return u.host;
}

function positiveInt(name: string, v: number | undefined, dflt: number, max = Number.MAX_SAFE_INTEGER): number {
  if (v === undefined) return dflt;
  if (!Number.isSafeInteger(v) || v < 1 || v > max) throw new RangeError(`httpRangeSource: ${name} must be an integer in 1..${max}, got ${v}`);
  return v;
}

/** What a network error says without its message (which can hold the URL: undici's "Failed to parse URL from …"). */
function networkDetail(err: unknown): string {
  const cause = (err as { cause?: unknown }).cause;
  const code = typeof cause === 'object' && cause !== null ? (cause as { code?: unknown }).code : undefined;
  return typeof code === 'string' && /^[A-Z0-9_]{2,40}$/.test(code) ? code : 'network error';
}

/** A body reader's result (Node's types give its chunks as `any`; fetch's are bytes). */
type BodyRead = { done: true; value?: undefined } | { done: false; value: Uint8Array };

async function cancel(res: Response): Promise<void> {
  await res.body?.cancel().catch(() => undefined);
}

/** Up to `max` bytes of a body as text (the rest cancelled), '' when it cannot be read. */
async function bodyPrefix(res: Response, max: number): Promise<string> {
  if (res.body === null) return '';
  const reader = res.body.getReader();
  const parts: Uint8Array[] = [];
  let got = 0;
  try {
    while (got < max) {
      const r = (await reader.read()) as BodyRead;
      if (r.done) break;
      parts.push(r.value);
      got += r.value.byteLength;
    }
  } catch {
    // An error body that does not arrive whole says less, not nothing.
  } finally {
    await reader.cancel().catch(() => undefined);
  }
  const all = new Uint8Array(Math.min(got, max));
  let at = 0;
  for (const p of parts) {
    const take = Math.min(p.byteLength, all.byteLength - at);
    all.set(p.subarray(0, take), at);
    at += take;
  }
  return new TextDecoder().decode(all);
}

class RangeSource implements HttpRangeSource {
  readonly size: number;
  readonly stats: HttpRangeStats = { requests: 0, bytesFetched: 0, cacheHits: 0, cachedBytes: 0 };
  private url: string;
  private currentHost: string;
  /** Bumped at each renewal: a request refused with an older link retries with the new one. */
  private generation = 0;
  private renewing: Promise<void> | undefined;
  private readonly fetchImpl: typeof fetch;
  private readonly blockSize: number;
  private readonly cacheBytes: number;
  private readonly maxAttempts: number;
  private readonly idleTimeoutMs: number;
  private readonly sleep: (ms: number, signal: AbortSignal) => Promise<void>;
  /** Block index -> bytes, least recently used first (a Map keeps insertion order). */
  private readonly cache = new Map<number, Uint8Array>();
  private readonly inflight = new Map<number, Promise<Uint8Array>>();
  private readonly controller = new AbortController();
  private readonly unlink: () => void;
  private closed = false;

  constructor(private readonly opts: HttpRangeSourceOptions) {
    if (!Number.isSafeInteger(opts.size) || opts.size < 0) throw new RangeError(`httpRangeSource: size must be a non-negative integer, got ${opts.size}`);
    this.size = opts.size;
    this.url = opts.url;
    this.currentHost = hostOf(opts.url);
    this.fetchImpl = opts.fetch ?? ((input, init) => fetch(input, init));
    this.blockSize = positiveInt('blockSize', opts.blockSize, DEFAULT_BLOCK_SIZE, 64 * 1024 * 1024);
    const cacheBytes = opts.cacheBytes ?? DEFAULT_CACHE_BYTES;
    if (!Number.isSafeInteger(cacheBytes) || cacheBytes < 0) throw new RangeError(`httpRangeSource: cacheBytes must be a non-negative integer, got ${cacheBytes}`);
    this.cacheBytes = cacheBytes;
    this.maxAttempts = positiveInt('maxAttempts', opts.maxAttempts, DEFAULT_MAX_ATTEMPTS, 10);
    this.idleTimeoutMs = positiveInt('idleTimeoutMs', opts.idleTimeoutMs, DEFAULT_IDLE_TIMEOUT_MS, 600_000);
    this.sleep = opts.sleep ?? defaultSleep;
    const outer = opts.signal;
    const onAbort = () => this.controller.abort(outer?.reason);
    if (outer?.aborted === true) onAbort();
    else outer?.addEventListener('abort', onAbort, { once: true });
    this.unlink = () => outer?.removeEventListener('abort', onAbort);
  }

  get host(): string {
    return this.currentHost;
  }

  async read(offset: bigint, length: bigint): Promise<Uint8Array> {
    if (this.closed) throw new RecordingError('unreadable', `${this.host}: read after close`);
    this.throwIfAborted();
    const start = Number(offset);
    const n = Number(length);
    if (start < 0 || n < 0 || start + n > this.size) throw new RecordingError('unreadable', `${this.host}: read past the end (${start}+${n} > ${this.size})`);
    const out = new Uint8Array(n);
    if (n === 0) return out;
    const bs = this.blockSize;
    const first = Math.floor(start / bs);
    const last = Math.floor((start + n - 1) / bs);
    const parts: Promise<Uint8Array>[] = [];
    let runStart = -1;
    const flush = (end: number) => {
      if (runStart < 0) return;
      const run = this.fetchBlocks(runStart, end);
      for (const p of run) parts.push(p);
      runStart = -1;
    };
    for (let b = first; b <= last; b++) {
      const hit = this.cache.get(b);
      const shared = hit === undefined ? this.inflight.get(b) : undefined;
      if (hit === undefined && shared === undefined) {
        if (runStart < 0) runStart = b;
        continue;
      }
      flush(b - 1);
      if (hit !== undefined) {
        this.cache.delete(b);
        this.cache.set(b, hit);
        this.stats.cacheHits++;
        parts.push(Promise.resolve(hit));
      } else if (shared !== undefined) {
        parts.push(shared);
      }
    }
    flush(last);
    const blocks = await Promise.all(parts);
    blocks.forEach((block, i) => {
      const blockStart = (first + i) * bs;
      const from = Math.max(start, blockStart) - blockStart;
      const to = Math.min(start + n, blockStart + block.byteLength) - blockStart;
      out.set(block.subarray(from, to), blockStart + from - start);
    });
    return out;
  }

  /**
   * One GET for blocks `a..b`: a promise per block, shared with concurrent reads until it settles.
   * The body lands in one buffer per block (no run-sized buffer copied into blocks after), so a
   * block that stays in the cache keeps only itself alive.
   */
  private fetchBlocks(a: number, b: number): Promise<Uint8Array>[] {
    const bs = this.blockSize;
    const from = a * bs;
    const to = Math.min(this.size, (b + 1) * bs);
    const whole = this.fetchRange(from, to);
    const keep = to - from <= this.cacheBytes;
    const blocks: Promise<Uint8Array>[] = [];
    for (let i = a; i <= b; i++) {
      const p = whole.then((parts) => parts[i - a]!);
      this.inflight.set(i, p);
      blocks.push(p);
    }
    whole.then(
      (parts) => {
        for (let i = a; i <= b; i++) {
          this.inflight.delete(i);
          if (keep && !this.closed) this.remember(i, parts[i - a]!);
        }
      },
      () => {
        for (let i = a; i <= b; i++) this.inflight.delete(i);
      },
    );
    return blocks;
  }

  private remember(block: number, bytes: Uint8Array): void {
    const old = this.cache.get(block);
    if (old !== undefined) {
      this.cache.delete(block);
      this.stats.cachedBytes -= old.byteLength;
    }
    this.cache.set(block, bytes);
    this.stats.cachedBytes += bytes.byteLength;
    for (const [k, v] of this.cache) {
      if (this.stats.cachedBytes <= this.cacheBytes) break;
      this.cache.delete(k);
      this.stats.cachedBytes -= v.byteLength;
    }
  }

  /** Bytes `from..to` (exclusive, `from` on a block's start) with the retries and the renewal, one array per block. */
  private async fetchRange(from: number, to: number): Promise<Uint8Array[]> {
    let renewed = false;
    let last: RecordingError | undefined;
    for (let attempt = 1; attempt <= this.maxAttempts; attempt++) {
      if (attempt > 1) await this.sleep(Math.min(2000, 250 * 2 ** (attempt - 2)), this.controller.signal);
      const generation = this.generation;
      try {
        return await this.attempt(from, to);
      } catch (err) {
        if (err instanceof Transient) {
          last = err.error;
          continue;
        }
        if (err instanceof Expired) {
          if (renewed || this.opts.renew === undefined) throw this.forbidden(err.status, renewed);
          renewed = true;
          await this.renewFrom(generation);
          // A renewal is not a failed try.
          attempt--;
          continue;
        }
        throw err;
      }
    }
    throw last ?? new RecordingError('fetch_failed', `${this.host}: no attempt made`);
  }

  private forbidden(status: number, renewed: boolean): RecordingError {
    const why = renewed ? 'even with a renewed link' : this.opts.renew === undefined ? 'and no renewal was given' : '';
    return new RecordingError('forbidden', `${this.host}: refused the link (HTTP ${status})${why ? ` ${why}` : ''}`);
  }

  /** A fresh link unless another request already got one since `generation`; one renewal at a time. */
  private async renewFrom(generation: number): Promise<void> {
    if (this.generation !== generation) return;
    if (this.renewing === undefined) {
      const renew = this.opts.renew!;
      this.renewing = (async () => {
        let url: string;
        try {
          url = await renew();
        } catch (err) {
          this.throwIfAborted();
          throw new RecordingError('forbidden', `${this.host}: the link expired and renewing it failed: ${messageOf(err)}`, { cause: err });
        }
        let host: string;
        try {
          host = hostOf(url);
        } catch {
          throw new RecordingError('forbidden', `${this.host}: the link expired and its renewal is not an http(s) URL`);
        }
        this.currentHost = host;
        this.url = url;
        this.generation++;
      })().finally(() => {
        this.renewing = undefined;
      });
    }
    await this.renewing;
  }

  /**
   * One request. Its own signal follows the source's and also fires when nothing arrives for
   * `idleTimeoutMs` (no answer, or a body that stalls): a hung connection is a failed try, never
   * a player waiting forever.
   */
  private async attempt(from: number, to: number): Promise<Uint8Array[]> {
    this.throwIfAborted();
    const ac = new AbortController();
    const outer = this.controller.signal;
    const onAbort = () => ac.abort(outer.reason);
    outer.addEventListener('abort', onAbort, { once: true });
    let stalled = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const progress = () => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        stalled = true;
        ac.abort(new DOMException('stalled', 'TimeoutError'));
      }, this.idleTimeoutMs);
    };
    progress();
    try {
      return await this.exchange(from, to, ac.signal, progress);
    } catch (err) {
      if (stalled && !outer.aborted) throw new Transient(new RecordingError('fetch_failed', `${this.host}: nothing arrived for ${this.idleTimeoutMs} ms`));
      throw err;
    } finally {
      clearTimeout(timer);
      outer.removeEventListener('abort', onAbort);
    }
  }

  private async exchange(from: number, to: number, signal: AbortSignal, progress: () => void): Promise<Uint8Array[]> {
    const want = to - from;
    const host = this.host;
    let res: Response;
    this.stats.requests++;
    try {
      // Called unbound: a browser's fetch refuses any other `this` ("Illegal invocation").
      const f = this.fetchImpl;
      res = await f(this.url, { headers: { Range: `bytes=${from}-${to - 1}` }, signal });
    } catch (err) {
      this.throwIfAborted();
      this.opts.onRequest?.({ offset: from, length: want, status: 0 });
      if (signal.aborted) throw err;
      throw new Transient(
        new RecordingError(
          'fetch_failed',
          `${host}: the request got no answer (${networkDetail(err)}); in a browser this is most often a bucket without a CORS rule allowing this page's origin to GET with a Range header, else the network`,
        ),
      );
    }
    progress();
    this.opts.onRequest?.({ offset: from, length: want, status: res.status });
    const status = res.status;
    if (status === 206) return this.body(res, from, to, progress);
    if (status === 200) {
      await cancel(res);
      throw new RecordingError('range_unsupported', `${host}: answered the whole object (HTTP 200) to a Range request`);
    }
    if (status === 404) {
      await cancel(res);
      throw new RecordingError('not_found', `${host}: no object at the link (HTTP 404)`);
    }
    if (status === 403) {
      await cancel(res);
      throw new Expired(status);
    }
    if (status === 400) {
      if (EXPIRED.test(await bodyPrefix(res, ERROR_BODY_BYTES))) throw new Expired(status);
      throw new RecordingError('fetch_failed', `${host}: answered HTTP 400 to a Range GET`);
    }
    if (status === 416) {
      const total = /^bytes \*\/(\d+)$/.exec(res.headers.get('content-range')?.trim() ?? '');
      await cancel(res);
      if (total) throw this.sizeMismatch(Number(total[1]));
      throw new RecordingError('fetch_failed', `${host}: answered HTTP 416 (range not satisfiable) for bytes ${from}-${to - 1}`);
    }
    await cancel(res);
    const error = new RecordingError('fetch_failed', `${host}: answered HTTP ${status}`);
    if (status >= 500) throw new Transient(error);
    throw error;
  }

  private sizeMismatch(total: number): RecordingError {
    return new RecordingError('size_mismatch', `${this.host}: the object is ${total} bytes, expected ${this.size} (the manifest's size)`);
  }

  /** A 206's body: its Content-Range checked, then exactly the bytes asked for (no more is read), split by block. */
  private async body(res: Response, from: number, to: number, progress: () => void): Promise<Uint8Array[]> {
    const host = this.host;
    const header = res.headers.get('content-range');
    const m = /^bytes (\d+)-(\d+)\/(\d+|\*)$/.exec(header?.trim() ?? '');
    if (!m) {
      await cancel(res);
      throw new RecordingError(
        'range_unsupported',
        `${host}: answered 206 without a readable Content-Range (${header === null ? 'none' : 'malformed'}); a bucket's CORS rule must expose it (ExposeHeaders: Content-Range)`,
      );
    }
    if (m[3] !== '*' && Number(m[3]) !== this.size) {
      await cancel(res);
      throw this.sizeMismatch(Number(m[3]));
    }
    if (Number(m[1]) !== from || Number(m[2]) !== to - 1) {
      await cancel(res);
      throw new RecordingError('range_unsupported', `${host}: answered bytes ${m[1]}-${m[2]} to a request for ${from}-${to - 1}`);
    }
    const want = to - from;
    const bs = this.blockSize;
    const parts: Uint8Array[] = [];
    for (let at = 0; at < want; at += bs) parts.push(new Uint8Array(Math.min(bs, want - at)));
    let got = 0;
    if (res.body !== null) {
      const reader = res.body.getReader();
      try {
        for (;;) {
          const r = (await reader.read()) as BodyRead;
          if (r.done) break;
          if (got + r.value.byteLength > want) {
            await reader.cancel().catch(() => undefined);
            throw new RecordingError('fetch_failed', `${host}: answered more than the ${want} bytes asked for`);
          }
          for (let off = 0; off < r.value.byteLength; ) {
            const part = parts[Math.floor(got / bs)]!;
            const at = got % bs;
            const n = Math.min(r.value.byteLength - off, part.byteLength - at);
            part.set(r.value.subarray(off, off + n), at);
            off += n;
            got += n;
          }
          this.stats.bytesFetched += r.value.byteLength;
          progress();
        }
      } catch (err) {
        if (err instanceof RecordingError) throw err;
        this.throwIfAborted();
        if (err instanceof Error && (err.name === 'AbortError' || err.name === 'TimeoutError')) throw err;
        throw new Transient(new RecordingError('fetch_failed', `${host}: the answer broke off after ${got} of ${want} bytes (${networkDetail(err)})`));
      } finally {
        reader.releaseLock();
      }
    }
    if (got < want) throw new Transient(new RecordingError('fetch_failed', `${host}: answered ${got} of the ${want} bytes asked for`));
    return parts;
  }

  private throwIfAborted(): void {
    if (this.controller.signal.aborted) throw this.controller.signal.reason as Error;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.unlink();
    this.controller.abort(new DOMException('the source was closed', 'AbortError'));
    this.cache.clear();
    this.stats.cachedBytes = 0;
  }
}

/** A `ByteSource` over HTTP Range GETs of one object (see the top of this file). */
export function httpRangeSource(opts: HttpRangeSourceOptions): HttpRangeSource {
  return new RangeSource(opts);
}
