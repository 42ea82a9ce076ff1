/**
 * The Python SDK (python/, `import fleet`) against a real cloud: one `fleet-cloud serve`, two
 * simulated robots uploading to the S3-compatible test server through the reference grant
 * provider, a few episodes recorded and verified in the bucket; then pytest (python/tests) runs
 * with the addresses, ids and credentials in its environment, in the venv built from
 * python/requirements-dev.txt. Also: mypy --strict on the package, and `pip install ./python`
 * into a new venv giving a working `import fleet`.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createTestPki, type TestPki } from '../cloud/src/egress/test-https.js';
import { cleanEnv, makeTempDir, REPO_ROOT, startCloud, type CloudProcess, type TempDir } from './support/cloud.js';
import { startGrantProvider, writeProviderTls, type GrantProviderProcess } from './support/grant-provider.js';
import { freePort, okJson } from './support/http.js';
import { runProcess, type RunResult } from './support/process.js';
import { ensurePythonEnv, findPython312 } from './support/python.js';
import { createEnrollmentToken, sendCommand, startFleet, type FleetProcess } from './support/robots.js';
import { startS3Server, type S3ServerProcess } from './support/s3-server.js';
import { waitFor } from './support/wait.js';

const REQUIREMENTS = join(REPO_ROOT, 'python', 'requirements-dev.txt');
/** Episodes per robot: with two robots, more than the page size the paging tests ask for. */
const EPISODES_PER_ROBOT = 3;

let pki: TestPki;
let tmp: TempDir;
let s3: S3ServerProcess;
let cloud: CloudProcess;
let provider: GrantProviderProcess;
let fleet: FleetProcess;
let python: string;
let destinationId: string;
let tls: { certFile: string; keyFile: string };
const episodeIds: string[] = [];

async function recordOn(robot: string): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < EPISODES_PER_ROBOT; i++) {
    await waitFor(
      async () => {
        const r = await cloud.fetch(`/v1/robots/${robot}`);
        return ((await r.json()) as { recording_state: string | null }).recording_state === 'idle' ? true : undefined;
      },
      { timeoutMs: 30_000, description: `${robot} idle` },
    );
    const started = await sendCommand(cloud, robot, 'episodes/start', { body: { task_id: 'sdk-pick' } });
    expect(started.status, JSON.stringify(started.body)).toBe(200);
    const done = await sendCommand(cloud, robot, i === 1 ? 'episodes/fail' : 'episodes/finish');
    expect(done.status, JSON.stringify(done.body)).toBe(200);
    ids.push(String(started.body.result!.episode_id));
  }
  return ids;
}

beforeAll(async () => {
  python = ensurePythonEnv((l) => console.warn(l), REQUIREMENTS);
  pki = createTestPki();
  tmp = await makeTempDir('fleet-python-sdk-');
  const providerTls = writeProviderTls(pki, tmp.path);
  tls = { certFile: providerTls.certFile, keyFile: providerTls.keyFile };
  // moto's S3 server (test/support/moto-server.ts), an implementation independent of the s3rver
  // most suites use: the robots' uploads and the SDK's datasets.download() both go through it.
  s3 = await startS3Server({ implementation: 'moto' });
  // Read links (python/tests/test_read_links.py) may point at the bucket.
  cloud = await startCloud({ args: ['--egress-allow-loopback', '--egress-ca-file', pki.caFile, '--read-origin', s3.endpoint] });
  const port = await freePort();
  const destination = await okJson<{ id: string; secret: string }>(
    await cloud.fetch('/v1/destinations', { method: 'POST', json: { type: 'external', url: `https://127.0.0.1:${port}/grant` } }),
  );
  destinationId = destination.id;
  provider = await startGrantProvider({ s3, secret: destination.secret, tls: { ...providerTls, ca: pki.caPem }, args: ['--port', String(port)] });
  const token = await createEnrollmentToken(cloud, { maxUses: 2 });
  fleet = await startFleet(cloud, { count: 2, token: token.token, args: ['--allow-http-uploads'] });
  for (const ids of await Promise.all(fleet.robots.map((r) => recordOn(r)))) episodeIds.push(...ids);
  const c = cloud.client();
  for (const id of episodeIds) {
    await waitFor(
      async () => {
        const e = await c.episodes.get(id).catch(() => undefined);
        return e?.replicas[0]?.state === 'verified' ? true : undefined;
      },
      { timeoutMs: 120_000, intervalMs: 200, description: `episode ${id} verified in the bucket` },
    );
  }
}, 600_000);

afterAll(async () => {
  await fleet?.[Symbol.asyncDispose]();
  await provider?.[Symbol.asyncDispose]();
  await cloud?.[Symbol.asyncDispose]();
  await s3?.[Symbol.asyncDispose]();
  await tmp?.[Symbol.asyncDispose]();
  pki?.cleanup();
});

function pythonEnv(extra: Record<string, string> = {}): Record<string, string | undefined> {
  return cleanEnv({
    PYTHONPATH: join(REPO_ROOT, 'python', 'src'),
    PYTHONDONTWRITEBYTECODE: '1',
    HOME: tmp.path,
    FLEET_URL: cloud.http,
    FLEET_API_KEY: cloud.adminKey,
    FLEET_TEST_ROBOTS: fleet.robots.join(','),
    FLEET_TEST_EPISODES: episodeIds.join(','),
    FLEET_TEST_DESTINATION_ID: destinationId,
    FLEET_TEST_S3_ENDPOINT: s3.endpoint,
    FLEET_TEST_S3_BUCKET: s3.bucket,
    // A certificate for 127.0.0.1 the cloud trusts (its --egress-ca-file): for an HTTPS webhook receiver.
    FLEET_TEST_TLS_CERT_FILE: tls.certFile,
    FLEET_TEST_TLS_KEY_FILE: tls.keyFile,
    AWS_ACCESS_KEY_ID: s3.accessKeyId,
    AWS_SECRET_ACCESS_KEY: s3.secretAccessKey,
    AWS_REGION: s3.region,
    AWS_EC2_METADATA_DISABLED: 'true',
    ...extra,
  });
}

function printTail(r: RunResult, lines = 40): string {
  return `exit ${r.code}\n--- stdout (tail)\n${r.stdout.split('\n').slice(-lines).join('\n')}\n--- stderr (tail)\n${r.stderr.split('\n').slice(-lines).join('\n')}`;
}

describe('the Python SDK', () => {
  test('pytest python/tests passes against the live cloud, fleet and bucket', async () => {
    const r = await runProcess(python, ['-m', 'pytest', 'python/tests', '-q', '-p', 'no:cacheprovider'], {
      name: 'pytest python/tests',
      cwd: REPO_ROOT,
      env: pythonEnv(),
      timeoutMs: 400_000,
    });
    // pytest's own summary, in the test log whether it passed or not.
    console.log(r.stdout.split('\n').filter((l) => l.trim() !== '').slice(-3).join('\n'));
    expect(r.code, printTail(r)).toBe(0);
  }, 450_000);

  test('mypy --strict passes on python/src/fleet', async () => {
    const r = await runProcess(python, ['-m', 'mypy', '--strict', '--cache-dir', '/dev/null', 'python/src/fleet'], { name: 'mypy --strict', cwd: REPO_ROOT, env: pythonEnv(), timeoutMs: 300_000 });
    expect(r.code, printTail(r)).toBe(0);
    expect(r.stdout).toMatch(/^Success: no issues found/m);
  }, 320_000);

  test('ruff: the SDK, its tests and scripts are lint-clean and formatted', async () => {
    const dir = join(REPO_ROOT, 'python');
    for (const args of [['check', '--no-cache', '.'], ['format', '--no-cache', '--check', '.']]) {
      const r = await runProcess(python, ['-m', 'ruff', ...args], { name: `ruff ${args[0]}`, cwd: dir, env: pythonEnv(), timeoutMs: 120_000 });
      expect(r.code, printTail(r)).toBe(0);
    }
  }, 260_000);

  test('pip install ./python into a new venv gives a working import fleet', async () => {
    await using venvDir = await makeTempDir('fleet-sdk-venv-');
    const venv = join(venvDir.path, 'venv');
    const made = await runProcess(findPython312().path, ['-m', 'venv', venv], { name: 'python3.12 -m venv', cwd: REPO_ROOT, env: cleanEnv(), timeoutMs: 120_000 });
    expect(made.code, printTail(made)).toBe(0);
    const py = join(venv, 'bin', 'python3');
    // hatchling (the backend) builds in a temp dir: nothing is written into python/.
    const installed = await runProcess(
      py,
      ['-m', 'pip', 'install', '--no-input', '--disable-pip-version-check', '--cache-dir', join(venvDir.path, 'pip-cache'), join(REPO_ROOT, 'python')],
      { name: 'pip install ./python', cwd: venvDir.path, env: cleanEnv({ PIP_REQUIRE_VIRTUALENV: '1' }), timeoutMs: 400_000 },
    );
    expect(installed.code, printTail(installed)).toBe(0);
    const imported = await runProcess(py, ['-c', 'import fleet, fleet.models, fleet.webhooks; print(fleet.__version__); print(fleet.Fleet(url="http://127.0.0.1:9", api_key=None))'], {
      name: 'import fleet',
      cwd: venvDir.path,
      env: cleanEnv(),
      timeoutMs: 60_000,
    });
    expect(imported.code, printTail(imported)).toBe(0);
    expect(imported.stdout.split('\n')[0]).toBe('0.1.0');
    expect(imported.stdout).toContain("Fleet(url='http://127.0.0.1:9')");
  }, 500_000);
});
