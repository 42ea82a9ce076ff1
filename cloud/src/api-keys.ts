import { iso, type ApiKey, type Clock, type CreatedApiKey, type Scope } from '@fleet/protocol';
import { ApiError, validationError } from './errors.js';
import { hashSecret, newId, newSecret } from './ids.js';
import { entitlementsOf } from './entitlements.js';
import type { ApiKeyRow, OrgRow, Store } from './store/index.js';

export const API_KEY_PREFIX = 'ak';

/** Creates a key and returns it with its plaintext, which exists nowhere else afterwards. */
export async function createApiKey(
  store: Store,
  clock: Clock,
  args: { org: OrgRow; name: string; scopes: Scope[]; expiresAt: number | null; createdBy: string },
): Promise<CreatedApiKey> {
  const now = clock.now();
  if (args.expiresAt !== null && args.expiresAt <= now) {
    throw validationError('body', '/expires_at', 'expires_at must be in the future', 'in_past');
  }
  const limit = entitlementsOf(args.org).limits.api_keys;
  if (limit !== undefined) {
    const active = (await store.apiKeys.list(args.org.id)).filter((k) => isUsable(k, now)).length;
    if (active >= limit) {
      throw new ApiError('conflict', `the organization already has ${active} active API keys (limit ${limit})`, {
        limit: 'api_keys',
        value: limit,
      });
    }
  }
  const key = newSecret(API_KEY_PREFIX);
  const row: ApiKeyRow = {
    id: newId('key'),
    orgId: args.org.id,
    name: args.name,
    scopes: [...args.scopes],
    keyHash: hashSecret(key),
    createdBy: args.createdBy,
    createdAt: now,
    expiresAt: args.expiresAt,
    revokedAt: null,
    lastUsedAt: null,
  };
  await store.apiKeys.create(row);
  return { ...toApiKey(row), key };
}

export function isUsable(k: ApiKeyRow, now: number): boolean {
  return k.revokedAt === null && (k.expiresAt === null || k.expiresAt > now);
}

export function toApiKey(k: ApiKeyRow): ApiKey {
  return {
    id: k.id,
    name: k.name,
    scopes: k.scopes,
    created_by: k.createdBy,
    last_used_at: k.lastUsedAt === null ? null : iso(k.lastUsedAt),
    expires_at: k.expiresAt === null ? null : iso(k.expiresAt),
    revoked_at: k.revokedAt === null ? null : iso(k.revokedAt),
    created_at: iso(k.createdAt),
  };
}
