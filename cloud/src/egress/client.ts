/**
 * The one way the cloud makes outbound HTTP requests (webhooks, grant providers, destination
 * checks). Each request:
 *   - accepts only `https:` URLs without userinfo;
 *   - resolves the host itself and refuses it if ANY resolved address is not public
 *     (see `classifyAddress`), before any connection is attempted;
 *   - connects only to the addresses it checked (no second DNS lookup, so no DNS rebinding),
 *     while TLS still verifies the certificate against the host NAME (SNI and identity check);
 *   - never follows redirects (a 3xx is returned as a response);
 *   - reads at most `maxResponseBytes` of the response body and aborts past it;
 *   - gives up after `timeoutMs` overall (resolution, connection, headers and body).
 * Failures are thrown as `EgressError` with a `failure` code.
 */
import { lookup as dnsLookup } from 'node:dns/promises';
import { EventEmitter } from 'node:events';
import type { LookupAddress } from 'node:dns';
import { BlockList, isIP } from 'node:net';
import { createSecureContext, rootCertificates, type SecureContext } from 'node:tls';
import { performance } from 'node:perf_hooks';
import { Pool } from 'undici';
import { parseBoundedJson, type BoundedJsonResult, type Scheduler } from '@fleet/protocol';
import { classifyAddress, parseHostLiteral, rememberedByText, type AddressRefusal, type HostLiteral } from './addresses.js';

export type EgressFailure =
  | 'invalid_url'
  | 'forbidden_address'
  | 'unresolvable'
  | 'unreachable'
  | 'timeout'
  | 'too_large'
  | 'tls';

export class EgressError extends Error {
  override readonly name = 'EgressError';
  /**
   * What a tenant may read (a webhook's disable reason or delivery error, a destination check, a
   * grant deferral): the class of failure in words, never a resolved address nor the resolver's
   * or socket's own text. `message` keeps that detail for the operator's log.
   */
  readonly publicMessage: string;
  constructor(
    readonly failure: EgressFailure,
    message: string,
    readonly details: {
      /** forbidden_address: the refused address and why. */
      address?: string;
      reason?: AddressRefusal;
      /**
       * unresolvable: true unless the resolver said the name does not exist (a DNS timeout or
       * server failure may pass; a caller can choose not to disable a subscription for it).
       */
      transient?: boolean;
      /** too_large: the response status, which was received before the body was cut off. */
      status?: number;
      cause?: unknown;
    } = {},
    publicMessage: string = message,
  ) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    this.publicMessage = publicMessage;
  }
}

export interface ResolvedAddress {
  address: string;
  /** 4 or 6. */
  family: number;
}

/** Resolves a host name to all its addresses (like `dns.lookup(host, { all: true })`). */
export type Resolver = (hostname: string) => Promise<readonly ResolvedAddress[]>;

export const DEFAULT_TIMEOUT_MS = 10_000;
/** The spec caps a grant provider's answer at 1 MiB; webhooks read even less in practice. */
export const DEFAULT_MAX_RESPONSE_BYTES = 1024 * 1024;

export interface EgressClientOptions {
  /**
   * Tests and local development only: also allow 127.0.0.0/8 and ::1 (nothing else that is
   * not public). Off by default.
   */
  allowLoopback?: boolean;
  /**
   * Extra trusted CA certificate(s), PEM (tests). Added to Node's bundled roots. Without it,
   * the default trust store applies, including NODE_EXTRA_CA_CERTS.
   */
  ca?: string | readonly string[];
  /** Host resolution; `dns.lookup(all)` by default. Injected by tests. */
  resolve?: Resolver;
  /** Pinned connection pools kept for keep-alive reuse (per origin and address set). */
  maxPools?: number;
  /** The request deadline's timer. */
  scheduler: Scheduler;
}

export interface EgressPostOptions {
  headers?: Record<string, string>;
  body?: string | Uint8Array;
  /** Overall deadline: resolution, connection, response headers and body. */
  timeoutMs?: number;
  maxResponseBytes?: number;
  /**
   * The caller reads only the status (a webhook delivery): the body is read past and dropped,
   * at most `maxResponseBytes` of it (more, and the connection is closed instead of kept), and
   * `body` is empty. Never `too_large` for a body without a declared length.
   */
  discardBody?: boolean;
}

export interface EgressResponse {
  status: number;
  headers: Record<string, string | string[]>;
  /** The response body, never more than `maxResponseBytes`. */
  body: Buffer;
  durationMs: number;
  /** The address the request was sent to (one that passed the check). */
  address: string;
}

/**
 * An answer's body as JSON, within the bounds every inbound JSON keeps (nesting depth, keys,
 * array length): what the grant relay reads from a provider. Anything else is a typed refusal,
 * never an exception and never a value that could break a later read.
 */
export function readJsonAnswer(res: Pick<EgressResponse, 'body'>): BoundedJsonResult {
  return parseBoundedJson(res.body.toString('utf8'));
}

const EMPTY_BODY = Buffer.alloc(0);

const defaultResolver: Resolver = (hostname) => dnsLookup(hostname, { all: true, verbatim: true });

const LOOPBACK_V4 = new BlockList();
LOOPBACK_V4.addSubnet('127.0.0.0', 8, 'ipv4');

/** Only 127.0.0.0/8 and ::1 itself, not ::ffff:127.0.0.1 and the like (remembered: BlockList.check builds a SocketAddress per call). */
const isPlainLoopback = rememberedByText((address) => {
  const family = isIP(address);
  return family === 4 ? LOOPBACK_V4.check(address, 'ipv4') : family === 6 && parseHostLiteral(address)?.address === '::1';
}, 1024);

/** A request's URL, checked and parsed once per text (every webhook attempt posts to the same few). */
interface Target {
  url: URL;
  /** The URL's origin and its path with the query (URL getters build a string per call). */
  origin: string;
  path: string;
  /** The host as an IP address, when it is one: no resolution, and its check can be remembered. */
  literal: HostLiteral | null;
}

/** Resolver answers that mean the name does not exist (anything else may be transient). */
const DNS_NOT_FOUND = new Set(['ENOTFOUND', 'ENODATA', 'EAI_NONAME', 'EAI_NODATA']);

const TLS_CODES = new Set([
  'EPROTO',
  'HOSTNAME_MISMATCH',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_DECRYPT_CERT_SIGNATURE',
  'UNABLE_TO_DECODE_ISSUER_PUBLIC_KEY',
  'CERT_SIGNATURE_FAILURE',
  'CERT_NOT_YET_VALID',
  'CERT_HAS_EXPIRED',
  'ERROR_IN_CERT_NOT_BEFORE_FIELD',
  'ERROR_IN_CERT_NOT_AFTER_FIELD',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'CERT_CHAIN_TOO_LONG',
  'CERT_REVOKED',
  'INVALID_CA',
  'PATH_LENGTH_EXCEEDED',
  'INVALID_PURPOSE',
  'CERT_UNTRUSTED',
  'CERT_REJECTED',
]);

const TIMEOUT_CODES = new Set(['UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT', 'ETIMEDOUT']);

function errorCodes(err: unknown): string[] {
  const codes: string[] = [];
  let current: unknown = err;
  for (let depth = 0; depth < 5 && typeof current === 'object' && current !== null; depth++) {
    const { code, errors } = current as { code?: unknown; errors?: unknown };
    if (typeof code === 'string') codes.push(code);
    // AggregateError from happy-eyeballs connection attempts.
    if (Array.isArray(errors)) codes.push(...errors.flatMap((e) => errorCodes(e)));
    current = (current as { cause?: unknown }).cause;
  }
  return codes;
}

function networkFailure(err: unknown): EgressFailure {
  const codes = errorCodes(err);
  if (codes.some((c) => TLS_CODES.has(c) || /^ERR_(TLS|SSL|OSSL)_/.test(c))) return 'tls';
  if (codes.some((c) => TIMEOUT_CODES.has(c))) return 'timeout';
  return 'unreachable';
}

function describe(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** A network failure in words for a tenant: no addresses (socket messages carry them), only the kind. */
function describePublicly(failure: EgressFailure, err: unknown): string {
  const codes = errorCodes(err);
  if (failure === 'tls') {
    // Certificate verification codes are fixed names (CERT_HAS_EXPIRED), safe to show.
    const code = codes.find((c) => TLS_CODES.has(c));
    return `the TLS handshake failed${code ? ` (${code})` : ''}`;
  }
  if (failure === 'timeout') return 'the connection timed out';
  if (codes.includes('ECONNREFUSED')) return 'the connection was refused';
  if (codes.includes('ECONNRESET') || codes.includes('UND_ERR_SOCKET')) return 'the connection was closed';
  if (codes.some((c) => c === 'EHOSTUNREACH' || c === 'ENETUNREACH')) return 'no route to the host';
  return 'the connection failed';
}

type LookupCallback = (err: Error | null, address: string | LookupAddress[], family?: number) => void;

export class EgressClient implements AsyncDisposable {
  private readonly allowLoopback: boolean;
  /**
   * Built once: with extra CAs, a context per connection would parse every bundled root again
   * (milliseconds of CPU for each new connection).
   */
  private readonly secureContext: SecureContext | undefined;
  private readonly resolve: Resolver;
  private readonly maxPools: number;
  private readonly scheduler: Scheduler;
  /** Pools keyed by origin and the checked addresses they are pinned to (insertion = age). */
  private readonly pools = new Map<string, Pool>();

  constructor(opts: EgressClientOptions) {
    this.allowLoopback = opts.allowLoopback ?? false;
    const extra = opts.ca === undefined ? [] : typeof opts.ca === 'string' ? [opts.ca] : [...opts.ca];
    this.secureContext = extra.length > 0 ? createSecureContext({ ca: [...rootCertificates, ...extra] }) : undefined;
    this.resolve = opts.resolve ?? defaultResolver;
    this.maxPools = opts.maxPools ?? 64;
    this.scheduler = opts.scheduler;
  }

  /** POSTs `body` to `url`; see the module comment for the rules. */
  async post(url: string | URL, opts: EgressPostOptions = {}): Promise<EgressResponse> {
    const started = performance.now();
    const timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const maxResponseBytes = opts.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES;
    const target = typeof url === 'string' ? this.targetOf(url) : this.parseTarget(url);

    const deadline = new Deadline();
    const timer = this.scheduler.setTimeout(() => deadline.abort(), timeoutMs);
    const timedOut = () => new EgressError('timeout', `no complete answer from ${target.url.host} within ${timeoutMs} ms`);
    try {
      const addresses = this.checked(target, target.literal !== null ? [target.literal] : await this.resolved(target.url, deadline));
      if (deadline.aborted) throw timedOut();
      const pool = this.poolFor(target.origin, addresses);
      let tooLarge = false;
      try {
        const res = await pool.request({
          method: 'POST',
          path: target.path,
          headers: opts.headers ?? {},
          body: opts.body ?? '',
          // Aborting destroys the response body too, until it closes (undici keeps the listener).
          signal: deadline,
        });
        const headers: Record<string, string | string[]> = {};
        for (const [name, value] of Object.entries(res.headers)) if (value !== undefined) headers[name] = value;

        const declared = Number(headers['content-length']);
        if (Number.isFinite(declared) && declared > maxResponseBytes) {
          tooLarge = true;
          res.body.destroy();
          throw new EgressError('too_large', `response body of ${declared} bytes exceeds ${maxResponseBytes}`, { status: res.statusCode });
        }
        if (opts.discardBody === true) {
          // One 'data' listener instead of an async iterator and its promise per chunk. It settles
          // when the body closes, also when the deadline destroyed it.
          await res.body.dump({ limit: maxResponseBytes });
          if (deadline.aborted) throw timedOut();
          return { status: res.statusCode, headers, body: EMPTY_BODY, durationMs: performance.now() - started, address: addresses[0]!.address };
        }
        const chunks: Buffer[] = [];
        let size = 0;
        for await (const chunk of res.body) {
          const buf = chunk as Buffer;
          size += buf.length;
          if (size > maxResponseBytes) {
            tooLarge = true;
            deadline.abort();
            res.body.destroy();
            throw new EgressError('too_large', `response body exceeds ${maxResponseBytes} bytes`, { status: res.statusCode });
          }
          chunks.push(buf);
        }
        return {
          status: res.statusCode,
          headers,
          body: Buffer.concat(chunks, size),
          durationMs: performance.now() - started,
          address: addresses[0]!.address,
        };
      } catch (err) {
        if (err instanceof EgressError) throw err;
        if (tooLarge) throw new EgressError('too_large', `response body exceeds ${maxResponseBytes} bytes`);
        if (deadline.aborted) throw timedOut();
        const failure = networkFailure(err);
        throw new EgressError(failure, `${failure} POST ${target.origin}: ${describe(err)}`, { cause: err }, `${failure} POST ${target.origin}: ${describePublicly(failure, err)}`);
      }
    } finally {
      this.scheduler.clearTimeout(timer);
    }
  }

  /** Closes every pooled connection. */
  async close(): Promise<void> {
    const pools = [...this.pools.values()];
    this.pools.clear();
    await Promise.all(pools.map((p) => p.destroy()));
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  /** `parseTarget` of a URL's text, remembered (invalid ones are refused again each time). */
  private readonly targetOf = rememberedByText((url) => this.parseTarget(url), 1024);

  private parseTarget(url: string | URL): Target {
    let parsed: URL;
    try {
      parsed = new URL(url);
    } catch (err) {
      throw new EgressError('invalid_url', 'not a valid URL', { cause: err });
    }
    if (parsed.protocol !== 'https:') throw new EgressError('invalid_url', `only https URLs are allowed, not ${parsed.protocol}`);
    if (parsed.username !== '' || parsed.password !== '') {
      throw new EgressError('invalid_url', 'URLs with credentials (userinfo) are not allowed');
    }
    return { url: parsed, origin: parsed.origin, path: `${parsed.pathname}${parsed.search}`, literal: parseHostLiteral(parsed.hostname) };
  }

  /** All addresses of `target`'s host name (not a literal). */
  private async resolved(target: URL, signal: Deadline): Promise<ResolvedAddress[]> {
    let addresses: ResolvedAddress[];
    try {
      addresses = [...(await abortable(this.resolve(target.hostname), signal))];
    } catch (err) {
      if (signal.aborted) throw new EgressError('timeout', `resolving ${target.hostname} took too long`);
      const transient = !errorCodes(err).some((c) => DNS_NOT_FOUND.has(c));
      throw new EgressError(
        'unresolvable',
        `cannot resolve ${target.hostname}: ${describe(err)}`,
        { cause: err, transient },
        transient ? `cannot resolve ${target.hostname}: the DNS lookup failed (it may work later)` : `${target.hostname} does not exist: no such host name`,
      );
    }
    if (addresses.length === 0) {
      throw new EgressError('unresolvable', `${target.hostname} has no addresses`, { transient: false });
    }
    return addresses;
  }

  /** Returns `addresses` (the host's, resolved or literal) if every one may be connected to. */
  private checked(target: Target, addresses: ResolvedAddress[]): ResolvedAddress[] {
    for (const { address } of addresses) {
      const verdict = classifyAddress(address);
      if (verdict === 'public') continue;
      if (this.allowLoopback && isPlainLoopback(address)) continue;
      const host = target.url.hostname;
      throw new EgressError(
        'forbidden_address',
        `${host} resolves to ${address} (${verdict})`,
        { address, reason: verdict },
        target.literal !== null ? `${host} is not a public address` : `${host} resolves to an address that is not public`,
      );
    }
    return addresses;
  }

  /** A pool for `origin` whose connections can only go to `addresses`. */
  private poolFor(origin: string, addresses: readonly ResolvedAddress[]): Pool {
    const key = `${origin}|${addresses.map((a) => a.address).join(',')}`;
    const existing = this.pools.get(key);
    if (existing !== undefined) {
      // Refresh its age.
      this.pools.delete(key);
      this.pools.set(key, existing);
      return existing;
    }
    const pinned = addresses.map((a) => ({ address: a.address, family: isIP(a.address) === 6 ? 6 : 4 }));
    // Called by net.connect instead of DNS: it can only ever answer the checked addresses.
    const lookup = (_hostname: string, options: { all?: boolean }, callback: LookupCallback) => {
      if (options.all === true) callback(null, pinned);
      else callback(null, pinned[0]!.address, pinned[0]!.family);
    };
    const pool = new Pool(origin, {
      connect: { lookup, ...(this.secureContext === undefined ? {} : { secureContext: this.secureContext }) },
    });
    this.pools.set(key, pool);
    while (this.pools.size > this.maxPools) {
      const [oldestKey, oldest] = this.pools.entries().next().value as [string, Pool];
      this.pools.delete(oldestKey);
      oldest.close().catch(() => undefined);
    }
    return pool;
  }
}

/**
 * One request's deadline, in the form undici takes as a request's `signal` (an EventEmitter that
 * emits 'abort'): an AbortController per request cost ~5 % of a webhook delivery's CPU (Node
 * builds an EventTarget and its internals for each, and undici's listener goes through them).
 */
class Deadline extends EventEmitter {
  aborted = false;

  abort(): void {
    if (this.aborted) return;
    this.aborted = true;
    this.emit('abort');
  }
}

/** Settles with `promise`, or rejects as soon as `signal` aborts. */
function abortable<T>(promise: Promise<T>, signal: Deadline): Promise<T> {
  if (signal.aborted) return Promise.reject(new Error('aborted'));
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(new Error('aborted'));
    signal.once('abort', onAbort);
    promise.then(
      (value) => {
        signal.removeListener('abort', onAbort);
        resolve(value);
      },
      (err: unknown) => {
        signal.removeListener('abort', onAbort);
        reject(err instanceof Error ? err : new Error(String(err)));
      },
    );
  });
}
