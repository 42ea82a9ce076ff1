/**
 * `npm run bench -- brokers [--connections N] [--only a,b] [--workers W] [--concurrency C]`: the
 * MQTT brokers a clustered deployment could run, measured on this machine under the same client
 * load, to record the choice in docs/decisions.md:
 * - aedes: a bare aedes in one process (bench/bare-broker.ts, the version the cloud embeds);
 * - aedes-redis: `fleet-cloud broker-node` on one Redis (the cloud's own cluster);
 * - mosquitto: Debian's mosquitto 2 with the cloud's dynamic-security configuration;
 * - nats: Debian's nats-server with JetStream and its MQTT listener;
 * - rabbitmq: Debian's rabbitmq-server with the rabbitmq_mqtt plugin;
 * - ejabberd: Debian's ejabberd with mod_mqtt, external authentication (extauth).
 * Missing Debian packages are installed (as root) and any service their postinst started is
 * stopped. Each candidate runs on loopback, free ports, its data in a temp dir.
 *
 * Load: N robot-like clients (bench/broker-clients.js: MQTT 3.1.1, clean session, a QoS 1
 * retained last will, QoS 1 subscriptions to their command topics, a retained QoS 1 status), all
 * logging in with one account and a client id each, spread over worker processes, on one node.
 * Figures: connects/s (the whole robot set-up: CONNACK, SUBACK, PUBACK) and resident memory per
 * connection: (RSS with all connected - RSS idle) / N, summed over every OS process of the
 * candidate (every node, Redis, epmd, helpers).
 *
 * Then tiny checks, each a yes or no seen on the wire: shared subscriptions ($share/<g>/...: 20
 * messages split between 2 consumers, none twice), a last will on an abrupt disconnect, a retained
 * message reaching a later subscriber, a wrong password refused, and, for the clustering
 * candidates (aedes-redis, nats, rabbitmq), a QoS 1 message published on one node of a 2-node
 * cluster reaching a subscriber on the other. A candidate that does not start or cannot hold the
 * load fails the run (exit 1) with its reason. Nothing here asserts a duration.
 */
import { execFileSync, fork, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, chownSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import mqtt from 'mqtt';
import { startBrokerCluster } from '../test/support/broker-cluster.js';
import { CLOUD_CLI, cleanEnv, makeTempDir, REPO_ROOT, type TempDir } from '../test/support/cloud.js';
import { EJABBERD, ensureDebianPackages, MOSQUITTO, NATS, RABBITMQ, REDIS, type DebianPackage } from '../test/support/debian.js';
import { freePort } from '../test/support/http.js';
import { startMosquitto } from '../test/support/mosquitto.js';
import { spawnProcess, type SpawnedProcess } from '../test/support/process.js';
import { waitFor } from '../test/support/wait.js';
import { parseBenchArgs, type BenchModule } from './lib/args.js';
import { fmt, table } from './lib/measure.js';
import { BenchFailure, row } from './lib/summary.js';

const WORKER = fileURLToPath(new URL('./broker-clients.js', import.meta.url));
const BARE_BROKER = fileURLToPath(new URL('./bare-broker.ts', import.meta.url));
const ROOT = 'fleet/v1/robots';

function log(msg: string): void {
  process.stderr.write(`bench brokers: ${msg}\n`);
}

interface Account {
  username: string;
  password: string;
}

/** One running set-up of a candidate: its nodes' MQTT URLs and every OS process it is made of. */
interface Running {
  urls: readonly string[];
  account: Account;
  pids(): number[];
  stop(): Promise<void>;
}

interface Candidate {
  name: string;
  packages: readonly DebianPackage[];
  version(): string;
  /** Starts `nodes` nodes (1, or 2 for the cross-node check) with data under `dir`. */
  start(dir: string, nodes: number): Promise<Running>;
  /** Whether the 2-node cross-node check runs (clustering candidates). */
  clusters: boolean;
}

// --- processes -------------------------------------------------------------------------------

/** Process groups this run started (Erlang nodes fork helpers): killed on exit whatever happened. */
const groups = new Set<number>();
process.once('exit', () => {
  for (const g of groups) killGroup(g);
});

function killGroup(pgid: number): void {
  try {
    process.kill(-pgid, 'SIGKILL');
  } catch {
    // already gone
  }
  groups.delete(pgid);
}

function spawnGroup(command: string, args: readonly string[], name: string, env: Record<string, string | undefined> = {}): SpawnedProcess {
  const p = spawnProcess(command, args, { name, env, detached: true, cwd: REPO_ROOT });
  groups.add(p.pid);
  return p;
}

async function stopGroup(p: SpawnedProcess): Promise<void> {
  killGroup(p.pid);
  await p.exited;
}

/** Every process whose ancestry reaches one of `roots` (the roots included). */
function withDescendants(roots: readonly number[]): number[] {
  const parent = new Map<number, number>();
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      parent.set(Number(d), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch {
      // exited meanwhile
    }
  }
  const keep = new Set(roots.filter((p) => parent.has(p)));
  for (let grew = true; grew; ) {
    grew = false;
    for (const [pid, pp] of parent) {
      if (!keep.has(pid) && keep.has(pp)) {
        keep.add(pid);
        grew = true;
      }
    }
  }
  return [...keep];
}

/** VmRSS summed over `pids`, in KiB. */
function rssKib(pids: readonly number[]): number {
  let kib = 0;
  for (const pid of pids) {
    try {
      kib += Number(/^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0);
    } catch {
      // exited meanwhile
    }
  }
  return kib;
}

/** Resolves once `account` can log in on `url` (a condition, not a sleep). */
async function accepting(url: string, account: Account, procs: readonly SpawnedProcess[], what: string, timeoutMs = 120_000): Promise<void> {
  await waitFor(
    async () => {
      for (const p of procs) if (p.exit) throw new BenchFailure(`${what} exited (${JSON.stringify(p.exit)}):\n${p.describe()}`);
      try {
        const c = await mqtt.connectAsync(url, { protocolVersion: 4, ...account, clientId: `ready-${randomBytes(4).toString('hex')}`, reconnectPeriod: 0, connectTimeout: 3000 });
        await c.endAsync(true);
        return true;
      } catch {
        return undefined;
      }
    },
    { timeoutMs, intervalMs: 200, description: () => `${what} to accept a login on ${url}\n${procs.map((p) => p.describe()).join('\n')}` },
  );
}

/** A service the package's postinst may have started (where policy-rc.d let it): stopped, so it holds no port or memory. */
function stopSystemService(service: string, processName: string): void {
  spawnSync('invoke-rc.d', [service, 'stop'], { stdio: 'ignore' });
  const left = spawnSync('pgrep', ['-x', processName], { encoding: 'utf8' }).stdout.trim();
  if (left) log(`${service}: a ${processName} not started by this run is running (pid ${left.split('\n').join(', ')}); it is left alone and its memory is not counted`);
}

function dpkgVersion(pkg: string): string {
  const r = spawnSync('dpkg-query', ['-W', '-f=${Version}', pkg], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() : 'not installed';
}

// --- candidates ------------------------------------------------------------------------------

const aedesSingle: Candidate = {
  name: 'aedes',
  packages: [],
  clusters: false,
  version: () => (JSON.parse(readFileSync(join(REPO_ROOT, 'node_modules', 'aedes', 'package.json'), 'utf8')) as { version: string }).version,
  async start() {
    const proc = spawnGroup(process.execPath, ['--import', 'tsx', BARE_BROKER], 'bare aedes');
    const url = (JSON.parse(await proc.waitForStdout((l) => l.startsWith('{"mqtt"'), { description: 'the broker address' })) as { mqtt: string }).mqtt;
    const account = { username: 'bench', password: 'unused' };
    await accepting(url, account, [proc], 'bare aedes');
    return { urls: [url], account, pids: () => withDescendants([proc.pid]), stop: () => stopGroup(proc) };
  },
};

/** A data directory that a `serve` created: the store broker nodes read robot accounts from. */
async function cloudStore(dir: string): Promise<Record<string, string>> {
  const dataDir = join(dir, 'cloud');
  const serve = spawnProcess(process.execPath, [CLOUD_CLI, 'serve', '--data-dir', dataDir, '--http-port', '0', '--mqtt-port', '0'], { name: 'fleet-cloud serve', cwd: REPO_ROOT, env: cleanEnv() });
  try {
    await serve.waitForStdout((l) => l.startsWith('{') && l.includes('"mqtt"'), { timeoutMs: 60_000, description: 'serve to print its addresses' });
  } finally {
    await serve.kill('SIGTERM');
  }
  return { FLEET_DATA_DIR: dataDir };
}

const aedesRedis: Candidate = {
  name: 'aedes-redis',
  packages: [REDIS],
  clusters: true,
  version: () => `${aedesSingle.version()} + redis ${dpkgVersion('redis-server')}`,
  async start(dir, nodes) {
    const storeEnv = await cloudStore(dir);
    const cluster = await startBrokerCluster({ nodes, storeEnv, dir: join(dir, 'cluster') });
    return {
      urls: cluster.urls,
      account: cluster.account,
      pids: () => withDescendants([...cluster.nodes.map((n) => n.process.pid), cluster.redisProcess.pid]),
      stop: async () => {
        await cluster[Symbol.asyncDispose]();
      },
    };
  },
};

const mosquitto: Candidate = {
  name: 'mosquitto',
  packages: [MOSQUITTO],
  clusters: false,
  version: () => dpkgVersion('mosquitto'),
  async start(dir) {
    stopSystemService('mosquitto', 'mosquitto');
    const broker = await startMosquitto({ dir: join(dir, 'mosquitto') });
    return { urls: [broker.url], account: broker.account, pids: () => withDescendants([broker.process.pid]), stop: async () => {
        await broker[Symbol.asyncDispose]();
      } };
  },
};

const nats: Candidate = {
  name: 'nats',
  packages: [NATS],
  clusters: true,
  version: () => dpkgVersion('nats-server'),
  async start(dir, nodes) {
    stopSystemService('nats-server', 'nats-server');
    const account = { username: 'bench', password: randomBytes(12).toString('hex') };
    const ports = await Promise.all(Array.from({ length: nodes }, async () => ({ client: await freePort(), mqtt: await freePort(), route: await freePort() })));
    const procs: SpawnedProcess[] = [];
    for (let i = 0; i < nodes; i++) {
      const p = ports[i]!;
      const conf = join(dir, `nats-${i}.conf`);
      mkdirSync(join(dir, `js-${i}`), { recursive: true });
      writeFileSync(
        conf,
        [
          `server_name: bench-n${i}`,
          `listen: 127.0.0.1:${p.client}`,
          `jetstream { store_dir: "${join(dir, `js-${i}`)}" }`,
          `mqtt { listen: 127.0.0.1:${p.mqtt} }`,
          `authorization { users: [ { user: "${account.username}", password: "${account.password}" } ] }`,
          ...(nodes > 1
            ? [`cluster { name: bench, listen: 127.0.0.1:${p.route}, routes: [ ${ports.filter((_, j) => j !== i).map((o) => `nats-route://127.0.0.1:${o.route}`).join(', ')} ] }`]
            : []),
        ].join('\n'),
      );
      chmodSync(conf, 0o600);
      procs.push(spawnGroup(NATS.find()!, ['-c', conf], `nats-server ${i}`));
    }
    const urls = ports.map((p) => `mqtt://127.0.0.1:${p.mqtt}`);
    for (const [i, url] of urls.entries()) await accepting(url, account, procs, `nats-server ${i}`);
    return { urls, account, pids: () => withDescendants(procs.map((p) => p.pid)), stop: async () => void (await Promise.all(procs.map(stopGroup))) };
  },
};

/** An epmd of this run's own on a free port, so Erlang nodes of the bench meet no system epmd. */
async function startEpmd(): Promise<{ port: number; proc: SpawnedProcess }> {
  const port = await freePort();
  const proc = spawnGroup('/usr/bin/epmd', ['-port', String(port)], 'epmd');
  await waitFor(() => (spawnSync('/usr/bin/epmd', ['-names'], { env: { ...process.env, ERL_EPMD_PORT: String(port) } }).status === 0 ? true : undefined), {
    timeoutMs: 20_000,
    description: 'epmd to answer',
  });
  return { port, proc };
}

const rabbitmq: Candidate = {
  name: 'rabbitmq',
  packages: [RABBITMQ],
  clusters: true,
  version: () => dpkgVersion('rabbitmq-server'),
  async start(dir, nodes) {
    stopSystemService('rabbitmq-server', 'beam.smp');
    const epmd = await startEpmd();
    // HOME holds the Erlang cookie every node of this run and rabbitmqctl share.
    writeFileSync(join(dir, '.erlang.cookie'), randomBytes(16).toString('hex'), { mode: 0o400 });
    writeFileSync(join(dir, 'enabled_plugins'), '[rabbitmq_mqtt].\n');
    const account = { username: 'bench', password: randomBytes(12).toString('hex') };
    const procs: SpawnedProcess[] = [epmd.proc];
    const urls: string[] = [];
    const envOf = (i: number, amqp: number, dist: number) => ({
      HOME: dir,
      ERL_EPMD_PORT: String(epmd.port),
      RABBITMQ_NODENAME: `bench${i}@localhost`,
      RABBITMQ_NODE_IP_ADDRESS: '127.0.0.1',
      RABBITMQ_NODE_PORT: String(amqp),
      RABBITMQ_DIST_PORT: String(dist),
      RABBITMQ_CONFIG_FILE: join(dir, `rabbitmq-${i}.conf`),
      RABBITMQ_ENABLED_PLUGINS_FILE: join(dir, 'enabled_plugins'),
      RABBITMQ_MNESIA_BASE: join(dir, `mnesia-${i}`),
      RABBITMQ_LOG_BASE: join(dir, `log-${i}`),
      RABBITMQ_LOGS: '-',
    });
    const ctl = (env: Record<string, string>, args: string[]) => {
      const r = spawnSync('/usr/lib/rabbitmq/bin/rabbitmqctl', ['-n', env.RABBITMQ_NODENAME!, ...args], { env: { ...process.env, ...env }, encoding: 'utf8', timeout: 120_000 });
      if (r.status !== 0) throw new BenchFailure(`rabbitmqctl ${args[0]} exited ${r.status}: ${(r.stderr || r.stdout).slice(0, 500)}`);
    };
    const envs: Record<string, string>[] = [];
    for (let i = 0; i < nodes; i++) {
      const amqp = await freePort();
      const mqttPort = await freePort();
      const env = envOf(i, amqp, await freePort());
      envs.push(env);
      writeFileSync(
        env.RABBITMQ_CONFIG_FILE,
        [`listeners.tcp.default = 127.0.0.1:${amqp}`, `mqtt.listeners.tcp.default = 127.0.0.1:${mqttPort}`, 'mqtt.allow_anonymous = false', `default_user = ${account.username}`, `default_pass = ${account.password}`, 'loopback_users = none'].join('\n'),
      );
      const proc = spawnGroup('/usr/lib/rabbitmq/bin/rabbitmq-server', [], `rabbitmq-server ${i}`, env);
      procs.push(proc);
      urls.push(`mqtt://127.0.0.1:${mqttPort}`);
      await proc.waitForStdout((l) => l.includes('Server startup complete') || l.includes('completed with'), { timeoutMs: 180_000, description: `rabbitmq node ${i} to start` });
      if (i > 0) {
        ctl(env, ['stop_app']);
        ctl(env, ['join_cluster', envs[0]!.RABBITMQ_NODENAME!]);
        ctl(env, ['start_app']);
      }
      await accepting(urls[i]!, account, procs, `rabbitmq node ${i}`, 180_000);
    }
    return { urls, account, pids: () => withDescendants(procs.map((p) => p.pid)), stop: async () => void (await Promise.all(procs.map(stopGroup))) };
  },
};

/** ejabberd's external authentication program: one account, read from the file beside it. */
const EXTAUTH = `
const { readFileSync } = require('node:fs');
const { username, password } = JSON.parse(readFileSync(process.argv[2], 'utf8'));
let buf = Buffer.alloc(0);
process.stdin.on('data', (d) => {
  buf = Buffer.concat([buf, d]);
  while (buf.length >= 2 && buf.length >= 2 + buf.readUInt16BE(0)) {
    const [op, user, , ...rest] = buf.subarray(2, 2 + buf.readUInt16BE(0)).toString('utf8').split(':');
    buf = buf.subarray(2 + buf.readUInt16BE(0));
    const ok = (op === 'auth' && user === username && rest.join(':') === password) || (op === 'isuser' && user === username);
    process.stdout.write(Buffer.from([0, 2, 0, ok ? 1 : 0]));
  }
});
`;

const ejabberd: Candidate = {
  name: 'ejabberd',
  packages: [EJABBERD],
  clusters: false,
  version: () => dpkgVersion('ejabberd'),
  async start(dir) {
    stopSystemService('ejabberd', 'beam.smp');
    const epmd = await startEpmd();
    const account = { username: 'bench', password: randomBytes(12).toString('hex') };
    const port = await freePort();
    for (const d of ['logs', 'spool']) mkdirSync(join(dir, d), { recursive: true });
    writeFileSync(join(dir, 'account.json'), JSON.stringify(account), { mode: 0o600 });
    writeFileSync(join(dir, 'extauth.cjs'), EXTAUTH);
    writeFileSync(
      join(dir, 'ejabberd.yml'),
      [
        'hosts: [localhost]',
        'loglevel: info',
        'certfiles: []',
        'listen:',
        `  - port: ${port}`,
        '    ip: "127.0.0.1"',
        '    module: mod_mqtt',
        '    backlog: 1024',
        'auth_method: external',
        `extauth_program: "${process.execPath} ${join(dir, 'extauth.cjs')} ${join(dir, 'account.json')}"`,
        'modules:',
        '  mod_mqtt: {}',
      ].join('\n'),
    );
    writeFileSync(
      join(dir, 'ejabberdctl.cfg'),
      [`ERLANG_NODE=bench@localhost`, `EJABBERD_PID_PATH=${join(dir, 'ejabberd.pid')}`, 'ERL_OPTIONS="-env ERL_CRASH_DUMP_BYTES 0"', 'ERL_MAX_PORTS=65536', 'ERL_PROCESSES=1000000'].join('\n'),
    );
    // ejabberdctl runs the node as the ejabberd user when started as root: it must read the dir.
    const uid = Number(execFileSync('id', ['-u', 'ejabberd'], { encoding: 'utf8' }).trim());
    const gid = Number(execFileSync('id', ['-g', 'ejabberd'], { encoding: 'utf8' }).trim());
    chmodSync(dirname(dir), 0o755);
    for (const p of [dir, ...readdirSync(dir).map((f) => join(dir, f))]) chownSync(p, uid, gid);
    const proc = spawnGroup(
      '/usr/sbin/ejabberdctl',
      ['--config-dir', dir, '--config', join(dir, 'ejabberd.yml'), '--ctl-config', join(dir, 'ejabberdctl.cfg'), '--logs', join(dir, 'logs'), '--spool', join(dir, 'spool'), 'foreground'],
      'ejabberd',
      { ERL_EPMD_PORT: String(epmd.port), HOME: dir },
    );
    const url = `mqtt://127.0.0.1:${port}`;
    try {
      await accepting(url, account, [proc, epmd.proc], 'ejabberd', 180_000);
    } catch (err) {
      await Promise.all([stopGroup(proc), stopGroup(epmd.proc)]);
      const logFile = join(dir, 'logs', 'ejabberd.log');
      const tail = existsSync(logFile) ? readFileSync(logFile, 'utf8').split('\n').slice(-15).join('\n') : '(no ejabberd.log)';
      throw new BenchFailure(`${err instanceof Error ? err.message : String(err)}\nejabberd.log:\n${tail}`);
    }
    return { urls: [url], account, pids: () => withDescendants([proc.pid, epmd.proc.pid]), stop: async () => void (await Promise.all([stopGroup(proc), stopGroup(epmd.proc)])) };
  },
};

const CANDIDATES: readonly Candidate[] = [aedesSingle, aedesRedis, mosquitto, nats, rabbitmq, ejabberd];

// --- load ------------------------------------------------------------------------------------

class Worker {
  readonly child: ChildProcess;
  private readonly ready: Promise<void>;

  constructor() {
    this.child = fork(WORKER, [], { execArgv: ['--max-old-space-size=2048'], cwd: REPO_ROOT, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    this.ready = new Promise((resolve, reject) => {
      this.child.once('message', () => resolve());
      this.child.once('exit', (code) => reject(new BenchFailure(`client worker exited ${code} before it was ready`)));
    });
  }

  async connect(msg: Record<string, unknown>): Promise<{ ok: number; failed: number; errors: string[]; ms: number; open: number }> {
    await this.ready;
    return new Promise((resolve, reject) => {
      const onMessage = (m: { type: string; ok: number; failed: number; errors: string[]; ms: number; open: number }) => {
        if (m.type !== 'connected') return;
        this.child.off('message', onMessage);
        resolve(m);
      };
      this.child.on('message', onMessage);
      this.child.once('exit', (code) => reject(new BenchFailure(`client worker exited ${code} while connecting`)));
      this.child.send({ type: 'connect', ...msg });
    });
  }

  async stop(): Promise<void> {
    if (this.child.exitCode !== null) return;
    const gone = new Promise((resolve) => this.child.once('exit', resolve));
    this.child.send({ type: 'stop' });
    await gone;
  }
}

interface LoadFigures {
  connectsPerS: number;
  kibPerConnection: number;
  idleMib: number;
  loadedMib: number;
}

async function load(run: Running, n: number, workers: number, concurrency: number, tag: string): Promise<LoadFigures> {
  const idle = rssKib(run.pids());
  const pool = Array.from({ length: workers }, () => new Worker());
  try {
    const ids = Array.from({ length: n }, (_, i) => `${tag}-${i}`);
    const t0 = performance.now();
    const results = await Promise.all(
      pool.map((w, k) => w.connect({ url: run.urls[0], username: run.account.username, password: run.account.password, ids: ids.filter((_, i) => i % workers === k), concurrency, root: ROOT })),
    );
    const ms = performance.now() - t0;
    const ok = results.reduce((s, r) => s + r.ok, 0);
    const open = results.reduce((s, r) => s + r.open, 0);
    if (ok !== n || open !== n) throw new BenchFailure(`${ok} of ${n} clients set up, ${open} still open: ${results.flatMap((r) => r.errors).slice(0, 5).join('; ')}`);
    const loaded = rssKib(run.pids());
    return { connectsPerS: (n / ms) * 1000, kibPerConnection: (loaded - idle) / n, idleMib: idle / 1024, loadedMib: loaded / 1024 };
  } finally {
    await Promise.all(pool.map((w) => w.stop()));
  }
}

// --- feature checks --------------------------------------------------------------------------

async function client(url: string, account: Account, extra: mqtt.IClientOptions = {}): Promise<mqtt.MqttClient> {
  return mqtt.connectAsync(url, { protocolVersion: 4, clean: true, reconnectPeriod: 0, connectTimeout: 10_000, clientId: `check-${randomBytes(6).toString('hex')}`, ...account, ...extra });
}

/** Resolves with what `collect` gathered once `done` says so, or with it as it is after `ms`. */
async function gather<T>(state: T, done: (s: T) => boolean, ms: number): Promise<T> {
  await waitFor(() => (done(state) ? true : undefined), { timeoutMs: ms, intervalMs: 50 }).catch(() => undefined);
  return state;
}

async function checkRetained(url: string, account: Account): Promise<boolean> {
  const topic = `${ROOT}/check-${randomBytes(4).toString('hex')}/status`;
  const pub = await client(url, account);
  await pub.publishAsync(topic, 'retained', { qos: 1, retain: true });
  await pub.endAsync();
  const sub = await client(url, account);
  try {
    const got = { retained: false };
    sub.on('message', (t, _p, packet) => {
      if (t === topic && packet.retain) got.retained = true;
    });
    await sub.subscribeAsync(topic, { qos: 1 });
    return (await gather(got, (g) => g.retained, 5000)).retained;
  } finally {
    await sub.endAsync(true);
  }
}

async function checkWill(url: string, account: Account): Promise<boolean> {
  const topic = `${ROOT}/check-${randomBytes(4).toString('hex')}/status`;
  const observer = await client(url, account);
  try {
    const got = { will: false };
    observer.on('message', (t, p) => {
      if (t === topic && p.toString() === 'gone') got.will = true;
    });
    await observer.subscribeAsync(topic, { qos: 1 });
    const dying = await client(url, account, { will: { topic, payload: Buffer.from('gone'), qos: 1, retain: false }, keepalive: 60 });
    dying.stream.destroy();
    return (await gather(got, (g) => g.will, 10_000)).will;
  } finally {
    await observer.endAsync(true);
  }
}

/** 20 messages on 20 topics: shared when both consumers got some and none came twice. */
async function checkShared(url: string, account: Account): Promise<{ ok: boolean; detail: string }> {
  const tag = randomBytes(4).toString('hex');
  const counts = [0, 0];
  const consumers = [await client(url, account), await client(url, account)];
  try {
    for (const [i, c] of consumers.entries()) {
      c.on('message', () => counts[i]!++);
      const granted = await c.subscribeAsync(`$share/bench/${ROOT}/+/outbox`, { qos: 1 });
      if (granted.some((g) => g.qos === 128)) return { ok: false, detail: 'SUBACK refused $share' };
    }
    const pub = await client(url, account);
    for (let i = 0; i < 20; i++) await pub.publishAsync(`${ROOT}/share-${tag}-${i}/outbox`, String(i), { qos: 1 });
    await pub.endAsync();
    await gather(counts, (c) => c[0]! + c[1]! >= 40, 3000);
    const ok = counts[0]! > 0 && counts[1]! > 0 && counts[0]! + counts[1]! === 20;
    return { ok, detail: `${counts[0]} + ${counts[1]} of 20` };
  } finally {
    await Promise.all(consumers.map((c) => c.endAsync(true)));
  }
}

async function checkAuth(url: string, account: Account): Promise<boolean> {
  try {
    const c = await client(url, { username: account.username, password: `${account.password}-wrong` });
    await c.endAsync(true);
    return false;
  } catch {
    return true;
  }
}

/** A QoS 1 command published on node 1 reaches its robot's subscription on node 0. */
async function checkCrossNode(urls: readonly string[], account: Account): Promise<boolean> {
  const topic = `${ROOT}/check-${randomBytes(4).toString('hex')}/cmd`;
  const sub = await client(urls[0]!, account);
  try {
    const got = { cmd: false };
    sub.on('message', (t) => {
      if (t === topic) got.cmd = true;
    });
    await sub.subscribeAsync(topic, { qos: 1 });
    const pub = await client(urls[1]!, account);
    // The subscription travels to the other node asynchronously: publish until it arrives.
    await waitFor(
      async () => {
        await pub.publishAsync(topic, 'cmd', { qos: 1 });
        return got.cmd ? true : undefined;
      },
      { timeoutMs: 15_000, intervalMs: 500 },
    ).catch(() => undefined);
    await pub.endAsync(true);
    return got.cmd;
  } finally {
    await sub.endAsync(true);
  }
}

async function safe<T>(what: string, f: () => Promise<T>, fallback: T): Promise<T> {
  try {
    return await f();
  } catch (err) {
    log(`${what}: ${err instanceof Error ? err.message : String(err)}`);
    return fallback;
  }
}

// --- the run ---------------------------------------------------------------------------------

interface Result {
  name: string;
  version: string;
  figures?: LoadFigures;
  shared?: string;
  will?: boolean;
  retained?: boolean;
  auth?: boolean;
  crossNode?: boolean | null;
  error?: string;
}

const yn = (b: boolean | null | undefined) => (b === null || b === undefined ? '-' : b ? 'yes' : 'no');

export const brokers: BenchModule = {
  description: 'MQTT broker candidates for a clustered deployment: connects/s, KiB per connection, features',
  async run(argv) {
    const args = parseBenchArgs(argv, { only: { type: 'string' }, workers: { type: 'string' }, concurrency: { type: 'string' } });
    const n = argv.includes('--connections') ? args.connections : 5000;
    const workers = Math.max(1, Number(args.extra.workers ?? 2));
    const concurrency = Math.max(1, Number(args.extra.concurrency ?? 50));
    const only = typeof args.extra.only === 'string' ? args.extra.only.split(',').map((s) => s.trim()) : null;
    for (const o of only ?? []) if (!CANDIDATES.some((c) => c.name === o)) throw new BenchFailure(`unknown candidate ${o} (${CANDIDATES.map((c) => c.name).join(', ')})`);
    const chosen = CANDIDATES.filter((c) => !only || only.includes(c.name));

    const missing = ensureDebianPackages(
      chosen.flatMap((c) => c.packages),
      log,
    );
    const results: Result[] = [];
    for (const c of chosen) {
      const r: Result = { name: c.name, version: '' };
      results.push(r);
      if (c.packages.some((p) => missing.includes(p.name))) {
        r.error = `Debian package ${c.packages.map((p) => p.name).join(', ')} not installed`;
        continue;
      }
      r.version = c.version();
      let tmp: TempDir | undefined;
      let run: Running | undefined;
      try {
        tmp = await makeTempDir(`fleet-brokers-${c.name}-`);
        log(`${c.name} ${r.version}: starting`);
        mkdirSync(join(tmp.path, 'one'));
        mkdirSync(join(tmp.path, 'two'));
        run = await c.start(join(tmp.path, 'one'), 1);
        log(`${c.name}: ${n} clients from ${workers} workers, ${concurrency} in flight each`);
        r.figures = await load(run, n, workers, concurrency, `${c.name}-robot`);
        log(`${c.name}: ${fmt(r.figures.connectsPerS, 0)} connects/s, ${fmt(r.figures.kibPerConnection, 1)} KiB per connection (RSS ${fmt(r.figures.idleMib, 0)} -> ${fmt(r.figures.loadedMib, 0)} MiB)`);
        const url = run.urls[0]!;
        const shared = await safe(`${c.name} shared`, () => checkShared(url, run!.account), { ok: false, detail: 'error' });
        r.shared = `${shared.ok ? 'yes' : 'no'} (${shared.detail})`;
        r.will = await safe(`${c.name} will`, () => checkWill(url, run!.account), false);
        r.retained = await safe(`${c.name} retained`, () => checkRetained(url, run!.account), false);
        r.auth = await safe(`${c.name} auth`, () => checkAuth(url, run!.account), false);
        await run.stop();
        run = undefined;
        if (c.clusters) {
          log(`${c.name}: a 2-node cluster for the cross-node check`);
          try {
            run = await c.start(join(tmp.path, 'two'), 2);
          } catch (err) {
            r.crossNode = false;
            throw new BenchFailure(`the 2-node cluster did not start: ${err instanceof Error ? err.message : String(err)}`);
          }
          r.crossNode = await safe(`${c.name} cross-node`, () => checkCrossNode(run!.urls, run!.account), false);
        } else r.crossNode = null;
      } catch (err) {
        r.error = err instanceof Error ? err.message.split('\n').slice(0, 6).join('\n') : String(err);
        log(`${c.name} FAILED: ${r.error}`);
      } finally {
        if (run) await run.stop().catch(() => undefined);
        await tmp?.[Symbol.asyncDispose]();
      }
    }

    process.stdout.write(
      `\n== MQTT broker candidates: ${n} robot-like clients (MQTT 3.1.1, clean session, will, QoS 1 subscription, retained status) on one node, ${workers} client processes\n` +
        `${table(
          ['candidate', 'version', 'connects/s', 'KiB/conn', 'RSS idle→loaded MiB', 'shared subs', 'will', 'retained', 'bad password refused', '2-node cross-node'],
          results.map((r) => [
            r.name,
            r.version,
            r.figures ? fmt(r.figures.connectsPerS, 0) : 'FAILED',
            r.figures ? fmt(r.figures.kibPerConnection, 1) : '',
            r.figures ? `${fmt(r.figures.idleMib, 0)}→${fmt(r.figures.loadedMib, 0)}` : '',
            r.shared ?? '-',
            yn(r.will),
            yn(r.retained),
            yn(r.auth),
            r.crossNode === null ? 'n/a' : yn(r.crossNode),
          ]),
        )}\n`,
    );
    for (const r of results.filter((x) => x.error)) process.stdout.write(`${r.name} FAILED: ${r.error}\n`);
    const failed = results.filter((r) => r.error);
    if (failed.length > 0) throw new BenchFailure(failed.map((r) => `${r.name}: ${r.error}`).join('\n'));
    const base = results.find((r) => r.name === 'aedes')?.figures;
    return results.flatMap((r) => [
      row({ name: `${r.name}: connects/s, ${n} clients`, figure: r.figures!.connectsPerS, unit: 'conn/s', baseline: base?.connectsPerS ?? null, baselineUnit: base ? 'conn/s' : null, baselineName: 'bare aedes, same load' }),
      row({ name: `${r.name}: KiB per connection`, figure: r.figures!.kibPerConnection, unit: 'KiB', baseline: base?.kibPerConnection ?? null, baselineUnit: base ? 'KiB' : null, baselineName: 'bare aedes, same load' }),
    ]);
  },
};
