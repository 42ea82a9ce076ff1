import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ManualScheduler, type ManualClock } from '@fleet/protocol';
import { Authenticator, LastUsedTracker } from './auth.js';
import { DATABASE_FILE, type Store } from './store/index.js';
import { openTwin } from './store/test-store.js';
import { bearer, errorCode, errorDetails, startTestCloud, type TestCloud, type TestTenant } from './test-support.js';

// The authenticator caches keys and organizations; these tests change them the way the admin
// CLI or another replica does (a second, independent connection to the same database file) and
// check that the very next request sees the change.

let dir: string;
let t: TestCloud;
let tenant: TestTenant;
/** Another process's view of the same database, as `fleet-cloud apikeys revoke` / `orgs set-limit` open it. */
let other: Store;

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'fleet-auth-cache-'));
  t = await startTestCloud({ dataDir: dir });
  tenant = await t.createTenant();
  other = await openTwin(t.store);
});
afterEach(async () => {
  await other.close();
  await t.close();
  rmSync(dir, { recursive: true, force: true });
});

const listKeys = (auth = tenant.auth) => t.app.inject({ method: 'GET', url: '/v1/api-keys', headers: auth });

/** Raw SQL on a third connection: no store code at all, as any writer of the database could do. */
async function rawSql(sql: string, ...params: unknown[]): Promise<void> {
  if (t.store.engine === 'postgres') {
    const c = new pg.Client({ connectionString: t.store.url });
    await c.connect();
    try {
      let n = 0;
      await c.query(sql.replace(/\?/g, () => `$${++n}`), params);
    } finally {
      await c.end();
    }
    return;
  }
  const db = new Database(join(dir, DATABASE_FILE));
  try {
    db.prepare(sql).run(...params);
  } finally {
    db.close();
  }
}

describe('the auth cache follows changes made by other connections', () => {
  it('a key revoked through another connection is refused on the next request', async () => {
    const created = await t.createKey(tenant.org, ['admin']);
    const auth = bearer(created.key);
    expect((await listKeys(auth)).statusCode).toBe(200);
    expect((await listKeys(auth)).statusCode).toBe(200);

    expect(await other.apiKeys.revoke(tenant.org.id, created.id, t.clock.now())).toBe(true);

    const res = await listKeys(auth);
    expect(res.statusCode).toBe(401);
    expect(errorCode(res)).toBe('unauthenticated');
    // The organization's other key is untouched.
    expect((await listKeys()).statusCode).toBe(200);
  });

  it('a key revoked with plain SQL is refused on the next request', async () => {
    expect((await listKeys()).statusCode).toBe(200);
    await rawSql('UPDATE api_keys SET revoked_at = ? WHERE org_id = ?', t.clock.now(), tenant.org.id);
    expect((await listKeys()).statusCode).toBe(401);
  });

  it('a scope change is applied on the next request', async () => {
    expect((await listKeys()).statusCode).toBe(200);
    await rawSql(`UPDATE api_keys SET scopes = '["robots:read"]' WHERE org_id = ?`, tenant.org.id);
    const res = await listKeys();
    expect(res.statusCode).toBe(403);
    expect(errorCode(res)).toBe('insufficient_scope');
  });

  it('a feature switched off through another connection is refused on the next request, and back on', async () => {
    expect((await listKeys()).statusCode).toBe(200);

    expect(await other.orgs.setFeature(tenant.org.id, 'api.access', false)).toBe(true);
    const refused = await listKeys();
    expect(refused.statusCode).toBe(403);
    expect(errorCode(refused)).toBe('entitlement_required');

    expect(await other.orgs.setFeature(tenant.org.id, 'api.access', null)).toBe(true);
    expect((await listKeys()).statusCode).toBe(200);
  });

  it('a request limit lowered through another connection holds from the next request', async () => {
    expect((await listKeys()).statusCode).toBe(200);

    expect(await other.orgs.setLimit(tenant.org.id, 'requests_per_minute_per_key', 2)).toBe(true);
    expect((await listKeys()).statusCode).toBe(200);
    const res = await listKeys();
    expect(res.statusCode).toBe(429);
    expect(res.headers['retry-after']).toBeDefined();
    expect(errorDetails(res)).toMatchObject({ limit: 'requests_per_minute_per_key', max: 2 });
  });

  it('a tier change through another connection is applied on the next request', async () => {
    const goHome = () => t.app.inject({ method: 'POST', url: '/v1/robots/rb_none/go-home', headers: tenant.auth });
    // Enterprise has robot commands: past the entitlement check, the robot is not found.
    expect(errorCode(await goHome())).not.toBe('entitlement_required');
    expect(await other.orgs.setTier(tenant.org.id, 'free')).toBe(true);
    const res = await goHome();
    expect(res.statusCode).toBe(403);
    expect(errorCode(res)).toBe('entitlement_required');
  });
});

describe('auth revision', () => {
  it('moves with changes to keys and organizations, not with last-use writes', async () => {
    const key = await t.createKey(tenant.org, ['admin']);
    const before = await t.store.apiKeys.authRevision();
    await other.apiKeys.touch(new Map([[key.id, t.clock.now()]]));
    expect(await t.store.apiKeys.authRevision()).toBe(before);

    const steps: (() => Promise<unknown>)[] = [
      () => other.apiKeys.revoke(tenant.org.id, key.id, t.clock.now()),
      () => other.orgs.setTier(tenant.org.id, 'pro'),
      () => other.orgs.setFeature(tenant.org.id, 'api.robot_commands', false),
      () => other.orgs.setFeature(tenant.org.id, 'api.robot_commands', true),
      () => other.orgs.setFeature(tenant.org.id, 'api.robot_commands', null),
      () => other.orgs.setLimit(tenant.org.id, 'robots', 3),
      () => other.orgs.setLimit(tenant.org.id, 'robots', 4),
      () => other.orgs.setLimit(tenant.org.id, 'robots', null),
      () => other.orgs.create({ id: 'org_other', name: 'o', tier: 'free', createdAt: 0 }),
      () => rawSql('UPDATE api_keys SET expires_at = 1 WHERE id = ?', key.id),
      () => rawSql('DELETE FROM api_keys WHERE id = ?', key.id),
    ];
    let last = before;
    for (const step of steps) {
      await step();
      const now = await t.store.apiKeys.authRevision();
      expect(now).not.toBe(last);
      last = now;
    }
  });
});

describe('Authenticator cache', () => {
  let store: Store;
  let clock: ManualClock;
  let tracker: LastUsedTracker;

  beforeEach(() => {
    store = t.store;
    clock = t.clock;
    tracker = new LastUsedTracker(store, 60_000, () => undefined, new ManualScheduler(clock));
  });

  it('keeps at most its bound of keys, and never an unknown one', async () => {
    const auth = new Authenticator(store, clock, tracker, 2);
    for (let i = 0; i < 20; i++) {
      await expect(auth.authenticate(`Bearer ak_unknownunknown${String(i).padStart(4, '0')}`)).rejects.toMatchObject({ code: 'unauthenticated' });
    }
    expect(auth.cachedKeys).toBe(0);
    const keys = await Promise.all([1, 2, 3].map(() => t.createKey(tenant.org, ['admin'])));
    for (const k of keys) await auth.authenticate(`Bearer ${k.key}`);
    expect(auth.cachedKeys).toBe(2);
    // The evicted key still authenticates (from the database).
    await expect(auth.authenticate(`Bearer ${keys[0]!.key}`)).resolves.toMatchObject({ key: { id: keys[0]!.id } });
    expect(auth.cachedKeys).toBe(2);
  });

  it('refuses a cached key once it expires', async () => {
    const auth = new Authenticator(store, clock, tracker);
    const k = await t.createKey(tenant.org, ['admin'], { expiresAt: clock.now() + 1000 });
    await expect(auth.authenticate(`Bearer ${k.key}`)).resolves.toMatchObject({ key: { id: k.id } });
    expect(auth.cachedKeys).toBe(1);
    clock.advance(1000);
    await expect(auth.authenticate(`Bearer ${k.key}`)).rejects.toMatchObject({ code: 'unauthenticated' });
  });
});
