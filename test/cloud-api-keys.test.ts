import { join } from 'node:path';
import { describe, expect, test } from 'vitest';
import type { CreateApiKeyBody, CreatedApiKey } from '@fleet/protocol';
import { FleetApiError } from '@fleet/client';
import { makeTempDir, startCloud, type CloudProcess } from './support/cloud.js';
import { beforeDeadline, untilPast } from './support/wait.js';

interface ErrorBody {
  error: { code: string; message: string; details?: Record<string, unknown> };
}

async function errorOf(res: Response): Promise<ErrorBody['error']> {
  const body = (await res.json()) as ErrorBody;
  return body.error;
}

/** Creates an organization with an admin key through the CLI, as an operator would. */
async function orgWithAdminKey(cloud: CloudProcess, name: string): Promise<{ org: string; key: string }> {
  const org = await cloud.cli(['orgs', 'create', '--name', name, '--tier', 'pro']);
  expect(org.code, org.stderr).toBe(0);
  const orgId = org.stdout.trim();
  const key = await cloud.cli(['keys', 'create', '--org', orgId, '--name', `${name} admin`, '--scopes', 'admin']);
  expect(key.code, key.stderr).toBe(0);
  return { org: orgId, key: key.stdout.trim() };
}

describe('API keys through the admin key', () => {
  test('list, create (key shown once), use, revoke: the next request with the revoked key is 401', async () => {
    await using cloud = await startCloud();
    const admin = cloud.client();

    const before = await admin.apiKeys.list();
    expect(before.api_keys.map((k) => k.name)).toEqual(['bootstrap admin']);

    const created = await admin.apiKeys.create({ name: 'ci reader', scopes: ['data:read'] });
    expect(created.key).toMatch(/^ak_/);
    expect(created).toMatchObject({ name: 'ci reader', scopes: ['data:read'], revoked_at: null, expires_at: null, last_used_at: null });

    // The list shows the key's record, never its plaintext.
    const listRes = await cloud.fetch('/v1/api-keys');
    expect(listRes.status).toBe(200);
    const listText = await listRes.text();
    expect(listText).not.toContain(created.key);
    const listed = (JSON.parse(listText) as { api_keys: Record<string, unknown>[] }).api_keys;
    expect(listed.map((k) => k.id)).toContain(created.id);
    for (const k of listed) expect(k).not.toHaveProperty('key');

    // The new key works within its scope, and only there.
    const reader = cloud.client(created.key);
    expect((await reader.entitlements()).tier).toBe('enterprise');
    const denied = await cloud.fetch('/v1/api-keys', { key: created.key });
    expect(denied.status).toBe(403);
    expect(await errorOf(denied)).toMatchObject({ code: 'insufficient_scope', details: { required_scope: 'admin' } });

    const del = await cloud.fetch(`/v1/api-keys/${created.id}`, { method: 'DELETE' });
    expect(del.status).toBe(204);
    expect(await del.text()).toBe('');

    const after = await cloud.fetch('/v1/entitlements', { key: created.key });
    expect(after.status).toBe(401);
    expect((await errorOf(after)).code).toBe('unauthenticated');
    await expect(reader.entitlements()).rejects.toMatchObject({ status: 401, code: 'unauthenticated' });

    // Revoked stays listed, with the time of the first revocation; revoking again keeps it.
    const revoked = (await admin.apiKeys.list()).api_keys.find((k) => k.id === created.id)!;
    expect(revoked.revoked_at).not.toBeNull();
    expect((await cloud.fetch(`/v1/api-keys/${created.id}`, { method: 'DELETE' })).status).toBe(204);
    expect((await admin.apiKeys.list()).api_keys.find((k) => k.id === created.id)!.revoked_at).toBe(revoked.revoked_at);
  });

  test('an admin key can revoke itself; its next request is 401', async () => {
    await using cloud = await startCloud();
    const second = await cloud.client().apiKeys.create({ name: 'second admin', scopes: ['admin'] });
    const self = cloud.client(second.key);
    await self.apiKeys.revoke(second.id);
    await expect(self.apiKeys.list()).rejects.toMatchObject({ status: 401, code: 'unauthenticated' });
    // The bootstrap key is untouched.
    expect((await cloud.client().apiKeys.list()).api_keys).toHaveLength(2);
  });

  test('missing, malformed and unknown keys are 401 unauthenticated', async () => {
    await using cloud = await startCloud();
    for (const key of [null, 'not-a-key', `ak_${'x'.repeat(40)}`]) {
      const res = await cloud.fetch('/v1/api-keys', { key });
      expect(res.status, String(key)).toBe(401);
      expect((await errorOf(res)).code).toBe('unauthenticated');
      expect(res.headers.get('x-request-id')).toMatch(/^req_/);
    }
  });

  test('malformed create bodies are 400 validation_failed and create nothing', async () => {
    await using cloud = await startCloud();
    for (const json of [{ name: '', scopes: ['admin'] }, { name: 'x', scopes: [] }, { name: 'x', scopes: ['root'] }, { name: 'x', scopes: ['admin', 'admin'] }, { name: 'x'.repeat(129), scopes: ['admin'] }]) {
      const res = await cloud.fetch('/v1/api-keys', { method: 'POST', json });
      expect(res.status, JSON.stringify(json)).toBe(400);
      expect((await errorOf(res)).code).toBe('validation_failed');
    }
    expect((await cloud.client().apiKeys.list()).api_keys).toHaveLength(1);
  });
});

describe('expiring keys', () => {
  test('keys with an expires_at a few seconds ahead (CLI and API) work until then, and are 401 after', async () => {
    await using cloud = await startCloud();
    const org = (await orgsOf(cloud))[0]!;
    // The expiry is judged by another process's clock. What is checked before it counts only if
    // it all happened before it: a machine too slow for the window gets a wider one.
    let attempt = 0;
    const { value: seen, deadline: expiresAt } = await beforeDeadline(
      async (deadline) => {
        const name = `short-lived ${++attempt}`;
        const fromCli = await cloud.cli(['keys', 'create', '--org', org, '--name', name, '--scopes', 'data:read', '--expires-at', deadline.toISOString()]);
        const fromApi = await cloud
          .client()
          .apiKeys.create({ name: `${name} api`, scopes: ['admin'], expires_at: deadline.toISOString() })
          .then(
            (created) => ({ created }),
            (err: unknown) => ({ err }),
          );
        const cliKey = fromCli.stdout.trim();
        return {
          name,
          fromCli,
          cliKey,
          fromApi,
          cliStatus: fromCli.code === 0 ? (await cloud.fetch('/v1/entitlements', { key: cliKey })).status : null,
          apiStatus: 'created' in fromApi ? (await cloud.fetch('/v1/api-keys', { key: fromApi.created.key })).status : null,
          listed: (await cloud.client().apiKeys.list()).api_keys.find((k) => k.name === name),
        };
      },
      { windowMs: 3_000, description: 'creating and using the short-lived keys' },
    );
    expect(seen.fromCli.code, seen.fromCli.stderr).toBe(0);
    if (!('created' in seen.fromApi)) throw seen.fromApi.err;
    const fromApi = seen.fromApi.created;
    expect(fromApi.expires_at).toBe(expiresAt.toISOString());
    expect(seen.cliStatus).toBe(200);
    expect(seen.apiStatus).toBe(200);
    expect(seen.listed?.expires_at).toBe(expiresAt.toISOString());

    await untilPast(expiresAt);
    for (const key of [seen.cliKey, fromApi.key]) {
      const res = await cloud.fetch('/v1/entitlements', { key });
      expect(res.status).toBe(401);
      expect((await errorOf(res)).code).toBe('unauthenticated');
    }
  });

  test('an expires_at in the past is refused by the API and the CLI', async () => {
    await using cloud = await startCloud();
    const past = new Date(Date.now() - 60_000).toISOString();
    await expect(cloud.client().apiKeys.create({ name: 'late', scopes: ['admin'], expires_at: past })).rejects.toMatchObject({
      status: 400,
      code: 'validation_failed',
    });
    const cli = await cloud.cli(['keys', 'create', '--org', (await orgsOf(cloud))[0]!, '--name', 'late', '--scopes', 'admin', '--expires-at', past]);
    expect(cli.code).not.toBe(0);
    expect(cli.stdout).toBe('');
    expect(cli.stderr).toMatch(/future/);
  });
});

async function orgsOf(cloud: CloudProcess): Promise<string[]> {
  const res = await cloud.cli(['orgs', 'list']);
  expect(res.code, res.stderr).toBe(0);
  return res.stdout
    .trim()
    .split('\n')
    .map((l) => (JSON.parse(l) as { id: string }).id);
}

describe('Idempotency-Key over HTTP', () => {
  test('a replay returns the stored response with Idempotent-Replayed; another body with the same key is 422', async () => {
    await using dir = await makeTempDir();
    const dataDir = join(dir.path, 'data');
    const body: CreateApiKeyBody = { name: 'idempotent', scopes: ['data:read'] };
    let firstText: string;
    {
      await using cloud = await startCloud({ dataDir });
      const first = await cloud.fetch('/v1/api-keys', { method: 'POST', json: body, headers: { 'idempotency-key': 'create-1' } });
      expect(first.status).toBe(201);
      expect(first.headers.get('idempotent-replayed')).toBeNull();
      firstText = await first.text();

      const replay = await cloud.fetch('/v1/api-keys', { method: 'POST', json: body, headers: { 'idempotency-key': 'create-1' } });
      expect(replay.status).toBe(201);
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(await replay.text()).toBe(firstText);

      const reused = await cloud.fetch('/v1/api-keys', { method: 'POST', json: { ...body, name: 'other' }, headers: { 'idempotency-key': 'create-1' } });
      expect(reused.status).toBe(422);
      expect((await errorOf(reused)).code).toBe('idempotency_key_reused');

      // One key was created, not two or three.
      const names = (await cloud.client().apiKeys.list()).api_keys.map((k) => k.name);
      expect(names.filter((n) => n === 'idempotent')).toHaveLength(1);
      expect(names).not.toContain('other');

      // The FleetClient sends the header too.
      const viaClient = await cloud.client().apiKeys.create(body, { idempotencyKey: 'create-1' });
      expect(viaClient).toEqual(JSON.parse(firstText) as CreatedApiKey);
    }
    // The stored response survives a restart (it is sealed with the data dir's secret key).
    await using again = await startCloud({ dataDir });
    const replay = await again.fetch('/v1/api-keys', { method: 'POST', json: body, headers: { 'idempotency-key': 'create-1' } });
    expect(replay.status).toBe(201);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(await replay.text()).toBe(firstText);
  });

  test('keys are per organization: another org may use the same Idempotency-Key', async () => {
    await using cloud = await startCloud();
    const other = await orgWithAdminKey(cloud, 'Other');
    const a = await cloud.fetch('/v1/api-keys', { method: 'POST', json: { name: 'a', scopes: ['admin'] }, headers: { 'idempotency-key': 'shared' } });
    const b = await cloud.fetch('/v1/api-keys', { method: 'POST', key: other.key, json: { name: 'b', scopes: ['admin'] }, headers: { 'idempotency-key': 'shared' } });
    expect(a.status).toBe(201);
    expect(b.status).toBe(201);
    expect(b.headers.get('idempotent-replayed')).toBeNull();
    expect(((await b.json()) as { name: string }).name).toBe('b');
  });
});

describe('organizations are isolated', () => {
  test("org B's admin key cannot see or revoke org A's keys (404), and A's key keeps working", async () => {
    await using cloud = await startCloud();
    const a = cloud.client();
    const aKey = await a.apiKeys.create({ name: 'a-reader', scopes: ['data:read'] });
    const b = await orgWithAdminKey(cloud, 'Org B');
    const bClient = cloud.client(b.key);

    const bList = await bClient.apiKeys.list();
    expect(bList.api_keys.map((k) => k.name)).toEqual(['Org B admin']);
    const aIds = (await a.apiKeys.list()).api_keys.map((k) => k.id);
    for (const k of bList.api_keys) expect(aIds).not.toContain(k.id);

    for (const id of aIds) {
      const res = await cloud.fetch(`/v1/api-keys/${id}`, { method: 'DELETE', key: b.key });
      expect(res.status).toBe(404);
      expect((await errorOf(res)).code).toBe('not_found');
    }
    // The error for another org's key is the same as for a key that never existed.
    const unknown = await cloud.fetch('/v1/api-keys/key_doesnotexist', { method: 'DELETE', key: b.key });
    expect(unknown.status).toBe(404);
    expect((await errorOf(unknown)).code).toBe('not_found');

    expect((await cloud.fetch('/v1/entitlements', { key: aKey.key })).status).toBe(200);
    expect((await a.apiKeys.list()).api_keys.every((k) => k.revoked_at === null)).toBe(true);
    // And B's entitlements are B's own.
    expect((await bClient.entitlements()).tier).toBe('pro');
    await expect(bClient.apiKeys.revoke(aKey.id)).rejects.toBeInstanceOf(FleetApiError);
  });
});
