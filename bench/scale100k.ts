/**
 * `npm run bench -- scale100k`: `--robots` (100,000) lightweight robots connected at once through
 * a broker cluster of `--nodes` (7) `fleet-cloud broker-node` processes on one Redis, with
 * `--replicas` (2) `fleet-cloud serve` replicas on one PostgreSQL database; then one node is
 * killed (kill -9) and the robots it held move to the others.
 *
 * Every process here may hold about 19,700 sockets (the open-files limit of 20,000 cannot be
 * raised), so the robots run in several load processes (bench/scale100k-robots.ts, at most
 * `--per-worker` each) and the nodes are sized so that all but one hold every robot: with 7 nodes
 * each holds about 14,300 before the kill and 16,700 after. Robots are the lightweight clients of
 * the fleet benchmark (connect, will, subscriptions, retained status, `stack.status` answers, an
 * outbox of reports kept until acknowledged), not the agent; they get their address list from
 * enrollment (`mqtt.urls`) and move to the next address after a lost connection, with the agent's
 * backoff and jitter.
 *
 * Prints: enrollment rate; connects per second for all of them at once; resident memory per
 * connection of each broker node ((RSS loaded - RSS idle) / its robots) and of each replica (per
 * robot of the fleet), and Redis's; `stack/status` p50/p99 at `--command-rate` (100/s) to random
 * robots through the replicas in turn while all are connected, and report ingest at
 * `--report-rate` (reports acknowledged per second) at the same time; then after the kill: how
 * long until every robot the node held was connected again, until the replicas counted the whole
 * fleet connected again, the commands that timed out meanwhile (504, as the contract says) and
 * their retries with the same Idempotency-Key (each must succeed and the robot must not run it
 * twice), and the index checked in PostgreSQL: every report published is indexed exactly once.
 * Any lost or doubled report, a command answered twice, a robot that did not come back, or a
 * failed request fails the run after the figures are printed. Nothing is asserted about time.
 */
import { fork, spawnSync, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { Pool } from 'undici';
import { startBrokerCluster, type BrokerCluster } from '../test/support/broker-cluster.js';
import { makeTempDir, REPO_ROOT, type CloudProcess } from '../test/support/cloud.js';
import { createDatabase, ensurePostgresBinaries, startPostgres } from '../test/support/postgres.js';
import { sample, scrapeMetrics, startReplicas } from '../test/support/replicas.js';
import { waitFor } from '../test/support/wait.js';
import { parseBenchArgs, type BenchModule } from './lib/args.js';
import { BENCH_SERVE_ARGS, liftRequestLimits } from './lib/limits.js';
import { fmt, table } from './lib/measure.js';
import { memoryMb, percentile } from './lib/proc.js';
import { BenchFailure, row, type SummaryRow } from './lib/summary.js';

const WORKER = fileURLToPath(new URL('./scale100k-robots.ts', import.meta.url));

function log(msg: string): void {
  process.stderr.write(`bench scale100k: ${msg}\n`);
}

function positiveInt(name: string, raw: unknown): number {
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} must be a whole number >= 1, got ${String(raw)}`);
  return n;
}

interface Enrolled {
  robot_id: string;
  password: string;
  urls: string[];
}

interface WorkerStats {
  robots: number;
  connected: number;
  onUrl: Record<string, number>;
  pending: number;
  reportsPublished: number;
  republished: number;
  acked: number;
  duplicateAcks: number;
  refusedAcks: number;
  replies: number;
  commandsDeliveredAgain: number;
  reconnects: number;
  reconnectErrors: Record<string, number>;
  marked: number;
  recovered: number;
  recoveredMaxMs: number | null;
  reportTag: string;
  reportCount: number;
}

/** A load process of lightweight robots, with a request/answer over its IPC channel. */
class Worker {
  readonly child: ChildProcess;
  private waiting = new Map<string, (msg: Record<string, unknown>) => void>();
  readonly ready: Promise<void>;

  constructor(index: number) {
    this.child = fork(WORKER, [], {
      execArgv: ['--import', 'tsx', '--max-old-space-size=4096'],
      cwd: REPO_ROOT,
      env: { ...process.env, SCALE_WORKER: String(index) },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    this.child.on('message', (msg: Record<string, unknown>) => {
      const w = this.waiting.get(String(msg.type));
      this.waiting.delete(String(msg.type));
      this.failures.delete(String(msg.type));
      w?.(msg);
    });
    this.child.once('exit', (code) => {
      for (const fail of this.failures.values()) fail(code);
      this.failures.clear();
    });
    this.ready = this.answer('ready').then(() => undefined);
  }

  private answer(type: string): Promise<Record<string, unknown>> {
    return new Promise((resolve, reject) => {
      this.waiting.set(type, resolve);
      this.failures.set(type, (code) => reject(new BenchFailure(`robot worker exited (${code}) before answering ${type}`)));
    });
  }

  private failures = new Map<string, (code: number | null) => void>();

  request(msg: Record<string, unknown>, answer: string): Promise<Record<string, unknown>> {
    const p = this.answer(answer);
    this.child.send(msg);
    return p;
  }

  tell(msg: Record<string, unknown>): void {
    this.child.send(msg);
  }

  async stats(): Promise<WorkerStats> {
    return (await this.request({ type: 'stats' }, 'stats')) as unknown as WorkerStats;
  }

  async stop(): Promise<void> {
    if (this.child.exitCode !== null) return;
    const exited = new Promise((r) => this.child.once('exit', r));
    this.child.send({ type: 'stop' });
    await Promise.race([exited, sleep(20_000)]);
    if (this.child.exitCode === null) this.child.kill('SIGKILL');
  }
}

async function enrollAll(clouds: readonly CloudProcess[], token: string, n: number, concurrency: number): Promise<{ robots: Enrolled[]; ms: number }> {
  const pools = clouds.map((c) => new Pool(c.http, { connections: Math.ceil(concurrency / clouds.length) }));
  const robots: Enrolled[] = [];
  let next = 0;
  const t0 = performance.now();
  let last = t0;
  try {
    await Promise.all(
      Array.from({ length: concurrency }, async (_, lane) => {
        const pool = pools[lane % pools.length]!;
        while (next < n) {
          const i = next++;
          const res = await pool.request({
            method: 'POST',
            path: '/v1/robots/enroll',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ token, name: `scale-${i}`, platform: 'bench', runtime_version: 'bench-light' }),
          });
          const text = await res.body.text();
          if (res.statusCode !== 201) throw new BenchFailure(`enroll ${i}: HTTP ${res.statusCode} ${text.slice(0, 200)}`);
          const e = JSON.parse(text) as { robot_id: string; mqtt: { password: string; url: string; urls?: string[] } };
          robots.push({ robot_id: e.robot_id, password: e.mqtt.password, urls: e.mqtt.urls ?? [e.mqtt.url] });
          if (robots.length % 10_000 === 0) {
            const now = performance.now();
            log(`enrolled ${robots.length} in ${fmt((now - t0) / 1000, 1)} s (the last 10,000 at ${fmt((10_000 / (now - last)) * 1000, 0)}/s)`);
            last = now;
          }
        }
      }),
    );
  } finally {
    await Promise.all(pools.map((p) => p.close()));
  }
  return { robots, ms: performance.now() - t0 };
}

/** Every RSS of a process tree's root (a node, a replica, Redis), MiB. */
const rssOf = (pid: number): number => memoryMb(pid).rss;

/**
 * What a run that waited in vain for the replicas' count prints before it fails, so that the
 * next run need not be repeated to learn where the robots went: the robots the load processes
 * hold connected (per node), the nodes that exited, Redis's clients and pub/sub figures, the
 * store's count, and the last lines of every node and replica.
 */
async function diagnose(
  workers: readonly { stats(): Promise<WorkerStats> }[],
  cluster: BrokerCluster,
  clouds: readonly CloudProcess[],
  databaseUrl: string,
): Promise<void> {
  try {
    const stats = await Promise.all(workers.map((w) => w.stats()));
    log(`diagnosis: the load processes hold ${sum(stats.map((s) => s.connected))} robots connected after ${sum(stats.map((s) => s.reconnects))} reconnects; per node: ${robotsPerNode(cluster.urls, stats).join(', ')}`);
    const why = new Map<string, number>();
    for (const s of stats) for (const [k, v] of Object.entries(s.reconnectErrors)) why.set(k, (why.get(k) ?? 0) + v);
    log(`diagnosis: failed reconnects by reason: ${[...why].sort((a, b) => b[1] - a[1]).slice(0, 8).map(([k, v]) => `${v}x ${k}`).join('; ') || 'none'}`);
    log(`diagnosis: nodes exited: ${cluster.nodes.filter((nd) => nd.process.exit !== null).map((nd) => nd.index).join(', ') || 'none'}`);
    const port = new URL(cluster.redisUrl).port;
    for (const section of ['clients', 'stats', 'memory']) {
      const r = spawnSync('redis-cli', ['-p', port, 'INFO', section], { encoding: 'utf8', timeout: 10_000 });
      log(`diagnosis: redis INFO ${section}: ${(r.stdout ?? '').split('\n').filter((l) => /clients|output|pubsub|rejected|evicted|used_memory_human|total_connections/.test(l)).map((l) => l.trim()).join(' ')}`);
    }
    const lists = spawnSync('redis-cli', ['-p', port, 'CLIENT', 'LIST'], { encoding: 'utf8', timeout: 10_000 });
    log(`diagnosis: redis clients with pub/sub output queued: ${(lists.stdout ?? '').split('\n').filter((l) => / sub=[1-9]| psub=[1-9]/.test(l) && !/ omem=0 /.test(l)).length}`);
    const db = new pg.Client({ connectionString: databaseUrl });
    await db.connect();
    try {
      const r = await db.query<{ connected: boolean; n: string }>('SELECT connected, count(*) AS n FROM robots GROUP BY connected');
      log(`diagnosis: store robots by connected: ${r.rows.map((x) => `${x.connected}=${x.n}`).join(' ')}`);
    } finally {
      await db.end();
    }
    for (const nd of cluster.nodes) log(`diagnosis: node ${nd.index}: ${nd.process.describe().slice(-1500)}`);
    for (const c of clouds) log(`diagnosis: replica ${c.process.pid}: ${c.process.describe().slice(-3000)}`);
  } catch (err) {
    log(`diagnosis failed: ${String(err)}`);
  }
}

/** Robots the load processes hold connected on each node, in the order of `urls`. */
function robotsPerNode(urls: readonly string[], stats: readonly WorkerStats[]): number[] {
  return urls.map((u) => sum(stats.map((s) => s.onUrl[u] ?? 0)));
}

/** Robots a replica's /metrics counts as connected (read from the shared store). */
async function connectedGauge(cloud: CloudProcess): Promise<number> {
  return sample(await scrapeMetrics(cloud), 'fleet_robots_connected');
}

interface CommandOutcome {
  times: number[];
  ok: number;
  timedOut: { robot: string; key: string }[];
  failed: string[];
}

/**
 * Open loop: `rate` POST /v1/robots/{id}/stack/status per second for `seconds`, each to a random
 * robot with an Idempotency-Key of its own, through the replicas in turn; each one's time from
 * send to answer.
 */
async function commandLoad(clouds: readonly CloudProcess[], adminKey: string, robots: readonly Enrolled[], rate: number, seconds: number, tag: string): Promise<CommandOutcome> {
  const pools = clouds.map((c) => new Pool(c.http, { connections: 64 }));
  const out: CommandOutcome = { times: [], ok: 0, timedOut: [], failed: [] };
  const inFlight: Promise<void>[] = [];
  const t0 = performance.now();
  const total = Math.round(rate * seconds);
  try {
    for (let i = 0; i < total; i++) {
      const due = t0 + (i * 1000) / rate;
      const wait = due - performance.now();
      if (wait > 0) await sleep(wait);
      const robot = robots[Math.floor(Math.random() * robots.length)]!.robot_id;
      const key = `scale-${tag}-${i}`;
      const pool = pools[i % pools.length]!;
      inFlight.push(
        (async () => {
          const start = performance.now();
          try {
            const res = await pool.request({ method: 'POST', path: `/v1/robots/${robot}/stack/status`, headers: { authorization: `Bearer ${adminKey}`, 'idempotency-key': key } });
            const text = await res.body.text();
            if (res.statusCode === 200) {
              out.times.push(performance.now() - start);
              out.ok++;
            } else if (res.statusCode === 504) out.timedOut.push({ robot, key });
            else if (out.failed.length < 1000) out.failed.push(`${robot}: HTTP ${res.statusCode} ${text.slice(0, 160)}`);
          } catch (err) {
            out.failed.push(`${robot}: ${(err as Error).message}`);
          }
        })(),
      );
    }
    await Promise.all(inFlight);
  } finally {
    await Promise.all(pools.map((p) => p.close()));
  }
  out.times.sort((a, b) => a - b);
  return out;
}

/** The same commands again, with the same keys: each must now be answered 200 (and run once by its robot). */
async function retryCommands(cloud: CloudProcess, adminKey: string, timedOut: readonly { robot: string; key: string }[]): Promise<{ ok: number; failed: string[] }> {
  const pool = new Pool(cloud.http, { connections: 16 });
  let ok = 0;
  const failed: string[] = [];
  try {
    await Promise.all(
      timedOut.map(async ({ robot, key }) => {
        // A key whose first request still runs on a replica answers 409 until it ends.
        for (let attempt = 0; attempt < 30; attempt++) {
          const res = await pool.request({ method: 'POST', path: `/v1/robots/${robot}/stack/status`, headers: { authorization: `Bearer ${adminKey}`, 'idempotency-key': key } });
          const text = await res.body.text();
          if (res.statusCode === 200) {
            ok++;
            return;
          }
          if (res.statusCode !== 409 && res.statusCode !== 504) {
            failed.push(`${robot} ${key}: HTTP ${res.statusCode} ${text.slice(0, 160)}`);
            return;
          }
          await sleep(1000);
        }
        failed.push(`${robot} ${key}: not answered after 30 tries`);
      }),
    );
  } finally {
    await pool.close();
  }
  return { ok, failed };
}

const sum = (xs: readonly number[]) => xs.reduce((s, x) => s + x, 0);

export const scale100k: BenchModule = {
  description: '100,000 lightweight robots through a broker cluster (7 nodes on Redis, 2 replicas on PostgreSQL): connects/s, memory per connection, command p50/p99, report ingest, a node killed',
  async run(argv) {
    const args = parseBenchArgs(argv, {
      robots: { type: 'string', default: '100000' },
      nodes: { type: 'string', default: '7' },
      replicas: { type: 'string', default: '2' },
      'per-worker': { type: 'string', default: '15000' },
      'connect-concurrency': { type: 'string', default: '32' },
      'command-rate': { type: 'string', default: '100' },
      'command-seconds': { type: 'string', default: '30' },
      'report-rate': { type: 'string', default: '200' },
      'kill-node': { type: 'string', default: 'last' },
    });
    const n = positiveInt('robots', args.extra.robots);
    const nodeCount = positiveInt('nodes', args.extra.nodes);
    const replicaCount = positiveInt('replicas', args.extra.replicas);
    const perWorker = positiveInt('per-worker', args.extra['per-worker']);
    const concurrency = positiveInt('connect-concurrency', args.extra['connect-concurrency']);
    const commandRate = positiveInt('command-rate', args.extra['command-rate']);
    const commandSeconds = positiveInt('command-seconds', args.extra['command-seconds']);
    const reportRate = Number(args.extra['report-rate']);
    if (nodeCount < 2) throw new Error('--nodes must be 2 or more: one is killed');
    if (replicaCount > nodeCount - 1) throw new Error('--replicas must be fewer than --nodes: no replica sits on the node that is killed');
    const killIndex = args.extra['kill-node'] === 'last' ? nodeCount - 1 : Number(args.extra['kill-node']);
    if (!Number.isInteger(killIndex) || killIndex < replicaCount || killIndex >= nodeCount) throw new Error(`--kill-node must be a node without a replica: ${replicaCount}..${nodeCount - 1}`);
    // The open-files limit: each node must hold its share once one node is gone.
    const limit = Number(/^Max open files\s+\d+\s+(\d+)/m.exec(readFileSync('/proc/self/limits', 'utf8'))?.[1] ?? 20_000);
    const afterKill = Math.ceil(n / (nodeCount - 1));
    if (afterKill + 256 > limit) {
      throw new BenchFailure(`${n} robots over ${nodeCount - 1} nodes after the kill is ${afterKill} per node, over the open-files limit ${limit} less 256: use more --nodes or ${(nodeCount - 1) * (limit - 300)} --robots at most`);
    }
    if (perWorker + 256 > limit) throw new BenchFailure(`--per-worker ${perWorker} is over the open-files limit ${limit} less 256`);
    const workerCount = Math.ceil(n / perWorker);

    // PostgreSQL on loopback (fsync on, synchronous_commit off), started as the scale bench starts it.
    const binDir = ensurePostgresBinaries(log);
    if (!binDir) throw new BenchFailure('PostgreSQL binaries are not available (run as root to install them, or install postgresql)');
    await using dir = await makeTempDir('fleet-scale100k-');
    const dataDir = join(dir.path, 'data');
    const server = await startPostgres(binDir, { durable: true, maxConnections: 400 });
    await using _pg = { [Symbol.asyncDispose]: () => server.stop() };
    const storeEnv = { FLEET_DATABASE_URL: await createDatabase(server, 'fleet_scale100k') };
    log(`${n} robots, ${nodeCount} broker nodes, ${replicaCount} replicas on PostgreSQL, ${workerCount} load processes; node ${process.version}; open-files limit ${limit}`);

    await using cluster = await startBrokerCluster({ nodes: nodeCount, storeEnv, dir: join(dir.path, 'cluster'), heartbeatMs: 1000 });
    const urls = cluster.urls;
    await using replicas = await startReplicas({
      broker: cluster,
      dataDir,
      count: replicaCount,
      storeEnv,
      mqttUrlFor: (i) => urls[i]!,
      args: [...BENCH_SERVE_ARGS, '--mqtt-broker', 'fleet-cluster', '--mqtt-public-url', urls.join(','), '--log-level', 'warn'],
    });
    const clouds = replicas.clouds;
    const first = clouds[0]!;
    await liftRequestLimits(first, storeEnv);
    const orgs = await first.cli(['orgs', 'list'], { env: storeEnv });
    for (const line of orgs.stdout.trim().split('\n').filter(Boolean)) {
      const { id } = JSON.parse(line) as { id: string };
      const r = await first.cli(['orgs', 'set-limit', id, `robots=${n + 10}`], { env: storeEnv });
      if (r.code !== 0) throw new Error(`orgs set-limit robots: ${r.stderr}`);
    }
    const tokenRes = await first.fetch('/v1/robots/enrollment-tokens', { method: 'POST', json: { max_uses: n, name_prefix: 'scale' } });
    if (tokenRes.status !== 201) throw new BenchFailure(`enrollment token: HTTP ${tokenRes.status} ${await tokenRes.text()}`);
    const { token } = (await tokenRes.json()) as { token: string };
    log(`enrolling ${n} robots through ${replicaCount} replicas, 16 at a time...`);
    const enrolled = await enrollAll(clouds, token, n, 16);
    const robots = enrolled.robots;

    const workers = Array.from({ length: workerCount }, (_, i) => new Worker(i));
    try {
      await Promise.all(workers.map((w) => w.ready));
      await sleep(2000);
      const idle = { nodes: cluster.nodes.map((nd) => rssOf(nd.process.pid)), replicas: clouds.map((c) => rssOf(c.process.pid)), redis: rssOf(cluster.redisProcess.pid) };

      log(`connecting ${n} robots, ${concurrency} connects in flight per load process...`);
      const t0 = performance.now();
      const answers = await Promise.all(workers.map((w, i) => w.request({ type: 'connect', robots: robots.slice(i * perWorker, (i + 1) * perWorker), concurrency }, 'connected')));
      const connectMs = performance.now() - t0;
      const ok = sum(answers.map((a) => Number(a.ok)));
      const failedConnects = sum(answers.map((a) => Number(a.failed)));
      const connectErrors = answers.flatMap((a) => a.errors as string[]).slice(0, 5);
      const connectsPerS = (ok / connectMs) * 1000;
      log(`${ok} connected, ${failedConnects} failed in ${fmt(connectMs / 1000, 1)} s (${fmt(connectsPerS, 0)}/s)${connectErrors.length ? `; first errors: ${connectErrors.join('; ')}` : ''}`);
      if (ok < n) throw new BenchFailure(`${ok} of ${n} robots connected: ${connectErrors.join('; ')}`);

      const tListed = performance.now();
      let gauge = 0;
      try {
        await waitFor(async () => ((gauge = await connectedGauge(first)) >= n ? true : undefined), {
          timeoutMs: 600_000,
          intervalMs: 2000,
          description: () => `the replicas to count ${n} robots connected (${gauge})`,
        });
      } catch (err) {
        await diagnose(workers, cluster, clouds, storeEnv.FLEET_DATABASE_URL);
        throw err;
      }
      const listedMs = performance.now() - tListed + connectMs;
      await sleep(3000);
      let stats = await Promise.all(workers.map((w) => w.stats()));
      const perNode = robotsPerNode(urls, stats);
      const loaded = { nodes: cluster.nodes.map((nd) => rssOf(nd.process.pid)), replicas: clouds.map((c) => rssOf(c.process.pid)), redis: rssOf(cluster.redisProcess.pid) };
      const nodeKb = perNode.map((count, i) => (count > 0 ? ((loaded.nodes[i]! - idle.nodes[i]!) * 1024) / count : Number.NaN));
      const replicaKb = loaded.replicas.map((r, i) => ((r - idle.replicas[i]!) * 1024) / n);
      const redisKb = ((loaded.redis - idle.redis) * 1024) / n;
      log(`robots per node: ${perNode.join(', ')}`);

      // Steady load: commands at the asked rate and reports, all connected.
      const adminKey = first.adminKey;
      for (const w of workers) w.tell({ type: 'reports', perSecond: reportRate / workerCount });
      const ackedBefore = sum(stats.map((s) => s.acked));
      const tSteady = performance.now();
      log(`${commandRate} commands/s for ${commandSeconds} s to random robots, ${reportRate} reports/s offered...`);
      const steady = await commandLoad(clouds, adminKey, robots, commandRate, commandSeconds, 'steady');
      stats = await Promise.all(workers.map((w) => w.stats()));
      const ingestPerS = ((sum(stats.map((s) => s.acked)) - ackedBefore) / (performance.now() - tSteady)) * 1000;

      // The kill: robots on that node are marked, the node dies, commands and reports go on.
      const killedUrl = urls[killIndex]!;
      const marks = await Promise.all(workers.map((w) => w.request({ type: 'mark', url: killedUrl }, 'marked')));
      const onKilled = sum(marks.map((m) => Number(m.count)));
      log(`killing node ${killIndex} (${killedUrl}) with ${onKilled} robots on it...`);
      const tKill = performance.now();
      await cluster.kill(killIndex);
      const during = commandLoad(clouds, adminKey, robots, commandRate, commandSeconds, 'failover');
      let back = 0;
      try {
        await waitFor(
          async () => {
            stats = await Promise.all(workers.map((w) => w.stats()));
            back = sum(stats.map((s) => s.recovered));
            return back >= onKilled ? true : undefined;
          },
          { timeoutMs: 600_000, intervalMs: 500, description: () => `the ${onKilled} robots of node ${killIndex} to connect again (${back} so far)` },
        );
      } catch (err) {
        await diagnose(workers, cluster, clouds, storeEnv.FLEET_DATABASE_URL);
        throw err;
      }
      const allBackMs = Math.max(...stats.map((s) => s.recoveredMaxMs ?? 0));
      // The replicas first see the node's robots go (three missed heartbeats), then come back.
      let lowest = n;
      await waitFor(
        async () => {
          gauge = await connectedGauge(first);
          lowest = Math.min(lowest, gauge);
          return lowest < n && gauge >= n ? true : undefined;
        },
        {
        timeoutMs: 600_000,
        intervalMs: 500,
        description: () => `the replicas to count ${n} robots connected again (${gauge})`,
      });
      const cloudBackMs = performance.now() - tKill;
      const failover = await during;
      for (const w of workers) w.tell({ type: 'reports', perSecond: 0 });
      const retried = await retryCommands(first, adminKey, [...steady.timedOut, ...failover.timedOut]);

      // Every outbox drained, then the index: each report published is there once.
      await waitFor(
        async () => {
          stats = await Promise.all(workers.map((w) => w.stats()));
          return sum(stats.map((s) => s.pending)) === 0 ? true : undefined;
        },
        { timeoutMs: 300_000, intervalMs: 1000, description: () => `every outbox to drain (${sum(stats.map((s) => s.pending))} reports unacknowledged)` },
      );
      const published = sum(stats.map((s) => s.reportsPublished));
      const db = new pg.Client({ connectionString: storeEnv.FLEET_DATABASE_URL });
      await db.connect();
      let indexed = 0;
      let distinct = 0;
      let dbBytes = 0;
      try {
        const tags = stats.map((s) => `ep_${s.reportTag}%`);
        const r = await db.query<{ n: string; d: string }>('SELECT count(*) AS n, count(DISTINCT id) AS d FROM episodes WHERE id LIKE ANY($1)', [tags]);
        indexed = Number(r.rows[0]!.n);
        distinct = Number(r.rows[0]!.d);
        dbBytes = Number((await db.query<{ b: string }>('SELECT pg_database_size(current_database()) AS b')).rows[0]!.b);
      } finally {
        await db.end();
      }
      const metrics = await Promise.all(clouds.map((c) => scrapeMetrics(c)));
      const inserted = sum(metrics.map((m) => sample(m, 'fleet_episode_reports_total{result="inserted"}')));
      const duplicates = sum(metrics.map((m) => sample(m, 'fleet_episode_reports_total{result="duplicate"}')));
      const deliveredAgain = sum(stats.map((s) => s.commandsDeliveredAgain));
      const republished = sum(stats.map((s) => s.republished));
      const refused = sum(stats.map((s) => s.refusedAcks));
      // Each command (one Idempotency-Key, one cmd_id) is run by its robot at most once: a robot
      // answers a cmd_id it has seen with its first answer. More runs than keys sent would be a
      // retry the cloud sent under a new cmd_id, i.e. a command answered twice.
      const runs = sum(stats.map((s) => s.replies));
      const keysSent = Math.round(commandRate * commandSeconds) * 2;

      const p = (xs: number[], q: number) => fmt(percentile(xs, q), 1);
      process.stdout.write(
        `\nscale100k: ${n} lightweight robots (plain mqtt.js clients speaking the robot protocol, not the agent) in ${workerCount} load processes, ` +
          `${nodeCount} fleet-cloud broker-node nodes on one Redis, ${replicaCount} fleet-cloud serve replicas on PostgreSQL, all on this machine\n` +
          `${table(
            ['figure', 'value'],
            [
              ['enrolled (POST /v1/robots/enroll, 16 in flight over the replicas)', `${robots.length} in ${fmt(enrolled.ms / 1000, 1)} s = ${fmt((robots.length / enrolled.ms) * 1000, 0)}/s`],
              ['connected (connect + subscribe + status), all at once', `${ok} of ${n} in ${fmt(connectMs / 1000, 1)} s = ${fmt(connectsPerS, 0)}/s; ${failedConnects} failed`],
              ['until the replicas counted all connected (fleet_robots_connected)', `${fmt(listedMs / 1000, 1)} s`],
              ['robots per node', perNode.join(' / ')],
              ['node RSS per connection, KiB (each node)', nodeKb.map((k) => fmt(k, 1)).join(' / ')],
              ['node RSS idle -> loaded, MiB (each node)', idle.nodes.map((r, i) => `${fmt(r, 0)}->${fmt(loaded.nodes[i]!, 0)}`).join(' / ')],
              ['replica RSS per robot of the fleet, KiB (each replica)', replicaKb.map((k) => fmt(k, 1)).join(' / ')],
              ['replica RSS idle -> loaded, MiB', idle.replicas.map((r, i) => `${fmt(r, 0)}->${fmt(loaded.replicas[i]!, 0)}`).join(' / ')],
              ['Redis RSS per robot, KiB', `${fmt(redisKb, 2)} (${fmt(idle.redis, 0)} -> ${fmt(loaded.redis, 0)} MiB)`],
              [`stack/status at ${commandRate}/s, all connected: p50 / p99 ms`, `${p(steady.times, 50)} / ${p(steady.times, 99)} (${steady.ok} answered, ${steady.timedOut.length} 504, ${steady.failed.length} failed)`],
              [`report ingest, ${reportRate}/s offered, all connected`, `${fmt(ingestPerS, 0)} acknowledged/s`],
              [`node ${killIndex} killed with robots on it`, String(onKilled)],
              ['until every one of them was connected again (another node)', `${fmt(allBackMs / 1000, 1)} s`],
              [`until the replicas counted the whole fleet connected again (lowest count meanwhile)`, `${fmt(cloudBackMs / 1000, 1)} s (${lowest})`],
              [`stack/status at ${commandRate}/s during the failover: p50 / p99 ms`, `${p(failover.times, 50)} / ${p(failover.times, 99)} (${failover.ok} answered, ${failover.timedOut.length} 504, ${failover.failed.length} failed)`],
              ['504s retried with the same Idempotency-Key', `${retried.ok} of ${steady.timedOut.length + failover.timedOut.length} answered 200; ${retried.failed.length} failed`],
              ['commands run by robots / Idempotency-Keys sent', `${runs} / ${keysSent}`],
              ['commands delivered to a robot again (answered with the first answer, not run again)', String(deliveredAgain)],
              ['reports published / indexed / distinct in the index', `${published} / ${indexed} / ${distinct}`],
              ['reports published again from outboxes after the kill; deduplicated by the index', `${republished}; ${duplicates} (inserted ${inserted})`],
              ['PostgreSQL database size, MiB', fmt(dbBytes / 1024 / 1024, 1)],
            ],
          )}\n`,
      );
      process.stdout.write(
        `${JSON.stringify({
          bench: 'scale100k',
          robots: n,
          nodes: nodeCount,
          replicas: replicaCount,
          load_processes: workerCount,
          enroll_per_s: (robots.length / enrolled.ms) * 1000,
          connect_s: connectMs / 1000,
          connects_per_s: connectsPerS,
          listed_s: listedMs / 1000,
          robots_per_node: perNode,
          node_kb_per_connection: nodeKb,
          replica_kb_per_robot: replicaKb,
          redis_kb_per_robot: redisKb,
          command_ms: { p50: percentile(steady.times, 50), p99: percentile(steady.times, 99), n: steady.times.length },
          report_ingest_per_s: ingestPerS,
          killed_node_robots: onKilled,
          reconnect_all_s: allBackMs / 1000,
          cloud_all_connected_again_s: cloudBackMs / 1000,
          failover_command_ms: { p50: percentile(failover.times, 50), p99: percentile(failover.times, 99), timed_out: failover.timedOut.length },
          retried_ok: retried.ok,
          commands_delivered_again: deliveredAgain,
          reports: { published, indexed, distinct, republished, duplicates, inserted },
          database_mib: dbBytes / 1024 / 1024,
        })}\n`,
      );
      const problems: string[] = [];
      if (steady.failed.length + failover.failed.length > 0) problems.push(`failed commands: ${[...steady.failed, ...failover.failed].slice(0, 3).join('; ')}`);
      if (retried.failed.length > 0) problems.push(`retries failed: ${retried.failed.slice(0, 3).join('; ')}`);
      if (indexed !== published || distinct !== published) problems.push(`${published} reports published, ${indexed} indexed (${distinct} distinct)`);
      if (refused > 0) problems.push(`${refused} reports refused`);
      if (runs > keysSent) problems.push(`robots ran ${runs} commands for ${keysSent} Idempotency-Keys`);
      if (problems.length > 0) throw new BenchFailure(`scale100k: ${problems.join('; ')}`);
      const rows: SummaryRow[] = [
        row({ name: `scale100k: robots connected through ${nodeCount} nodes`, figure: ok, unit: 'robots', baseline: null, baselineUnit: null }),
        row({ name: `scale100k: connects/s, ${n} at once`, figure: connectsPerS, unit: 'conn/s', baseline: null, baselineUnit: null }),
        row({ name: 'scale100k: node RSS per connection (mean)', figure: sum(nodeKb.filter((k) => Number.isFinite(k))) / nodeKb.filter((k) => Number.isFinite(k)).length, unit: 'KiB', baseline: null, baselineUnit: null }),
        row({ name: `scale100k: stack/status p50 at ${commandRate}/s`, figure: percentile(steady.times, 50), unit: 'ms', baseline: null, baselineUnit: null }),
        row({ name: `scale100k: stack/status p99 at ${commandRate}/s`, figure: percentile(steady.times, 99), unit: 'ms', baseline: null, baselineUnit: null }),
        row({ name: 'scale100k: every robot of a killed node connected again', figure: allBackMs / 1000, unit: 's', baseline: null, baselineUnit: null }),
      ];
      return rows;
    } finally {
      await Promise.allSettled(workers.map((w) => w.stop()));
    }
  },
};
