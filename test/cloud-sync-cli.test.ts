import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';
import type { Destination, RoutingRule } from '@fleet/protocol';
import { makeTempDir, runCloudCli, startCloud, type CloudProcess } from './support/cloud.js';

async function ok(cloud: CloudProcess, args: string[]): Promise<string> {
  const res = await cloud.cli(args);
  expect(res.code, `fleet-cloud ${args.join(' ')}\n${res.stderr}`).toBe(0);
  return res.stdout.trim();
}

const lines = <T>(out: string): T[] => (out === '' ? [] : out.split('\n').map((l) => JSON.parse(l) as T));

describe('fleet-cloud destinations and routing-rules against a running serve', () => {
  test('create, list, order, delete and revoke; the secret is printed once; the API sees the same rows', async () => {
    await using cloud = await startCloud();
    const org = (JSON.parse((await ok(cloud, ['orgs', 'list'])).split('\n')[0]!) as { id: string }).id;
    const client = cloud.client();

    const created = JSON.parse(await ok(cloud, ['destinations', 'create', '--org', org, '--url', 'https://grants.example.com/v1', '--retention', 'until_all_verified_plus_72h'])) as Destination & { secret: string };
    expect(created).toMatchObject({ type: 'external', url: 'https://grants.example.com/v1', retention: 'until_all_verified_plus_72h', revoked_at: null });
    expect(created.secret).toMatch(/^dsec_[A-Za-z0-9_-]{43}$/);
    const second = JSON.parse(await ok(cloud, ['destinations', 'create', '--org', org, '--url', 'https://other.example.com/g'])) as Destination;

    const listedOut = await ok(cloud, ['destinations', 'list', '--org', org]);
    expect(listedOut).not.toContain(created.secret);
    expect(lines<Destination>(listedOut).map((d) => d.id)).toEqual([created.id, second.id]);
    expect((await client.destinations.list()).destinations.map((d) => d.id)).toEqual([created.id, second.id]);

    const r1 = JSON.parse(await ok(cloud, ['routing-rules', 'create', '--org', org, '--destination', created.id, '--match', '{"robot_id":["rbt_a","rbt_b"],"has_autonomous":"true"}'])) as RoutingRule;
    expect(r1).toMatchObject({ destination_id: created.id, match: { robot_id: ['rbt_a', 'rbt_b'], has_autonomous: ['true'] }, position: 1 });
    const r2 = JSON.parse(await ok(cloud, ['routing-rules', 'create', '--org', org, '--destination', second.id])) as RoutingRule;
    expect(r2).toMatchObject({ match: {}, position: 2 });

    const ordered = lines<RoutingRule>(await ok(cloud, ['routing-rules', 'order', '--org', org, r2.id, r1.id]));
    expect(ordered.map((r) => [r.id, r.position])).toEqual([
      [r2.id, 1],
      [r1.id, 2],
    ]);
    expect((await client.routingRules.list()).routing_rules.map((r) => r.id)).toEqual([r2.id, r1.id]);

    // Refusals: one line on stderr, exit 1, nothing written.
    const bad = await cloud.cli(['routing-rules', 'create', '--org', org, '--destination', created.id, '--match', '{"colour":"red"}']);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/invalid routing rule/);
    const partial = await cloud.cli(['routing-rules', 'order', '--org', org, r1.id]);
    expect(partial.code).toBe(1);
    const privateUrl = await cloud.cli(['destinations', 'create', '--org', org, '--url', 'https://10.0.0.1/g']);
    expect(privateUrl.code).toBe(1);
    expect(privateUrl.stderr).toMatch(/validation_failed/);
    const unknownOrg = await cloud.cli(['destinations', 'list', '--org', 'org_nope']);
    expect(unknownOrg.code).toBe(1);
    expect(unknownOrg.stderr).toMatch(/no organization org_nope/);

    await ok(cloud, ['routing-rules', 'delete', '--org', org, r2.id]);
    expect(lines<RoutingRule>(await ok(cloud, ['routing-rules', 'list', '--org', org])).map((r) => [r.id, r.position])).toEqual([[r1.id, 1]]);
    expect((await cloud.cli(['routing-rules', 'delete', '--org', org, r2.id])).code).toBe(1);

    await ok(cloud, ['destinations', 'revoke', '--org', org, second.id]);
    const after = (await client.destinations.list()).destinations.find((d) => d.id === second.id)!;
    expect(after.revoked_at).not.toBeNull();
    expect((await cloud.cli(['destinations', 'revoke', '--org', org, 'dst_nope'])).code).toBe(1);
    // A rule cannot point at a revoked destination.
    const revokedRule = await cloud.cli(['routing-rules', 'create', '--org', org, '--destination', second.id]);
    expect(revokedRule.code).toBe(1);
    expect(revokedRule.stderr).toMatch(/revoked/);
  });

  test('refuses a data directory without a database and creates none', async () => {
    await using dir = await makeTempDir();
    for (const args of [
      ['destinations', 'list', '--org', 'org_x'],
      ['routing-rules', 'list', '--org', 'org_x'],
    ]) {
      const res = await runCloudCli([...args, '--data-dir', dir.path]);
      expect(res.code).toBe(1);
      expect(res.stderr).toMatch(/no database/);
    }
    expect(existsSync(join(dir.path, 'cloud.sqlite'))).toBe(false);
  });
});
