import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Clock } from '@fleet/protocol';
import { createApiKey } from './api-keys.js';
import { newId } from './ids.js';
import type { Store } from './store/index.js';

export const ADMIN_KEY_FILE = 'admin-key';

export interface Bootstrapped {
  orgId: string;
  adminKey: string;
  keyFile: string;
}

/**
 * On the first start with an empty data directory: one organization and one admin key, so a
 * newcomer can call /v1 at once. The key is returned to be printed once and written with mode
 * 0600 beside the database; it is stored only as a hash.
 */
export async function bootstrapIfEmpty(store: Store, clock: Clock, dataDir: string): Promise<Bootstrapped | null> {
  const orgId = newId('org');
  // Atomic: two processes starting on one empty data dir must not both bootstrap.
  if (!(await store.orgs.createFirst({ id: orgId, name: 'default', tier: 'enterprise', createdAt: clock.now() }))) return null;
  const org = (await store.orgs.get(orgId))!;
  const created = await createApiKey(store, clock, { org, name: 'bootstrap admin', scopes: ['admin'], expiresAt: null, createdBy: 'bootstrap' });
  const keyFile = join(dataDir, ADMIN_KEY_FILE);
  // `mode` only applies when the file is created: a key file left from an earlier installation
  // would keep its mode (say 0644). Remove it and create a fresh one exclusively instead.
  rmSync(keyFile, { force: true });
  writeFileSync(keyFile, `${created.key}\n`, { mode: 0o600, flag: 'wx' });
  return { orgId, adminKey: created.key, keyFile };
}
