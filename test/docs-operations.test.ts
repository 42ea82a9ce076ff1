import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { describe, expect, inject, test } from 'vitest';
import { openPgStore } from '../cloud/src/store/postgres/store.js';
import { REPO_ROOT } from './support/cloud.js';

/**
 * What docs/operations.md tells an operator to run, run: the SQL that creates the PostgreSQL
 * role and database (the cloud must then create its schema there as that role), and the systemd
 * unit of the replicas (systemd's own checker, and a data directory and broker account the
 * service's user gets).
 */

const operations = readFileSync(join(REPO_ROOT, 'docs', 'operations.md'), 'utf8');

/** The text of a `## heading` section. */
function section(heading: string): string {
  const text = operations.split(new RegExp(`^## ${heading}$`, 'm'))[1];
  if (text === undefined) throw new Error(`no section "${heading}"`);
  return text.split(/^## /m)[0]!;
}

/** The fenced blocks of one language in `text` (indented ones too, as in a list item), indentation removed. */
function blocks(text: string, lang: string): string[] {
  return [...text.matchAll(new RegExp(`^( *)\`\`\`${lang}\\n([\\s\\S]*?)^\\1\`\`\``, 'gm'))].map((m) => m[2]!.replace(new RegExp(`^${m[1]}`, 'gm'), ''));
}

const fleetPostgres = inject('fleetPostgres');

describe('docs/operations.md', () => {
  test.skipIf(fleetPostgres === null)('PostgreSQL: the SQL makes a role and database where the cloud creates its schema as that role', async () => {
    const [sql, ...more] = blocks(section('PostgreSQL'), 'sql');
    expect(more).toEqual([]);
    expect(sql).toMatch(/CREATE ROLE fleet\b/);
    // The test server's superuser is itself called fleet: the documented names get a suffix.
    const name = `fleet_docs_${randomBytes(4).toString('hex')}`;
    const password = randomBytes(12).toString('hex');
    const statements = sql!
      .replace(/\bfleet\b/g, name)
      .replace(/'PASSWORD'/g, `'${password}'`)
      .split(';')
      .map((s) => s.trim())
      .filter((s) => s !== '');
    const admin = new pg.Client({ connectionString: fleetPostgres!.adminUrl });
    await admin.connect();
    try {
      // One by one: CREATE DATABASE does not run inside the transaction of a multi-statement query.
      for (const statement of statements) await admin.query(statement);
      const url = new URL(fleetPostgres!.adminUrl);
      url.username = name;
      url.password = password;
      url.pathname = `/${name}`;
      const store = await openPgStore(url.toString());
      try {
        expect((await store.orgs.list()).length).toBe(0);
      } finally {
        await store.close();
      }
      const owner = await admin.query<{ owner: string }>('SELECT pg_get_userbyid(datdba) AS owner FROM pg_database WHERE datname = $1', [name]);
      expect(owner.rows).toEqual([{ owner: name }]);
      const role = await admin.query<{ rolsuper: boolean; rolcreatedb: boolean }>('SELECT rolsuper, rolcreatedb FROM pg_roles WHERE rolname = $1', [name]);
      expect(role.rows).toEqual([{ rolsuper: false, rolcreatedb: false }]);
    } finally {
      await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await admin.query(`DROP ROLE IF EXISTS ${name}`);
      await admin.end();
    }
  });

  const analyze = spawnSync('systemd-analyze', ['--version'], { encoding: 'utf8' });
  test.skipIf(analyze.status !== 0)('replicas: the systemd unit passes systemd-analyze, makes its data directory and hands the account file to its user', () => {
    const [unit, ...more] = blocks(section('Running several replicas behind mosquitto'), 'ini');
    expect(more).toEqual([]);
    const settings = (key: string) => [...unit!.matchAll(new RegExp(`^${key}=(.*)$`, 'gm'))].map((m) => m[1]!);
    const env = new Map(settings('Environment').map((e) => e.split(/=(.*)/s).slice(0, 2) as [string, string]));
    // The data directory is the one StateDirectory= creates, owned by the service's user.
    expect(settings('StateDirectory').map((d) => `/var/lib/${d}`)).toEqual([env.get('FLEET_DATA_DIR')]);
    expect(settings('StateDirectoryMode')).toEqual(['0700']);
    // The root-owned account file reaches the service as a credential it may read.
    const [credential, source] = settings('LoadCredential')[0]?.split(':') ?? [];
    expect(source).toBe('/etc/fleet/cloud-mqtt-account.json');
    expect(env.get('FLEET_MQTT_ACCOUNT_FILE')).toBe(`%d/${credential}`);

    const dir = mkdtempSync(join(tmpdir(), 'unit-'));
    try {
      writeFileSync(join(dir, 'fleet-cloud@.service'), unit!.replace('/usr/bin/node ', `${process.execPath} `));
      const r = spawnSync('systemd-analyze', ['verify', join(dir, 'fleet-cloud@8081.service')], { encoding: 'utf8' });
      // Unknown keys and unresolvable specifiers are only warnings: any output is a failure here.
      expect({ status: r.status, output: `${r.stdout}${r.stderr}` }).toEqual({ status: 0, output: '' });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
