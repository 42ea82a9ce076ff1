import { existsSync, mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';
import { makeTempDir, REPO_ROOT, runCloudCli, startCloud, type CloudProcess } from './support/cloud.js';

const ORG_ID = /^org_[a-z0-9]+$/;
const KEY = /^ak_[A-Za-z0-9_-]{16,128}$/;

async function ok(cloud: CloudProcess, args: string[]): Promise<string> {
  const res = await cloud.cli(args);
  expect(res.code, `fleet-cloud ${args.join(' ')}\n${res.stderr}`).toBe(0);
  return res.stdout.trim();
}

async function errorCode(res: Response): Promise<string> {
  return ((await res.json()) as { error: { code: string } }).error.code;
}

describe('fleet-cloud CLI against a running serve on the same data dir', () => {
  test('orgs create, keys create: the key works against the running server at once', async () => {
    await using cloud = await startCloud();
    const org = await ok(cloud, ['orgs', 'create', '--name', 'Acme Robotics', '--tier', 'free']);
    expect(org).toMatch(ORG_ID);

    const listed = (await ok(cloud, ['orgs', 'list'])).split('\n').map((l) => JSON.parse(l) as { id: string; name: string; tier: string });
    expect(listed).toContainEqual(expect.objectContaining({ id: org, name: 'Acme Robotics', tier: 'free' }));
    expect(listed).toHaveLength(2);

    const key = await ok(cloud, ['keys', 'create', '--org', org, '--name', 'ops', '--scopes', 'data:read,admin']);
    expect(key).toMatch(KEY);
    const client = cloud.client(key);
    const keys = await client.apiKeys.list();
    expect(keys.api_keys).toEqual([expect.objectContaining({ name: 'ops', scopes: ['data:read', 'admin'], created_by: 'cli' })]);
    const ent = await client.entitlements();
    expect(ent.tier).toBe('free');
    expect(ent.features).toMatchObject({ 'api.access': true, 'api.robot_commands': false });
  });

  test('orgs set-feature api.access=false gates the very next request; =true and =default restore it', async () => {
    await using cloud = await startCloud();
    const org = await ok(cloud, ['orgs', 'create', '--name', 'Gated', '--tier', 'free']);
    const key = await ok(cloud, ['keys', 'create', '--org', org, '--name', 'admin', '--scopes', 'admin']);
    // A request before the change, so a cached answer would show.
    expect((await cloud.fetch('/v1/api-keys', { key })).status).toBe(200);

    await ok(cloud, ['orgs', 'set-feature', org, 'api.access=false']);
    const gated = await cloud.fetch('/v1/api-keys', { key });
    expect(gated.status).toBe(403);
    const body = (await gated.json()) as { error: { code: string; details: Record<string, unknown> } };
    expect(body.error).toMatchObject({ code: 'entitlement_required', details: { feature: 'api.access' } });
    // Entitlements stay readable, so the caller can see what it lacks.
    expect((await cloud.client(key).entitlements()).features['api.access']).toBe(false);
    // The bootstrap organization is not affected.
    expect((await cloud.fetch('/v1/api-keys')).status).toBe(200);

    await ok(cloud, ['orgs', 'set-feature', org, 'api.access=true']);
    expect((await cloud.fetch('/v1/api-keys', { key })).status).toBe(200);

    await ok(cloud, ['orgs', 'set-feature', org, 'api.access=false']);
    expect((await cloud.fetch('/v1/api-keys', { key })).status).toBe(403);
    await ok(cloud, ['orgs', 'set-feature', org, 'api.access=default']);
    expect((await cloud.fetch('/v1/api-keys', { key })).status).toBe(200);
    const listed = (await ok(cloud, ['orgs', 'list'])).split('\n').map((l) => JSON.parse(l) as { id: string; features: object });
    expect(listed.find((o) => o.id === org)!.features).toEqual({});
  });

  test('orgs set-tier and set-limit are reflected by GET /v1/entitlements and enforced', async () => {
    await using cloud = await startCloud();
    const org = await ok(cloud, ['orgs', 'create', '--name', 'Upgrader', '--tier', 'free']);
    const key = await ok(cloud, ['keys', 'create', '--org', org, '--name', 'admin', '--scopes', 'admin']);
    const client = cloud.client(key);
    expect(await client.entitlements()).toMatchObject({ tier: 'free', features: { 'api.robot_commands': false }, limits: { api_keys: 10 } });

    await ok(cloud, ['orgs', 'set-tier', org, 'pro']);
    expect(await client.entitlements()).toMatchObject({ tier: 'pro', features: { 'api.robot_commands': true }, limits: { api_keys: 100 } });

    // One active key already: a limit of 1 refuses the next.
    await ok(cloud, ['orgs', 'set-limit', org, 'api_keys=1']);
    expect((await client.entitlements()).limits.api_keys).toBe(1);
    const refused = await cloud.fetch('/v1/api-keys', { key, method: 'POST', json: { name: 'two', scopes: ['data:read'] } });
    expect(refused.status).toBe(409);
    expect(await errorCode(refused)).toBe('conflict');
    const cliRefused = await cloud.cli(['keys', 'create', '--org', org, '--name', 'two', '--scopes', 'data:read']);
    expect(cliRefused.code).not.toBe(0);
    expect(cliRefused.stdout).toBe('');
    expect(cliRefused.stderr).toMatch(/limit/);

    await ok(cloud, ['orgs', 'set-limit', org, 'api_keys=default']);
    expect((await client.entitlements()).limits.api_keys).toBe(100);
    expect((await cloud.fetch('/v1/api-keys', { key, method: 'POST', json: { name: 'two', scopes: ['data:read'] } })).status).toBe(201);
  });

  describe('bad input exits non-zero with a message on stderr and changes nothing', () => {
    const cases: { what: string; args: (org: string) => string[]; stderr: RegExp }[] = [
      { what: 'unknown tier on create', args: () => ['orgs', 'create', '--name', 'x', '--tier', 'gold'], stderr: /tier/ },
      { what: 'unknown tier on set-tier', args: (org) => ['orgs', 'set-tier', org, 'gold'], stderr: /tier/ },
      { what: 'missing org on set-tier', args: () => ['orgs', 'set-tier', 'org_missing', 'pro'], stderr: /no organization org_missing/ },
      { what: 'unknown feature', args: (org) => ['orgs', 'set-feature', org, 'robots.fly=true'], stderr: /FEATURE/ },
      { what: 'bad feature value', args: (org) => ['orgs', 'set-feature', org, 'api.access=maybe'], stderr: /FEATURE=true\|false\|default/ },
      { what: 'missing org on set-feature', args: () => ['orgs', 'set-feature', 'org_missing', 'api.access=false'], stderr: /no organization/ },
      { what: 'bad limit value', args: (org) => ['orgs', 'set-limit', org, 'api_keys=lots'], stderr: /NAME=NUMBER/ },
      { what: 'missing org on set-limit', args: () => ['orgs', 'set-limit', 'org_missing', 'api_keys=3'], stderr: /no organization/ },
      { what: 'unknown limit name', args: (org) => ['orgs', 'set-limit', org, 'robotz=3'], stderr: /unknown limit robotz.*api_keys/ },
      { what: 'limit name with a dot', args: (org) => ['orgs', 'set-limit', org, 'api.keys=3'], stderr: /unknown limit api\.keys/ },
      { what: 'fractional limit', args: (org) => ['orgs', 'set-limit', org, 'api_keys=1.5'], stderr: /whole number/ },
      { what: 'negative limit', args: (org) => ['orgs', 'set-limit', org, 'robots=-1'], stderr: /whole number/ },
      { what: 'missing --name on create', args: () => ['orgs', 'create'], stderr: /--name/ },
      { what: 'empty --name on create', args: () => ['orgs', 'create', '--name', ''], stderr: /--name/ },
      { what: 'unknown scope', args: (org) => ['keys', 'create', '--org', org, '--name', 'k', '--scopes', 'data:read,root'], stderr: /unknown scope root/ },
      { what: 'duplicate scope', args: (org) => ['keys', 'create', '--org', org, '--name', 'k', '--scopes', 'admin,admin'], stderr: /unique/ },
      { what: 'missing org on keys create', args: () => ['keys', 'create', '--org', 'org_missing', '--name', 'k', '--scopes', 'admin'], stderr: /no organization org_missing/ },
      { what: 'missing --scopes', args: (org) => ['keys', 'create', '--org', org, '--name', 'k'], stderr: /--scopes/ },
      { what: 'bad --expires-at', args: (org) => ['keys', 'create', '--org', org, '--name', 'k', '--scopes', 'admin', '--expires-at', 'tomorrow'], stderr: /expires-at/ },
      { what: 'unknown command', args: () => ['orgs', 'delete', 'org_x'], stderr: /unknown command|error/ },
    ];

    test('every case, against one running server', async () => {
      await using cloud = await startCloud();
      const org = await ok(cloud, ['orgs', 'create', '--name', 'Target', '--tier', 'free']);
      const before = await ok(cloud, ['orgs', 'list']);
      const failures: string[] = [];
      // Independent, and none may change anything: run them side by side, a few at a time (twenty
      // node processes at once on a loaded 2-core machine starve each other past any timeout).
      const results: Awaited<ReturnType<typeof cloud.cli>>[] = [];
      for (let i = 0; i < cases.length; i += 3) results.push(...(await Promise.all(cases.slice(i, i + 3).map((c) => cloud.cli(c.args(org))))));
      for (const [i, c] of cases.entries()) {
        const res = results[i]!;
        if (res.code === 0 || res.code === null) failures.push(`${c.what}: exit ${res.code}`);
        if (!c.stderr.test(res.stderr)) failures.push(`${c.what}: stderr ${JSON.stringify(res.stderr)} does not match ${c.stderr}`);
        if (KEY.test(res.stdout.trim()) || ORG_ID.test(res.stdout.trim())) failures.push(`${c.what}: printed ${res.stdout.trim()}`);
      }
      expect(failures).toEqual([]);
      expect(await ok(cloud, ['orgs', 'list'])).toBe(before);
      // No key was created for the target organization.
      const admin = await ok(cloud, ['keys', 'create', '--org', org, '--name', 'check', '--scopes', 'admin']);
      expect((await cloud.client(admin).apiKeys.list()).api_keys.map((k) => k.name)).toEqual(['check']);
    });
  });

  test('set-limit takes every limit a tier names, request rates included', async () => {
    await using cloud = await startCloud();
    const org = await ok(cloud, ['orgs', 'create', '--name', 'Limits', '--tier', 'free']);
    const key = await ok(cloud, ['keys', 'create', '--org', org, '--name', 'admin', '--scopes', 'admin']);
    for (const name of ['api_keys', 'robots', 'webhook_subscriptions', 'requests_per_minute_per_key', 'requests_per_minute_per_org']) {
      await ok(cloud, ['orgs', 'set-limit', org, `${name}=1000`]);
    }
    expect((await cloud.client(key).entitlements()).limits).toEqual({
      api_keys: 1000,
      robots: 1000,
      webhook_subscriptions: 1000,
      requests_per_minute_per_key: 1000,
      requests_per_minute_per_org: 1000,
    });
  });

  test('--version prints the version of cloud/package.json', async () => {
    const { version } = JSON.parse(readFileSync(join(REPO_ROOT, 'cloud', 'package.json'), 'utf8')) as { version: string };
    for (const flag of ['--version', '-V']) {
      const res = await runCloudCli([flag]);
      expect(res.code, res.stderr).toBe(0);
      expect(res.stdout.trim()).toBe(version);
    }
  });

  test('--help works for every command', async () => {
    const commands = [[], ['serve'], ['orgs'], ['orgs', 'create'], ['orgs', 'list'], ['orgs', 'set-tier'], ['orgs', 'set-feature'], ['orgs', 'set-limit'], ['keys'], ['keys', 'create'], ['openapi']];
    const results = await Promise.all(commands.map((c) => runCloudCli([...c, '--help'])));
    results.forEach((res, i) => {
      const name = ['fleet-cloud', ...commands[i]!].join(' ');
      expect(res.code, `${name} --help: ${res.stderr}`).toBe(0);
      expect(res.stdout).toContain(`Usage: ${name}`);
    });
    const root = results[0]!.stdout;
    for (const c of ['serve', 'orgs', 'keys', 'openapi']) expect(root).toContain(c);
    const serve = results[1]!.stdout;
    for (const flag of ['--data-dir', '--http-port', '--mqtt-port', 'FLEET_HTTP_PORT', 'FLEET_DATA_DIR']) expect(serve).toContain(flag);
  });

  test('openapi prints the document the server serves', async () => {
    await using cloud = await startCloud();
    const printed = await cloud.cli(['openapi'], { withDataDir: false });
    expect(printed.code, printed.stderr).toBe(0);
    const served = await (await cloud.fetch('/v1/openapi.json', { key: null })).json();
    expect(JSON.parse(printed.stdout)).toEqual(served);
  });
});

describe('administration commands need an existing database', () => {
  const commands: string[][] = [
    ['orgs', 'create', '--name', 'x'],
    ['orgs', 'list'],
    ['orgs', 'set-tier', 'org_x', 'pro'],
    ['orgs', 'set-feature', 'org_x', 'api.access=false'],
    ['orgs', 'set-limit', 'org_x', 'robots=3'],
    ['keys', 'create', '--org', 'org_x', '--name', 'k', '--scopes', 'admin'],
  ];

  test('every command refuses a --data-dir without a database (missing or empty directory) and creates nothing', async () => {
    await using tmp = await makeTempDir();
    const missing = join(tmp.path, 'typo');
    const empty = join(tmp.path, 'empty');
    mkdirSync(empty);
    const runs = commands.flatMap((c) => [missing, empty].map((dir) => ({ c, dir })));
    const results = await Promise.all(runs.map(({ c, dir }) => runCloudCli([...c, '--data-dir', dir])));
    const failures: string[] = [];
    results.forEach((res, i) => {
      const { c, dir } = runs[i]!;
      const what = `${c.join(' ')} --data-dir ${dir === missing ? '<missing>' : '<empty>'}`;
      if (res.code !== 1) failures.push(`${what}: exit ${res.code}`);
      if (!/no database in .*cloud\.sqlite does not exist/.test(res.stderr)) failures.push(`${what}: stderr ${JSON.stringify(res.stderr)}`);
      if (/\n\s+at /.test(res.stderr)) failures.push(`${what}: stack trace on stderr`);
      if (res.stdout !== '') failures.push(`${what}: printed ${JSON.stringify(res.stdout)}`);
    });
    expect(failures).toEqual([]);
    expect(existsSync(missing)).toBe(false);
    expect(readdirSync(empty)).toEqual([]);
  });
});
