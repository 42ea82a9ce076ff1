import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DAY, HOUR } from '@fleet/protocol';
import { MIGRATIONS } from './sqlite/migrations.js';
import { openSqliteStore } from './sqlite/store.js';
import { openPgStore } from './postgres/store.js';
import { PG_MIGRATIONS } from './postgres/migrations.js';
import { postgresVersion, schemaSql } from './shared/schema.js';
import { createTestDatabase, openTestStore, openTwin, postgresAvailable, REAL_TIME, type TestEngine } from './test-store.js';
import type { ApiKeyRow, Store, StoredResponse } from './shared/types.js';

const T0 = Date.parse('2026-01-01T00:00:00Z');

/**
 * An opened store; `twin` opens a second store on the same data (another process or replica),
 * where the engine has one (not an in-memory SQLite database).
 */
interface Opened {
  store: Store;
  twin?: () => Promise<Store>;
  dispose(): Promise<void>;
}

/**
 * The contract every Store implementation keeps. A new implementation (PostgreSQL) adds one
 * `describeStore` call at the bottom of this file.
 */
function describeStore(name: string, engine: TestEngine, open: () => Promise<Opened>): void {
  // The PostgreSQL run is skipped (and named so) when this test run has no PostgreSQL server.
  (engine === 'postgres' && !postgresAvailable() ? describe.skip : describe)(`Store contract: ${name}`, () => {
    let opened: Opened;
    let store: Store;

    beforeEach(async () => {
      opened = await open();
      store = opened.store;
    });
    afterEach(async () => {
      await opened.dispose();
    });

    async function org(id: string, tier = 'free', createdAt = T0): Promise<void> {
      await store.orgs.create({ id, name: `name of ${id}`, tier, createdAt });
    }

    function keyRow(id: string, orgId: string, over: Partial<ApiKeyRow> = {}): Omit<ApiKeyRow, 'revokedAt' | 'lastUsedAt'> {
      return {
        id,
        orgId,
        name: `key ${id}`,
        scopes: ['data:read', 'admin'],
        keyHash: `hash-${id}`,
        createdBy: 'test',
        createdAt: T0,
        expiresAt: null,
        ...over,
      };
    }

    it('answers ping', async () => {
      await expect(store.ping()).resolves.toBeUndefined();
    });

    describe('orgs', () => {
      it('creates, gets and lists organizations in creation order', async () => {
        await org('org_b', 'pro', T0 + 1);
        await org('org_a', 'free', T0 + 2);
        expect(await store.orgs.get('org_b')).toEqual({
          id: 'org_b',
          name: 'name of org_b',
          tier: 'pro',
          createdAt: T0 + 1,
          featureOverrides: {},
          limitOverrides: {},
        });
        expect(await store.orgs.get('org_missing')).toBeUndefined();
        expect((await store.orgs.list()).map((o) => o.id)).toEqual(['org_b', 'org_a']);
      });

      it('refuses a second organization with the same id', async () => {
        await org('org_a');
        await expect(org('org_a')).rejects.toThrow();
      });

      it('creates the first organization only once', async () => {
        const first = { id: 'org_first', name: 'default', tier: 'enterprise', createdAt: 1 };
        expect(await store.orgs.createFirst(first)).toBe(true);
        expect(await store.orgs.createFirst({ ...first, id: 'org_second' })).toBe(false);
        expect((await store.orgs.list()).map((o) => o.id)).toEqual(['org_first']);
      });

      it('changes the tier, and says false for an unknown organization', async () => {
        await org('org_a');
        expect(await store.orgs.setTier('org_a', 'enterprise')).toBe(true);
        expect((await store.orgs.get('org_a'))?.tier).toBe('enterprise');
        expect(await store.orgs.setTier('org_missing', 'pro')).toBe(false);
      });

      it('sets, replaces and clears feature overrides per organization', async () => {
        await org('org_a');
        await org('org_b');
        expect(await store.orgs.setFeature('org_a', 'api.robot_commands', true)).toBe(true);
        expect(await store.orgs.setFeature('org_a', 'data.metadata', false)).toBe(true);
        expect((await store.orgs.get('org_a'))?.featureOverrides).toEqual({ 'api.robot_commands': true, 'data.metadata': false });
        expect((await store.orgs.get('org_b'))?.featureOverrides).toEqual({});

        expect(await store.orgs.setFeature('org_a', 'api.robot_commands', false)).toBe(true);
        expect((await store.orgs.get('org_a'))?.featureOverrides['api.robot_commands']).toBe(false);

        expect(await store.orgs.setFeature('org_a', 'api.robot_commands', null)).toBe(true);
        expect((await store.orgs.get('org_a'))?.featureOverrides).toEqual({ 'data.metadata': false });
        // Clearing an override that is not there is fine.
        expect(await store.orgs.setFeature('org_a', 'api.robot_commands', null)).toBe(true);

        expect(await store.orgs.setFeature('org_missing', 'api.access', true)).toBe(false);
        expect(await store.orgs.get('org_missing')).toBeUndefined();
      });

      it('sets, replaces and clears limit overrides per organization', async () => {
        await org('org_a');
        await org('org_b');
        expect(await store.orgs.setLimit('org_a', 'api_keys', 3)).toBe(true);
        expect(await store.orgs.setLimit('org_a', 'robots', 2.5)).toBe(true);
        expect(await store.orgs.setLimit('org_a', 'api_keys', 0)).toBe(true);
        expect((await store.orgs.get('org_a'))?.limitOverrides).toEqual({ api_keys: 0, robots: 2.5 });
        expect((await store.orgs.get('org_b'))?.limitOverrides).toEqual({});
        expect(await store.orgs.setLimit('org_a', 'api_keys', null)).toBe(true);
        expect((await store.orgs.get('org_a'))?.limitOverrides).toEqual({ robots: 2.5 });
        expect(await store.orgs.setLimit('org_missing', 'api_keys', 1)).toBe(false);
      });

      it('shows overrides in list() too', async () => {
        await org('org_a');
        await store.orgs.setFeature('org_a', 'api.access', false);
        await store.orgs.setLimit('org_a', 'robots', 7);
        const [listed] = await store.orgs.list();
        expect(listed?.featureOverrides).toEqual({ 'api.access': false });
        expect(listed?.limitOverrides).toEqual({ robots: 7 });
      });
    });

    describe('api keys', () => {
      beforeEach(async () => {
        await org('org_a');
        await org('org_b');
      });

      it('creates keys and finds them by hash, by org and id, and in the org list', async () => {
        await store.apiKeys.create(keyRow('key_2', 'org_a', { createdAt: T0 + 2, expiresAt: T0 + DAY }));
        await store.apiKeys.create(keyRow('key_1', 'org_a', { createdAt: T0 + 1 }));
        await store.apiKeys.create(keyRow('key_3', 'org_b'));

        const found = await store.apiKeys.findByHash('hash-key_2');
        expect(found).toEqual({ ...keyRow('key_2', 'org_a', { createdAt: T0 + 2, expiresAt: T0 + DAY }), revokedAt: null, lastUsedAt: null });
        expect(await store.apiKeys.findByHash('hash-nope')).toBeUndefined();

        expect((await store.apiKeys.get('org_a', 'key_1'))?.scopes).toEqual(['data:read', 'admin']);
        // Tenant-scoped: another organization's id is not there.
        expect(await store.apiKeys.get('org_b', 'key_1')).toBeUndefined();
        expect((await store.apiKeys.list('org_a')).map((k) => k.id)).toEqual(['key_1', 'key_2']);
        expect((await store.apiKeys.list('org_b')).map((k) => k.id)).toEqual(['key_3']);
        expect(await store.apiKeys.list('org_missing')).toEqual([]);
      });

      it('refuses a duplicate key hash', async () => {
        await store.apiKeys.create(keyRow('key_1', 'org_a'));
        await expect(store.apiKeys.create(keyRow('key_2', 'org_a', { keyHash: 'hash-key_1' }))).rejects.toThrow();
      });

      it('revokes once and keeps the first revocation time', async () => {
        await store.apiKeys.create(keyRow('key_1', 'org_a'));
        expect(await store.apiKeys.revoke('org_a', 'key_1', T0 + HOUR)).toBe(true);
        expect(await store.apiKeys.revoke('org_a', 'key_1', T0 + 2 * HOUR)).toBe(true);
        expect((await store.apiKeys.get('org_a', 'key_1'))?.revokedAt).toBe(T0 + HOUR);
        expect((await store.apiKeys.findByHash('hash-key_1'))?.revokedAt).toBe(T0 + HOUR);
      });

      it("does not revoke an unknown id or another organization's key", async () => {
        await store.apiKeys.create(keyRow('key_1', 'org_a'));
        expect(await store.apiKeys.revoke('org_a', 'key_missing', T0)).toBe(false);
        expect(await store.apiKeys.revoke('org_b', 'key_1', T0)).toBe(false);
        expect((await store.apiKeys.get('org_a', 'key_1'))?.revokedAt).toBeNull();
      });

      it('records last use in batches and never moves it backwards', async () => {
        await store.apiKeys.create(keyRow('key_1', 'org_a'));
        await store.apiKeys.create(keyRow('key_2', 'org_a'));
        await store.apiKeys.touch(new Map());
        expect((await store.apiKeys.get('org_a', 'key_1'))?.lastUsedAt).toBeNull();

        await store.apiKeys.touch(new Map([['key_1', T0 + 10], ['key_2', T0 + 20], ['key_unknown', T0]]));
        expect((await store.apiKeys.get('org_a', 'key_1'))?.lastUsedAt).toBe(T0 + 10);
        expect((await store.apiKeys.get('org_a', 'key_2'))?.lastUsedAt).toBe(T0 + 20);

        await store.apiKeys.touch(new Map([['key_1', T0 + 5], ['key_2', T0 + 30]]));
        expect((await store.apiKeys.get('org_a', 'key_1'))?.lastUsedAt).toBe(T0 + 10);
        expect((await store.apiKeys.get('org_a', 'key_2'))?.lastUsedAt).toBe(T0 + 30);
      });

      it('keeps recording use after revocation without touching revoked_at', async () => {
        await store.apiKeys.create(keyRow('key_1', 'org_a'));
        await store.apiKeys.revoke('org_a', 'key_1', T0 + 1);
        await store.apiKeys.touch(new Map([['key_1', T0 + 2]]));
        const row = await store.apiKeys.get('org_a', 'key_1');
        expect([row?.revokedAt, row?.lastUsedAt]).toEqual([T0 + 1, T0 + 2]);
      });

      it('authRevision moves to a value not seen before with every change to keys, organizations and their overrides', async () => {
        const seen = [await store.apiKeys.authRevision()];
        const changes: [string, () => Promise<unknown>][] = [
          ['api key created', () => store.apiKeys.create(keyRow('key_1', 'org_a'))],
          ['api key revoked', () => store.apiKeys.revoke('org_a', 'key_1', T0 + 1)],
          ['organization created', () => org('org_c')],
          ['tier changed', () => store.orgs.setTier('org_c', 'pro')],
          ['feature override set', () => store.orgs.setFeature('org_a', 'api.robot_commands', true)],
          ['feature override replaced', () => store.orgs.setFeature('org_a', 'api.robot_commands', false)],
          ['feature override cleared', () => store.orgs.setFeature('org_a', 'api.robot_commands', null)],
          ['limit override set', () => store.orgs.setLimit('org_b', 'robots', 3)],
          ['limit override replaced', () => store.orgs.setLimit('org_b', 'robots', 4)],
          ['limit override cleared', () => store.orgs.setLimit('org_b', 'robots', null)],
          ['second api key created', () => store.apiKeys.create(keyRow('key_2', 'org_b'))],
        ];
        for (const [label, change] of changes) {
          await change();
          const revision = await store.apiKeys.authRevision();
          expect(seen, label).not.toContain(revision);
          seen.push(revision);
        }
        // Reading it is not a change.
        expect(await store.apiKeys.authRevision()).toBe(seen[seen.length - 1]);
      });

      it("authRevision stays the same when only a key's last use is recorded, or when keys and organizations are read", async () => {
        await store.apiKeys.create(keyRow('key_1', 'org_a'));
        await store.apiKeys.create(keyRow('key_2', 'org_b'));
        await store.apiKeys.revoke('org_b', 'key_2', T0 + 1);
        const before = await store.apiKeys.authRevision();
        await store.apiKeys.touch(new Map([['key_1', T0 + 10], ['key_2', T0 + 20]]));
        await store.apiKeys.touch(new Map([['key_1', T0 + 5]]));
        await store.apiKeys.touch(new Map());
        await store.apiKeys.findByHash('hash-key_1');
        await store.apiKeys.list('org_a');
        await store.orgs.list();
        expect(await store.apiKeys.authRevision()).toBe(before);
        // The uses were recorded all the same (the revocation too).
        expect((await store.apiKeys.get('org_a', 'key_1'))?.lastUsedAt).toBe(T0 + 10);
        expect(await store.apiKeys.get('org_b', 'key_2')).toMatchObject({ lastUsedAt: T0 + 20, revokedAt: T0 + 1 });
        // The next change to a key moves it again.
        await store.apiKeys.revoke('org_a', 'key_1', T0 + 30);
        expect(await store.apiKeys.authRevision()).not.toBe(before);
      });

      it('authRevision moves for a change committed by another writer on the same data', async () => {
        // Another process (SQLite on disk) or replica (PostgreSQL); an in-memory database has only this one.
        const other = opened.twin ? await opened.twin() : store;
        try {
          const before = await store.apiKeys.authRevision();
          await other.apiKeys.create(keyRow('key_x', 'org_a'));
          const afterCreate = await store.apiKeys.authRevision();
          expect(afterCreate).not.toBe(before);
          expect(await other.apiKeys.authRevision()).toBe(afterCreate);
          await other.apiKeys.touch(new Map([['key_x', T0 + 1]]));
          expect(await store.apiKeys.authRevision()).toBe(afterCreate);
          await other.orgs.setLimit('org_b', 'api_keys', 1);
          const afterLimit = await store.apiKeys.authRevision();
          expect([before, afterCreate]).not.toContain(afterLimit);
        } finally {
          if (other !== store) await other.close();
        }
      });
    });

    describe('idempotency', () => {
      const lease = 60_000;
      const ttl = DAY;
      const response: StoredResponse = { status: 201, contentType: 'application/json; charset=utf-8', body: 'sealed' };
      const begin = (key: string, fingerprint: string, now: number, orgId = 'org_a', token = 'tok') =>
        store.idempotency.begin({ orgId, key, token, fingerprint, now, leaseMs: lease });
      const complete = (key: string, now: number, orgId = 'org_a', r = response, token = 'tok') =>
        store.idempotency.complete({ orgId, key, token, response: r, now, ttlMs: ttl });

      it('claims a new key, reports it in flight, then replays once complete', async () => {
        expect(await begin('k', 'fp', T0)).toEqual({ kind: 'started' });
        expect(await begin('k', 'fp', T0 + 1)).toEqual({ kind: 'in_flight' });
        expect(await begin('k', 'other', T0 + 1)).toEqual({ kind: 'mismatch' });
        await complete('k', T0 + 2);
        expect(await begin('k', 'fp', T0 + 3)).toEqual({ kind: 'replay', response });
        expect(await begin('k', 'other', T0 + 3)).toEqual({ kind: 'mismatch' });
      });

      it('stores an empty body and a null content type as given', async () => {
        await begin('k', 'fp', T0);
        const empty: StoredResponse = { status: 204, contentType: null, body: '' };
        await complete('k', T0, 'org_a', empty);
        expect(await begin('k', 'fp', T0)).toEqual({ kind: 'replay', response: empty });
      });

      it('scopes keys per organization', async () => {
        expect(await begin('k', 'fp', T0, 'org_a')).toEqual({ kind: 'started' });
        expect(await begin('k', 'other', T0, 'org_b')).toEqual({ kind: 'started' });
        await complete('k', T0, 'org_a');
        expect(await begin('k', 'other', T0, 'org_b')).toEqual({ kind: 'in_flight' });
      });

      it('replaces a completed entry once its ttl is over', async () => {
        await begin('k', 'fp', T0);
        await complete('k', T0);
        expect((await begin('k', 'fp', T0 + ttl - 1)).kind).toBe('replay');
        expect(await begin('k', 'new', T0 + ttl)).toEqual({ kind: 'started' });
        expect(await begin('k', 'new', T0 + ttl + 1)).toEqual({ kind: 'in_flight' });
      });

      it('lets a claim be taken over once its lease is over', async () => {
        await begin('k', 'fp', T0);
        expect((await begin('k', 'fp', T0 + lease - 1)).kind).toBe('in_flight');
        expect(await begin('k', 'other', T0 + lease)).toEqual({ kind: 'started' });
        expect(await begin('k', 'other', T0 + lease + 1)).toEqual({ kind: 'in_flight' });
      });

      it('releases an in-flight claim so that a retry runs again, but never a completed one', async () => {
        await begin('k', 'fp', T0);
        await store.idempotency.release({ orgId: 'org_a', key: 'k', token: 'tok' });
        expect(await begin('k', 'fp', T0 + 1)).toEqual({ kind: 'started' });
        await complete('k', T0 + 1);
        await store.idempotency.release({ orgId: 'org_a', key: 'k', token: 'tok' });
        expect((await begin('k', 'fp', T0 + 2)).kind).toBe('replay');
        // Releasing what does not exist is harmless.
        await expect(store.idempotency.release({ orgId: 'org_a', key: 'missing', token: 'tok' })).resolves.toBeUndefined();
      });

      it('lets only the holder of a claim complete, release or renew it: a late original cannot touch a retry that took over', async () => {
        const original = { orgId: 'org_a', key: 'k', token: 'first' };
        const retry = { orgId: 'org_a', key: 'k', token: 'second' };
        await begin('k', 'fp', T0, 'org_a', original.token);
        // The original's process stalled past its lease; a retry takes the key over.
        expect(await begin('k', 'fp', T0 + lease, 'org_a', retry.token)).toEqual({ kind: 'started' });
        // The original wakes up: its release, renewal and completion touch nothing.
        await store.idempotency.release(original);
        expect(await store.idempotency.renew([original], T0 + lease + 1, lease)).toBe(0);
        expect(await complete('k', T0 + lease + 1, 'org_a', { ...response, body: 'late' }, original.token)).toBe(false);
        expect(await begin('k', 'fp', T0 + lease + 2, 'org_a', 'third')).toEqual({ kind: 'in_flight' });
        // The retry's claim is intact, and its response is the one replayed.
        expect(await complete('k', T0 + lease + 3, 'org_a', response, retry.token)).toBe(true);
        expect(await begin('k', 'fp', T0 + lease + 4)).toEqual({ kind: 'replay', response });
        // Once completed, neither token releases, renews or completes it again.
        await store.idempotency.release(retry);
        expect(await store.idempotency.renew([retry], T0 + lease + 5, lease)).toBe(0);
        expect(await complete('k', T0 + lease + 5, 'org_a', { ...response, body: 'again' }, retry.token)).toBe(false);
        expect(await begin('k', 'fp', T0 + lease + 6)).toEqual({ kind: 'replay', response });
      });

      it('renews the leases of the claims held by their tokens, all in one call', async () => {
        await begin('a', 'fp', T0, 'org_a', 'ta');
        await begin('b', 'fp', T0, 'org_a', 'tb');
        await begin('a', 'fp', T0, 'org_b', 'tc');
        await begin('c', 'fp', T0, 'org_a', 'td');
        expect(await store.idempotency.renew([], T0, lease)).toBe(0);
        const renewed = await store.idempotency.renew(
          [
            { orgId: 'org_a', key: 'a', token: 'ta' },
            { orgId: 'org_a', key: 'b', token: 'tb' },
            { orgId: 'org_b', key: 'a', token: 'wrong' },
            { orgId: 'org_a', key: 'missing', token: 'tx' },
          ],
          T0 + lease - 1,
          lease,
        );
        expect(renewed).toBe(2);
        // The renewed ones hold a lease from the renewal; the others lapse at their first one.
        const at = T0 + lease;
        expect([
          (await begin('a', 'fp', at, 'org_a', 'new')).kind,
          (await begin('b', 'fp', at, 'org_a', 'new')).kind,
          (await begin('a', 'fp', at, 'org_b', 'new')).kind,
          (await begin('c', 'fp', at, 'org_a', 'new')).kind,
        ]).toEqual(['in_flight', 'in_flight', 'started', 'started']);
        expect((await begin('a', 'fp', T0 + 2 * lease - 2, 'org_a', 'new')).kind).toBe('in_flight');
        expect((await begin('a', 'fp', T0 + 2 * lease - 1, 'org_a', 'new')).kind).toBe('started');
        // A key with quotes, commas or brackets is matched as it is (the SQLite engine passes the set as JSON).
        const odd = `k"],[",'\\`;
        await begin(odd, 'fp', T0, 'org_a', 'to');
        expect(await store.idempotency.renew([{ orgId: 'org_a', key: odd, token: 'to' }], T0 + 1, lease)).toBe(1);
      });

      it('purges expired entries and lapsed claims, and nothing live', async () => {
        await begin('done-old', 'fp', T0);
        await complete('done-old', T0);
        await begin('done-new', 'fp', T0 + HOUR);
        await complete('done-new', T0 + HOUR);
        await begin('claim-old', 'fp', T0);
        await begin('claim-new', 'fp', T0 + ttl);

        expect(await store.idempotency.purgeExpired(T0 + lease - 1)).toBe(0);
        expect(await store.idempotency.purgeExpired(T0 + lease)).toBe(1); // claim-old
        expect(await store.idempotency.purgeExpired(T0 + ttl - 1)).toBe(0);
        expect(await store.idempotency.purgeExpired(T0 + ttl)).toBe(1); // done-old
        expect((await begin('done-new', 'fp', T0 + ttl)).kind).toBe('replay');
        expect((await begin('claim-new', 'fp', T0 + ttl)).kind).toBe('in_flight');
        expect(await begin('done-old', 'other', T0 + ttl)).toEqual({ kind: 'started' });
        expect(await store.idempotency.purgeExpired(T0 + ttl)).toBe(0);
      });
    });

    describe('meters', () => {
      it('increments by one or by n, per organization, meter and day', async () => {
        await store.meters.increment('org_a', 'x', '2026-01-01');
        await store.meters.increment('org_a', 'x', '2026-01-01');
        await store.meters.increment('org_a', 'x', '2026-01-01', 5);
        await store.meters.increment('org_a', 'y', '2026-01-01');
        await store.meters.increment('org_b', 'x', '2026-01-01', 100);
        expect(await store.meters.list('org_a', '2026-01-01', '2026-01-01')).toEqual([
          { meter: 'x', day: '2026-01-01', count: 7 },
          { meter: 'y', day: '2026-01-01', count: 1 },
        ]);
        expect(await store.meters.list('org_b', '2026-01-01', '2026-01-01')).toEqual([{ meter: 'x', day: '2026-01-01', count: 100 }]);
        expect(await store.meters.list('org_c', '2026-01-01', '2026-01-01')).toEqual([]);
      });

      it('lists an inclusive day range ordered by day, then meter', async () => {
        for (const day of ['2025-12-31', '2026-01-01', '2026-01-15', '2026-01-31', '2026-02-01']) {
          await store.meters.increment('org_a', 'b', day);
          await store.meters.increment('org_a', 'a', day);
        }
        const rows = await store.meters.list('org_a', '2026-01-01', '2026-01-31');
        expect(rows.map((r) => `${r.day} ${r.meter}`)).toEqual([
          '2026-01-01 a',
          '2026-01-01 b',
          '2026-01-15 a',
          '2026-01-15 b',
          '2026-01-31 a',
          '2026-01-31 b',
        ]);
        expect(await store.meters.list('org_a', '2026-02-02', '2026-12-31')).toEqual([]);
        expect(await store.meters.list('org_a', '2026-01-31', '2026-01-01')).toEqual([]);
      });
    });

    describe('secret key fingerprint', () => {
      it('records the first one, then tells the same from a different one', async () => {
        expect(await store.checkSecretKey('fp-a')).toBe('recorded');
        expect(await store.checkSecretKey('fp-a')).toBe('same');
        expect(await store.checkSecretKey('fp-b')).toBe('different');
        expect(await store.checkSecretKey('fp-a')).toBe('same');
      });
    });

    describe('shared counters', () => {
      const W = 60_000;

      // Each engine runs only its own half (no skipped variants): SQLite has none, PostgreSQL shares them.
      if (engine === 'sqlite') {
        it('are absent on SQLite, where one process counts in its own memory', () => {
          expect(store.sharedCounters).toBeUndefined();
        });
        return;
      }

      it('count hits per key in fixed windows that start at the first hit and last windowMs', async () => {
        const counters = store.sharedCounters!;
        expect(counters).toBeDefined();
        expect(await counters.hit('k', T0, W)).toEqual({ count: 1, windowStart: T0 });
        expect(await counters.hit('k', T0 + 1, W)).toEqual({ count: 2, windowStart: T0 });
        expect(await counters.hit('other', T0 + 10, W)).toEqual({ count: 1, windowStart: T0 + 10 });
        expect(await counters.hit('k', T0 + W - 1, W)).toEqual({ count: 3, windowStart: T0 });
        // The first hit at the window's end starts the next window at 1.
        expect(await counters.hit('k', T0 + W, W)).toEqual({ count: 1, windowStart: T0 + W });
        expect(await counters.hit('k', T0 + W + 5, W)).toEqual({ count: 2, windowStart: T0 + W });
        // Long after: the next window starts at that hit, not on the old windows' grid.
        expect(await counters.hit('other', T0 + 10 * W + 7, W)).toEqual({ count: 1, windowStart: T0 + 10 * W + 7 });
        expect(await counters.hit('other', T0 + 10 * W + 8, W)).toEqual({ count: 2, windowStart: T0 + 10 * W + 7 });
      });

      it('give each of many hits at once, from two replicas, its own count', async () => {
        const other = await opened.twin!();
        try {
          const hits = await Promise.all(Array.from({ length: 20 }, (_, i) => (i % 2 ? other : store).sharedCounters!.hit('k', T0, W)));
          expect(hits.map((h) => h.count).sort((a, b) => a - b)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
          expect(hits.every((h) => h.windowStart === T0)).toBe(true);
          expect(await store.sharedCounters!.hit('k', T0 + 1, W)).toEqual({ count: 21, windowStart: T0 });
        } finally {
          await other.close();
        }
      });

      it('purge drops the counters whose window started before the given time, and only those', async () => {
        const counters = store.sharedCounters!;
        await counters.hit('a', T0, W);
        await counters.hit('a', T0 + 1, W);
        await counters.hit('b', T0 + 100, W);
        await counters.hit('c', T0 + 200, W);
        expect(await counters.purge(T0)).toBe(0);
        expect(await counters.purge(T0 + 1)).toBe(1);
        expect(await counters.purge(T0 + 1)).toBe(0);
        // A dropped counter starts over, even within what was its window; a kept one counts on.
        expect(await counters.hit('a', T0 + 2, W)).toEqual({ count: 1, windowStart: T0 + 2 });
        expect(await counters.hit('c', T0 + 201, W)).toEqual({ count: 2, windowStart: T0 + 200 });
        expect(await counters.purge(T0 + 200)).toBe(2);
        expect(await counters.hit('c', T0 + 202, W)).toEqual({ count: 3, windowStart: T0 + 200 });
        expect(await counters.purge(T0 + 201)).toBe(1);
        expect(await counters.purge(T0 + 10 * W)).toBe(0);
      });
    });
  });
}

const tempDirs: string[] = [];
afterEach(() => {
  for (const dir of tempDirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'fleet-cloud-store-'));
  tempDirs.push(dir);
  return dir;
}

describeStore('sqlite in memory', 'sqlite', async () => {
  const store = openSqliteStore(':memory:', REAL_TIME);
  return { store, dispose: () => store.close() };
});

describeStore('sqlite on disk', 'sqlite', async () => {
  const dir = tempDir();
  const store = openSqliteStore(dir, REAL_TIME);
  return { store, twin: async () => openSqliteStore(dir, REAL_TIME), dispose: () => store.close() };
});

describeStore('postgres', 'postgres', async () => {
  const store = await openTestStore('postgres');
  return { store, twin: () => openTwin(store), dispose: () => store.close() };
});

(postgresAvailable() ? describe : describe.skip)('postgres migrations', () => {
  it('are applied once when several replicas start together, and again finds nothing to do', async () => {
    const db = await createTestDatabase();
    try {
      const stores = await Promise.all([openPgStore(db.url), openPgStore(db.url), openPgStore(db.url)]);
      await stores[0].orgs.create({ id: 'org_a', name: 'a', tier: 'free', createdAt: T0 });
      const versions = await stores[1].db.many<{ version: number }>('SELECT version FROM schema_migrations ORDER BY version');
      expect(versions.map((v) => v.version)).toEqual(PG_MIGRATIONS.map((m) => m.version));
      await Promise.all(stores.map((s) => s.close()));
      const again = await openPgStore(db.url);
      expect((await again.orgs.list()).map((o) => o.id)).toEqual(['org_a']);
      await again.close();
    } finally {
      await db.drop();
    }
  });

  it('refuses a database without the schema when asked not to create one', async () => {
    const db = await createTestDatabase();
    try {
      // The template already holds the schema: drop it to get an empty database.
      const s = await openPgStore(db.url);
      await s.db.query('DROP SCHEMA public CASCADE; CREATE SCHEMA public');
      await s.close();
      await expect(openPgStore(db.url, { create: false })).rejects.toThrow(/no fleet schema/);
    } finally {
      await db.drop();
    }
  });

  it('numbers migrations 1, 2, 3, ... without gaps', () => {
    expect(PG_MIGRATIONS.map((m) => m.version)).toEqual(PG_MIGRATIONS.map((_m, i) => i + 1));
  });
});

describe('the schema both engines share', () => {
  it('is carried by both migration histories to the same point', () => {
    // Each SQLite migration after PostgreSQL's first has a PostgreSQL step of its own.
    expect(PG_MIGRATIONS.length).toBe(postgresVersion(MIGRATIONS.length));
  });

  it('declares nothing for a migration that does not exist yet (it would never be created)', () => {
    for (let v = 1; v <= 40; v++) {
      expect(schemaSql('sqlite', MIGRATIONS.length + v)).toBe('');
      expect(schemaSql('postgres', PG_MIGRATIONS.length + v)).toBe('');
    }
  });

  it('gives every step of both engines something to do', () => {
    for (const m of [...MIGRATIONS, ...PG_MIGRATIONS]) expect(m.sql.trim(), m.name).not.toBe('');
  });

  it('renders each dialect: SQLite tables are STRICT, PostgreSQL times are BIGINT and booleans BOOLEAN', () => {
    const lite = MIGRATIONS.map((m) => m.sql).join('\n');
    const pg = PG_MIGRATIONS.map((m) => m.sql).join('\n');
    expect(lite).toMatch(/CREATE TABLE org_features \([^;]*\) STRICT, WITHOUT ROWID;/);
    expect(lite).not.toMatch(/BIGINT|BOOLEAN|DOUBLE PRECISION/);
    expect(pg).toMatch(/created_at BIGINT NOT NULL/);
    expect(pg).toMatch(/connected BOOLEAN NOT NULL DEFAULT false/);
    expect(lite).toMatch(/connected INTEGER NOT NULL DEFAULT 0/);
    expect(pg).not.toMatch(/STRICT|AUTOINCREMENT/);
    // A column added later is an ALTER on SQLite and part of the first CREATE on PostgreSQL.
    expect(lite).toMatch(/ALTER TABLE robots ADD COLUMN status_at INTEGER;/);
    expect(pg).toMatch(/ALTER TABLE robots ADD COLUMN status_at BIGINT;/);
  });
});

describe('sqlite migrations', () => {
  it('are idempotent: opening one data directory again keeps the data and applies nothing twice', async () => {
    const dir = tempDir();
    const first = openSqliteStore(dir, REAL_TIME);
    await first.orgs.create({ id: 'org_a', name: 'a', tier: 'free', createdAt: T0 });
    await first.close();

    const second = openSqliteStore(dir, REAL_TIME);
    expect((await second.orgs.get('org_a'))?.name).toBe('a');
    const versions = second.db.prepare('SELECT version FROM schema_migrations ORDER BY version').pluck().all();
    expect(versions).toEqual(MIGRATIONS.map((m) => m.version));
    await second.close();

    const third = openSqliteStore(dir, REAL_TIME);
    expect((await third.orgs.list()).map((o) => o.id)).toEqual(['org_a']);
    await third.close();
  });

  it('lets two stores open one directory at the same time (serve and the CLI)', async () => {
    const dir = tempDir();
    const serve = openSqliteStore(dir, REAL_TIME);
    const cli = openSqliteStore(dir, REAL_TIME);
    await cli.orgs.create({ id: 'org_cli', name: 'cli', tier: 'free', createdAt: T0 });
    expect((await serve.orgs.get('org_cli'))?.name).toBe('cli');
    expect(serve.db.prepare('SELECT COUNT(*) FROM schema_migrations').pluck().get()).toBe(MIGRATIONS.length);
    await cli.close();
    await serve.close();
  });

  it('numbers migrations 1, 2, 3, ... without gaps', () => {
    expect(MIGRATIONS.map((m) => m.version)).toEqual(MIGRATIONS.map((_m, i) => i + 1));
  });

  it('closes twice without error', async () => {
    const store = openSqliteStore(':memory:', REAL_TIME);
    await store.close();
    await expect(store.close()).resolves.toBeUndefined();
  });
});
