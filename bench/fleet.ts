/**
 * Robots held by one cloud process: `--robots` (10,000; `bench -- all` asks for more) robot
 * connections to one `fleet-cloud serve` (a real process, embedded broker with its authentication and ACL). The robots are
 * LIGHTWEIGHT: plain mqtt.js clients in a few worker processes (bench/fleet-robots.js) that speak
 * the robot side of the link (credentials from POST /v1/robots/enroll, offline last will,
 * command and ack subscriptions, retained online status with capabilities, replies to
 * stack.status) and nothing else, not the agent.
 *
 * Prints: enrollment rate; the time to connect all of them (connect, subscribe and status each)
 * and connects/s; robots the cloud lists as connected; POST /v1/robots/{id}/stack/status p50/p99
 * over a sample while all are connected, next to the same commands with one robot connected
 * (the baseline, same cloud, same run); the cloud's RSS per robot ((RSS with all connected - RSS
 * idle) / connected). Fewer robots connected than asked for, or any failed command, fails the
 * run after the figures are printed. Asserts nothing about time.
 *
 * What the machine must allow, checked before anything is enrolled: one open file per robot
 * plus 256 in the cloud process (it inherits this shell's `ulimit -n`, which Node raises to the
 * hard limit; the bench tries `prlimit` on the cloud when that is too low, which needs
 * CAP_SYS_RESOURCE, and otherwise stops with the limits and the largest --robots that fits), and
 * as many in the robot worker processes (more workers are forked when one would hold more than
 * its limit). Every connection to the broker's one address takes an ephemeral port of its source
 * address (net.ipv4.ip_local_port_range, about 28,000), so the robots are spread over
 * 127.0.0.1, 127.0.0.2, ... (`--source-addresses`, by default as many as keep each under 80 % of
 * that range); a broker off loopback with more robots than that is refused with a message.
 */
import { execFileSync, fork, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { Pool } from 'undici';
import { REPO_ROOT, startCloud, type CloudProcess } from '../test/support/cloud.js';
import { parseBenchArgs, type BenchModule } from './lib/args.js';
import { fmt, table } from './lib/measure.js';
import { BENCH_SERVE_ARGS, liftRequestLimits } from './lib/limits.js';
import { memoryMb, percentile } from './lib/proc.js';
import { BenchFailure, row, type SummaryRow } from './lib/summary.js';

const WORKER = fileURLToPath(new URL('./fleet-robots.js', import.meta.url));

interface Cred {
  robot_id: string;
  password: string;
}

function log(msg: string): void {
  process.stderr.write(`bench fleet: ${msg}\n`);
}

/** RLIMIT_NOFILE of a process, soft and hard (Linux /proc). */
function openFilesLimit(pid: number | 'self'): { soft: number; hard: number } {
  const m = /^Max open files\s+(\d+|unlimited)\s+(\d+|unlimited)/m.exec(readFileSync(`/proc/${pid}/limits`, 'utf8'));
  const value = (v: string | undefined) => (v === 'unlimited' ? Number.POSITIVE_INFINITY : Number(v ?? Number.NaN));
  return { soft: value(m?.[1]), hard: value(m?.[2]) };
}

/**
 * Raises the open-files limit of a process we started to `need` with prlimit(1) when it is lower
 * (a hard limit only goes up with CAP_SYS_RESOURCE). Returns the limit after, and why not when
 * still too low.
 */
function raiseOpenFiles(pid: number, need: number): { soft: number; hard: number; why: string } {
  const before = openFilesLimit(pid);
  if (before.soft >= need) return { ...before, why: '' };
  let why = '';
  try {
    execFileSync('prlimit', ['--pid', String(pid), `--nofile=${need}:${Math.max(need, before.hard)}`], { stdio: ['ignore', 'ignore', 'pipe'] });
  } catch (err) {
    const stderr = (err as { stderr?: Buffer }).stderr?.toString().trim();
    why = `prlimit --pid ${pid} --nofile=${need}:${Math.max(need, before.hard)}: ${stderr || (err as Error).message}`;
  }
  return { ...openFilesLimit(pid), why };
}

/** The size of net.ipv4.ip_local_port_range: ephemeral ports per (source address, destination). */
function ephemeralPorts(): number {
  try {
    const [lo, hi] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number);
    return hi! - lo! + 1;
  } catch {
    return 28_232;
  }
}

/** A worker process of lightweight robots and a typed request/answer over its IPC channel. */
class Worker {
  readonly child: ChildProcess;
  private waiting = new Map<string, (msg: Record<string, unknown>) => void>();
  readonly ready: Promise<void>;
  /** Robots connected and failed so far in the current `connect` (from its progress messages). */
  progress = { ok: 0, failed: 0 };

  constructor(index: number) {
    this.child = fork(WORKER, [], { execArgv: ['--max-old-space-size=4096'], cwd: REPO_ROOT, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    this.child.on('message', (msg: Record<string, unknown>) => {
      if (msg.type === 'progress') {
        this.progress = { ok: Number(msg.ok), failed: Number(msg.failed) };
        return;
      }
      const w = this.waiting.get(String(msg.type));
      this.waiting.delete(String(msg.type));
      w?.(msg);
    });
    this.ready = new Promise((resolve, reject) => {
      this.waiting.set('ready', () => resolve());
      this.child.once('exit', (code) => reject(new BenchFailure(`robot worker ${index} exited (${code})`)));
    });
  }

  request(msg: Record<string, unknown>, answer: string): Promise<Record<string, unknown>> {
    return new Promise((resolve, reject) => {
      this.waiting.set(answer, resolve);
      this.child.once('exit', (code) => reject(new BenchFailure(`robot worker exited (${code}) before answering ${answer}`)));
      this.child.send(msg);
    });
  }

  async stop(): Promise<void> {
    if (this.child.exitCode !== null) return;
    const exited = new Promise((r) => this.child.once('exit', r));
    this.child.send({ type: 'stop' });
    await Promise.race([exited, sleep(10_000)]);
    if (this.child.exitCode === null) this.child.kill('SIGKILL');
  }
}

async function enrollAll(cloud: CloudProcess, token: string, n: number, concurrency: number): Promise<{ creds: Cred[]; ms: number }> {
  const pool = new Pool(cloud.http, { connections: concurrency });
  const creds: Cred[] = [];
  let next = 0;
  const t0 = performance.now();
  const step = n > 20_000 ? 5000 : 2000;
  let last = t0;
  try {
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next < n) {
          const i = next++;
          const res = await pool.request({
            method: 'POST',
            path: '/v1/robots/enroll',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ token, name: `fleet-${i}`, platform: 'bench', runtime_version: 'bench-light' }),
          });
          const text = await res.body.text();
          if (res.statusCode !== 201) throw new BenchFailure(`enroll ${i}: HTTP ${res.statusCode} ${text.slice(0, 200)}`);
          const e = JSON.parse(text) as { robot_id: string; mqtt: { password: string } };
          creds.push({ robot_id: e.robot_id, password: e.mqtt.password });
          if (creds.length % step === 0) {
            const now = performance.now();
            log(`enrolled ${creds.length} in ${fmt((now - t0) / 1000, 1)} s (the last ${step} at ${fmt((step / (now - last)) * 1000, 0)}/s)`);
            last = now;
          }
        }
      }),
    );
  } finally {
    await pool.close();
  }
  return { creds, ms: performance.now() - t0 };
}

/** Robots GET /v1/robots lists as connected (every page). */
async function connectedCount(cloud: CloudProcess): Promise<number> {
  let cursor: string | null = null;
  let connected = 0;
  do {
    const res: Response = await cloud.fetch(`/v1/robots?limit=100${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
    const text = await res.text();
    if (!res.ok) throw new BenchFailure(`GET /v1/robots: HTTP ${res.status} ${text.slice(0, 200)}`);
    const body = JSON.parse(text) as { robots: { connected: boolean }[]; cursor: string | null };
    connected += body.robots.filter((r) => r.connected).length;
    cursor = body.cursor;
  } while (cursor);
  return connected;
}

/** Sequential POST /v1/robots/{id}/stack/status to the given robots in turn; ms of each. */
async function commandTimes(cloud: CloudProcess, robots: readonly string[], count: number): Promise<number[]> {
  const pool = new Pool(cloud.http, { connections: 1 });
  const auth = `Bearer ${cloud.adminKey}`;
  const times: number[] = [];
  try {
    for (let i = 0; i < count; i++) {
      const id = robots[i % robots.length]!;
      const t0 = performance.now();
      const res = await pool.request({ method: 'POST', path: `/v1/robots/${id}/stack/status`, headers: { authorization: auth } });
      const text = await res.body.text();
      times.push(performance.now() - t0);
      if (res.statusCode !== 200) throw new BenchFailure(`stack/status ${id}: HTTP ${res.statusCode} ${text.slice(0, 200)}`);
      const body = JSON.parse(text) as { result?: { ok?: boolean } };
      if (body.result?.ok === false) throw new BenchFailure(`stack/status ${id}: declined ${text.slice(0, 200)}`);
    }
  } finally {
    await pool.close();
  }
  return times.sort((a, b) => a - b);
}

function positiveInt(name: string, raw: unknown): number {
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} must be a whole number >= 1, got ${String(raw)}`);
  return n;
}

export const fleet: BenchModule = {
  description: 'lightweight robot connections (--robots, 10,000) to one fleet-cloud serve: connect time, command p50/p99 while connected, cloud RSS per robot',
  async run(argv) {
    const args = parseBenchArgs(argv, {
      robots: { type: 'string', default: '10000' },
      workers: { type: 'string', default: '4' },
      'connect-concurrency': { type: 'string', default: '64' },
      commands: { type: 'string', default: '300' },
      sample: { type: 'string', default: '100' },
      'log-level': { type: 'string', default: 'warn' },
      'source-addresses': { type: 'string', default: 'auto' },
      'fit-open-files': { type: 'boolean', default: false },
    });
    const asked = positiveInt('robots', args.extra.robots);
    let n = asked;
    const askedWorkers = Math.min(n, positiveInt('workers', args.extra.workers));
    const connectConcurrency = positiveInt('connect-concurrency', args.extra['connect-concurrency']);
    const commandCount = positiveInt('commands', args.extra.commands);
    const sampleSize = Math.min(n, positiveInt('sample', args.extra.sample));

    // Robot workers inherit this process's open-files limit: enough of them that none holds more
    // robots than its limit less 256.
    const ownFiles = openFilesLimit('self');
    const perWorker = Math.max(1, Math.min(ownFiles.hard, ownFiles.soft) - 256);
    const workerCount = Math.min(n, Math.max(askedWorkers, Math.ceil(n / perWorker)));
    if (workerCount > askedWorkers) log(`${workerCount} worker processes instead of ${askedWorkers}: each holds at most ${perWorker} robots under its open-files limit ${ownFiles.soft}`);

    await using cloud = await startCloud({ logLevel: String(args.extra['log-level']), args: BENCH_SERVE_ARGS });
    let needFiles = n + 256;
    const cloudFiles = raiseOpenFiles(cloud.process.pid, needFiles);
    // --fit-open-files (bench -- all): as many robots as the machine lets one process hold, said so.
    const fitted = cloudFiles.soft < needFiles && args.extra['fit-open-files'] === true;
    if (fitted) {
      n = Math.max(1, cloudFiles.soft - 256);
      needFiles = n + 256;
      log(`--fit-open-files: ${n} robots instead of ${asked}, the most the cloud's open-files limit (${cloudFiles.soft}, hard ${cloudFiles.hard}) holds${cloudFiles.why ? `; it could not be raised (${cloudFiles.why})` : ''}`);
    }

    // Ephemeral ports: one per connection from a source address to the broker's address.
    const broker = new URL(cloud.mqtt);
    const loopback = /^127\.\d+\.\d+\.\d+$/.test(broker.hostname);
    const portsPerSource = Math.floor(ephemeralPorts() * 0.8);
    const rawSources = String(args.extra['source-addresses']);
    const sourceCount = rawSources === 'auto' ? Math.ceil(n / portsPerSource) : positiveInt('source-addresses', rawSources);
    if (sourceCount > 254) throw new BenchFailure(`${sourceCount} source addresses asked for (127.0.0.1-127.0.0.254 at most)`);
    if (sourceCount > 1 && !loopback) {
      throw new BenchFailure(`${n} robots need ${sourceCount} source addresses (${portsPerSource} ephemeral ports each), which only works with the broker on loopback; it is at ${cloud.mqtt}`);
    }
    const sources = sourceCount > 1 ? Array.from({ length: sourceCount }, (_, i) => `127.0.0.${i + 1}`) : [];

    log(
      `${n} lightweight robots (plain mqtt.js clients speaking the robot protocol, not the agent) in ${workerCount} worker processes` +
        `${sources.length ? ` from ${sources.length} source addresses (${sources[0]}-${sources.at(-1)})` : ''}; ` +
        `cloud pid ${cloud.process.pid}, open-files limit ${cloudFiles.soft} (cloud) / ${ownFiles.soft} (robots); node ${process.version}, ${availableParallelism()} CPUs`,
    );
    if (cloudFiles.soft < needFiles) {
      throw new BenchFailure(
        `the cloud's open-files limit (${cloudFiles.soft}, hard ${cloudFiles.hard}) is below ${n} robots + 256 = ${needFiles}` +
          `${cloudFiles.why ? ` and could not be raised (${cloudFiles.why}; a hard limit goes up only with CAP_SYS_RESOURCE)` : ''}: ` +
          `raise the hard limit of the shell that runs the bench (ulimit -Hn, systemd LimitNOFILE, docker --ulimit nofile) or run with --robots ${Math.max(1, cloudFiles.soft - 256)} at most`,
      );
    }
    await liftRequestLimits(cloud);
    const orgs = await cloud.cli(['orgs', 'list']);
    for (const line of orgs.stdout.trim().split('\n').filter(Boolean)) {
      const { id } = JSON.parse(line) as { id: string };
      const r = await cloud.cli(['orgs', 'set-limit', id, `robots=${n + 10}`]);
      if (r.code !== 0) throw new Error(`orgs set-limit robots: ${r.stderr}`);
    }
    const tokenRes = await cloud.fetch('/v1/robots/enrollment-tokens', { method: 'POST', json: { max_uses: n, name_prefix: 'fleet' } });
    if (tokenRes.status !== 201) throw new BenchFailure(`enrollment token: HTTP ${tokenRes.status} ${await tokenRes.text()}`);
    const { token } = (await tokenRes.json()) as { token: string };

    log(`enrolling ${n} robots (POST /v1/robots/enroll, 8 at a time)...`);
    const enrolled = await enrollAll(cloud, token, n, 8);
    const creds = enrolled.creds;

    const workers = Array.from({ length: workerCount }, (_, i) => new Worker(i));
    try {
      await Promise.all(workers.map((w) => w.ready));
      await sleep(2000);
      const idle = memoryMb(cloud.process.pid);
      log(`cloud RSS idle (enrolled, none connected): ${fmt(idle.rss, 1)} MiB`);

      // Baseline: the same commands with one robot connected.
      const first = await workers[0]!.request({ type: 'connect', url: cloud.mqtt, creds: creds.slice(0, 1), concurrency: 1, sources: sources.slice(0, 1) }, 'connected');
      if (first.ok !== 1) throw new BenchFailure(`the first robot did not connect: ${JSON.stringify(first.errors)}`);
      await sleep(500);
      // Warm-up, discarded: the first commands of a fresh process pay for JIT and lazy statements.
      await commandTimes(cloud, [creds[0]!.robot_id], Math.min(100, commandCount));
      const alone = await commandTimes(cloud, [creds[0]!.robot_id], commandCount);

      // Every other robot, split over the workers, all at once.
      log(`connecting ${n - 1} more robots, ${connectConcurrency} connects in flight per worker...`);
      const rest = creds.slice(1);
      const t0 = performance.now();
      for (const w of workers) w.progress = { ok: 0, failed: 0 };
      const step = n > 20_000 ? 5000 : 2000;
      let logged = 0;
      const progress = setInterval(() => {
        const settled = workers.reduce((s, w) => s + w.progress.ok + w.progress.failed, 0);
        if (settled - logged < step) return;
        const now = performance.now();
        const failedSoFar = workers.reduce((s, w) => s + w.progress.failed, 0);
        log(`${settled} settled (${failedSoFar} failed) in ${fmt((now - t0) / 1000, 1)} s`);
        logged = settled;
      }, 250);
      let answers: Record<string, unknown>[];
      try {
        answers = await Promise.all(
          workers.map((w, i) =>
            w.request({ type: 'connect', url: cloud.mqtt, creds: rest.filter((_, k) => k % workerCount === i), concurrency: connectConcurrency, sources }, 'connected'),
          ),
        );
      } finally {
        clearInterval(progress);
      }
      const connectMs = performance.now() - t0;
      const ok = 1 + answers.reduce((s, a) => s + Number(a.ok), 0);
      const failed = answers.reduce((s, a) => s + Number(a.failed), 0);
      const errors = answers.flatMap((a) => a.errors as string[]).slice(0, 5);
      log(`${ok} connected, ${failed} failed in ${fmt(connectMs / 1000, 1)} s${errors.length ? `; first errors: ${errors.join('; ')}` : ''}`);

      // The cloud records each robot's status message after its CONNACK: wait until it lists all
      // that connected (or stops getting closer), then let it settle before reading its RSS.
      let listed = await connectedCount(cloud);
      const listDeadline = performance.now() + 60_000 + n;
      while (listed < ok && performance.now() < listDeadline) {
        await sleep(1000);
        listed = await connectedCount(cloud);
      }
      await sleep(2000);
      const held = memoryMb(cloud.process.pid);
      const sample = Array.from({ length: sampleSize }, (_, i) => creds[Math.floor((i * creds.length) / sampleSize)]!.robot_id).filter((id) => id !== creds[0]!.robot_id);
      const loaded = ok === n ? await commandTimes(cloud, sample, commandCount) : [];
      const stats = await Promise.all(workers.map((w) => w.request({ type: 'stats' }, 'stats')));
      const closedAfter = stats.reduce((s, a) => s + Number(a.closed), 0);
      const perRobotKb = listed > 0 ? ((held.rss - idle.rss) * 1024) / listed : Number.NaN;
      const connectsPerS = ((ok - 1) / connectMs) * 1000;

      process.stdout.write(
        `\nfleet: ${n} lightweight robots (plain mqtt.js clients speaking the robot protocol, not the agent), ${workerCount} worker processes` +
          `${sources.length ? ` from ${sources.length} loopback source addresses` : ''}, one cloud process with its embedded broker\n` +
          `${table(
            ['figure', 'value'],
            [
              ['enrolled (POST /v1/robots/enroll, 8 in flight)', `${creds.length} in ${fmt(enrolled.ms / 1000, 1)} s = ${fmt((creds.length / enrolled.ms) * 1000, 0)}/s`],
              ['connected (connect + subscribe + status), all at once', `${ok} of ${n} in ${fmt(connectMs / 1000, 1)} s = ${fmt(connectsPerS, 0)}/s; ${failed} failed`],
              ['listed as connected by GET /v1/robots', String(listed)],
              ['connections closed since (by the cloud or a timeout)', String(closedAfter)],
              [`stack/status p50 / p99 ms, ${sample.length} robots of ${ok} connected`, loaded.length ? `${fmt(percentile(loaded, 50))} / ${fmt(percentile(loaded, 99))}` : 'not measured (not all connected)'],
              ['stack/status p50 / p99 ms, 1 robot connected (baseline)', `${fmt(percentile(alone, 50))} / ${fmt(percentile(alone, 99))}`],
              ['cloud RSS idle -> with all connected, MiB', `${fmt(idle.rss, 1)} -> ${fmt(held.rss, 1)} (peak ${fmt(held.hwm, 1)})`],
              ['cloud RSS per connected robot, KiB', fmt(perRobotKb, 1)],
            ],
          )}\n`,
      );
      process.stdout.write(
        `${JSON.stringify({
          bench: 'fleet',
          robots: n,
          lightweight_robots: true,
          workers: workerCount,
          source_addresses: Math.max(1, sources.length),
          enroll_s: enrolled.ms / 1000,
          connect_s: connectMs / 1000,
          connects_per_s: connectsPerS,
          connected: ok,
          connect_failed: failed,
          connect_errors: errors,
          listed_connected: listed,
          closed_after_connect: closedAfter,
          command_ms_all_connected: loaded.length ? { p50: percentile(loaded, 50), p99: percentile(loaded, 99), n: loaded.length } : null,
          command_ms_one_connected: { p50: percentile(alone, 50), p99: percentile(alone, 99), n: alone.length },
          cloud_rss_mb_idle: idle.rss,
          cloud_rss_mb_all_connected: held.rss,
          cloud_kb_per_robot: perRobotKb,
        })}\n`,
      );
      if (ok < n || listed < n || closedAfter > 0) {
        throw new BenchFailure(`fleet: ${ok} of ${n} connected, ${listed} listed as connected, ${closedAfter} closed since${errors.length ? `; first errors: ${errors.join('; ')}` : ''}`);
      }
      const rows: SummaryRow[] = [
        row({
          name: `robots held by one cloud (lightweight clients)${fitted ? `, ${asked} asked, open-files limit ${cloudFiles.soft}` : ''}`,
          figure: listed,
          unit: 'robots',
          baseline: null,
          baselineUnit: null,
        }),
        row({ name: `connect ${n} robots, all at once`, figure: connectMs / 1000, unit: 's', baseline: null, baselineUnit: null, note: `${fmt(connectsPerS, 0)} connects/s` }),
        row({ name: `connects/s while connecting ${n}`, figure: connectsPerS, unit: 'conn/s', baseline: null, baselineUnit: null }),
        row({ name: `stack/status p50, ${n} connected`, figure: percentile(loaded, 50), unit: 'ms', baseline: percentile(alone, 50), baselineUnit: 'ms', baselineName: 'same command, 1 robot connected' }),
        row({ name: `stack/status p99, ${n} connected`, figure: percentile(loaded, 99), unit: 'ms', baseline: percentile(alone, 99), baselineUnit: 'ms', baselineName: 'same command, 1 robot connected' }),
        row({ name: 'cloud RSS per connected robot', figure: perRobotKb, unit: 'KiB', baseline: null, baselineUnit: null }),
      ];
      return rows;
    } finally {
      await Promise.allSettled(workers.map((w) => w.stop()));
    }
  },
};
