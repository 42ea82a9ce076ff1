/**
 * The customer CLI `fleet` (packages/client/dist/cli.js) as a real process against a real
 * `fleet-cloud serve` with a simulated robot: lists with filters in both output forms, an export
 * cut off mid-way (a proxy drops the connection on the second page) and finished with --resume,
 * usage and API errors with their exit codes, and the config file: written 0600 by login,
 * refused when others may read it. Read links last: a destination served by the reference grant
 * provider into the S3 server, one episode uploaded and verified, its links printed and read.
 */
import { chmodSync, existsSync, readFileSync, statSync, writeFileSync, appendFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import type { FleetClient } from '@fleet/client';
import { READ_LINKS_MAX_FILES, STREAM_PAGE_LIMIT } from '@fleet/protocol';
import { request } from 'undici';
import { createTestPki, type TestPki } from '../cloud/src/egress/test-https.js';
import { cleanEnv, makeTempDir, REPO_ROOT, startCloud, type CloudProcess, type TempDir } from './support/cloud.js';
import { getEpisode } from './support/episodes.js';
import { startGrantProvider, writeProviderTls, type GrantProviderProcess } from './support/grant-provider.js';
import { freePort } from './support/http.js';
import { runProcess, type RunResult } from './support/process.js';
import { startFleet, type FleetProcess } from './support/robots.js';
import { startS3Server, type S3ServerProcess } from './support/s3-server.js';
import { waitFor } from './support/wait.js';

const FLEET_CLI = join(REPO_ROOT, 'packages', 'client', 'dist', 'cli.js');

let pki: TestPki;
let s3: S3ServerProcess;
let cloud: CloudProcess;
let fleet: FleetProcess;
let tmp: TempDir;
let robot: string;
let recorded: string[] = [];

function fleetCli(args: readonly string[], env: Record<string, string | undefined> = {}, cwd = REPO_ROOT): Promise<RunResult> {
  return runProcess(process.execPath, [FLEET_CLI, ...args], {
    name: `fleet ${args.join(' ')}`,
    cwd,
    // No FLEET_* of the developer's, and a HOME with no config file in it.
    env: cleanEnv({ HOME: tmp.path, XDG_CONFIG_HOME: undefined, ...env }),
    timeoutMs: 60_000,
  });
}
const withKey = () => ({ FLEET_URL: cloud.http, FLEET_API_KEY: cloud.adminKey });

async function record(c: FleetClient, end: 'finish' | 'fail'): Promise<string> {
  await waitFor(async () => ((await c.robots.get(robot)).recording_state === 'idle' ? true : undefined), { timeoutMs: 30_000, description: 'the robot idle' });
  const started = await c.robots.startEpisode(robot);
  await (end === 'finish' ? c.robots.finishEpisode(robot) : c.robots.failEpisode(robot));
  return String((started.result as { episode_id?: string }).episode_id);
}

beforeAll(async () => {
  tmp = await makeTempDir('fleet-cli-');
  // For read links (the last tests): the provider's CA, and the bucket's origin allowed.
  pki = createTestPki();
  s3 = await startS3Server();
  cloud = await startCloud({ args: ['--egress-allow-loopback', '--egress-ca-file', pki.caFile, '--read-origin', s3.endpoint] });
  fleet = await startFleet(cloud, { count: 1, subtaskMs: 100, args: ['--bytes-per-second', '4096', '--allow-http-uploads'] });
  robot = fleet.robots[0]!;
  const c = cloud.client();
  for (const end of ['finish', 'finish', 'fail', 'finish', 'finish'] as const) recorded.push(await record(c, end));
  await waitFor(async () => ((await c.episodes.list({ robot_id: robot }, { limit: 100 })).episodes.length >= recorded.length ? true : undefined), {
    timeoutMs: 60_000,
    intervalMs: 200,
    description: 'the recorded episodes in the index',
  });
  recorded = (await c.episodes.list({ robot_id: robot }, { limit: 100 })).episodes.map((e) => e.id);
}, 120_000);

afterAll(async () => {
  await fleet?.[Symbol.asyncDispose]();
  await cloud?.[Symbol.asyncDispose]();
  await s3?.close();
  await tmp?.[Symbol.asyncDispose]();
  pki?.cleanup();
});

describe('fleet CLI', () => {
  test('--version, and robots list as a table and as JSON', async () => {
    const version = await fleetCli(['--version']);
    expect(version.code).toBe(0);
    expect(version.stdout.trim()).toMatch(/^\d+\.\d+\.\d+$/);

    const table = await fleetCli(['robots', 'list'], withKey());
    expect(table.code, table.stderr).toBe(0);
    expect(table.stdout.split('\n')[0]).toMatch(/^ID\s+NAME\s+CONNECTED/);
    expect(table.stdout).toContain(robot);

    const json = await fleetCli(['robots', 'list', '--json'], withKey());
    expect((JSON.parse(json.stdout) as { robots: { id: string }[] }).robots.map((r) => r.id)).toEqual([robot]);
  });

  test('episodes list with filters, one page and --all', async () => {
    const page = await fleetCli(['--json', 'episodes', 'list', '--robot-id', robot, '--outcome', 'success', '--limit', '2'], withKey());
    expect(page.code, page.stderr).toBe(0);
    const body = JSON.parse(page.stdout) as { episodes: { id: string; robot_id: string; outcome: string }[]; cursor: string | null };
    expect(body.episodes).toHaveLength(2);
    expect(body.episodes.every((e) => e.robot_id === robot && e.outcome === 'success')).toBe(true);
    expect(body.cursor).toBeTruthy();

    const all = await fleetCli(['episodes', 'list', '--robot-id', robot, '--outcome', 'failure', '--all', '--json'], withKey());
    expect((JSON.parse(all.stdout) as { episodes: { outcome: string }[] }).episodes.map((e) => e.outcome)).toEqual(['failure']);

    const table = await fleetCli(['episodes', 'list', '--robot-id', robot, '--limit', '2'], withKey());
    expect(table.code).toBe(0);
    expect(table.stdout.trim().split('\n')).toHaveLength(3);
    expect(table.stderr).toMatch(/^more: --cursor \S+/);
  });

  test('episodes annotate, outcome and get', async () => {
    const id = recorded[0]!;
    const annotated = await fleetCli(['episodes', 'annotate', id, '--set', 'grade=3', '--set', 'note=ok', '--json'], withKey());
    expect(annotated.code, annotated.stderr).toBe(0);
    expect((JSON.parse(annotated.stdout) as { annotations: unknown }).annotations).toMatchObject({ grade: 3, note: 'ok' });
    const outcome = await fleetCli(['episodes', 'outcome', id, 'failure', '--reason', 'operator review', '--json'], withKey());
    expect((JSON.parse(outcome.stdout) as { outcome: string }).outcome).toBe('failure');
    const filtered = await fleetCli(['episodes', 'list', '--annotation', 'grade=3', '--json'], withKey());
    expect((JSON.parse(filtered.stdout) as { episodes: { id: string }[] }).episodes.map((e) => e.id)).toEqual([id]);
    const got = await fleetCli(['episodes', 'get', id], withKey());
    expect(got.stdout).toMatch(new RegExp(`^id\\s+${id}$`, 'm'));
  });

  test('episodes export: cut off after the first page, then --resume finishes the same file', async () => {
    // A proxy in front of the cloud that drops the connection on every request for a later page.
    let dropped = 0;
    const proxy: Server = createServer((req, res) => {
      if (req.url?.startsWith('/v1/episodes/export') && req.url.includes('cursor=')) {
        dropped++;
        req.socket.destroy();
        return;
      }
      void fetch(`${cloud.http}${req.url}`, { headers: { authorization: String(req.headers.authorization) } }).then(async (up) => {
        const headers: Record<string, string> = {};
        up.headers.forEach((v, k) => {
          if (!['content-length', 'transfer-encoding', 'connection', 'keep-alive'].includes(k)) headers[k] = v;
        });
        res.writeHead(up.status, headers).end(Buffer.from(await up.arrayBuffer()));
      });
    });
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    try {
      const out = join(tmp.path, 'export.ndjson');
      const cursorFile = `${out}.cursor`;
      const proxied = { FLEET_URL: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`, FLEET_API_KEY: cloud.adminKey };
      const first = await fleetCli(['episodes', 'export', '--robot-id', robot, '--out', out, '--page-size', '2'], proxied);
      expect(first.code).toBe(1);
      expect(first.stderr).toMatch(/^fleet: connection_failed: /);
      expect(dropped).toBeGreaterThan(1); // the GET was retried before giving up
      expect(readFileSync(out, 'utf8').trim().split('\n')).toHaveLength(2);
      const state = JSON.parse(readFileSync(cursorFile, 'utf8')) as { cursor: unknown; episodes: number };
      expect(typeof state.cursor).toBe('string');
      expect(state.episodes).toBe(2);

      // A half-written line from the interrupted page is cut off by --resume.
      appendFileSync(out, '{"id":"half');
      const differentFilters = await fleetCli(['episodes', 'export', '--out', out, '--resume'], withKey());
      expect(differentFilters.code).toBe(2);
      const resumed = await fleetCli(['episodes', 'export', '--robot-id', robot, '--out', out, '--page-size', '2', '--resume', '--json'], withKey());
      expect(resumed.code, resumed.stderr).toBe(0);
      expect(JSON.parse(resumed.stdout)).toMatchObject({ ok: true, episodes: recorded.length, resumed: true });
      const lines = readFileSync(out, 'utf8').trim().split('\n').map((l) => JSON.parse(l) as { id: string; files: unknown[] });
      expect(lines.map((l) => l.id)).toEqual(recorded);
      expect(lines.every((l) => Array.isArray(l.files))).toBe(true);
      expect(existsSync(cursorFile)).toBe(false);

      const again = await fleetCli(['episodes', 'export', '--robot-id', robot, '--out', out, '--resume'], withKey());
      expect(again.code).toBe(2);
      expect(again.stderr).toMatch(/nothing to resume/);
    } finally {
      await new Promise((resolve) => proxy.close(resolve));
    }
  });

  test('datasets create, snapshot and manifest', async () => {
    const created = await fleetCli(['datasets', 'create', '--name', 'mine', '--filter', `robot_id=${robot}`, '--json'], withKey());
    expect(created.code, created.stderr).toBe(0);
    const id = (JSON.parse(created.stdout) as { id: string }).id;
    const snap = await fleetCli(['datasets', 'snapshot', id, '--json'], withKey());
    expect(snap.code, snap.stderr).toBe(0);
    const manifest = await fleetCli(['datasets', 'manifest', id], withKey());
    const lines = manifest.stdout.trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines[0]).toMatchObject({ dataset_id: id });
    expect(lines.length - 1).toBe((JSON.parse(snap.stdout) as { episode_count: number }).episode_count);
  });

  test('robots get and command', async () => {
    const got = await fleetCli(['robots', 'get', robot, '--json'], withKey());
    expect((JSON.parse(got.stdout) as { id: string; connected: boolean }).connected).toBe(true);
    const status = await fleetCli(['robots', 'command', robot, 'stack/status', '--json'], withKey());
    expect(status.code, status.stderr).toBe(0);
    expect(JSON.parse(status.stdout)).toMatchObject({ status: 'ok' });
  });

  test('keys, enrollment tokens, webhooks, destinations, routing rules, sync health and usage (--json)', async () => {
    const json = async (args: string[]) => {
      const r = await fleetCli([...args, '--json'], withKey());
      expect({ args, code: r.code, stderr: r.stderr }).toEqual({ args, code: 0, stderr: '' });
      return JSON.parse(r.stdout) as Record<string, unknown> & { id: string };
    };
    const key = await json(['keys', 'create', '--name', 'ci', '--scopes', 'data:read,robots:read']);
    expect(key.key).toMatch(/^ak_/);
    expect(((await json(['keys', 'list'])).api_keys as { id: string }[]).map((k) => k.id)).toContain(key.id);
    await json(['keys', 'revoke', key.id]);
    expect((await json(['enrollment-tokens', 'create', '--max-uses', '2', '--name-prefix', 'cell'])).token).toMatch(/^ret_/);

    const hook = await json(['webhooks', 'create', 'https://127.0.0.1:9/hook', '--events', 'episode.finalized,episode.failed']);
    expect(hook.secret).toMatch(/^whsec_/);
    expect(((await json(['webhooks', 'list'])).webhooks as { id: string }[]).map((w) => w.id)).toEqual([hook.id]);
    expect((await json(['webhooks', 'test', hook.id])).event_id).toBeTruthy();
    expect((await json(['webhooks', 'rotate-secret', hook.id])).secret).toMatch(/^whsec_/);
    expect((await json(['webhooks', 'dead-letters', hook.id])).dead_letters).toEqual([]);
    await json(['webhooks', 'delete', hook.id]);

    const dst = await json(['destinations', 'create', 'https://127.0.0.1:9/grants', '--retention', 'keep']);
    expect(dst.secret).toMatch(/^dsec_/);
    const r1 = await json(['routing-rules', 'create', '--destination', dst.id, '--match', `robot_id=${robot}`, '--match', 'robot_id=other']);
    expect(r1.match).toEqual({ robot_id: [robot, 'other'] });
    const r2 = await json(['routing-rules', 'create', '--destination', dst.id]);
    expect(((await json(['routing-rules', 'order', r2.id, r1.id])).routing_rules as { id: string }[]).map((r) => r.id)).toEqual([r2.id, r1.id]);
    await json(['routing-rules', 'delete', r1.id]);
    expect(((await json(['routing-rules', 'list'])).routing_rules as { id: string }[]).map((r) => r.id)).toEqual([r2.id]);
    expect(((await json(['destinations', 'list'])).destinations as { id: string }[]).map((d) => d.id)).toEqual([dst.id]);
    await json(['destinations', 'revoke', dst.id]);
    expect(((await json(['sync-health'])).robots as { robot_id: string }[]).map((r) => r.robot_id)).toContain(robot);
    expect(Array.isArray((await json(['usage'])).usage)).toBe(true);

    const table = await fleetCli(['webhooks', 'list'], withKey());
    expect(table.stdout.trim()).toBe('(none)');
  });

  test('the examples of --help parse: run against the cloud, none is a usage error', async () => {
    const examples: string[][] = [];
    for (const help of [['--help'], ['episodes', 'list', '--help'], ['episodes', 'export', '--help']]) {
      const r = await fleetCli(help);
      expect(r.code).toBe(0);
      for (const line of r.stdout.split('\n')) {
        const m = /^ {2}\$ fleet (.+?)(?:\s+#.*)?$/.exec(line);
        // A --resume example needs an interrupted export first (else it is rightly refused), and
        // the placeholder key of the login example is refused as malformed before anything is sent.
        if (m && !m[1]!.includes('--resume') && !m[1]!.includes('ak_...')) examples.push(m[1]!.trim().split(/\s+/));
      }
    }
    expect(examples.length).toBeGreaterThanOrEqual(10);
    await using work = await makeTempDir('fleet-cli-examples-');
    for (const args of examples) {
      // Placeholder ids answer 404 and `login` with `ak_...` 401: exit 1, never 2.
      const r = await fleetCli(args, { ...withKey(), HOME: work.path }, work.path);
      expect({ args, usageError: r.code === 2 ? r.stderr : null }).toEqual({ args, usageError: null });
    }
  });

  test('usage errors exit 2 with one line; API errors print code, message and request id and exit 1', async () => {
    for (const args of [['episodes', 'list', '--limit', 'abc'], ['episodes', 'list', '--bogus'], ['robots', 'command', robot, 'dance'], ['nope']]) {
      const r = await fleetCli(args, withKey());
      expect({ args, code: r.code }).toEqual({ args, code: 2 });
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).not.toMatch(/\n\s+at /);
    }
    const noKey = await fleetCli(['robots', 'list'], { FLEET_URL: cloud.http });
    expect(noKey.code).toBe(2);
    expect(noKey.stderr).toMatch(/no API key/);

    const missing = await fleetCli(['episodes', 'get', 'ep_missing'], withKey());
    expect(missing.code).toBe(1);
    expect(missing.stderr.trim()).toMatch(/^fleet: not_found: .+ \(\S+\)$/);
    const wrongKey = await fleetCli(['robots', 'list'], { FLEET_URL: cloud.http, FLEET_API_KEY: 'ak_wrong_but_well_formed_0000' });
    expect(wrongKey.code).toBe(1);
    expect(wrongKey.stderr).toMatch(/^fleet: unauthenticated: /);
  });

  test('an API error prints its details, one line each: which field and why', async () => {
    const badTime = await fleetCli(['episodes', 'list', '--from', 'yesterday'], withKey());
    expect(badTime.code).toBe(1);
    const [head, ...details] = badTime.stderr.trimEnd().split('\n');
    expect(head).toMatch(/^fleet: validation_failed: invalid (querystring|filter) \(\S+\)$/);
    expect(details).toHaveLength(1);
    expect(details[0]).toMatch(/^ {2}querystring \/from: .+ \(\w+\)$/);

    const badFilter = await fleetCli(['datasets', 'create', '--name', 'typo', '--filter', 'robot=rbt_1', '--filter', 'outcome=maybe'], withKey());
    expect(badFilter.code).toBe(1);
    const lines = badFilter.stderr.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^fleet: validation_failed: invalid filter \(\S+\)$/);
    expect(lines.slice(1).join('\n')).toMatch(/^ {2}body \/filter.*robot/m);
    expect(lines.slice(1).join('\n')).toMatch(/^ {2}body \/filter\/outcome: /m);
  });

  test('a malformed API key is named as such, where it came from, and never printed', async () => {
    for (const key of ['ak_short', `${cloud.adminKey}"`, `sk_${cloud.adminKey.slice(3)}`]) {
      const r = await fleetCli(['robots', 'list'], { FLEET_URL: cloud.http, FLEET_API_KEY: key });
      expect({ key, code: r.code }).toEqual({ key, code: 2 });
      expect(r.stderr).toMatch(/^fleet: the API key in FLEET_API_KEY is malformed: .+; an API key is ak_ followed by 16 to 128 letters, digits, _ or -\n$/);
      expect(r.stderr).not.toContain(key.slice(3, 12));
    }
    // Surrounding whitespace (a pasted line break) is not part of the key.
    const padded = await fleetCli(['robots', 'list', '--json'], { FLEET_URL: cloud.http, FLEET_API_KEY: ` ${cloud.adminKey}\n` });
    expect(padded.code, padded.stderr).toBe(0);
    const login = await fleetCli(['login', '--url', cloud.http, '--key', 'ak_...', '--config', join(tmp.path, 'conf', 'never.json')]);
    expect(login.code).toBe(2);
    expect(login.stderr).toMatch(/^fleet: the API key in --key is malformed: /);
  });

  test('--url is the API address with or without /v1 and trailing slashes', async () => {
    for (const url of [`${cloud.http}/v1`, `${cloud.http}/v1/`, `${cloud.http}/`]) {
      const r = await fleetCli(['robots', 'list', '--json', '--url', url], { FLEET_API_KEY: cloud.adminKey });
      expect({ url, code: r.code, stderr: r.stderr }).toEqual({ url, code: 0, stderr: '' });
      expect(r.stdout).toContain(robot);
    }
  });

  test('tables name robots: episodes list and sync-health show the robot name, not only its id', async () => {
    const name = (await cloud.client().robots.get(robot)).name;
    const table = await fleetCli(['episodes', 'list', '--robot-id', robot], withKey());
    expect(table.code, table.stderr).toBe(0);
    const rows = table.stdout.trim().split('\n').slice(1);
    expect(rows.length).toBeGreaterThan(0);
    for (const row of rows) expect(row.split(/\s{2,}/)[1]).toBe(name);
    const health = await fleetCli(['sync-health'], withKey());
    expect(health.code, health.stderr).toBe(0);
    expect(health.stdout.split('\n')[0]).toMatch(/^ROBOT\s+.*DISK FULL IN$/);
    expect(health.stdout).toMatch(new RegExp(`^${name}\\s`, 'm'));
  });

  test('episodes export without --out writes NDJSON to stdout; its page size is the server cap', async () => {
    const r = await fleetCli(['episodes', 'export', '--robot-id', robot, '--page-size', '2'], withKey());
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout.trim().split('\n').map((l) => (JSON.parse(l) as { id: string }).id)).toEqual(recorded);
    expect(r.stderr).toBe(`fleet: exported ${recorded.length} episodes (${Buffer.byteLength(r.stdout)} bytes)\n`);
    const resume = await fleetCli(['episodes', 'export', '--resume'], withKey());
    expect(resume.code).toBe(2);
    expect(resume.stderr).toMatch(/--resume needs --out/);

    const help = await fleetCli(['episodes', 'export', '--help']);
    expect(help.stdout.replace(/\s+/g, ' ')).toContain(`episodes per request (1-${STREAM_PAGE_LIMIT.max}, default ${STREAM_PAGE_LIMIT.default})`);
    const max = await fleetCli(['episodes', 'export', '--robot-id', robot, '--page-size', String(STREAM_PAGE_LIMIT.max)], withKey());
    expect(max.code, max.stderr).toBe(0);
    const over = await fleetCli(['episodes', 'export', '--page-size', String(STREAM_PAGE_LIMIT.max + 1)], withKey());
    expect(over.code).toBe(2);
  });

  test('login writes a 0600 config that later commands use; a config others can read is refused', async () => {
    const config = join(tmp.path, 'conf', 'fleet.json');
    const login = await fleetCli(['login', '--url', cloud.http, '--key', cloud.adminKey, '--config', config]);
    expect(login.code, login.stderr).toBe(0);
    expect(statSync(config).mode & 0o777).toBe(0o600);
    const listed = await fleetCli(['robots', 'list', '--config', config, '--json']);
    expect(listed.code, listed.stderr).toBe(0);
    expect(listed.stdout).toContain(robot);

    const badLogin = await fleetCli(['login', '--url', cloud.http, '--key', 'ak_wrong_but_well_formed_0000', '--config', join(tmp.path, 'conf', 'other.json')]);
    expect(badLogin.code).toBe(1);
    expect(existsSync(join(tmp.path, 'conf', 'other.json'))).toBe(false);

    const open = join(tmp.path, 'open.json');
    writeFileSync(open, JSON.stringify({ url: cloud.http, api_key: cloud.adminKey }));
    chmodSync(open, 0o644);
    const refused = await fleetCli(['robots', 'list', '--config', open]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/chmod 600/);
    expect(refused.stdout).toBe('');

    // The default location, under HOME.
    const home = await fleetCli(['login', '--url', cloud.http, '--key', cloud.adminKey]);
    expect(home.code, home.stderr).toBe(0);
    expect(statSync(join(tmp.path, '.config', 'fleet', 'config.json')).mode & 0o777).toBe(0o600);
    const fromHome = await fleetCli(['entitlements', '--json']);
    expect(fromHome.code, fromHome.stderr).toBe(0);
  });
});

describe('fleet episodes read-links', () => {
  let provider: GrantProviderProcess | undefined;
  let episodeId: string;

  afterAll(async () => {
    await provider?.[Symbol.asyncDispose]();
  });

  test('before any verified replica: 409 replica_not_verified with the replicas; an unknown destination 404; too many --file exit 2', async () => {
    const id = recorded[0]!;
    const none = await fleetCli(['episodes', 'read-links', id], withKey());
    expect(none.code).toBe(1);
    expect(none.stdout).toBe('');
    expect(none.stderr).toMatch(/^fleet: replica_not_verified: .+ \(\S+\)\n {2}replicas: \[/);
    const unknown = await fleetCli(['episodes', 'read-links', id, '--destination', 'dst_nope'], withKey());
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/^fleet: not_found: /);
    const many = Array.from({ length: READ_LINKS_MAX_FILES + 1 }, (_, i) => ['--file', `f${i}`]).flat();
    const over = await fleetCli(['episodes', 'read-links', id, ...many], withKey());
    expect(over.code).toBe(2);
    expect(over.stderr.trim()).toBe(`fleet: at most ${READ_LINKS_MAX_FILES} --file per call (${READ_LINKS_MAX_FILES + 1} given)`);
  });

  test('a verified episode: the JSON answer with one link per file, which reads the object (Range: 206)', async () => {
    const c = cloud.client();
    const port = await freePort();
    const destination = await c.destinations.create({ type: 'external', url: `https://127.0.0.1:${port}/grants` });
    provider = await startGrantProvider({ s3, secret: destination.secret, tls: writeProviderTls(pki, tmp.path), args: ['--port', String(port)] });
    // This one episode goes to it, whatever rules earlier tests left: a rule of its own, first.
    episodeId = await record(c, 'finish');
    const rule = await c.routingRules.create({ destination_id: destination.id, match: { episode_id: episodeId } });
    const others = (await c.routingRules.list()).routing_rules.map((r) => r.id).filter((r) => r !== rule.id);
    await c.routingRules.setOrder([rule.id, ...others]);
    const episode = await waitFor(
      async () => {
        const ep = await getEpisode(cloud, episodeId);
        return ep?.replicas.some((r) => r.destination_id === destination.id && r.state === 'verified') ? ep : undefined;
      },
      { timeoutMs: 120_000, intervalMs: 500, description: `episode ${episodeId} verified at ${destination.id}` },
    );
    const files = (await c.episodes.files(episodeId)).files;
    const replica = episode.replicas.find((r) => r.destination_id === destination.id)!;

    // No --json: the answer is JSON all the same.
    const r = await fleetCli(['episodes', 'read-links', episodeId], withKey());
    expect(r.code, r.stderr).toBe(0);
    const answer = JSON.parse(r.stdout) as { episode_id: string; destination_id: string; files: { path: string; url: string; size_bytes: number; sha256: string; expires_at: string }[] };
    expect(answer).toMatchObject({ episode_id: episodeId, destination_id: destination.id });
    expect(answer.files.map((f) => [f.path, f.size_bytes, f.sha256])).toEqual(files.map((f) => [f.path, f.size_bytes, f.sha256]));
    for (const f of answer.files) {
      expect(new URL(f.url).origin).toBe(s3.endpoint);
      const stored = (await s3.getObject(`${replica.object_key}${f.path}`))!;
      const got = await request(f.url);
      expect(got.statusCode).toBe(200);
      expect(Buffer.from(await got.body.arrayBuffer()).equals(stored.body)).toBe(true);
    }
    const big = answer.files.find((f) => f.size_bytes > 100)!;
    const ranged = await request(big.url, { headers: { range: 'bytes=0-99' } });
    expect(ranged.statusCode).toBe(206);
    expect((await ranged.body.arrayBuffer()).byteLength).toBe(100);

    // --file and --destination reach the API: one file, from that replica; a path not in the manifest is 400.
    const one = await fleetCli(['--json', 'episodes', 'read-links', episodeId, '--destination', destination.id, '--file', big.path], withKey());
    expect(one.code, one.stderr).toBe(0);
    expect((JSON.parse(one.stdout) as { files: { path: string }[] }).files.map((f) => f.path)).toEqual([big.path]);
    const stray = await fleetCli(['episodes', 'read-links', episodeId, '--file', 'not/in/the/manifest.bin'], withKey());
    expect(stray.code).toBe(1);
    expect(stray.stderr).toMatch(/^fleet: validation_failed: /);
    expect(stray.stderr).toContain('unknown_file');
  }, 180_000);
});
