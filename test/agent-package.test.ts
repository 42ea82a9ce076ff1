import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { makeTempDir, REPO_ROOT, startCloud, type CloudProcess, type TempDir } from './support/cloud.js';
import { runProcess, spawnProcess, type RunResult, type SpawnedProcess } from './support/process.js';
import { createTestPki } from '../cloud/src/egress/test-https.js';
import { getEpisode } from './support/episodes.js';
import { writeProviderTls } from './support/grant-provider.js';
import { ensurePythonEnv } from './support/python.js';
import { createEnrollmentToken, sendCommand, waitForRobot } from './support/robots.js';
import { startSyncStack } from './support/sync-stack.js';
import { waitFor } from './support/wait.js';

/**
 * The agent's Debian package as a robot gets it: `npm run package:agent` builds it, Debian's
 * lintian judges it, dpkg installs it on this machine, and the installed `fleet-agent`, run as the
 * package's system user, enrolls with a test cloud and shows up connected with the package's
 * version. Then dpkg removes it (the conffile stays) and purges it.
 *
 * The only test file that runs dpkg (the e2e project runs two files at once, and dpkg holds a
 * lock). It installs over a fleet-agent package already on the machine (a run that died before
 * its purge) and purges it at the end whatever happened.
 */

const PKG = 'fleet-agent';
const DATA_DIR = '/var/lib/fleet-agent';
const CONFIG = '/etc/fleet-agent/agent.yaml';
const UNIT = '/lib/systemd/system/fleet-agent.service';
const VERSION = (JSON.parse(readFileSync(join(REPO_ROOT, 'agent', 'package.json'), 'utf8')) as { version: string }).version;
/** How the installed agent is started: as the unit's ExecStart does, with the packaged config. */
const START_ARGS = ['start', '--config', CONFIG];

const has = (cmd: string) => spawnSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' }).status === 0;
const skipReason =
  process.getuid?.() !== 0 ? 'not root: dpkg -i needs root' : !has('dpkg-deb') || !has('dpkg') ? 'dpkg is missing (not a Debian system)' : !has('lintian') ? 'lintian is missing (test/support/debian.ts installs it as root)' : null;

// A loaded 2-core machine: building, lintian and dpkg each take tens of seconds there.
const STEP_MS = 300_000;
const env = { DEBIAN_FRONTEND: 'noninteractive' };

function run(cmd: string, args: readonly string[], timeoutMs = STEP_MS): Promise<RunResult> {
  return runProcess(cmd, args, { name: [cmd, ...args].join(' '), cwd: REPO_ROOT, env, timeoutMs });
}

/** The environment of the test run without its FLEET_* variables. */
function noFleetEnv(): Record<string, string | undefined> {
  const clean: Record<string, string | undefined> = {};
  for (const k of Object.keys(process.env)) if (k.startsWith('FLEET_')) clean[k] = undefined;
  return clean;
}

function ok(r: RunResult, what: string): RunResult {
  if (r.code !== 0) throw new Error(`${what} exited ${r.code ?? r.signal}\nstdout:\n${r.stdout}\nstderr:\n${r.stderr}`);
  return r;
}

/** A quick command's stdout; throws with its stderr unless it exits 0. */
function output(cmd: string, args: readonly string[]): string {
  const r = spawnSync(cmd, args, { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')} exited ${r.status ?? r.signal}: ${r.stderr}`);
  return r.stdout;
}

/** dpkg's status of the package: `install ok installed`, `deinstall ok config-files`, or null once purged (or never installed). */
function packageStatus(): string | null {
  const r = spawnSync('dpkg-query', ['-W', '-f=${Status}', PKG], { encoding: 'utf8' });
  const status = r.stdout.trim();
  return r.status === 0 && !status.endsWith(' not-installed') ? status : null;
}

describe.skipIf(skipReason !== null)(`the agent's Debian package${skipReason ? ` (skipped: ${skipReason})` : ''}`, () => {
  let out: TempDir | undefined;
  let deb = '';
  let cloud: CloudProcess | undefined;
  let agent: SpawnedProcess | undefined;

  afterAll(async () => {
    try {
      await agent?.kill('SIGTERM', 20_000);
      await cloud?.[Symbol.asyncDispose]();
    } finally {
      if (packageStatus() !== null) spawnSync('dpkg', ['--purge', PKG], { stdio: 'ignore', env: { ...process.env, ...env } });
      await out?.[Symbol.asyncDispose]();
    }
  }, STEP_MS);

  test('npm run package:agent builds fleet-agent_<version>_<arch>.deb, and lintian reports no error', async () => {
    out = await makeTempDir('fleet-pkg-');
    const built = ok(await run('npm', ['run', '--silent', 'package:agent', '--', '--out', out.path]), 'npm run package:agent');
    const arch = output('dpkg', ['--print-architecture']).trim();
    deb = join(out.path, `${PKG}_${VERSION}_${arch}.deb`);
    expect(built.stdout).toContain(`${PKG}_${VERSION}_${arch}.deb`);
    expect(statSync(deb).size).toBeGreaterThan(0);

    const field = (name: string) => output('dpkg-deb', ['--field', deb, name]).trim();
    expect(field('Package')).toBe(PKG);
    expect(field('Version')).toBe(VERSION);
    expect(field('Depends')).toMatch(/^nodejs \(>= 20\)/);
    const contents = output('dpkg-deb', ['--contents', deb]);
    // The simulator, development tools and better-sqlite3's C sources are not shipped.
    expect(contents).not.toMatch(/node_modules\/(@fleet\/simulator|typescript|vitest|tsx|prebuild-install)\//);
    expect(contents).not.toMatch(/better-sqlite3\/(deps|src)\//);
    expect(contents).toMatch(/\.\/usr\/lib\/fleet-agent\/node_modules\/better-sqlite3\/build\/Release\/better_sqlite3\.node/);
    expect(contents).toMatch(/\.\/usr\/share\/doc\/fleet-agent\/examples\/ros2-action\.py/);
    expect(contents).toMatch(/\.\/usr\/share\/doc\/fleet-agent\/examples\/ros2-button\.py/);

    // lintian exits non-zero on errors only (by default); any `E:` line fails the test, warnings are tolerated.
    const lint = await run('lintian', ['--tag-display-limit', '0', deb]);
    const errors = lint.stdout.split('\n').filter((l) => l.startsWith('E:'));
    expect({ errors, code: lint.code }).toEqual({ errors: [], code: 0 });
  }, STEP_MS);

  test('dpkg -i installs the program, the conffile, the unit (systemd-analyze verify) and the fleet-agent user', async () => {
    ok(await run('dpkg', ['-i', deb]), 'dpkg -i');
    expect(packageStatus()).toBe('install ok installed');

    const version = ok(await run(`/usr/bin/${PKG}`, ['--version']), 'fleet-agent --version');
    expect(version.stdout.trim()).toBe(VERSION);

    expect(output('dpkg-query', ['-W', '-f=${Conffiles}', PKG])).toContain(CONFIG);
    // The packaged config is valid as shipped, and so are its commented-out examples once uncommented.
    ok(await run(`/usr/bin/${PKG}`, ['config', 'check', CONFIG]), 'fleet-agent config check');
    const uncommented = readFileSync(CONFIG, 'utf8').replace(/^# (recorder:|actions:| {2})/gm, '$1');
    const examples = join(out!.path, 'examples.yaml');
    writeFileSync(examples, uncommented);
    const checked = JSON.parse(ok(await run(`/usr/bin/${PKG}`, ['config', 'check', examples]), 'fleet-agent config check (examples)').stdout) as { settings: Record<string, unknown> };
    expect(checked.settings).toMatchObject({ data_dir: DATA_DIR, recorder: { kind: 'command' }, actions: { go_home: { timeout_ms: 8000 } } });

    const user = output('getent', ['passwd', PKG]).split(':');
    expect(Number(user[2])).toBeLessThan(1000); // a system user
    expect(user[5]).toBe(DATA_DIR);
    // postinst makes the data directory: enrollment runs before the service ever started.
    const dir = statSync(DATA_DIR);
    expect(dir.isDirectory()).toBe(true);
    expect(dir.uid).toBe(Number(user[2]));

    // Unknown keys and unresolvable paths are only warnings to systemd-analyze: any output fails.
    const verify = await run('systemd-analyze', ['verify', UNIT]);
    expect({ code: verify.code, output: `${verify.stdout}${verify.stderr}` }).toEqual({ code: 0, output: '' });
  });

  test('the installed agent, as the fleet-agent user, enrolls and runs against a test cloud with the package version', async () => {
    cloud = await startCloud();
    const token = await createEnrollmentToken(cloud);
    // As docs/robots.md tells an admin to enroll.
    const enrollArgs = ['-u', PKG, '--', `/usr/bin/${PKG}`, 'enroll', '--api', cloud.http, '--token', token.token, '--data-dir', DATA_DIR, '--name', 'packaged-arm'];
    const enrolled = ok(await runProcess('runuser', enrollArgs, { name: 'runuser fleet-agent enroll', cwd: '/', env: noFleetEnv(), timeoutMs: STEP_MS }), 'fleet-agent enroll');
    const { robot_id: robotId } = JSON.parse(enrolled.stdout) as { robot_id: string };
    expect(statSync(join(DATA_DIR, 'credentials.json')).mode & 0o777).toBe(0o600);

    // As the unit runs it: the service's user, a fresh environment, signals straight to the agent
    // (setpriv execs it; runuser would stand between and SIGKILL it 2 s after a SIGTERM).
    const startArgs = [`--reuid=${PKG}`, `--regid=${PKG}`, '--init-groups', '--reset-env', `/usr/bin/${PKG}`, ...START_ARGS];
    agent = spawnProcess('setpriv', startArgs, { name: 'fleet-agent start (packaged)', cwd: '/' });
    await agent.waitForStdout((l) => l.includes('"state":"connected"'), { timeoutMs: 120_000, description: 'the connected line' });
    const robot = await waitForRobot(cloud, robotId, (r) => r.connected && r.runtime_version === VERSION, { timeoutMs: 120_000, description: `connected with runtime ${VERSION}` });
    expect(robot).toMatchObject({ name: 'packaged-arm', connected: true, runtime_version: VERSION });

    // systemd's stop: SIGTERM, and the agent exits cleanly by itself.
    expect(await agent.kill('SIGTERM', 60_000)).toEqual({ code: 0, signal: null });
  });

  test('the installed agent with `ros2 bag record` configured records, syncs and verifies an episode whose bag rosbags reads', async () => {
    const python = ensurePythonEnv();
    const pki = createTestPki();
    const dir = await makeTempDir('fleet-pkg-ros2-');
    const stack = await startSyncStack({ pki, tls: writeProviderTls(pki, dir.path), events: ['episode.verified'] });
    let installed: SpawnedProcess | undefined;
    try {
      const config = join(dir.path, 'agent.yaml');
      // Root runs it here (not the service's user): the stand-in ros2 and its Python live under /root.
      writeFileSync(
        config,
        [
          `data_dir: ${join(dir.path, 'robot')}`,
          'allow_http_uploads: true',
          'recorder:',
          '  kind: command',
          `  command: [${JSON.stringify(join(REPO_ROOT, 'test', 'support', 'fake-ros2', 'ros2'))}, bag, record, --storage, mcap, --output, "{dir}/bag", /joint_states]`,
          '  env:',
          `    PATH: ${JSON.stringify(`${dirname(python)}:/usr/bin:/bin`)}`,
          '',
        ].join('\n'),
      );
      const token = await createEnrollmentToken(stack.cloud);
      const enrolled = ok(await runProcess(`/usr/bin/${PKG}`, ['enroll', '--config', config, '--api', stack.cloud.http, '--token', token.token], { name: 'fleet-agent enroll (packaged)', cwd: '/', env: noFleetEnv(), timeoutMs: STEP_MS }), 'enroll');
      const { robot_id: robotId } = JSON.parse(enrolled.stdout) as { robot_id: string };
      installed = spawnProcess(`/usr/bin/${PKG}`, ['start', '--config', config], { name: 'fleet-agent start (packaged, ros2)', cwd: '/', env: noFleetEnv() });
      await installed.waitForStdout((l) => l.includes('"state":"connected"'), { timeoutMs: 120_000, description: 'the connected line' });
      await waitForRobot(stack.cloud, robotId, (r) => r.connected && r.capabilities.includes('episodes.v1'), { timeoutMs: 60_000, description: 'connected with episodes.v1' });

      const start = await sendCommand(stack.cloud, robotId, 'episodes/start');
      expect(start.status, JSON.stringify(start.body)).toBe(200);
      const id = (start.body as { result: { episode_id: string } }).result.episode_id;
      const bag = join(dir.path, 'robot', 'episodes', id, 'bag');
      await waitFor(() => (existsSync(bag) && readdirSync(bag).some((f) => f.endsWith('.mcap')) ? true : undefined), { timeoutMs: 60_000, description: 'ros2 writing its bag' });
      expect((await sendCommand(stack.cloud, robotId, 'episodes/finish')).status).toBe(200);
      const ep = await waitFor(
        async () => {
          const e = await getEpisode(stack.cloud, id);
          return e?.replicas[0]?.state === 'verified' ? e : undefined;
        },
        { timeoutMs: 120_000, description: 'the episode verified' },
      );
      // The bag as the bucket holds it, read by Python's rosbags.
      const copy = join(dir.path, 'from-bucket', 'bag');
      mkdirSync(copy, { recursive: true });
      const key = ep.replicas[0]!.object_key!;
      const objects = (await stack.s3.listObjects()).filter((o) => o.key.startsWith(key));
      expect(objects.map((o) => o.key.slice(key.length)).sort()).toEqual([expect.stringMatching(/^bag\/[^/]+\.mcap$/), 'bag/metadata.yaml']);
      for (const o of objects) writeFileSync(join(copy, o.key.slice(key.length + 'bag/'.length)), (await stack.s3.getObject(o.key))!.body);
      const read = spawnSync(python, ['-c', 'import sys\nfrom pathlib import Path\nfrom rosbags.highlevel import AnyReader\nwith AnyReader([Path(sys.argv[1])]) as r:\n    print(sum(1 for _ in r.messages()), r.connections[0].msgtype)', copy], { encoding: 'utf8' });
      expect(read.stderr).toBe('');
      const [count, type] = read.stdout.trim().split(' ');
      expect(Number(count)).toBeGreaterThan(0);
      expect(type).toBe('sensor_msgs/msg/JointState');
    } finally {
      await installed?.kill('SIGTERM', 60_000);
      await stack.dispose();
      await dir[Symbol.asyncDispose]();
      pki.cleanup();
    }
  });

  test('dpkg -r removes the program and keeps the conffile and the data; dpkg --purge removes those too', async () => {
    ok(await run('dpkg', ['-r', PKG]), 'dpkg -r');
    expect(packageStatus()).toBe('deinstall ok config-files');
    expect(existsSync(`/usr/bin/${PKG}`)).toBe(false);
    expect(existsSync('/usr/lib/fleet-agent')).toBe(false);
    expect(existsSync(UNIT)).toBe(false);
    expect(readFileSync(CONFIG, 'utf8')).toMatch(/^data_dir: \/var\/lib\/fleet-agent$/m);
    expect(existsSync(join(DATA_DIR, 'credentials.json'))).toBe(true);

    ok(await run('dpkg', ['--purge', PKG]), 'dpkg --purge');
    expect(packageStatus()).toBeNull();
    expect(existsSync(CONFIG)).toBe(false);
    expect(existsSync(DATA_DIR)).toBe(false);
  });
});
