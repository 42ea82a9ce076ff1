import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';
import { databaseEnv, makeTempDir, parseAddressLine, runCloudCli, startCloud } from './support/cloud.js';

const KEY_LINE = /^ak_[A-Za-z0-9_-]{16,128}$/;

describe('first start on an empty data directory', () => {
  test('prints the admin key once, then the address line; admin-key is 0600 with the same key', async () => {
    await using cloud = await startCloud();
    const lines = cloud.stdoutLines;
    const keyLines = lines.filter((l) => KEY_LINE.test(l));
    expect(keyLines).toHaveLength(1);
    const printed = keyLines[0]!;
    expect(lines.filter((l) => l.includes('ak_'))).toEqual([printed]);
    expect(lines.some((l) => l.startsWith('First start: created organization org_'))).toBe(true);
    // The address line comes after the key, and is the last thing printed (by each replica, when
    // the suites run on several: one of them created the organization and printed the key).
    const own = cloud.processes.find((p) => p.stdoutLines.includes(printed))!.stdoutLines;
    const addressAt = own.findIndex((l) => parseAddressLine(l) !== null);
    expect(addressAt).toBeGreaterThan(own.indexOf(printed));
    for (const p of cloud.processes) expect(parseAddressLine(p.stdoutLines.at(-1)!)).not.toBeNull();
    if (cloud.processes.length === 1) expect(parseAddressLine(own[addressAt]!)).toEqual({ http: cloud.http, mqtt: cloud.mqtt });
    expect(cloud.http).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(cloud.mqtt).toMatch(/^mqtt:\/\/127\.0\.0\.1:\d+$/);

    const file = join(cloud.dataDir, 'admin-key');
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(readFileSync(file, 'utf8')).toBe(`${printed}\n`);
    expect(cloud.adminKey).toBe(printed);

    // The key is an admin key of an enterprise organization.
    const list = await cloud.client().apiKeys.list();
    expect(list.api_keys).toHaveLength(1);
    expect(list.api_keys[0]).toMatchObject({ name: 'bootstrap admin', scopes: ['admin'], created_by: 'bootstrap', revoked_at: null, expires_at: null });
    expect((await cloud.client().entitlements()).tier).toBe('enterprise');
    // Logs are on stderr and never carry the key, although it was just used: once the log line
    // of the request that used it has been read (stderr is another pipe than the answer).
    await cloud.waitForStderr((l) => l.includes('/v1/entitlements'), { description: 'the log line of GET /v1/entitlements' });
    expect(cloud.stderrLines.join('\n')).not.toContain(printed);
  });

  test('a second start on the same data dir creates no organization and prints no key', async () => {
    await using dir = await makeTempDir();
    const dataDir = join(dir.path, 'data');
    let firstKey: string;
    {
      await using first = await startCloud({ dataDir });
      firstKey = first.adminKey;
      expect(first.stdoutLines.filter((l) => KEY_LINE.test(l))).toEqual([firstKey]);
    }
    await using second = await startCloud({ dataDir });
    for (const p of second.processes) {
      expect(p.stdoutLines).toHaveLength(1);
      expect(parseAddressLine(p.stdoutLines[0]!)).not.toBeNull();
    }
    expect(second.stdoutLines.join('\n')).not.toMatch(/ak_|First start/);
    expect(second.adminKey).toBe(firstKey);

    const orgs = await second.cli(['orgs', 'list']);
    expect(orgs.code).toBe(0);
    expect(orgs.stdout.trim().split('\n')).toHaveLength(1);
    // The first key still works and is still the only one.
    const list = await second.client(firstKey).apiKeys.list();
    expect(list.api_keys.map((k) => k.name)).toEqual(['bootstrap admin']);
  });

  test('a start with another secret key than the stored secrets were sealed with is refused, and says so', async () => {
    await using dir = await makeTempDir();
    const dataDir = join(dir.path, 'data');
    {
      await using first = await startCloud({ dataDir });
      expect(first.adminKey).toMatch(KEY_LINE);
    }
    const otherKey = Buffer.alloc(32, 7).toString('base64');
    const res = await runCloudCli(['serve', '--data-dir', dataDir, '--http-port', '0', '--mqtt-port', '0'], {
      env: { ...(await databaseEnv(dataDir)), FLEET_SECRET_KEY: otherKey },
      timeoutMs: 20_000,
    });
    expect(res.code).toBe(1);
    expect(res.stderr).toMatch(/secret key \(fingerprint [0-9a-f]{32}\) is not the one this database's stored secrets were sealed with/);
    expect(res.stderr).not.toContain(otherKey);
    expect(res.stdout).not.toMatch(/"http"/);
    // The right key still starts it.
    await using again = await startCloud({ dataDir });
    expect(parseAddressLine(again.stdoutLines.at(-1)!)).not.toBeNull();
  });

  test('a stale admin-key file from an earlier installation is replaced with mode 0600', async () => {
    await using dir = await makeTempDir();
    const dataDir = join(dir.path, 'data');
    // e.g. the database was deleted to start over, but the old key file was left (and copied
    // around with a lax mode): the new key must not inherit its permissions.
    mkdirSync(dataDir, { mode: 0o700 });
    writeFileSync(join(dataDir, 'admin-key'), 'ak_stale_key_from_before_0000000\n', { mode: 0o644 });
    await using cloud = await startCloud({ dataDir });
    const printed = cloud.stdoutLines.find((l) => KEY_LINE.test(l));
    expect(printed).toBeDefined();
    expect(cloud.adminKey).toBe(printed);
    expect(statSync(join(dataDir, 'admin-key')).mode & 0o777).toBe(0o600);
  });

  test('orgs create before the first serve is refused: only serve creates the database, and then bootstraps', async () => {
    await using dir = await makeTempDir();
    const dataDir = join(dir.path, 'data');
    const created = await runCloudCli(['orgs', 'create', '--name', 'early', '--data-dir', dataDir]);
    expect(created.code).toBe(1);
    expect(created.stderr).toMatch(/no database in .*fleet-cloud serve/s);
    expect(existsSync(dataDir)).toBe(false);
    await using cloud = await startCloud({ dataDir });
    expect(cloud.stdoutLines.filter((l) => KEY_LINE.test(l))).toEqual([cloud.adminKey]);
    const orgs = await cloud.cli(['orgs', 'list']);
    expect(orgs.stdout.trim().split('\n').map((l) => (JSON.parse(l) as { name: string }).name)).toEqual(['default']);
  });
});

describe('a first start that cannot listen', () => {
  for (const listener of ['HTTP', 'MQTT'] as const) {
    test(`${listener} port taken: says which port, exits 1 without a stack trace, and creates no organization or key`, async () => {
      await using dir = await makeTempDir();
      const dataDir = join(dir.path, 'data');
      const taken = createServer();
      await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
      try {
        const port = (taken.address() as AddressInfo).port;
        const ports = listener === 'HTTP' ? ['--http-port', String(port), '--mqtt-port', '0'] : ['--http-port', '0', '--mqtt-port', String(port)];
        const res = await runCloudCli(['serve', '--data-dir', dataDir, '--host', '127.0.0.1', ...ports], { timeoutMs: 30_000 });
        expect(res.code).toBe(1);
        expect(res.stderr).toContain(`cannot listen for ${listener} on 127.0.0.1:${port}: address already in use`);
        expect(res.stderr).not.toMatch(/\n\s+at /);
        expect(res.stdout).not.toMatch(/ak_|First start/);
        expect(existsSync(join(dataDir, 'admin-key'))).toBe(false);
        // The database may exist (serve opened it), but holds no organization and no key.
        const orgs = await runCloudCli(['orgs', 'list', '--data-dir', dataDir]);
        expect(orgs.code, orgs.stderr).toBe(0);
        expect(orgs.stdout).toBe('');
      } finally {
        await new Promise((resolve) => taken.close(resolve));
      }
      // Once the port is free, the first start bootstraps as usual.
      await using cloud = await startCloud({ dataDir });
      expect(cloud.stdoutLines.filter((l) => KEY_LINE.test(l))).toEqual([cloud.adminKey]);
    });
  }
});
