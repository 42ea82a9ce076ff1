/**
 * A real mosquitto 2 broker for the tests, the Debian package's binary and dynamic security
 * plugin. Running as root it installs the package when missing (and runs the broker with
 * `user root`: mosquitto otherwise drops to a `mosquitto` user that could not write the temp
 * dir). The configuration comes from `fleet-cloud broker-config`, the command operators use,
 * plus a listener on 127.0.0.1 and a free port and persistence in the temp dir, so a restart
 * keeps sessions and the robot accounts.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join } from 'node:path';
import mqtt from 'mqtt';
import { makeTempDir, runCloudCli, type TempDir } from './cloud.js';
import { ensureDebianPackages, MOSQUITTO } from './debian.js';
import { spawnProcess, type ProcessExit, type SpawnedProcess } from './process.js';
import { waitFor } from './wait.js';

const isRoot = process.getuid?.() === 0;
const PLUGIN = '/usr/lib/x86_64-linux-gnu/mosquitto_dynamic_security.so';

/** Whether the broker can run here, and why not. */
export type MosquittoAvailability = { ok: true; binary: string } | { ok: false; reason: string };

let availability: MosquittoAvailability | undefined;

/** The binary, installed from Debian (apt-get) when running as root and it is missing. */
export function ensureMosquitto(log: (line: string) => void = (l) => console.warn(l)): MosquittoAvailability {
  if (availability) return availability;
  let binary = MOSQUITTO.find();
  if (!binary && isRoot) {
    ensureDebianPackages([MOSQUITTO], log);
    binary = MOSQUITTO.find();
  }
  if (!binary) availability = { ok: false, reason: isRoot ? 'mosquitto is not installed and apt-get could not install it' : 'mosquitto is not installed (apt-get install mosquitto as root, or run the tests as root)' };
  else if (!existsSync(PLUGIN)) availability = { ok: false, reason: `mosquitto's dynamic security plugin is missing (${PLUGIN})` };
  else availability = { ok: true, binary };
  if (!availability.ok) log(`mosquitto tests skipped: ${availability.reason}`);
  return availability;
}

async function ownDir(path: string): Promise<TempDir> {
  await mkdir(path, { recursive: true });
  return { path, [Symbol.asyncDispose]: () => rm(path, { recursive: true, force: true }) };
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

export interface MosquittoBroker extends AsyncDisposable {
  /** `mqtt://127.0.0.1:<port>`, no credentials. */
  readonly url: string;
  readonly port: number;
  /** `cloud-mqtt-account.json` of `broker-config`: what `serve --mqtt-account-file` takes. */
  readonly accountFile: string;
  readonly account: { username: string; password: string };
  readonly dir: string;
  readonly process: SpawnedProcess;
  /** Stops (SIGTERM: mosquitto saves its persistence file) and starts again on the same port and files. */
  restart(): Promise<void>;
  stop(): Promise<ProcessExit>;
}

/** Resolves once the broker accepts a login with the cloud's account (a condition, not a sleep). */
async function waitAccepting(url: string, account: { username: string; password: string }, proc: SpawnedProcess): Promise<void> {
  await waitFor(
    async () => {
      if (proc.exit) throw new Error(`mosquitto exited (${JSON.stringify(proc.exit)}):\n${proc.describe()}`);
      try {
        const c = await mqtt.connectAsync(url, { protocolVersion: 4, ...account, reconnectPeriod: 0, connectTimeout: 2000 });
        await c.endAsync(true);
        return true;
      } catch {
        return undefined;
      }
    },
    { timeoutMs: 20_000, intervalMs: 100, description: () => `mosquitto to accept connections on ${url}\n${proc.describe()}` },
  );
}

/**
 * Starts mosquitto with the fleet's generated configuration, in a temp dir of its own or in `dir`
 * (created). Dispose it: that stops it and removes its directory.
 */
export async function startMosquitto(opts: { dir?: string } = {}): Promise<MosquittoBroker> {
  const avail = ensureMosquitto();
  if (!avail.ok) throw new Error(avail.reason);
  const tmp: TempDir = opts.dir === undefined ? await makeTempDir('fleet-mosq-') : await ownDir(opts.dir);
  const dir = tmp.path;
  const generated = await runCloudCli(['broker-config', '--out', join(dir, 'fleet'), '--plugin', PLUGIN]);
  if (generated.code !== 0) throw new Error(`fleet-cloud broker-config exited ${generated.code}: ${generated.stderr}`);
  const files = JSON.parse(generated.stdout) as { conf: string; account: string };
  const account = JSON.parse(readFileSync(files.account, 'utf8')) as { username: string; password: string };
  const port = await freePort();
  const conf = join(dir, 'mosquitto.conf');
  writeFileSync(
    conf,
    [
      ...(isRoot ? ['user root'] : []),
      `listener ${port} 127.0.0.1`,
      'persistence true',
      `persistence_location ${dir}/`,
      'log_dest stderr',
      'log_type error',
      'log_type warning',
      'log_type notice',
      'log_type information',
      readFileSync(files.conf, 'utf8'),
    ].join('\n'),
  );
  const url = `mqtt://127.0.0.1:${port}`;
  const spawn = () => spawnProcess(avail.binary, ['-c', conf], { name: 'mosquitto' });
  let proc = spawn();
  try {
    await waitAccepting(url, account, proc);
  } catch (err) {
    await proc.kill('SIGKILL');
    await tmp[Symbol.asyncDispose]();
    throw err;
  }
  const broker: MosquittoBroker = {
    url,
    port,
    accountFile: files.account,
    account,
    dir,
    get process() {
      return proc;
    },
    async restart() {
      await proc.kill('SIGTERM');
      proc = spawn();
      await waitAccepting(url, account, proc);
    },
    stop: () => proc.kill('SIGTERM'),
    async [Symbol.asyncDispose]() {
      try {
        await proc.kill('SIGTERM');
      } finally {
        await tmp[Symbol.asyncDispose]();
      }
    },
  };
  return broker;
}
