import { every, systemScheduler, type Clock, type Scheduler } from '@fleet/protocol';
import { isUsable } from './api-keys.js';
import { ApiError } from './errors.js';
import { hashSecret } from './ids.js';
import type { ApiKeyRow, OrgRow, Store } from './store/index.js';

export interface Principal {
  org: OrgRow;
  key: ApiKeyRow;
}

// The auth scheme name is case-insensitive (RFC 9110 11.1); the key itself is not.
const BEARER = /^[Bb][Ee][Aa][Rr][Ee][Rr][ \t]+(ak_[A-Za-z0-9_-]{16,128})[ \t]*$/;

/**
 * Resolves `Authorization: Bearer ak_…` to its key and organization. The key row is read on
 * every request, so a revocation takes effect on the very next one; last use is only noted in
 * memory (see LastUsedTracker).
 */
export class Authenticator {
  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    private readonly lastUsed: LastUsedTracker,
  ) {}

  async authenticate(header: string | undefined): Promise<Principal> {
    if (!header) throw new ApiError('unauthenticated', 'missing Authorization: Bearer <API key>');
    const m = BEARER.exec(header);
    if (!m) throw new ApiError('unauthenticated', 'malformed Authorization header; expected Bearer ak_…');
    const key = await this.store.apiKeys.findByHash(hashSecret(m[1]!));
    const now = this.clock.now();
    // One message for unknown, expired and revoked keys: the answer must not reveal which.
    if (!key || !isUsable(key, now)) throw new ApiError('unauthenticated', 'invalid, expired or revoked API key');
    const org = await this.store.orgs.get(key.orgId);
    if (!org) throw new ApiError('unauthenticated', 'invalid, expired or revoked API key');
    this.lastUsed.note(key.id, now);
    return { org, key: { ...key, lastUsedAt: this.lastUsed.latest(key.id, key.lastUsedAt) } };
  }
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
    private readonly scheduler: Scheduler = systemScheduler,
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
