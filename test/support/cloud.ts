import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { FleetClient } from '@fleet/client';
import { runProcess, spawnProcess, type ProcessExit, type RunResult, type SpawnedProcess } from './process.js';
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
}

export interface CloudProcess extends AsyncDisposable {
  readonly http: string;
  readonly mqtt: string;
  readonly dataDir: string;
  /** `<dataDir>/admin-key`, read when asked (throws if the file does not exist). */
  readonly adminKey: string;
  readonly stdoutLines: readonly string[];
  readonly stderrLines: readonly string[];
  readonly process: SpawnedProcess;
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
  const args = viaEnv
    ? ['serve', ...(opts.args ?? [])]
    : ['serve', '--data-dir', dataDir, '--http-port', '0', '--mqtt-port', '0', '--log-level', logLevel, ...(opts.args ?? [])];
  const dbEnv = await databaseEnv(dataDir);
  const env = cleanEnv({
    ...dbEnv,
    ...(viaEnv ? { FLEET_DATA_DIR: dataDir, FLEET_HTTP_PORT: '0', FLEET_MQTT_PORT: '0', FLEET_LOG_LEVEL: logLevel } : {}),
    ...opts.env,
  });

  let proc: SpawnedProcess | undefined;
  const cleanup = async () => {
    try {
      await proc?.kill('SIGTERM');
    } finally {
      if (ownDir) await dropDatabase(dataDir);
      await ownDir?.[Symbol.asyncDispose]();
    }
  };

  let addresses: ServeAddresses;
  try {
    // BENCH_CLOUD_NODE_ARGS (e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof"): node flags for the cloud
    // process only, to profile it under a benchmark (NODE_OPTIONS refuses --cpu-prof).
    const nodeArgs = (process.env.BENCH_CLOUD_NODE_ARGS ?? '').split(' ').filter(Boolean);
    proc = spawnProcess(process.execPath, [...nodeArgs, CLOUD_CLI, ...args], { name: 'fleet-cloud serve', cwd: REPO_ROOT, env });
    const line = await proc.waitForStdout((l) => parseAddressLine(l) !== null, {
      timeoutMs: opts.startTimeoutMs ?? 20_000,
      description: 'the {"http":…,"mqtt":…} line',
    });
    addresses = parseAddressLine(line)!;
  } catch (err) {
    await cleanup();
    throw err;
  }
  const running = proc;

  const cloud: CloudProcess = {
    http: addresses.http,
    mqtt: addresses.mqtt,
    dataDir,
    get adminKey() {
      return readFileSync(join(dataDir, 'admin-key'), 'utf8').trim();
    },
    stdoutLines: running.stdoutLines,
    stderrLines: running.stderrLines,
    process: running,
    client: (apiKey) => new FleetClient({ baseUrl: addresses.http, apiKey: apiKey ?? cloud.adminKey }),
    fetch: (path, init = {}) => {
      const { key, json, ...rest } = init;
      const headers = new Headers(rest.headers);
      const bearer = key === undefined ? cloud.adminKey : key;
      if (bearer !== null) headers.set('authorization', `Bearer ${bearer}`);
      if (json !== undefined) headers.set('content-type', 'application/json');
      return fetch(`${addresses.http}${path}`, { ...rest, headers, ...(json !== undefined ? { body: JSON.stringify(json) } : {}) });
    },
    cli: (cliArgs, o = {}) =>
      runCloudCli(o.withDataDir === false ? cliArgs : [...cliArgs, '--data-dir', dataDir], { env: { ...(o.withDataDir === false ? {} : dbEnv), ...o.env } }),
    kill: (signal) => running.kill(signal),
    [Symbol.asyncDispose]: cleanup,
  };
  return cloud;
}
