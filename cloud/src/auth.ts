import { API_KEY_PATTERN, every, type Clock, type Scheduler } from '@fleet/protocol';
import { LRUCache } from 'lru-cache';
import { isUsable } from './api-keys.js';
import { ApiError } from './errors.js';
import { hashSecret } from './ids.js';
import { FAILED_LOGIN_LIMIT, type FailedLoginLimiter } from './login-limit.js';
import type { ApiKeyRow, OrgRow, Store } from './store/index.js';

export interface Principal {
  org: OrgRow;
  key: ApiKeyRow;
}

// The auth scheme name is case-insensitive (RFC 9110 11.1); the key itself is not, and has the
// one pattern keys are made and checked by everywhere.
const BEARER = new RegExp(`^[Bb][Ee][Aa][Rr][Ee][Rr][ \\t]+(${API_KEY_PATTERN.source.replace(/^\^|\$$/g, '')})[ \\t]*$`);

/** How many keys (with their organizations) one process keeps; the least recently used goes first. */
export const DEFAULT_AUTH_CACHE_SIZE = 10_000;

interface CachedPrincipal {
  key: ApiKeyRow;
  org: OrgRow;
}

/**
 * Resolves `Authorization: Bearer ak_…` to its key and organization. Keys found in the database
 * are cached with their organizations (only keys that exist: an unknown key is looked up every
 * time and never grows the cache), and the cache is valid for one auth revision: each request
 * reads that one-row counter, which every writer of keys, organizations and their overrides
 * bumps (triggers, migration 10), and drops the whole cache when it moved. So a revocation, an
 * expiry, a scope, tier, feature or limit change takes effect on the very next request, also
 * when another process (the admin CLI, another replica) wrote it. Expiry is checked against
 * the clock on every request. Last use is only noted in memory (see LastUsedTracker).
 */
export class Authenticator {
  private readonly cache: LRUCache<string, CachedPrincipal>;
  private revision: number | null = null;

  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    private readonly lastUsed: LastUsedTracker,
    cacheSize: number = DEFAULT_AUTH_CACHE_SIZE,
    /** Failed logins per client address; an address over it is answered 429 before its key is looked at. */
    private readonly failures?: FailedLoginLimiter,
  ) {
    this.cache = new LRUCache({ max: cacheSize });
  }

  /** How many keys are cached now (tests check the bound). */
  get cachedKeys(): number {
    return this.cache.size;
  }

  /**
   * `address` is the client's: a key that is refused (unknown, expired, revoked or malformed;
   * not a missing header) counts as a failed login from it, and an address with too many is
   * refused with 429 `rate_limited` until its window ends.
   */
  async authenticate(header: string | undefined, address?: string): Promise<Principal> {
    if (!header) throw new ApiError('unauthenticated', 'missing Authorization: Bearer <API key>');
    if (address === undefined || !this.failures) return this.resolve(header);
    const wait = this.failures.retryAfterS(address);
    if (wait !== null) {
      throw new ApiError(
        'rate_limited',
        `too many failed logins from this address: the limit is ${this.failures.maxFailures}; retry in ${wait} s`,
        { limit: FAILED_LOGIN_LIMIT, max: this.failures.maxFailures, retry_after_s: wait },
        { 'retry-after': String(wait) },
      );
    }
    try {
      return await this.resolve(header);
    } catch (err) {
      if (err instanceof ApiError && err.code === 'unauthenticated') await this.failures.failed(address);
      throw err;
    }
  }

  private async resolve(header: string): Promise<Principal> {
    const m = BEARER.exec(header);
    if (!m) throw new ApiError('unauthenticated', 'malformed Authorization header; expected Bearer ak_…');
    const keyHash = hashSecret(m[1]!);
    // The revision first, the rows after: rows read later are at least as new as the revision
    // they are cached under, so a change is never missed (at worst a fresh row is dropped once).
    const revision = await this.store.apiKeys.authRevision();
    if (revision !== this.revision) {
      this.cache.clear();
      this.revision = revision;
    }
    const cached = this.cache.get(keyHash) ?? (await this.load(keyHash, revision));
    const now = this.clock.now();
    // One message for unknown, expired and revoked keys: the answer must not reveal which.
    if (!cached || !isUsable(cached.key, now)) throw new ApiError('unauthenticated', 'invalid, expired or revoked API key');
    const { key, org } = cached;
    this.lastUsed.note(key.id, now);
    // Kept on the cached row too: once the tracker has flushed, the stored value it holds is the newest.
    key.lastUsedAt = this.lastUsed.latest(key.id, key.lastUsedAt);
    return { org, key: { ...key } };
  }

  private async load(keyHash: string, revision: number): Promise<CachedPrincipal | undefined> {
    const key = await this.store.apiKeys.findByHash(keyHash);
    if (!key) return undefined;
    const org = await this.store.orgs.get(key.orgId);
    if (!org) return undefined;
    // Requests get a copy of the key row, but share its scopes and the organization: frozen.
    Object.freeze(key.scopes);
    const entry: CachedPrincipal = { key, org: freezeOrg(org) };
    // Another request may have seen a newer revision while this one waited for the rows.
    if (this.revision === revision) {
      this.cache.set(keyHash, entry);
    }
    return entry;
  }
}

/** One organization object is shared by every request of its keys: nobody may change it. */
function freezeOrg(org: OrgRow): OrgRow {
  Object.freeze(org.featureOverrides);
  Object.freeze(org.limitOverrides);
  return Object.freeze(org);
}

/**
 * Keeps `last_used_at` without a database write per request: uses are noted in memory and
 * written in one batch every `flushMs` and at shutdown. A crash loses at most one interval of
 * last-use times, never a key.
 */
export class LastUsedTracker {
  private pending = new Map<string, number>();
  private stopFlushing: (() => void) | undefined;

  constructor(
    private readonly store: Store,
    private readonly flushMs: number,
    private readonly onError: (err: unknown) => void,
    private readonly scheduler: Scheduler,
  ) {}

  start(): void {
    this.stopFlushing ??= every(this.scheduler, this.flushMs, () => {
      this.flush().catch(this.onError);
    });
  }

  note(keyId: string, at: number): void {
    const prev = this.pending.get(keyId);
    if (prev === undefined || at > prev) this.pending.set(keyId, at);
  }

  /** The newest of the stored value and what is waiting to be written. */
  latest(keyId: string, stored: number | null): number | null {
    const p = this.pending.get(keyId);
    if (p === undefined) return stored;
    return stored === null ? p : Math.max(p, stored);
  }

  async flush(): Promise<void> {
    if (this.pending.size === 0) return;
    const batch = this.pending;
    this.pending = new Map();
    try {
      await this.store.apiKeys.touch(batch);
    } catch (err) {
      for (const [id, at] of batch) this.note(id, at);
      throw err;
    }
  }

  async stop(): Promise<void> {
    this.stopFlushing?.();
    this.stopFlushing = undefined;
    await this.flush();
  }
}
