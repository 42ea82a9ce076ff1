import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { FleetClient } from '@fleet/client';
import { startBrokerCluster } from './broker-cluster.js';
import { startMosquitto, type MosquittoBroker } from './mosquitto.js';
import { runProcess, spawnProcess, type ProcessExit, type RunResult, type SpawnedProcess, type WaitOptions } from './process.js';
import { startRoundRobin, type RoundRobin } from './round-robin.js';
import { createTestDatabase, testEngine } from '../../cloud/src/store/test-store.js';

export const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const CLOUD_CLI = join(REPO_ROOT, 'cloud', 'dist', 'cli.js');

/** The line `serve` prints once it listens. */
export interface ServeAddresses {
  http: string;
  mqtt: string;
}

export function parseAddressLine(line: string): ServeAddresses | null {
  if (!line.startsWith('{')) return null;
  try {
    const v = JSON.parse(line) as Partial<ServeAddresses>;
    return typeof v.http === 'string' && typeof v.mqtt === 'string' ? { http: v.http, mqtt: v.mqtt } : null;
  } catch {
    return null;
  }
}

function assertBuilt(): void {
  if (!existsSync(CLOUD_CLI)) throw new Error(`${CLOUD_CLI} is missing: run \`npm run build\` before the end-to-end tests`);
}

/**
 * The environment for a spawned CLI: the caller's, minus any FLEET_* a developer has exported
 * (a stray FLEET_DATA_DIR must not point a test at real data), plus what the test sets.
 */
export function cleanEnv(extra: Record<string, string | undefined> = {}): Record<string, string | undefined> {
  const env: Record<string, string | undefined> = {};
  for (const k of Object.keys(process.env)) if (k.startsWith('FLEET_')) env[k] = undefined;
  // An agent under test never reads the machine's /etc/fleet-agent/agent.yaml (the package test installs one).
  env.FLEET_AGENT_CONFIG = 'none';
  return { ...env, ...extra };
}

/**
 * With FLEET_TEST_DATABASE=postgres every cloud keeps its index in a PostgreSQL database of its
 * own, tied to its data directory so that a restart on the same directory finds the same data.
 */
const databases = new Map<string, Promise<{ url: string; drop(): Promise<void> }>>();

/** `{ FLEET_DATABASE_URL }` for the cloud on `dataDir` when the suites run on PostgreSQL; `{}` on SQLite. */
export async function databaseEnv(dataDir: string): Promise<Record<string, string>> {
  if (testEngine() !== 'postgres') return {};
  let db = databases.get(dataDir);
  if (!db) {
    db = createTestDatabase();
    databases.set(dataDir, db);
  }
  return { FLEET_DATABASE_URL: (await db).url };
}

async function dropDatabase(dataDir: string): Promise<void> {
  const db = databases.get(dataDir);
  databases.delete(dataDir);
  await (await db)?.drop();
}

/** A fresh directory under the OS temp dir, removed on dispose. */
export interface TempDir extends AsyncDisposable {
  readonly path: string;
}

export async function makeTempDir(prefix = 'fleet-e2e-'): Promise<TempDir> {
  const path = await mkdtemp(join(tmpdir(), prefix));
  return {
    path,
    async [Symbol.asyncDispose]() {
      await rm(path, { recursive: true, force: true });
    },
  };
}

/** Runs `node cloud/dist/cli.js ...args` to completion. */
export async function runCloudCli(args: readonly string[], opts: { env?: Record<string, string | undefined>; timeoutMs?: number } = {}): Promise<RunResult> {
  assertBuilt();
  return runProcess(process.execPath, [CLOUD_CLI, ...args], {
    name: `fleet-cloud ${args.join(' ')}`,
    cwd: REPO_ROOT,
    env: cleanEnv(opts.env),
    ...(opts.timeoutMs !== undefined ? { timeoutMs: opts.timeoutMs } : {}),
  });
}

export interface StartCloudOptions {
  /** Serve this data directory (kept on dispose). By default a fresh temp dir, removed on dispose. */
  dataDir?: string;
  /** `flags` (default): --data-dir, --http-port 0, --mqtt-port 0; `env`: the FLEET_* variables. */
  configVia?: 'flags' | 'env';
  /** Default `info`: the shutdown tests wait for log lines. */
  logLevel?: string;
  /** More `serve` flags. */
  args?: readonly string[];
  env?: Record<string, string | undefined>;
  /** How long to wait for the address line. */
  startTimeoutMs?: number;
  /**
   * `single`: always one process with its embedded broker, also when FLEET_TEST_REPLICAS asks for
   * replicas: for tests of that deployment itself (the embedded broker's refusals and log lines,
   * one process's ports, signals and logs).
   */
  topology?: 'single';
}

export interface CloudProcess extends AsyncDisposable {
  readonly http: string;
  readonly mqtt: string;
  readonly dataDir: string;
  /** `<dataDir>/admin-key`, read when asked (throws if the file does not exist). */
  readonly adminKey: string;
  readonly stdoutLines: readonly string[];
  readonly stderrLines: readonly string[];
  /** The first stderr line, printed or to come, of any of the `serve` processes that matches (a log line of whichever replica handled it). */
  waitForStderr(match: (line: string) => boolean, opts?: WaitOptions): Promise<string>;
  /** The (first) `serve` process. */
  readonly process: SpawnedProcess;
  /** Every `serve` process: one, or the replicas with FLEET_TEST_REPLICAS. */
  readonly processes: readonly SpawnedProcess[];
  /** A typed /v1 client; the admin key unless another is given. */
  client(apiKey?: string): FleetClient;
  /** Raw HTTP against the server: `key` sends a bearer (admin key by default, null for none), `json` a JSON body. */
  fetch(path: string, init?: RequestInit & { key?: string | null; json?: unknown }): Promise<Response>;
  /** `fleet-cloud ...args --data-dir <dataDir>` (pass `withDataDir: false` for commands without it). */
  cli(args: readonly string[], opts?: { withDataDir?: boolean; env?: Record<string, string | undefined> }): Promise<RunResult>;
  /** Sends a signal and waits for the exit (SIGKILL after a grace period). */
  kill(signal?: NodeJS.Signals): Promise<ProcessExit>;
}

/**
 * FLEET_TEST_REPLICAS=N (N >= 2) runs every cloud a test starts as N `serve` replicas on one
 * store behind one mosquitto, with a round-robin TCP front as its HTTP address: the end-to-end
 * suites then check the replicated deployment (robots on the external broker, requests landing
 * on any replica, webhooks claimed across processes) with the same assertions.
 */
export function testReplicas(): number {
  const n = Number(process.env.FLEET_TEST_REPLICAS ?? '1');
  return Number.isInteger(n) && n >= 2 ? n : 1;
}

function replicated(opts: StartCloudOptions): boolean {
  if (testReplicas() < 2 || opts.topology === 'single') return false;
  // A test (or startReplicas) that names its own broker runs what it names.
  return !(opts.args ?? []).includes('--mqtt-url') && opts.env?.FLEET_MQTT_URL === undefined;
}

/**
 * One mosquitto per data directory, like its database. It runs while a cloud on the directory
 * runs and stops with the last of them (as the embedded broker goes down with its process),
 * keeping its files: a cloud started again on the directory finds its robots' accounts and
 * sessions on the same port. The files sit next to the data directory (`<dataDir>.mosquitto`),
 * inside the test's temp dir, so nothing outlives the test.
 */
/** The broker a replicated cloud runs on: mosquitto, or with FLEET_TEST_BROKER=cluster a broker cluster. */
type TestBroker = Pick<MosquittoBroker, 'url' | 'accountFile' | 'process' | 'restart' | 'stop'> & AsyncDisposable & { readonly urls?: readonly string[]; readonly replicaUrls?: readonly string[] };

const brokers = new Map<string, { broker: Promise<TestBroker>; users: number }>();

/** FLEET_TEST_BROKER=cluster: the replicated suites run on three broker nodes instead of one mosquitto. */
export function testBrokerKind(): 'mosquitto' | 'cluster' {
  return process.env.FLEET_TEST_BROKER === 'cluster' ? 'cluster' : 'mosquitto';
}

/**
 * FLEET_TEST_BROKER_KILL_MS=<ms> (with FLEET_TEST_BROKER=cluster): the cluster gets a fourth node,
 * in every robot's address list but with no replica on it, killed (kill -9) that long after the
 * cluster started, in the middle of the test: the robots it held move to another node, their
 * reports in flight come again from their outboxes. Unset: no node is killed.
 */
export function testBrokerKillMs(): number | null {
  const raw = process.env.FLEET_TEST_BROKER_KILL_MS;
  if (raw === undefined || raw === '') return null;
  const ms = Number(raw);
  if (!Number.isInteger(ms) || ms < 0) throw new Error(`FLEET_TEST_BROKER_KILL_MS must be a whole number of milliseconds, not ${raw}`);
  return ms;
}

/** The cluster of a replicated test: three nodes, and with FLEET_TEST_BROKER_KILL_MS a fourth that dies mid-test. */
async function startTestCluster(dataDir: string, storeEnv: Record<string, string>): Promise<TestBroker> {
  const killMs = testBrokerKillMs();
  const cluster = await startBrokerCluster({
    nodes: killMs === null ? 3 : 4,
    storeEnv: Object.keys(storeEnv).length > 0 ? storeEnv : { FLEET_DATA_DIR: dataDir },
    dir: `${dataDir}.cluster`,
  });
  if (killMs === null) return cluster;
  const doomed = cluster.nodes.length - 1;
  let killed: Promise<void> = Promise.resolve();
  const timer = setTimeout(() => {
    process.stderr.write(`broker cluster of ${dataDir}: node ${doomed} killed (kill -9) ${killMs} ms after it started\n`);
    killed = cluster.kill(doomed);
  }, killMs);
  const cancel = async () => {
    clearTimeout(timer);
    await killed;
  };
  return {
    url: cluster.url,
    // Replicas sit on the first three nodes only; robots are told all four.
    get urls() {
      return cluster.urls;
    },
    replicaUrls: cluster.urls.slice(0, doomed),
    accountFile: cluster.accountFile,
    get process() {
      return cluster.process;
    },
    // A restart of the test's cloud brings back the nodes that still run; the killed one stays dead.
    restart: async () => {
      for (const n of cluster.nodes) if (n.index !== doomed && n.process.exit !== null) await cluster.start(n.index);
    },
    stop: async () => {
      await cancel();
      return cluster.stop();
    },
    [Symbol.asyncDispose]: async () => {
      await cancel();
      await cluster[Symbol.asyncDispose]();
    },
  };
}

async function holdBroker(dataDir: string, storeEnv: Record<string, string>): Promise<TestBroker> {
  let entry = brokers.get(dataDir);
  if (!entry) {
    const started: Promise<TestBroker> =
      testBrokerKind() === 'cluster' ? startTestCluster(dataDir, storeEnv) : startMosquitto({ dir: `${dataDir}.mosquitto` });
    entry = { broker: started, users: 0 };
    brokers.set(dataDir, entry);
    entry.broker.catch(() => brokers.delete(dataDir));
  }
  const broker = await entry.broker;
  if (entry.users++ === 0 && broker.process.exit !== null) await broker.restart();
  return broker;
}

/** One user fewer; the last stops the broker (`dispose`: and removes it). */
async function releaseBroker(dataDir: string, dispose: boolean): Promise<void> {
  const entry = brokers.get(dataDir);
  if (!entry) return;
  const broker = await entry.broker.catch(() => undefined);
  entry.users = Math.max(0, entry.users - 1);
  if (entry.users > 0) return;
  if (dispose) {
    brokers.delete(dataDir);
    await broker?.[Symbol.asyncDispose]();
  } else {
    await broker?.stop();
  }
}

/** Spawns one `serve` and waits for its address line. */
async function spawnServe(args: readonly string[], env: Record<string, string | undefined>, startTimeoutMs: number | undefined): Promise<{ proc: SpawnedProcess; addresses: ServeAddresses }> {
  // BENCH_CLOUD_NODE_ARGS (e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof"): node flags for the cloud
  // process only, to profile it under a benchmark (NODE_OPTIONS refuses --cpu-prof).
  const nodeArgs = (process.env.BENCH_CLOUD_NODE_ARGS ?? '').split(' ').filter(Boolean);
  const proc = spawnProcess(process.execPath, [...nodeArgs, CLOUD_CLI, ...args], { name: 'fleet-cloud serve', cwd: REPO_ROOT, env });
  try {
    const line = await proc.waitForStdout((l) => parseAddressLine(l) !== null, {
      // A cold start on a loaded 2-core machine (other suites building, migrating, spawning) can
      // take well over the usual second: a wait on the line, with room, not a bound on speed.
      timeoutMs: startTimeoutMs ?? 45_000,
      description: 'the {"http":…,"mqtt":…} line',
    });
    return { proc, addresses: parseAddressLine(line)! };
  } catch (err) {
    await proc.kill('SIGKILL');
    throw err;
  }
}

/** `--flag value` taken out of `args`: [the value or undefined, the rest]. */
function takeFlag(args: readonly string[], flag: string): [string | undefined, string[]] {
  const i = args.indexOf(flag);
  if (i < 0) return [undefined, [...args]];
  return [args[i + 1], [...args.slice(0, i), ...args.slice(i + 2)]];
}

/**
 * Starts `fleet-cloud serve` on free ports and resolves once it printed its addresses. Dispose
 * it (`await using cloud = await startCloud()`): that stops the process and removes the temp dir,
 * also when the test failed.
 */
export async function startCloud(opts: StartCloudOptions = {}): Promise<CloudProcess> {
  assertBuilt();
  const ownDir = opts.dataDir === undefined ? await makeTempDir() : null;
  const dataDir = opts.dataDir ?? join(ownDir!.path, 'data');
  const logLevel = opts.logLevel ?? 'info';
  const viaEnv = opts.configVia === 'env';
  const replicas = replicated(opts) ? testReplicas() : 1;

  const procs: SpawnedProcess[] = [];
  const addrs: ServeAddresses[] = [];
  let front: RoundRobin | null = null;
  let holdsBroker = false;
  let dbEnv: Record<string, string> = {};
  const stop = async (signal: NodeJS.Signals = 'SIGTERM') => {
    try {
      const exits = await Promise.all(procs.map((p) => p.kill(signal)));
      return exits[0]!;
    } finally {
      await front?.[Symbol.asyncDispose]();
      front = null;
      if (holdsBroker) {
        holdsBroker = false;
        await releaseBroker(dataDir, ownDir !== null);
      }
    }
  };
  const cleanup = async () => {
    try {
      await stop();
    } finally {
      if (ownDir) await dropDatabase(dataDir);
      await ownDir?.[Symbol.asyncDispose]();
    }
  };

  let mqttAddress: string;
  try {
    dbEnv = await databaseEnv(dataDir);
    const base = { ...dbEnv, ...(viaEnv ? { FLEET_DATA_DIR: dataDir, FLEET_HTTP_PORT: '0', FLEET_LOG_LEVEL: logLevel } : {}) };
    if (replicas === 1) {
      const args = viaEnv
        ? ['serve', ...(opts.args ?? [])]
        : ['serve', '--data-dir', dataDir, '--http-port', '0', '--mqtt-port', '0', '--log-level', logLevel, ...(opts.args ?? [])];
      const started = await spawnServe(args, cleanEnv({ ...base, ...(viaEnv ? { FLEET_MQTT_PORT: '0' } : {}), ...opts.env }), opts.startTimeoutMs);
      procs.push(started.proc);
      addrs.push(started.addresses);
      mqttAddress = started.addresses.mqtt;
    } else {
      // Each replica listens on a port of its own; a fixed --http-port (a restart on the same
      // address) is the front's. The broker belongs to the data directory, so --mqtt-port goes.
      const [httpPort, withoutHttp] = takeFlag(opts.args ?? [], '--http-port');
      const [, rest] = takeFlag(withoutHttp, '--mqtt-port');
      const broker = await holdBroker(dataDir, dbEnv);
      holdsBroker = true;
      // On a cluster, replica i is on node i (modulo the nodes) and robots are told every node,
      // each robot in an order of its own (most land on another node than a given replica's):
      // commands and reports cross nodes.
      const urls = broker.urls ?? [broker.url];
      const replicaUrls = broker.replicaUrls ?? urls;
      const urlOf = (i: number) => replicaUrls[i % replicaUrls.length]!;
      const clusterArgs = broker.urls ? ['--mqtt-broker', 'fleet-cluster', '--mqtt-public-url', [...urls].reverse().join(',')] : [];
      const envOf = (i: number) =>
        cleanEnv({
          ...base,
          ...(viaEnv ? { FLEET_MQTT_URL: urlOf(i), FLEET_MQTT_ACCOUNT_FILE: broker.accountFile } : {}),
          ...opts.env,
        });
      const argsOf = (i: number) =>
        viaEnv
          ? ['serve', ...clusterArgs, ...rest]
          : ['serve', '--data-dir', dataDir, '--http-port', '0', '--mqtt-url', urlOf(i), '--mqtt-account-file', broker.accountFile, '--log-level', logLevel, ...clusterArgs, ...rest];
      // The first replica creates the organization and admin key; the others find them.
      const first = await spawnServe(argsOf(0), envOf(0), opts.startTimeoutMs);
      procs.push(first.proc);
      addrs.push(first.addresses);
      const others = await Promise.allSettled(Array.from({ length: replicas - 1 }, (_, i) => spawnServe(argsOf(i + 1), envOf(i + 1), opts.startTimeoutMs)));
      for (const o of others) {
        if (o.status !== 'fulfilled') continue;
        procs.push(o.value.proc);
        addrs.push(o.value.addresses);
      }
      const failed = others.find((o) => o.status === 'rejected');
      if (failed) throw failed.reason;
      front = await startRoundRobin(() => addrs.map((a) => new URL(a.http)), httpPort === undefined ? 0 : Number(httpPort));
      mqttAddress = broker.url;
    }
  } catch (err) {
    await cleanup();
    throw err;
  }
  const http = front?.url ?? addrs[0]!.http;

  // Requests from the test's own fetch and client go to the replicas in turn, one request each
  // (a kept-alive connection through the front would stay on one replica).
  let turn = 0;
  const spread: typeof fetch = (input, init) => {
    const url = typeof input === 'string' ? input : input instanceof URL ? input.href : input.url;
    if (addrs.length === 1 || !url.startsWith(http)) return fetch(input, init);
    const target = addrs[turn++ % addrs.length]!.http + url.slice(http.length);
    return typeof input === 'string' || input instanceof URL ? fetch(target, init) : fetch(new Request(target, input), init);
  };

  const cloud: CloudProcess = {
    http,
    mqtt: mqttAddress,
    dataDir,
    get adminKey() {
      return readFileSync(join(dataDir, 'admin-key'), 'utf8').trim();
    },
    get stdoutLines() {
      return procs.length === 1 ? procs[0]!.stdoutLines : procs.flatMap((p) => p.stdoutLines);
    },
    get stderrLines() {
      return procs.length === 1 ? procs[0]!.stderrLines : procs.flatMap((p) => p.stderrLines);
    },
    waitForStderr: async (match, o) => {
      try {
        return await Promise.any(procs.map((p) => p.waitForStderr(match, o)));
      } catch (err) {
        throw err instanceof AggregateError ? (err.errors[0] as Error) : err;
      }
    },
    process: procs[0]!,
    processes: procs,
    client: (apiKey) => new FleetClient({ baseUrl: http, apiKey: apiKey ?? cloud.adminKey, fetch: spread }),
    fetch: (path, init = {}) => {
      const { key, json, ...rest } = init;
      const headers = new Headers(rest.headers);
      const bearer = key === undefined ? cloud.adminKey : key;
      if (bearer !== null) headers.set('authorization', `Bearer ${bearer}`);
      if (json !== undefined) headers.set('content-type', 'application/json');
      return spread(`${http}${path}`, { ...rest, headers, ...(json !== undefined ? { body: JSON.stringify(json) } : {}) });
    },
    cli: (cliArgs, o = {}) =>
      runCloudCli(o.withDataDir === false ? cliArgs : [...cliArgs, '--data-dir', dataDir], { env: { ...(o.withDataDir === false ? {} : dbEnv), ...o.env } }),
    kill: (signal) => stop(signal),
    [Symbol.asyncDispose]: cleanup,
  };
  return cloud;
}
