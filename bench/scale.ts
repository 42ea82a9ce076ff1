/**
 * `npm run bench -- scale`: the same cloud on SQLite (one process, embedded broker) and on
 * PostgreSQL with 1, 2 and 3 `serve` replicas behind one mosquitto, in one run, on the same
 * machine. For each set-up:
 * - ingest over MQTT: enrolled robots publish outbox reports (`in-flight` unacknowledged each)
 *   and count each msg_id's ack once; reports/s, next to a raw batched insert of the same reports
 *   into an empty table of the same engine;
 * - list: closed-loop GET /v1/episodes pages with two equality filters, spread round-robin over
 *   the replicas; requests/s and p50/p99, next to the one-replica figure of the same engine
 *   (PostgreSQL x1 next to SQLite).
 * On PostgreSQL with two replicas it also measures ingest of one organization alone against two
 * organizations at once (half the robots each, the same replicas), with the time ingest spent
 * waiting on the ordering locks: PostgreSQL's own view of waiting backends (pg_stat_activity,
 * wait_event 'advisory'), sampled every 10 ms. Episode seqs and event ids are ordered per
 * organization, so the second organization's ingest should add no wait to the first's. On two
 * shared cores a second ingest mostly takes CPU, so two more phases isolate the lock: the first
 * organization ingests while a slow writer of the second holds the second's ordering locks
 * (200 ms of every 250), and, as the control, while the same writer holds the first's own (what
 * one lock for all organizations would do to everyone).
 * Any failed request or missing ack fails the run. Nothing here asserts a duration. All parts
 * share the machine's cores: replicas add processes, not hardware, so the figures show what
 * replicas cost and whether the shared database serializes them, not a cluster's throughput.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import type mqtt from 'mqtt';
import pg from 'pg';
import type { EpisodeReport } from '@fleet/protocol';
import { LOCKS } from '../cloud/src/store/postgres/db.js';
import { startCloud, type CloudProcess } from '../test/support/cloud.js';
import { ensureMosquitto, startMosquitto, type MosquittoBroker } from '../test/support/mosquitto.js';
import { createDatabase, ensurePostgresBinaries, startPostgres } from '../test/support/postgres.js';
import { startReplicas } from '../test/support/replicas.js';
import { parseBenchArgs, type BenchModule } from './lib/args.js';
import { fmt, table } from './lib/measure.js';
import { percentile } from './lib/proc.js';
import { syntheticReport } from './lib/reports.js';
import { BENCH_SERVE_ARGS } from './lib/limits.js';
import { rawSqliteInsert } from './episodes.js';
import { BenchFailure, row, type SummaryRow } from './lib/summary.js';
import { enrollRobots, publishReports } from './lib/mqtt-ingest.js';

function log(msg: string): void {
  process.stderr.write(`bench scale: ${msg}\n`);
}

const UNLIMITED = '1000000000';

interface SetUp {
  label: string;
  engine: 'sqlite' | 'postgres';
  replicas: readonly CloudProcess[];
  /** The environment an administration command needs to reach this set-up's store. */
  storeEnv: Record<string, string>;
  close(): Promise<void>;
}

/** The reports one run publishes: robot r's k-th report is index r * perRobot + k. */
const report = (tag: string) => (i: number): EpisodeReport => syntheticReport(i, tag);

async function liftLimits(cloud: CloudProcess, env: Record<string, string>): Promise<void> {
  const listed = await cloud.cli(['orgs', 'list'], { env });
  if (listed.code !== 0) throw new BenchFailure(`orgs list: ${listed.stderr}`);
  for (const line of listed.stdout.trim().split('\n').filter(Boolean)) {
    const { id } = JSON.parse(line) as { id: string };
    for (const name of ['requests_per_minute_per_key', 'requests_per_minute_per_org']) {
      const res = await cloud.cli(['orgs', 'set-limit', id, `${name}=${UNLIMITED}`], { env });
      if (res.code !== 0) throw new BenchFailure(`orgs set-limit: ${res.stderr}`);
    }
  }
}

/** A raw batched INSERT of the same reports into an empty PostgreSQL table (1,000 rows per statement). */
async function rawPgInsert(url: string, n: number, make: (i: number) => EpisodeReport): Promise<number> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    await c.query('CREATE TABLE raw (id TEXT PRIMARY KEY, org_id TEXT NOT NULL, body TEXT NOT NULL)');
    const t0 = performance.now();
    for (let i = 0; i < n; i += 1000) {
      const ids: string[] = [];
      const bodies: string[] = [];
      for (let j = i; j < Math.min(n, i + 1000); j++) {
        const r = make(j);
        ids.push(r.id);
        bodies.push(JSON.stringify(r));
      }
      await c.query("INSERT INTO raw (id, org_id, body) SELECT id, 'org_bench', body FROM unnest($1::text[], $2::text[]) AS u(id, body)", [ids, bodies]);
    }
    return (n / (performance.now() - t0)) * 1000;
  } finally {
    await c.end();
  }
}

/** Every robot publishes `perRobot` reports, `inFlight` unacknowledged; resolves with reports/s. */
async function ingest(clients: { id: string; c: mqtt.MqttClient }[], perRobot: number, inFlight: number, make: (i: number) => EpisodeReport): Promise<number> {
  const { acked, ms } = await publishReports(clients, perRobot, inFlight, make);
  return (acked / ms) * 1000;
}

interface ListFigures {
  rps: number;
  p50: number;
  p99: number;
  requests: number;
}

/** `concurrency` workers GET filtered pages for `durationS`, worker w on replica w mod N. */
async function listLoop(replicas: readonly CloudProcess[], key: string, robotIds: readonly string[], concurrency: number, durationS: number): Promise<ListFigures> {
  const times: number[] = [];
  const outcomes = ['success', 'failure', 'discarded'];
  const deadline = performance.now() + durationS * 1000;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async (_x, w) => {
      const base = replicas[w % replicas.length]!.http;
      for (let n = 0; performance.now() < deadline; n++) {
        const qs = new URLSearchParams({ limit: '50', robot_id: robotIds[(w + n) % robotIds.length]!, outcome: outcomes[n % 3]! });
        const s = performance.now();
        const res = await fetch(`${base}/v1/episodes?${qs.toString()}`, { headers: { authorization: `Bearer ${key}` } });
        const text = await res.text();
        if (!res.ok) throw new BenchFailure(`GET /v1/episodes?${qs.toString()}: HTTP ${res.status} ${text.slice(0, 200)}`);
        times.push(performance.now() - s);
      }
    }),
  );
  const ms = performance.now() - t0;
  times.sort((a, b) => a - b);
  return { rps: (times.length / ms) * 1000, p50: percentile(times, 50), p99: percentile(times, 99), requests: times.length };
}

/** Samples PostgreSQL's waiting backends until stopped; resolves with backend-milliseconds spent waiting on advisory locks. */
function sampleLockWaits(url: string, everyMs = 10): { stop(): Promise<number> } {
  const c = new pg.Client({ connectionString: url });
  let running = true;
  let waitedMs = 0;
  const loop = (async () => {
    await c.connect();
    let last = performance.now();
    while (running) {
      const r = await c.query<{ n: number }>(
        "SELECT COUNT(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event = 'advisory'",
      );
      const now = performance.now();
      waitedMs += r.rows[0]!.n * (now - last);
      last = now;
      await new Promise((resolve) => setTimeout(resolve, everyMs));
    }
    await c.end();
  })();
  return {
    async stop() {
      running = false;
      await loop;
      return waitedMs;
    },
  };
}

/**
 * Holds an organization's ordering locks (episodes and events, the keys the store takes) from a
 * transaction of its own that sleeps while holding them, as a slow writer of that organization
 * would: `holdMs` held, `gapMs` free, over and over until stopped. Resolves with the share of
 * the time they were held.
 */
function holdOrgLocks(url: string, orgId: string, holdMs: number, gapMs: number): { stop(): Promise<number> } {
  const c = new pg.Client({ connectionString: url });
  let running = true;
  let heldMs = 0;
  const t0 = performance.now();
  const loop = (async () => {
    await c.connect();
    while (running) {
      await c.query('BEGIN');
      const t = performance.now();
      await c.query('SELECT pg_advisory_xact_lock($1, hashtext($3)), pg_advisory_xact_lock($2, hashtext($3))', [LOCKS.episodes, LOCKS.events, orgId]);
      await c.query('SELECT pg_sleep($1)', [holdMs / 1000]);
      await c.query('COMMIT');
      heldMs += performance.now() - t;
      if (gapMs > 0) await new Promise((resolve) => setTimeout(resolve, gapMs));
    }
    await c.end();
  })();
  return {
    async stop() {
      running = false;
      await loop;
      return heldMs / (performance.now() - t0);
    },
  };
}

interface Phase {
  rps: number;
  waitMs: number;
}

interface OrgsResult {
  replicas: number;
  robotsPerOrg: number;
  reportsPerOrg: number;
  alone: Phase;
  both: Phase;
  /** Organization A alone while B's ordering locks are held by a slow writer of B. */
  otherHeld: Phase & { heldShare: number };
  /** The control: A alone while A's own locks are held the same way (what a lock shared by all would do to A). */
  ownHeld: Phase & { heldShare: number };
}

/**
 * One organization's robots ingest alone, then its robots and a second organization's ingest at
 * once; each phase with PostgreSQL's advisory-lock waits.
 */
async function measureOrgs(replicas: readonly CloudProcess[], storeEnv: Record<string, string>, o: { robots: number; perRobot: number; inFlight: number; tag: string }): Promise<OrgsResult> {
  const first = replicas[0]!;
  const made = await first.cli(['orgs', 'create', '--name', 'bench-second', '--tier', 'enterprise'], { env: storeEnv });
  if (made.code !== 0) throw new BenchFailure(`orgs create: ${made.stderr}`);
  const orgB = made.stdout.trim();
  const keyed = await first.cli(['keys', 'create', '--org', orgB, '--name', 'bench', '--scopes', 'admin'], { env: storeEnv });
  if (keyed.code !== 0) throw new BenchFailure(`keys create: ${keyed.stderr}`);
  await liftLimits(first, storeEnv);
  const half = Math.max(1, Math.floor(o.robots / 2));
  const a = await enrollRobots(first, half);
  const b = await enrollRobots(replicas[replicas.length - 1]!, half, keyed.stdout.trim());
  const url = storeEnv.FLEET_DATABASE_URL!;
  try {
    const rate = (r: { acked: number; ms: number }) => (r.acked / r.ms) * 1000;
    log(`two organizations: ${half} robots of one organization alone...`);
    let s = sampleLockWaits(url);
    const alone = rate(await publishReports(a, o.perRobot, o.inFlight, report(`${o.tag}a1`)));
    const aloneWaitMs = await s.stop();
    log(`two organizations: ${half} robots of each at once...`);
    s = sampleLockWaits(url);
    const [ra, rb] = await Promise.all([publishReports(a, o.perRobot, o.inFlight, report(`${o.tag}a2`)), publishReports(b, o.perRobot, o.inFlight, report(`${o.tag}b2`))]);
    const bothWaitMs = await s.stop();
    // Held phases: a writer that keeps one organization's ordering locks (200 ms held, 50 ms
    // free) costs a little CPU, so, unlike a second organization's ingest, it shows on two shared
    // cores whether the other organization waits for it.
    const db = new pg.Client({ connectionString: url });
    await db.connect();
    const orgOf = async (robotId: string) => (await db.query<{ org_id: string }>('SELECT org_id FROM robots WHERE id = $1', [robotId])).rows[0]!.org_id;
    const [orgA, orgBId] = [await orgOf(a[0]!.id), await orgOf(b[0]!.id)];
    await db.end();
    log(`two organizations: one organization while the other's ordering locks are held by a slow writer...`);
    let hold = holdOrgLocks(url, orgBId, 200, 50);
    s = sampleLockWaits(url);
    const other = rate(await publishReports(a, o.perRobot, o.inFlight, report(`${o.tag}a3`)));
    const otherWaitMs = await s.stop();
    const otherShare = await hold.stop();
    log(`two organizations: the control, one organization while its own ordering locks are held the same way...`);
    hold = holdOrgLocks(url, orgA, 200, 50);
    s = sampleLockWaits(url);
    const own = rate(await publishReports(a, o.perRobot, o.inFlight, report(`${o.tag}a4`)));
    const ownWaitMs = await s.stop();
    const ownShare = await hold.stop();
    return {
      replicas: replicas.length,
      robotsPerOrg: half,
      reportsPerOrg: half * o.perRobot,
      alone: { rps: alone, waitMs: aloneWaitMs },
      both: { rps: ((ra.acked + rb.acked) / Math.max(ra.ms, rb.ms)) * 1000, waitMs: bothWaitMs },
      otherHeld: { rps: other, waitMs: otherWaitMs, heldShare: otherShare },
      ownHeld: { rps: own, waitMs: ownWaitMs, heldShare: ownShare },
    };
  } finally {
    await Promise.all([...a, ...b].map(({ c }) => c.endAsync().catch(() => undefined)));
  }
}

interface Result {
  label: string;
  engine: 'sqlite' | 'postgres';
  replicas: number;
  ingestRps: number;
  list: ListFigures;
}

async function measureSetUp(setUp: SetUp, o: { robots: number; perRobot: number; inFlight: number; concurrency: number; durationS: number; tag: string }): Promise<Result> {
  const first = setUp.replicas[0]!;
  await liftLimits(first, setUp.storeEnv);
  const clients = await enrollRobots(first, o.robots);
  try {
    log(`${setUp.label}: ingest ${o.robots} robots x ${o.perRobot} reports...`);
    const ingestRps = await ingest(clients, o.perRobot, o.inFlight, report(o.tag));
    log(`${setUp.label}: list pages for ${o.durationS} s over ${setUp.replicas.length} replica(s)...`);
    const list = await listLoop(setUp.replicas, first.adminKey, clients.map((c) => c.id), o.concurrency, o.durationS);
    return { label: setUp.label, engine: setUp.engine, replicas: setUp.replicas.length, ingestRps, list };
  } finally {
    await Promise.all(clients.map(({ c }) => c.endAsync().catch(() => undefined)));
  }
}

function num(raw: unknown, name: string, min = 1): number {
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min) throw new Error(`--${name} must be a whole number >= ${min}, got ${String(raw)}`);
  return n;
}

export const scale: BenchModule = {
  description: 'ingest and list on SQLite (1 process) and on PostgreSQL with 1, 2 and 3 replicas behind mosquitto, in one run',
  async run(argv) {
    const args = parseBenchArgs(argv, {
      robots: { type: 'string', default: '20' },
      'per-robot': { type: 'string', default: '500' },
      'in-flight': { type: 'string', default: '16' },
      concurrency: { type: 'string', default: '8' },
      'max-replicas': { type: 'string', default: '3' },
    });
    const o = {
      robots: num(args.extra.robots, 'robots'),
      perRobot: num(args.extra['per-robot'], 'per-robot'),
      inFlight: num(args.extra['in-flight'], 'in-flight'),
      concurrency: num(args.extra.concurrency, 'concurrency'),
      durationS: args.duration,
    };
    const maxReplicas = num(args.extra['max-replicas'], 'max-replicas');
    const n = o.robots * o.perRobot;
    const binDir = ensurePostgresBinaries(log);
    if (!binDir) throw new BenchFailure('PostgreSQL binaries are not available (run as root to install them, or install postgresql)');
    const mosq = ensureMosquitto(log);
    if (!mosq.ok) throw new BenchFailure(`mosquitto is not available: ${mosq.reason}`);
    const dir = mkdtempSync(join(tmpdir(), 'fleet-bench-scale-'));
    log(`PostgreSQL (fsync on, synchronous_commit off, like SQLite's WAL with synchronous=NORMAL) and mosquitto on loopback; node ${process.version}`);
    const server = await startPostgres(binDir, { durable: true });
    let broker: MosquittoBroker | null = null;
    const results: Result[] = [];
    let orgs: OrgsResult | null = null;
    let rawSqlite = 0;
    let rawPg = 0;
    try {
      log(`baselines: raw batched inserts of the same ${n} reports into empty tables...`);
      rawSqlite = rawSqliteInsert(join(dir, 'raw.sqlite'), n, report('raw'));
      rawPg = await rawPgInsert(await createDatabase(server, 'fleet_raw'), n, report('raw'));

      // SQLite: one process, its embedded broker (the default deployment).
      {
        const cloud = await startCloud({ logLevel: 'warn', args: BENCH_SERVE_ARGS });
        try {
          results.push(await measureSetUp({ label: 'sqlite x1 (embedded broker)', engine: 'sqlite', replicas: [cloud], storeEnv: {}, close: async () => undefined }, { ...o, tag: 's1' }));
        } finally {
          await cloud[Symbol.asyncDispose]();
        }
      }
      broker = await startMosquitto();
      for (let r = 1; r <= maxReplicas; r++) {
        const storeEnv = { FLEET_DATABASE_URL: await createDatabase(server, `fleet_scale_${r}`) };
        const set = await startReplicas({ broker, count: r, storeEnv, args: [...BENCH_SERVE_ARGS, '--log-level', 'warn'] });
        try {
          results.push(await measureSetUp({ label: `postgres x${r} (mosquitto)`, engine: 'postgres', replicas: set.clouds, storeEnv, close: async () => undefined }, { ...o, tag: `p${r}` }));
          if (r === Math.min(2, maxReplicas)) orgs = await measureOrgs(set.clouds, storeEnv, { ...o, tag: `o${r}` });
        } finally {
          await set[Symbol.asyncDispose]();
        }
      }
    } finally {
      await broker?.stop().catch(() => undefined);
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    }

    const sqlite1 = results.find((r) => r.engine === 'sqlite')!;
    const pg1 = results.find((r) => r.engine === 'postgres' && r.replicas === 1)!;
    const rawOf = (r: Result) => (r.engine === 'sqlite' ? rawSqlite : rawPg);
    const listBase = (r: Result) => (r === pg1 ? sqlite1 : r.engine === 'postgres' ? pg1 : null);
    process.stdout.write(`\nscale: ${n} reports per set-up (${o.robots} robots x ${o.perRobot}, ${o.inFlight} in flight each); list ${o.concurrency} workers x ${o.durationS} s, 2 filters, 50 per page\n`);
    process.stdout.write(
      `${table(
        ['set-up', 'ingest/s', 'raw insert/s (same engine)', 'ratio', 'list req/s', 'p50 ms', 'p99 ms', 'list vs'],
        results.map((r) => {
          const b = listBase(r);
          return [r.label, fmt(r.ingestRps, 0), fmt(rawOf(r), 0), fmt(r.ingestRps / rawOf(r), 3), fmt(r.list.rps, 0), fmt(r.list.p50), fmt(r.list.p99), b ? `${fmt(r.list.rps / b.list.rps, 3)} of ${b.label}` : '–'];
        }),
      )}\n`,
    );
    const rows: SummaryRow[] = [];
    if (orgs) {
      const g = orgs;
      const per1k = (waitMs: number, reports: number) => (waitMs / reports) * 1000;
      process.stdout.write(
        `\nscale: ingest of two organizations on postgres x${g.replicas}, ${g.robotsPerOrg} robots x ${o.perRobot} reports each; advisory-lock waits sampled from pg_stat_activity every 10 ms; a slow writer holds an organization's ordering locks 200 ms of every 250 ms\n`,
      );
      const phase = (name: string, reports: number, p: Phase, held?: number) => [
        name,
        String(reports),
        fmt(p.rps, 0),
        fmt(p.rps / g.alone.rps, 3),
        fmt(p.waitMs, 0),
        fmt(per1k(p.waitMs, reports), 1),
        held === undefined ? '–' : `${fmt(held * 100, 0)} %`,
      ];
      process.stdout.write(
        `${table(
          ['phase', 'reports', 'ingest/s', 'vs alone', 'lock wait, backend-ms', 'wait per 1,000 reports, ms', 'locks held'],
          [
            phase('organization A alone', g.reportsPerOrg, g.alone),
            phase('A and B at once', 2 * g.reportsPerOrg, g.both),
            phase("A while B's locks are held", g.reportsPerOrg, g.otherHeld, g.otherHeld.heldShare),
            phase("control: A while A's own locks are held", g.reportsPerOrg, g.ownHeld, g.ownHeld.heldShare),
          ],
        )}\n`,
      );
      rows.push(
        row({
          name: `scale ingest, two organizations at once, postgres x${g.replicas}`,
          figure: g.both.rps,
          unit: 'reports/s',
          baseline: g.alone.rps,
          baselineUnit: 'reports/s',
          baselineName: 'one organization alone, same replicas',
          note: `lock wait per 1,000 reports ${fmt(per1k(g.both.waitMs, 2 * g.reportsPerOrg), 1)} ms (alone ${fmt(per1k(g.alone.waitMs, g.reportsPerOrg), 1)} ms)`,
        }),
        row({
          name: `scale ingest, one organization while another's ordering locks are held, postgres x${g.replicas}`,
          figure: g.otherHeld.rps,
          unit: 'reports/s',
          baseline: g.alone.rps,
          baselineUnit: 'reports/s',
          baselineName: 'the same organization alone',
          note: `control with its own locks held: ${fmt(g.ownHeld.rps / g.alone.rps, 3)} of alone`,
        }),
      );
    }
    for (const r of results) {
      rows.push(row({ name: `scale ingest, ${r.label}`, figure: r.ingestRps, unit: 'reports/s', baseline: rawOf(r), baselineUnit: 'rows/s', baselineName: `raw batched insert, ${r.engine}`, note: `${n} reports over MQTT` }));
      const b = listBase(r);
      rows.push(row({ name: `scale list, ${r.label}`, figure: r.list.rps, unit: 'req/s', baseline: b ? b.list.rps : null, baselineUnit: b ? 'req/s' : null, ...(b ? { baselineName: b.label } : {}), note: `p50 ${fmt(r.list.p50)} ms, p99 ${fmt(r.list.p99)} ms` }));
    }
    return rows;
  },
};
