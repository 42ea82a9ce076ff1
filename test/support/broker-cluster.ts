/**
 * A broker cluster for the tests, as docs/operations.md sets one up: one Redis (Debian's
 * redis-server, on loopback, an append-only file in the cluster's directory so a stop and a
 * restart keep the cluster's state, as mosquitto's persistence file does), and `fleet-cloud broker-node` nodes on it,
 * each on a port of its own, reading robot accounts from the cloud's store (`storeEnv`: the
 * PostgreSQL database, or the data directory on SQLite) and letting in the cloud's replicas with
 * an account file written by `fleet-cloud broker-config`.
 */
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import mqtt from 'mqtt';
import { cleanEnv, CLOUD_CLI, makeTempDir, REPO_ROOT, runCloudCli, type TempDir } from './cloud.js';
import { ensureDebianPackages, REDIS } from './debian.js';
import { freePort } from './http.js';
import { spawnProcess, type SpawnedProcess } from './process.js';
import { waitFor } from './wait.js';

export interface ClusterNodeProcess {
  readonly index: number;
  readonly url: string;
  readonly port: number;
  readonly id: string;
  readonly process: SpawnedProcess;
  readonly alive: boolean;
}

export interface BrokerCluster extends AsyncDisposable {
  readonly redisUrl: string;
  /** The Redis server the nodes share (a new process after a stop and a restart). */
  readonly redisProcess: SpawnedProcess;
  readonly nodes: readonly ClusterNodeProcess[];
  /** Every node's URL, in order. */
  readonly urls: readonly string[];
  /** The first node's URL. */
  readonly url: string;
  /** The cloud's account on the nodes (`serve --mqtt-account-file`, `broker-node --account-file`). */
  readonly accountFile: string;
  readonly account: { username: string; password: string };
  readonly heartbeatMs: number;
  readonly process: SpawnedProcess;
  /** kill -9 of one node (its connections end with it; its robots' wills are another node's to publish). */
  kill(index: number): Promise<void>;
  /** Starts a killed or stopped node again on its port (a new node id), and Redis first if it was stopped. */
  start(index: number): Promise<void>;
  /** Every node started again (a node that still runs is left as it is). */
  restart(): Promise<void>;
  /**
   * Every node stopped (SIGTERM), then Redis (its append-only file keeps the cluster's state for a
   * restart). Nothing of the cluster outlives a stop: a test file that ends without disposing it
   * leaves no server behind.
   */
  stop(): Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

export interface BrokerClusterOptions {
  nodes?: number;
  /** `{ FLEET_DATABASE_URL }` or `{ FLEET_DATA_DIR }`: the store the cloud replicas use. */
  storeEnv: Record<string, string>;
  /** The directory for Redis and the account (kept by the caller), or a temp dir of its own. */
  dir?: string;
  heartbeatMs?: number;
}

function redisBinary(): string {
  let bin = REDIS.find();
  if (!bin) {
    ensureDebianPackages([REDIS]);
    bin = REDIS.find();
  }
  if (!bin) throw new Error('redis-server is not installed (apt-get install -y redis-server as root)');
  return bin;
}

async function accepting(url: string, account: { username: string; password: string }, proc: SpawnedProcess, what: string): Promise<void> {
  await waitFor(
    async () => {
      if (proc.exit) throw new Error(`${what} exited (${JSON.stringify(proc.exit)}):\n${proc.describe()}`);
      try {
        const c = await mqtt.connectAsync(url, { protocolVersion: 4, ...account, reconnectPeriod: 0, connectTimeout: 2000 });
        await c.endAsync(true);
        return true;
      } catch {
        return undefined;
      }
    },
    { timeoutMs: 45_000, intervalMs: 100, description: () => `${what} to accept the cloud's login on ${url}\n${proc.describe()}` },
  );
}

export async function startBrokerCluster(opts: BrokerClusterOptions): Promise<BrokerCluster> {
  const count = opts.nodes ?? 3;
  const heartbeatMs = opts.heartbeatMs ?? 1000;
  const tmp: TempDir | null = opts.dir === undefined ? await makeTempDir('fleet-cluster-') : null;
  const dir = opts.dir ?? tmp!.path;
  mkdirSync(dir, { recursive: true });
  const generated = await runCloudCli(['broker-config', '--out', join(dir, 'fleet')]);
  if (generated.code !== 0) throw new Error(`fleet-cloud broker-config exited ${generated.code}: ${generated.stderr}`);
  const accountFile = (JSON.parse(generated.stdout) as { account: string }).account;
  const account = JSON.parse(readFileSync(accountFile, 'utf8')) as { username: string; password: string };

  const redisPort = await freePort();
  const redisArgs = ['--port', String(redisPort), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'yes', '--appendfsync', 'no', '--dir', dir];
  const spawnRedis = async () => {
    const proc = spawnProcess(redisBinary(), redisArgs, { name: 'redis-server' });
    await proc.waitForStdout((l) => l.includes('Ready to accept connections'), { timeoutMs: 30_000, description: 'redis-server to be ready' });
    return proc;
  };
  let redis = await spawnRedis();
  const redisUrl = `redis://127.0.0.1:${redisPort}`;

  const ports: number[] = [];
  for (let i = 0; i < count; i++) ports.push(await freePort());
  const nodes: { index: number; url: string; port: number; id: string; process: SpawnedProcess; alive: boolean }[] = [];
  const spawnNode = async (index: number) => {
    const port = ports[index]!;
    const proc = spawnProcess(
      process.execPath,
      [CLOUD_CLI, 'broker-node', '--port', String(port), '--redis-url', redisUrl, '--account-file', accountFile, '--heartbeat-ms', String(heartbeatMs), '--node-id', `node${index}-${Date.now().toString(36)}`, '--log-level', 'info'],
      { name: `broker-node ${index}`, cwd: REPO_ROOT, env: cleanEnv(opts.storeEnv) },
    );
    const line = await proc.waitForStdout((l) => l.startsWith('{') && l.includes('"node"'), { timeoutMs: 45_000, description: `broker-node ${index}'s address line` });
    const { mqtt: url, node } = JSON.parse(line) as { mqtt: string; node: string };
    await accepting(url, account, proc, `broker-node ${index}`);
    const entry = { index, url, port, id: node, process: proc, alive: true };
    nodes[index] = entry;
    return entry;
  };
  const dispose = async () => {
    await Promise.allSettled(nodes.map((n) => n.process.kill('SIGKILL')));
    await redis.kill('SIGKILL');
    await tmp?.[Symbol.asyncDispose]();
  };
  try {
    for (let i = 0; i < count; i++) await spawnNode(i);
  } catch (err) {
    await dispose();
    throw err;
  }
  const cluster: BrokerCluster = {
    redisUrl,
    get redisProcess() {
      return redis;
    },
    get nodes() {
      return nodes;
    },
    get urls() {
      return nodes.map((n) => n.url);
    },
    get url() {
      return nodes[0]!.url;
    },
    accountFile,
    account,
    heartbeatMs,
    get process() {
      return nodes[0]!.process;
    },
    async kill(index) {
      const n = nodes[index]!;
      await n.process.kill('SIGKILL');
      n.alive = false;
    },
    async start(index) {
      if (redis.exit !== null) redis = await spawnRedis();
      await spawnNode(index);
    },
    async restart() {
      if (redis.exit !== null) redis = await spawnRedis();
      for (const n of [...nodes]) if (n.process.exit !== null) await spawnNode(n.index);
    },
    async stop() {
      const exits = await Promise.all(nodes.map((n) => n.process.kill('SIGTERM')));
      for (const n of nodes) n.alive = false;
      await redis.kill('SIGTERM');
      return exits[0]!;
    },
    [Symbol.asyncDispose]: dispose,
  };
  return cluster;
}
