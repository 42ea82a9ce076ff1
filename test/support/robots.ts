import { existsSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Robot } from '@fleet/protocol';
import { cleanEnv, makeTempDir, REPO_ROOT, type CloudProcess, type TempDir } from './cloud.js';
import { runProcess, spawnProcess, type ProcessExit, type RunResult, type SpawnedProcess } from './process.js';
import { waitFor } from './wait.js';

export const AGENT_CLI = join(REPO_ROOT, 'agent', 'dist', 'cli.js');
export const SIM_CLI = join(REPO_ROOT, 'simulator', 'dist', 'cli.js');

function assertBuilt(): void {
  for (const cli of [AGENT_CLI, SIM_CLI]) if (!existsSync(cli)) throw new Error(`${cli} is missing: run \`npm run build\` before the end-to-end tests`);
}

export interface ApiError {
  code: string;
  message: string;
  details?: Record<string, unknown>;
}

/** A JSON answer: status and parsed body. */
export interface JsonResponse<T = Record<string, unknown>> {
  status: number;
  body: T;
}

async function json<T>(res: Response): Promise<JsonResponse<T>> {
  const text = await res.text();
  return { status: res.status, body: (text ? JSON.parse(text) : {}) as T };
}

export interface EnrollmentToken {
  id: string;
  token: string;
  name_prefix: string | null;
  max_uses: number;
  uses: number;
  expires_at: string;
  created_at: string;
}

/** `POST /v1/robots/enrollment-tokens` with the admin key (or `key`); throws unless 201. */
export async function createEnrollmentToken(
  cloud: CloudProcess,
  opts: { maxUses?: number; expiresAt?: string; namePrefix?: string; key?: string } = {},
): Promise<EnrollmentToken> {
  const res = await cloud.fetch('/v1/robots/enrollment-tokens', {
    method: 'POST',
    ...(opts.key !== undefined ? { key: opts.key } : {}),
    json: {
      ...(opts.maxUses !== undefined ? { max_uses: opts.maxUses } : {}),
      ...(opts.expiresAt !== undefined ? { expires_at: opts.expiresAt } : {}),
      ...(opts.namePrefix !== undefined ? { name_prefix: opts.namePrefix } : {}),
    },
  });
  const r = await json<EnrollmentToken>(res);
  if (r.status !== 201) throw new Error(`creating an enrollment token answered ${r.status}: ${JSON.stringify(r.body)}`);
  return r.body;
}

/** Runs `fleet-agent ...args` to completion. */
export function runAgentCli(args: readonly string[], opts: { timeoutMs?: number } = {}): Promise<RunResult> {
  assertBuilt();
  return runProcess(process.execPath, [AGENT_CLI, ...args], { name: `fleet-agent ${args.join(' ')}`, cwd: REPO_ROOT, env: cleanEnv(), timeoutMs: opts.timeoutMs ?? 30_000 });
}

export interface EnrollOptions {
  token: string;
  dataDir: string;
  name?: string;
  platform?: string;
  legacy?: boolean;
}

/** `fleet-agent enroll` against the cloud's API. */
export function enrollCli(cloud: CloudProcess, o: EnrollOptions): Promise<RunResult> {
  return runAgentCli([
    'enroll',
    '--api',
    cloud.http,
    '--token',
    o.token,
    '--data-dir',
    o.dataDir,
    ...(o.name !== undefined ? ['--name', o.name] : []),
    ...(o.platform !== undefined ? ['--platform', o.platform] : []),
    ...(o.legacy ? ['--legacy-runtime'] : []),
  ]);
}

/** The robot's credentials file as the agent wrote it. */
export interface StoredCredentials {
  robot_id: string;
  name: string;
  mqtt: { url: string; client_id: string; username: string; password: string; previous_password?: string; urls?: string[]; topic_prefix: string };
  api_url: string;
  platform?: string;
}

export async function readStoredCredentials(dataDir: string): Promise<StoredCredentials> {
  return JSON.parse(await readFile(join(dataDir, 'credentials.json'), 'utf8')) as StoredCredentials;
}

/** `GET /v1/robots/{id}`. */
export async function getRobot(cloud: CloudProcess, robotId: string, key?: string): Promise<JsonResponse<Robot & { error?: ApiError }>> {
  return json(await cloud.fetch(`/v1/robots/${robotId}`, key !== undefined ? { key } : {}));
}

/** Every robot of the key's organization, through every page of `GET /v1/robots`. */
export async function listRobots(cloud: CloudProcess, key?: string): Promise<Robot[]> {
  const out: Robot[] = [];
  let cursor: string | null = null;
  do {
    const q: string = cursor === null ? '?limit=100' : `?limit=100&cursor=${encodeURIComponent(cursor)}`;
    const r = await json<{ robots: Robot[]; cursor: string | null }>(await cloud.fetch(`/v1/robots${q}`, key !== undefined ? { key } : {}));
    if (r.status !== 200) throw new Error(`GET /v1/robots answered ${r.status}: ${JSON.stringify(r.body)}`);
    out.push(...r.body.robots);
    cursor = r.body.cursor;
  } while (cursor !== null);
  return out;
}

/** Polls `GET /v1/robots/{id}` until `predicate` holds; the robot as last seen. */
export async function waitForRobot(
  cloud: CloudProcess,
  robotId: string,
  predicate: (r: Robot) => boolean,
  opts: { timeoutMs?: number; description?: string } = {},
): Promise<Robot> {
  let last: unknown;
  return waitFor(
    async () => {
      const r = await getRobot(cloud, robotId);
      last = r.body;
      return r.status === 200 && predicate(r.body) ? r.body : undefined;
    },
    { timeoutMs: opts.timeoutMs ?? 15_000, description: () => `${opts.description ?? 'robot state'} of ${robotId} (last: ${JSON.stringify(last)})` },
  );
}

/** The answer of a robot command route. */
export interface CommandResponse {
  status: number;
  body: { status?: 'ok'; result?: Record<string, unknown>; error?: ApiError };
  headers: Headers;
}

/** `POST /v1/robots/{id}/{path}`, e.g. `stack/status` or `episodes/start`. */
export async function sendCommand(
  cloud: CloudProcess,
  robotId: string,
  path: string,
  opts: { body?: unknown; idempotencyKey?: string; key?: string } = {},
): Promise<CommandResponse> {
  const headers: Record<string, string> = {};
  if (opts.idempotencyKey !== undefined) headers['idempotency-key'] = opts.idempotencyKey;
  const res = await cloud.fetch(`/v1/robots/${robotId}/${path}`, {
    method: 'POST',
    headers,
    ...(opts.key !== undefined ? { key: opts.key } : {}),
    ...(opts.body !== undefined ? { json: opts.body } : {}),
  });
  const r = await json<CommandResponse['body']>(res);
  return { ...r, headers: res.headers };
}

/** The recorded facts of one episode directory (`episode.json`), as far as tests read them. */
export interface EpisodeFile {
  id: string;
  robot_id: string;
  outcome: 'success' | 'failure' | 'discarded';
  task_id: string | null;
  subtask_id: string | null;
  operator_id: string | null;
  metadata: Record<string, unknown>;
  segments: { segment_index: number; subtask_id: string | null; start_offset_s: number; end_offset_s: number }[];
  bag_size_bytes: number;
}

/** Episode directories of a robot data directory, finalized or not. */
export async function episodeDirs(dataDir: string): Promise<string[]> {
  return (await readdir(join(dataDir, 'episodes')).catch(() => [] as string[])).sort();
}

/** The finalized episodes (those with an `episode.json`) of a robot data directory. */
export async function finalizedEpisodes(dataDir: string): Promise<EpisodeFile[]> {
  const out: EpisodeFile[] = [];
  for (const id of await episodeDirs(dataDir)) {
    const text = await readFile(join(dataDir, 'episodes', id, 'episode.json'), 'utf8').catch(() => null);
    if (text !== null) out.push(JSON.parse(text) as EpisodeFile);
  }
  return out;
}

export interface AgentProcessOptions {
  /** Enroll with this token; by default a fresh one-use token from the admin key. */
  token?: string;
  /** Use this data directory (kept on dispose) instead of a fresh temp dir; with `enroll: false` it must hold credentials. */
  dataDir?: string;
  /** Enroll before starting (default true). */
  enroll?: boolean;
  name?: string;
  platform?: string;
  legacy?: boolean;
  finalizingDelayMs?: number;
  logLevel?: string;
  /** More `start` flags. */
  args?: readonly string[];
  /** A simulated robot (`--simulate`: synthetic recorder, simulated actions); default true. */
  simulate?: boolean;
}

/** A running `fleet-agent start`, connected and shown connected by the API. */
export interface AgentProcess extends AsyncDisposable {
  readonly robotId: string;
  readonly dataDir: string;
  readonly process: SpawnedProcess;
  /** `fleet-agent <args> --data-dir <dataDir>` (control surface: episode, context, status). */
  control(args: readonly string[]): Promise<RunResult>;
  /** `fleet-agent status`, parsed. */
  status(): Promise<Record<string, unknown>>;
  /** Sends a signal and waits for the exit (SIGKILL after a grace period). */
  kill(signal?: NodeJS.Signals): Promise<ProcessExit>;
}

/** Spawns `fleet-agent start --data-dir D` (no enrollment) and waits for its connected line. */
export async function spawnAgent(dataDir: string, opts: Pick<AgentProcessOptions, 'legacy' | 'finalizingDelayMs' | 'logLevel' | 'args' | 'simulate'> = {}): Promise<SpawnedProcess> {
  assertBuilt();
  const args = [
    AGENT_CLI,
    'start',
    '--data-dir',
    dataDir,
    '--log-level',
    opts.logLevel ?? 'info',
    '--reconnect-min-ms',
    '100',
    '--reconnect-max-ms',
    '1000',
    ...(opts.simulate ?? true ? ['--simulate'] : []),
    ...(opts.legacy ? ['--legacy-runtime'] : []),
    ...(opts.finalizingDelayMs !== undefined ? ['--finalizing-delay-ms', String(opts.finalizingDelayMs)] : []),
    ...(opts.args ?? []),
  ];
  return spawnProcess(process.execPath, args, { name: `fleet-agent start (${dataDir})`, cwd: REPO_ROOT, env: cleanEnv() });
}

/**
 * Enrolls a robot into a temp dir with `fleet-agent enroll`, spawns `fleet-agent start`, waits
 * for its `{"robot_id":…,"state":"connected"}` line and for the API to show it connected. Dispose
 * it: that stops the process (SIGTERM, then SIGKILL) and removes the temp dir.
 */
export async function startAgentProcess(cloud: CloudProcess, opts: AgentProcessOptions = {}): Promise<AgentProcess> {
  assertBuilt();
  // A short prefix: the control socket path must fit a Unix socket address.
  const own: TempDir | null = opts.dataDir === undefined ? await makeTempDir('fa-e2e-') : null;
  const dataDir = opts.dataDir ?? join(own!.path, 'robot');
  let proc: SpawnedProcess | undefined;
  const cleanup = async () => {
    try {
      await proc?.kill('SIGTERM');
    } finally {
      await own?.[Symbol.asyncDispose]();
    }
  };
  let robotId: string;
  try {
    if (opts.enroll ?? true) {
      const token = opts.token ?? (await createEnrollmentToken(cloud)).token;
      const r = await enrollCli(cloud, {
        token,
        dataDir,
        ...(opts.name !== undefined ? { name: opts.name } : {}),
        ...(opts.platform !== undefined ? { platform: opts.platform } : {}),
        ...(opts.legacy ? { legacy: true } : {}),
      });
      if (r.code !== 0) throw new Error(`fleet-agent enroll exited ${r.code}: ${r.stderr}`);
    }
    proc = await spawnAgent(dataDir, opts);
    const line = await proc.waitForStdout((l) => l.includes('"state":"connected"'), { description: 'the {"robot_id":…,"state":"connected"} line' });
    robotId = (JSON.parse(line) as { robot_id: string }).robot_id;
    await waitForRobot(cloud, robotId, (r) => r.connected, { description: 'connected' });
  } catch (err) {
    await cleanup();
    throw err;
  }
  const running = proc;
  return {
    robotId,
    dataDir,
    process: running,
    control: (args) => runAgentCli([...args, '--data-dir', dataDir]),
    async status() {
      const r = await runAgentCli(['status', '--json', '--data-dir', dataDir]);
      if (r.code !== 0) throw new Error(`fleet-agent status exited ${r.code}: ${r.stderr}`);
      return JSON.parse(r.stdout) as Record<string, unknown>;
    },
    kill: (signal) => running.kill(signal),
    [Symbol.asyncDispose]: cleanup,
  };
}

export interface FleetProcessOptions {
  count: number;
  legacy?: boolean;
  /** Episodes per minute per robot the operators start on their own. */
  autoEpisodes?: number;
  subtaskMs?: number;
  /** Default: a fresh token with `count` uses. */
  token?: string;
  /** Reuse this directory (kept on dispose); by default a fresh temp dir, removed on dispose. */
  dataDir?: string;
  logLevel?: string;
  args?: readonly string[];
  startTimeoutMs?: number;
}

/** A running `fleet-sim fleet` whose robots all connected. */
export interface FleetProcess extends AsyncDisposable {
  readonly robots: readonly string[];
  readonly dataDir: string;
  readonly process: SpawnedProcess;
  /** The data directory of robot `i`. */
  robotDir(i: number): string;
  kill(signal?: NodeJS.Signals): Promise<ProcessExit>;
}

/** Spawns `fleet-sim fleet` and resolves once it printed `{"robots":[…]}` and the cloud sees them connected. Dispose it. */
export async function startFleet(cloud: CloudProcess, opts: FleetProcessOptions): Promise<FleetProcess> {
  assertBuilt();
  const own: TempDir | null = opts.dataDir === undefined ? await makeTempDir('fs-e2e-') : null;
  const dataDir = opts.dataDir ?? join(own!.path, 'fleet');
  let proc: SpawnedProcess | undefined;
  const cleanup = async () => {
    try {
      await proc?.kill('SIGTERM', 15_000);
    } finally {
      await own?.[Symbol.asyncDispose]();
    }
  };
  let robots: string[];
  try {
    const token = opts.token ?? (await createEnrollmentToken(cloud, { maxUses: opts.count })).token;
    // The token goes in the environment, never on the command line, where `ps` shows it.
    const args = [
      SIM_CLI,
      'fleet',
      '--api',
      cloud.http,
      '--count',
      String(opts.count),
      '--data-dir',
      dataDir,
      '--log-level',
      opts.logLevel ?? 'info',
      ...(opts.legacy ? ['--legacy-runtime'] : []),
      ...(opts.autoEpisodes !== undefined ? ['--auto-episodes', String(opts.autoEpisodes)] : []),
      ...(opts.subtaskMs !== undefined ? ['--subtask-ms', String(opts.subtaskMs)] : []),
      ...(opts.args ?? []),
    ];
    proc = spawnProcess(process.execPath, args, { name: `fleet-sim fleet --count ${opts.count}`, cwd: REPO_ROOT, env: cleanEnv({ FLEET_SIM_TOKEN: token }) });
    const line = await proc.waitForStdout((l) => l.startsWith('{"robots":'), { timeoutMs: opts.startTimeoutMs ?? 60_000, description: 'the {"robots":[…]} line' });
    robots = (JSON.parse(line) as { robots: string[] }).robots;
    // The simulator prints once its robots are connected to the broker; the cloud learns it from
    // their status messages a moment later. A command sent before then would answer 503.
    // (A robot of another organization than the cloud's default key is 404 here: not waited on.)
    await Promise.all(
      robots.map((id) =>
        waitFor(
          async () => {
            const r = await getRobot(cloud, id);
            return r.status === 404 || (r.status === 200 && r.body.connected) ? true : undefined;
          },
          { timeoutMs: opts.startTimeoutMs ?? 60_000, description: `the cloud to see ${id} connected` },
        ),
      ),
    );
  } catch (err) {
    await cleanup();
    throw err;
  }
  const running = proc;
  return {
    robots,
    dataDir,
    process: running,
    robotDir: (i) => join(dataDir, `robot-${i}`),
    kill: (signal) => running.kill(signal, 15_000),
    [Symbol.asyncDispose]: cleanup,
  };
}

/** Creates an organization and an admin key in it through the cloud's CLI. */
export async function otherOrganization(cloud: CloudProcess, name: string): Promise<{ org: string; key: string }> {
  const org = await cloud.cli(['orgs', 'create', '--name', name, '--tier', 'enterprise']);
  if (org.code !== 0) throw new Error(`orgs create exited ${org.code}: ${org.stderr}`);
  const orgId = org.stdout.trim();
  const key = await cloud.cli(['keys', 'create', '--org', orgId, '--name', `${name} admin`, '--scopes', 'admin']);
  if (key.code !== 0) throw new Error(`keys create exited ${key.code}: ${key.stderr}`);
  return { org: orgId, key: key.stdout.trim() };
}
