/**
 * Robot commands through /v1 and MQTT, and how many simulated robots one cloud process holds.
 *
 * Latency: `POST /v1/robots/{id}/stack/status` round trips (HTTP -> cloud -> MQTT -> agent ->
 * MQTT -> cloud -> HTTP) against a raw mqtt.js request/response over the SAME broker in the same
 * run. The embedded broker lets only the cloud (whose secret lives in its process) publish on a
 * robot's command topic and read its replies, so no raw client can make a request/response there.
 * The honest common ground is an external broker: a bare aedes (the cloud's version) in its own
 * process; the cloud uses it with --mqtt-url, the simulated robots enroll onto it, and the raw
 * baseline (a requester here, a responder in its own process) runs over it too. The /v1 path is
 * then also measured with the default embedded broker (with its authentication and ACL), for
 * reference. Every socket has TCP_NODELAY, as the cloud's broker, its link and the agent set it
 * (without it, Nagle's algorithm meeting delayed ACKs cost every command about 88 ms).
 *
 * Configured actions (bench/commands-actions.ts): the same command answered by a program the
 * agent's config maps to it against the simulated robot's in-process answer, both through /v1.
 *
 * Capacity: fleets of increasing size (simulator processes of at most --per-process robots)
 * against one cloud process with its embedded broker: robots connected (GET /v1/robots), the
 * cloud's RSS before and after, memory per robot. Bounded by --capacity-timeout.
 *
 * Prints figures and ratios; asserts nothing about time.
 */
import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import mqtt from 'mqtt';
import { topics } from '@fleet/protocol';
import { Pool } from 'undici';
import { REPO_ROOT, startCloud, type CloudProcess } from '../test/support/cloud.js';
import { spawnProcess } from '../test/support/process.js';
import { createEnrollmentToken, listRobots, startFleet, type FleetProcess } from '../test/support/robots.js';
import { parseBenchArgs, type BenchModule } from './lib/args.js';
import { closedLoop, type LoopFigures } from './lib/closed-loop.js';
import { fmt, table } from './lib/measure.js';
import { BENCH_SERVE_ARGS, liftRequestLimits } from './lib/limits.js';
import { BenchFailure, row, type SummaryRow } from './lib/summary.js';
import { measureConfiguredActions, type ActionsFigures } from './commands-actions.js';

const BARE_BROKER = fileURLToPath(new URL('./bare-broker.ts', import.meta.url));
const RESPONDER = fileURLToPath(new URL('./mqtt-responder.ts', import.meta.url));

interface Load {
  durationS: number;
  warmupS: number;
  concurrency: number;
}

function log(msg: string): void {
  process.stderr.write(`bench commands: ${msg}\n`);
}

/** VmRSS and VmHWM of a process, in KiB (Linux /proc). */
function memoryKb(pid: number): { rss: number; hwm: number } {
  const text = readFileSync(`/proc/${pid}/status`, 'utf8');
  const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? Number.NaN);
  return { rss: field('VmRSS'), hwm: field('VmHWM') };
}

const mb = (kb: number) => kb / 1024;

/** Closed-loop /v1 command round trips: sequential on robot 0, concurrent spread over the fleet. */
/** What a loop of measureV1 sends: the command by default. */
type V1Request = (robot: string) => { method: 'GET' | 'POST'; path: string };
const STACK_STATUS: V1Request = (robot) => ({ method: 'POST', path: `/v1/robots/${robot}/stack/status` });
/** The same API path without the robot: authentication, the robot's row, a JSON answer. */
const ROBOT_GET: V1Request = (robot) => ({ method: 'GET', path: `/v1/robots/${robot}` });

async function measureV1(label: string, cloud: CloudProcess, robots: readonly string[], load: Load, request: V1Request = STACK_STATUS): Promise<LoopFigures[]> {
  const auth = `Bearer ${cloud.adminKey}`;
  const pool = new Pool(cloud.http, { connections: load.concurrency, pipelining: 1 });
  try {
    const op = (robot: string) => async () => {
      const res = await pool.request({ ...request(robot), headers: { authorization: auth } });
      const text = await res.body.text();
      if (res.statusCode !== 200) throw new Error(`${label}: HTTP ${res.statusCode} ${text}`);
    };
    const seq = await closedLoop(label, { concurrency: 1, durationS: load.durationS, warmupS: load.warmupS }, op(robots[0]!));
    const conc = await closedLoop(label, { concurrency: load.concurrency, durationS: load.durationS, warmupS: load.warmupS }, (w) => op(robots[w % robots.length]!)());
    return [seq, conc];
  } finally {
    await pool.close();
  }
}

/** A bare aedes process and a raw responder process on it. */
async function startRawPair(noDelay: boolean) {
  const flag = noDelay ? ['--nodelay'] : [];
  const broker = spawnProcess(process.execPath, ['--import', 'tsx', BARE_BROKER, ...flag], { name: `bare aedes${noDelay ? ' (nodelay)' : ''}`, cwd: REPO_ROOT });
  try {
    const url = (JSON.parse(await broker.waitForStdout((l) => l.startsWith('{"mqtt"'), { description: 'the broker address' })) as { mqtt: string }).mqtt;
    const responder = spawnProcess(process.execPath, ['--import', 'tsx', RESPONDER, url, ...flag], { name: 'raw responder', cwd: REPO_ROOT });
    try {
      await responder.waitForStdout((l) => l.includes('"ready"'), { description: 'the responder' });
    } catch (err) {
      await responder.kill();
      throw err;
    }
    return {
      url,
      async [Symbol.asyncDispose]() {
        await responder.kill();
        await broker.kill();
      },
    };
  } catch (err) {
    await broker.kill();
    throw err;
  }
}

/** Closed-loop raw mqtt.js request/response: publish a command, wait for the responder's reply. */
/** Where measureRaw sends: the bare responder's own topics, or the real robots' (the agent answers). */
interface RawTopics {
  command: (robot: string) => string;
  replies: string;
}
const RESPONDER_TOPICS: RawTopics = { command: (robot) => `bench/raw/${robot}/cmd`, replies: 'bench/raw/+/cmd/reply' };
const AGENT_TOPICS: RawTopics = { command: topics.command, replies: topics.allCommandReplies };

async function measureRaw(label: string, url: string, robots: readonly string[], load: Load, noDelay = false, to: RawTopics = RESPONDER_TOPICS): Promise<LoopFigures[]> {
  const client = await mqtt.connectAsync(url, { protocolVersion: 4, clientId: `raw_requester_${process.pid}`, clean: true, reconnectPeriod: 0 });
  if (noDelay) (client.stream as { setNoDelay?: (on: boolean) => void }).setNoDelay?.(true);
  const pending = new Map<string, () => void>();
  client.on('message', (_topic, payload) => {
    const { cmd_id } = JSON.parse(payload.toString('utf8')) as { cmd_id: string };
    const done = pending.get(cmd_id);
    pending.delete(cmd_id);
    done?.();
  });
  await client.subscribeAsync(to.replies, { qos: 1 });
  try {
    let seq = 0;
    const op = (robot: string) => () =>
      new Promise<void>((resolve, reject) => {
        const cmdId = `raw_${++seq}`;
        // A reply that never comes fails the run instead of hanging it.
        const timer = setTimeout(() => {
          pending.delete(cmdId);
          reject(new BenchFailure(`${label}: no reply to ${cmdId} within 10 s`));
        }, 10_000);
        pending.set(cmdId, () => {
          clearTimeout(timer);
          resolve();
        });
        const msg = { cmd_id: cmdId, command: 'stack.status', sent_at: Date.now() };
        client.publish(to.command(robot), JSON.stringify(msg), { qos: 1 }, (err) => {
          if (err) {
            pending.delete(cmdId);
            reject(err);
          }
        });
      });
    const one = await closedLoop(label, { concurrency: 1, durationS: load.durationS, warmupS: load.warmupS }, op(robots[0]!));
    const many = await closedLoop(label, { concurrency: load.concurrency, durationS: load.durationS, warmupS: load.warmupS }, (w) => op(robots[w % robots.length]!)());
    return [one, many];
  } finally {
    await client.endAsync();
  }
}

interface CapacityRow {
  target: number;
  connected: number;
  simulator_processes: number;
  fleet_start_s: number;
  cloud_rss_mb: number;
  cloud_hwm_mb: number;
  cloud_delta_mb: number;
  cloud_kb_per_robot: number;
  /** RSS added per robot since the previous step: the marginal cost, without the fixed growth of the first connections. */
  cloud_marginal_kb_per_robot: number;
  simulators_rss_mb: number;
  simulator_kb_per_robot: number;
}

async function capacity(opts: { sizes: number[]; perProcess: number; timeoutS: number; logLevel: string }): Promise<{ baseline_rss_mb: number; rows: CapacityRow[]; stopped: string | null }> {
  await using cloud = await startCloud({ logLevel: opts.logLevel, args: BENCH_SERVE_ARGS });
  await liftRequestLimits(cloud);
  await sleep(1000);
  const base = memoryKb(cloud.process.pid);
  log(`capacity: cloud pid ${cloud.process.pid}, RSS ${fmt(mb(base.rss), 1)} MiB before any robot`);
  const token = await createEnrollmentToken(cloud, { maxUses: Math.max(...opts.sizes) });
  const fleets: FleetProcess[] = [];
  const rows: CapacityRow[] = [];
  const deadline = Date.now() + opts.timeoutS * 1000;
  let total = 0;
  let stopped: string | null = null;
  let last: { rss: number; connected: number } | undefined;
  try {
    for (const size of opts.sizes) {
      const t0 = Date.now();
      try {
        while (total < size) {
          const remainingMs = deadline - Date.now();
          if (remainingMs <= 0) throw new Error(`time bound of ${opts.timeoutS} s reached`);
          const n = Math.min(opts.perProcess, size - total);
          log(`capacity: starting a simulator process with ${n} robots (total ${total + n})`);
          fleets.push(
            await startFleet(cloud, {
              count: n,
              token: token.token,
              logLevel: 'warn',
              startTimeoutMs: remainingMs,
              args: ['--name-prefix', `cap${fleets.length}`, '--start-concurrency', '32', '--connect-timeout-ms', String(Math.max(1000, remainingMs))],
            }),
          );
          total += n;
        }
      } catch (err) {
        stopped = `stopped before ${size} robots: ${(err as Error).message.split('\n')[0]}`;
        log(`capacity: ${stopped}`);
        break;
      }
      const startS = (Date.now() - t0) / 1000;
      await sleep(2000); // let the connection storm settle before reading memory
      const connected = (await listRobots(cloud)).filter((r) => r.connected).length;
      const m = memoryKb(cloud.process.pid);
      const simKb = fleets.reduce((sum, f) => sum + memoryKb(f.process.pid).rss, 0);
      const prev = last ?? { rss: base.rss, connected: 0 };
      const row: CapacityRow = {
        target: size,
        connected,
        simulator_processes: fleets.length,
        fleet_start_s: Math.round(startS * 10) / 10,
        cloud_rss_mb: Math.round(mb(m.rss) * 10) / 10,
        cloud_hwm_mb: Math.round(mb(m.hwm) * 10) / 10,
        cloud_delta_mb: Math.round(mb(m.rss - base.rss) * 10) / 10,
        cloud_kb_per_robot: connected > 0 ? Math.round(((m.rss - base.rss) / connected) * 10) / 10 : Number.NaN,
        cloud_marginal_kb_per_robot: connected > prev.connected ? Math.round(((m.rss - prev.rss) / (connected - prev.connected)) * 10) / 10 : Number.NaN,
        simulators_rss_mb: Math.round(mb(simKb) * 10) / 10,
        simulator_kb_per_robot: total > 0 ? Math.round((simKb / total) * 10) / 10 : Number.NaN,
      };
      rows.push(row);
      last = { rss: m.rss, connected };
      log(`capacity: ${size} robots -> ${connected} connected, cloud RSS ${row.cloud_rss_mb} MiB`);
    }
  } finally {
    log('capacity: stopping the simulators');
    await Promise.allSettled(fleets.map((f) => f[Symbol.asyncDispose]()));
  }
  return { baseline_rss_mb: Math.round(mb(base.rss) * 10) / 10, rows, stopped };
}

function positiveInts(name: string, raw: string): number[] {
  const xs = raw.split(',').map((s) => Number(s.trim()));
  if (xs.length === 0 || xs.some((x) => !Number.isInteger(x) || x < 1)) throw new Error(`--${name} must be a comma-separated list of positive integers, got ${raw}`);
  return xs;
}

export const commands: BenchModule = {
  description: 'POST /v1/robots/{id}/stack/status round trips vs raw mqtt.js request/response over the same broker; a command answered by a configured program vs in-process; robots one cloud process holds',
  async run(argv) {
    const args = parseBenchArgs(argv, {
      'log-level': { type: 'string', default: 'warn' },
      robots: { type: 'string', default: '10' },
      sizes: { type: 'string', default: '100,250,500,1000' },
      'per-process': { type: 'string', default: '250' },
      'capacity-timeout': { type: 'string', default: '600' },
      'skip-capacity': { type: 'boolean', default: false },
      'skip-actions': { type: 'boolean', default: false },
      /** Only the configured-actions rows (no raw baseline, no capacity). */
      'actions-only': { type: 'boolean', default: false },
    });
    const actionsOnly = args.extra['actions-only'] === true;
    const logLevel = String(args.extra['log-level']);
    const robotCount = positiveInts('robots', String(args.extra.robots))[0]!;
    const sizes = positiveInts('sizes', String(args.extra.sizes)).sort((a, b) => a - b);
    const perProcess = positiveInts('per-process', String(args.extra['per-process']))[0]!;
    const capacityTimeoutS = positiveInts('capacity-timeout', String(args.extra['capacity-timeout']))[0]!;
    const load: Load = { durationS: args.duration, warmupS: args.warmup, concurrency: args.connections };
    log(
      `${load.durationS} s per run (+${load.warmupS} s warm-up), sequential and ${load.concurrency} in flight; ${robotCount} simulated robots; ` +
        `cloud log level ${logLevel}; node ${process.version}, ${availableParallelism()} CPUs`,
    );

    const actionsRows = async (): Promise<SummaryRow[]> => {
      if (args.extra['skip-actions'] === true) return [];
      await using cloud = await startCloud({ logLevel, args: BENCH_SERVE_ARGS });
      await liftRequestLimits(cloud);
      const a = await measureConfiguredActions(cloud, (label, c, robots) => measureV1(label, c, robots, load), log);
      printActions(a);
      return actionsSummary(a);
    };
    if (actionsOnly) return actionsRows();

    // 1. Over one external bare broker: raw baseline and /v1, same broker, same run.
    let raw: LoopFigures[];
    let v1SameBroker: LoopFigures[];
    let getSameCloud: LoopFigures[];
    let rawToAgent: LoopFigures[];
    let robotIds: readonly string[];
    {
      // TCP_NODELAY on the bare broker and the raw clients, as the cloud's broker, its link and
      // the agent set it.
      await using pair = await startRawPair(true);
      await using cloud = await startCloud({ logLevel, args: ['--mqtt-url', pair.url, ...BENCH_SERVE_ARGS] });
      await liftRequestLimits(cloud);
      await using fleet = await startFleet(cloud, { count: robotCount, logLevel: 'warn', args: ['--no-control-socket'] });
      robotIds = fleet.robots;
      log(`external broker ${pair.url}: measuring raw mqtt.js`);
      raw = await measureRaw('raw mqtt.js req/resp, bare aedes', pair.url, robotIds, load, true);
      log('external broker: measuring /v1');
      v1SameBroker = await measureV1('/v1 stack/status, cloud --mqtt-url', cloud, robotIds, load);
      // The HTTP half alone, same cloud: what a command adds to the raw round trip at least.
      log('external broker: measuring an authenticated GET of the same robots');
      getSameCloud = await measureV1('GET /v1/robots/{id}, same cloud', cloud, robotIds, load, ROBOT_GET);
      // The robot half alone: raw mqtt.js straight to the simulated robots (the real agent code
      // answers; the bare broker has no ACL), no cloud in the path.
      log('external broker: measuring raw mqtt.js to the simulated robots');
      rawToAgent = await measureRaw('raw mqtt.js req/resp to the agent, bare aedes', pair.url, robotIds, load, true, AGENT_TOPICS);
    }

    // 2. The default deployment: the cloud's embedded broker with authentication and ACL.
    let v1Embedded: LoopFigures[];
    {
      await using cloud = await startCloud({ logLevel, args: BENCH_SERVE_ARGS });
      await liftRequestLimits(cloud);
      await using fleet = await startFleet(cloud, { count: robotCount, logLevel: 'warn', args: ['--no-control-socket'] });
      log('embedded broker: measuring /v1');
      v1Embedded = await measureV1('/v1 stack/status, embedded broker', cloud, fleet.robots, load);
    }

    const ratio = (a: LoopFigures, b: LoopFigures) => ({
      per_s: Math.round((a.per_s / b.per_s) * 1000) / 1000,
      p50: Math.round((a.p50_ms / b.p50_ms) * 1000) / 1000,
      p99: Math.round((a.p99_ms / b.p99_ms) * 1000) / 1000,
    });
    const rows: string[][] = [];
    const ratios: Record<string, ReturnType<typeof ratio>> = {};
    for (const i of [0, 1]) {
      const r = raw[i]!;
      const v = v1SameBroker[i]!;
      const e = v1Embedded[i]!;
      const fig = (f: LoopFigures) => [f.label, String(f.concurrency), fmt(f.per_s, 0), fmt(f.p50_ms), fmt(f.p99_ms)];
      const q = ratio(v, r);
      ratios[`in_flight_${r.concurrency}`] = q;
      rows.push(fig(r), fig(v), ['  ratio /v1 over raw (same broker)', String(r.concurrency), fmt(q.per_s, 3), fmt(q.p50, 3), fmt(q.p99, 3)], fig(e), fig(getSameCloud[i]!), fig(rawToAgent[i]!));
    }
    process.stdout.write(
      `\nRobot command round trips, stack.status. The raw baseline has no HTTP, auth, validation or durable command memory; ` +
        `the ratio compares it with /v1 over the same broker.\n`,
    );
    process.stdout.write(`${table(['target', 'in flight', 'cmds/s', 'p50 ms', 'p99 ms'], rows)}\n`);

    // 3. Configured actions.
    const actionSummary = await actionsRows();

    // 4. Capacity.
    let cap: Awaited<ReturnType<typeof capacity>> | null = null;
    if (args.extra['skip-capacity'] !== true) {
      cap = await capacity({ sizes, perProcess, timeoutS: capacityTimeoutS, logLevel });
      process.stdout.write(
        `\nRobots held by one cloud process (embedded broker), from GET /v1/robots; cloud RSS before any robot: ${fmt(cap.baseline_rss_mb, 1)} MiB. ` +
          `KiB/robot = (RSS - baseline) / connected; marginal = RSS added per robot since the previous row.\n`,
      );
      process.stdout.write(
        `${table(
          ['robots started', 'connected', 'sim procs', 'start s', 'cloud RSS MiB', 'peak MiB', '+MiB', 'KiB/robot', 'marginal KiB/robot', 'sims RSS MiB', 'sim KiB/robot'],
          cap.rows.map((r) => [
            String(r.target),
            String(r.connected),
            String(r.simulator_processes),
            fmt(r.fleet_start_s, 1),
            fmt(r.cloud_rss_mb, 1),
            fmt(r.cloud_hwm_mb, 1),
            fmt(r.cloud_delta_mb, 1),
            fmt(r.cloud_kb_per_robot, 1),
            fmt(r.cloud_marginal_kb_per_robot, 1),
            fmt(r.simulators_rss_mb, 1),
            fmt(r.simulator_kb_per_robot, 1),
          ]),
        )}\n`,
      );
      if (cap.stopped) process.stdout.write(`capacity: ${cap.stopped}\n`);
    }

    process.stdout.write(
      `${JSON.stringify({
        bench: 'commands',
        duration_s: load.durationS,
        in_flight: load.concurrency,
        robots: robotCount,
        node: process.version,
        cpus: availableParallelism(),
        raw_same_broker: raw,
        v1_same_broker: v1SameBroker,
        v1_embedded_broker: v1Embedded,
        authenticated_get_same_cloud: getSameCloud,
        raw_to_agent_same_broker: rawToAgent,
        ratio_v1_over_raw: ratios,
        capacity: cap,
      })}\n`,
    );
    const [raw1, raw50] = raw;
    const [v1, v50] = v1SameBroker;
    const [get1, get50] = getSameCloud;
    // A command is both: the raw round trip and an authenticated request. Their sum is the floor
    // of its latency; their costs add on the same cores, so 1 / (1/a + 1/b) bounds its rate.
    const floorName = 'raw MQTT req/resp plus an authenticated GET of the robot, same run';
    const summary: SummaryRow[] = [
      row({ name: '/v1 stack/status p50, 1 in flight', figure: v1!.p50_ms, unit: 'ms', baseline: raw1!.p50_ms, baselineUnit: 'ms', baselineName: 'raw MQTT req/resp, same broker' }),
      row({ name: `/v1 stack/status p50, ${v50!.concurrency} in flight`, figure: v50!.p50_ms, unit: 'ms', baseline: raw50!.p50_ms, baselineUnit: 'ms', baselineName: 'raw MQTT req/resp, same broker' }),
      row({ name: `/v1 stack/status throughput, ${v50!.concurrency} in flight`, figure: v50!.per_s, unit: 'cmd/s', baseline: raw50!.per_s, baselineUnit: 'cmd/s', baselineName: 'raw MQTT req/resp, same broker' }),
      row({ name: 'authenticated GET /v1/robots/{id} p50, 1 in flight', figure: get1!.p50_ms, unit: 'ms', baseline: raw1!.p50_ms, baselineUnit: 'ms', baselineName: 'raw MQTT req/resp, same broker' }),
      row({ name: 'raw MQTT req/resp to the real agent p50, 1 in flight', figure: rawToAgent[0]!.p50_ms, unit: 'ms', baseline: raw1!.p50_ms, baselineUnit: 'ms', baselineName: 'raw MQTT req/resp, same broker' }),
      row({ name: '/v1 stack/status p50, 1 in flight, against its parts', figure: v1!.p50_ms, unit: 'ms', baseline: raw1!.p50_ms + get1!.p50_ms, baselineUnit: 'ms', baselineName: floorName }),
      row({
        name: `/v1 stack/status throughput, ${v50!.concurrency} in flight, against its parts`,
        figure: v50!.per_s,
        unit: 'cmd/s',
        baseline: 1 / (1 / raw50!.per_s + 1 / get50!.per_s),
        baselineUnit: 'cmd/s',
        baselineName: floorName,
      }),
      ...actionSummary,
    ];
    return summary;
  },
};

function printActions(a: ActionsFigures): void {
  const fig = (f: LoopFigures) => [f.label, String(f.concurrency), fmt(f.per_s, 0), fmt(f.p50_ms), fmt(f.p99_ms)];
  const rows: string[][] = [];
  for (const i of [0, 1]) {
    const p = a.program[i]!;
    const s = a.inProcess[i]!;
    rows.push(fig(s), fig(p), ['  ratio program over in-process', String(p.concurrency), fmt(p.per_s / s.per_s, 3), fmt(p.p50_ms / s.p50_ms, 3), fmt(p.p99_ms / s.p99_ms, 3)]);
  }
  process.stdout.write('\nstack.status answered by a configured program (sh) against the in-process simulated robot, both real agents on one cloud.\n');
  process.stdout.write(`${table(['target', 'in flight', 'cmds/s', 'p50 ms', 'p99 ms'], rows)}\n`);
  process.stdout.write(`${JSON.stringify({ bench: 'commands', configured_actions: a })}\n`);
}

function actionsSummary(a: ActionsFigures): SummaryRow[] {
  const baselineName = 'the same command answered in-process (simulated robot), same run';
  const [p1, pN] = a.program;
  const [s1, sN] = a.inProcess;
  return [
    row({ name: '/v1 stack/status by a configured sh program p50, 1 in flight', figure: p1!.p50_ms, unit: 'ms', baseline: s1!.p50_ms, baselineUnit: 'ms', baselineName }),
    row({ name: `/v1 stack/status by a configured sh program p50, ${pN!.concurrency} in flight`, figure: pN!.p50_ms, unit: 'ms', baseline: sN!.p50_ms, baselineUnit: 'ms', baselineName }),
    row({ name: `/v1 stack/status by a configured sh program throughput, ${pN!.concurrency} in flight`, figure: pN!.per_s, unit: 'cmd/s', baseline: sN!.per_s, baselineUnit: 'cmd/s', baselineName }),
  ];
}
