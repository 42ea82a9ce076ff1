/**
 * `npm run soak -- --minutes 30 [--seed N]`: the whole system under a seeded schedule of random
 * faults, then a drain and every invariant checked (docs/reliability.md). Prints the faults
 * injected by kind, each invariant with its count, the memory peaks, and exits 1 on any
 * violation, naming the seed that replays the run.
 *
 * Options: --minutes M (the fault phase, default 30), --seed N (default: drawn and printed),
 * --robots N (default 30), --solo N (robots in a process of their own, default 6),
 * --episodes-per-minute N (per robot, default 4), --drain-s S (the drain's bound, default
 * 120 + 10 per minute), --keep (keep the data directory).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { makeTempDir } from '../test/support/cloud.js';
import { checkInvariants, listCloudEpisodes, mib, routedTo, type CloudEpisode, type Invariant, type RobotOf } from './checks.js';
import { FAULT_KINDS, faultCounts, FaultRunner, planFaults } from './faults.js';
import { readRobotState } from './robot-state.js';
import { SoakSystem, type OrgName } from './system.js';
import { ApiLog, memoryBounds, MemoryWatch } from './watch.js';

const started = Date.now();
const log = (line: string) => process.stderr.write(`[soak ${((Date.now() - started) / 1000).toFixed(0).padStart(4)} s] ${line}\n`);

function positive(raw: string | undefined, name: string, fallback: number, min = 1): number {
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (!Number.isFinite(n) || n < min) throw new Error(`--${name} must be a number >= ${min}, got ${raw}`);
  return n;
}

const { values } = parseArgs({
  args: process.argv.slice(2),
  strict: true,
  options: {
    minutes: { type: 'string' },
    seed: { type: 'string' },
    robots: { type: 'string' },
    solo: { type: 'string' },
    'episodes-per-minute': { type: 'string' },
    'drain-s': { type: 'string' },
    keep: { type: 'boolean', default: false },
  },
});
const minutes = positive(values.minutes, 'minutes', 30, 0.5);
const seed = values.seed !== undefined ? Math.floor(positive(values.seed, 'seed', 0, 0)) : Math.floor(Math.random() * 2 ** 31);
const robots = Math.floor(positive(values.robots, 'robots', 30, 2));
const solo = Math.min(robots, Math.floor(positive(values.solo, 'solo', 6, 1)));
const episodesPerMinute = positive(values['episodes-per-minute'], 'episodes-per-minute', 4, 0.1);
const drainS = positive(values['drain-s'], 'drain-s', 120 + 10 * minutes, 10);

const MiB = 1024 * 1024;

/** All robots' own records, with their organizations. */
function robotStates(sys: SoakSystem): RobotOf[] {
  return sys.groups.flatMap((g) => Array.from({ length: g.count }, (_, i) => ({ org: g.org, state: readRobotState(sys.robotDir(g, i)) })));
}

/** Light API traffic while the faults fall: lists, sync health, a robot command now and then. */
async function load(sys: SoakSystem, until: () => boolean, diskSeen: Set<string>): Promise<void> {
  let n = 0;
  while (!until()) {
    n++;
    const org: OrgName = n % 2 === 0 ? 'A' : 'B';
    const key = sys.orgs[org].key;
    try {
      await sys.api.call(sys, 'GET', '/v1/episodes?limit=20', key, undefined, 3);
      const health = await sys.api.call(sys, 'GET', '/v1/sync-health/robots', key, undefined, 3);
      if (health.status === 200) {
        for (const r of (JSON.parse(health.text) as { robots: { robot_id: string; pressure?: { free_bytes: number } }[] }).robots) {
          if (r.pressure?.free_bytes === 0) diskSeen.add(r.robot_id);
        }
      }
      const groups = sys.groups.filter((g) => g.org === org && g.robotIds.length > 0);
      const g = groups[n % Math.max(1, groups.length)];
      const robot = g?.robotIds[n % g.robotIds.length];
      if (robot) await sys.api.call(sys, 'POST', `/v1/robots/${robot}/stack/status`, key, undefined, 3);
    } catch (err) {
      log(`load: ${err instanceof Error ? err.message.split('\n')[0] : String(err)}`);
    }
    await sleep(2000);
  }
}

interface DrainState {
  pending: number;
  refused: number;
  recording: number;
  unindexed: number;
  unverified: number;
  webhooksPending: number;
}

async function drainState(sys: SoakSystem): Promise<{ state: DrainState; cloud: Record<OrgName, CloudEpisode[]>; robots: RobotOf[] }> {
  const robots = robotStates(sys);
  const cloud = { A: await listCloudEpisodes(sys, 'A'), B: await listCloudEpisodes(sys, 'B') };
  const ids = { A: new Map(cloud.A.map((e) => [e.id, e])), B: new Map(cloud.B.map((e) => [e.id, e])) };
  let unindexed = 0;
  let unverified = 0;
  for (const r of robots) {
    for (const e of r.state.episodes) {
      const c = ids[r.org].get(e.id);
      if (!c) unindexed++;
      if (routedTo(r.org, e) && c?.replicas.find((x) => x.destination_id === sys.orgs[r.org].destinationId)?.state !== 'verified') unverified++;
    }
  }
  let webhooksPending = 0;
  for (const org of ['A', 'B'] as const) {
    const list = await sys.api.json<{ webhooks: { pending_deliveries: number }[] }>(sys, 'GET', '/v1/webhooks', sys.orgs[org].key);
    webhooksPending += list.webhooks.reduce((n, w) => n + w.pending_deliveries, 0);
  }
  return {
    state: {
      pending: robots.reduce((n, r) => n + r.state.outboxPending, 0),
      refused: robots.reduce((n, r) => n + r.state.outboxRefused, 0),
      recording: robots.filter((r) => r.state.recording).length,
      unindexed,
      unverified,
      webhooksPending,
    },
    cloud,
    robots,
  };
}

function printReport(o: { faults: Record<string, number>; failedFaults: string[]; invariants: Invariant[]; outageFiveHundreds: string[]; memory: MemoryWatch; api: ApiLog; sys: SoakSystem; drained: boolean; drain: DrainState | null; diskSeen: number }): boolean {
  const lines: string[] = [];
  const ok = o.invariants.every((i) => i.violations.length === 0) && o.failedFaults.length === 0 && o.drained;
  lines.push('', `SOAK REPORT  seed ${seed}  minutes ${minutes}  robots ${robots} (${solo} solo)  episodes/min/robot ${episodesPerMinute}  wall ${((Date.now() - started) / 60_000).toFixed(1)} min`, '');
  lines.push('Faults injected (by kind):');
  for (const k of FAULT_KINDS) lines.push(`  ${k.padEnd(20)} ${o.faults[k] ?? 0}`);
  for (const f of o.failedFaults) lines.push(`  FAILED: ${f}`);
  lines.push(`  (disk fills seen as free_bytes 0 in sync health: ${o.diskSeen} robot(s))`, '');
  lines.push(`Drain: ${o.drained ? 'settled' : `NOT settled within ${drainS} s`}${o.drain ? ` (${JSON.stringify(o.drain)})` : ''}`, '');
  lines.push('Invariants:');
  for (const i of o.invariants) {
    lines.push(`  ${i.violations.length === 0 ? 'PASS' : 'FAIL'}  ${i.name}: ${i.count} checked, ${i.violations.length} violation(s)`);
    for (const v of i.violations) lines.push(`          - ${v}`);
  }
  lines.push('', `Of the 5xx above, answered while PostgreSQL was down: ${o.outageFiveHundreds.length} (the API answers 503 not_ready then; a 500 is a violation)`);
  for (const f of o.outageFiveHundreds.slice(0, 10)) lines.push(`          - ${f}`);
  if (o.outageFiveHundreds.length > 10) lines.push(`          … and ${o.outageFiveHundreds.length - 10} more`);
  lines.push('', 'Memory (peak RSS by process, bound by kind):');
  const bounds = memoryBounds(Math.max(1, ...o.sys.groups.map((g) => g.count)));
  for (const [label, p] of [...o.memory.peaks].sort((a, b) => a[0].localeCompare(b[0]))) lines.push(`  ${label.padEnd(16)} ${mib(p.peak).padStart(9)}  (bound ${mib(bounds[p.kind] ?? 0)}, ${p.samples} samples)`);
  lines.push('', `Soak API calls by status: ${[...o.api.statuses].sort((a, b) => a[0] - b[0]).map(([s, n]) => `${s}: ${n}`).join(', ')}; no answer (replica gone, retried): ${o.api.transportErrors}`);
  lines.push('', ok ? `RESULT: PASS (seed ${seed})` : `RESULT: FAIL — replay with: npm run soak -- --minutes ${minutes} --seed ${seed}${robots !== 30 ? ` --robots ${robots}` : ''}${solo !== 6 ? ` --solo ${solo}` : ''}`);
  process.stdout.write(`${lines.join('\n')}\n`);
  process.stdout.write(`SOAK_RESULT ${JSON.stringify({ ok, seed, minutes, faults: o.faults, failed_faults: o.failedFaults, drained: o.drained, invariants: o.invariants.map((i) => ({ name: i.name, count: i.count, violations: i.violations.length })) })}\n`);
  return ok;
}

async function main(): Promise<number> {
  log(`seed ${seed}: ${minutes} min of faults on ${robots} robots (replay: npm run soak -- --minutes ${minutes} --seed ${seed})`);
  const dir = await makeTempDir('fleet-soak-');
  const api = new ApiLog();
  const sys = new SoakSystem({ dir: dir.path, seed, robots, solo, episodesPerMinute, bytesPerSecond: 16 * 1024, diskQuotaBytes: 256 * MiB, log }, api);
  let passed = false;
  const memory = new MemoryWatch(() => sys.processes());
  let stopping = false;
  const onSignal = () => {
    if (stopping) process.exit(130);
    stopping = true;
    log('interrupted: stopping everything');
    void sys.close().finally(() => process.exit(130));
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    await sys.start();
    memory.start();
    log(`system up in ${((Date.now() - started) / 1000).toFixed(0)} s`);

    const seconds = minutes * 60;
    const plan = planFaults(seed, seconds, sys.groups);
    log(`fault plan: ${plan.map((f) => `${f.atS}s ${f.kind}`).join(', ')}`);
    const runner = new FaultRunner(sys, log);
    const phaseStart = Date.now();
    let faultsDone = false;
    const diskSeen = new Set<string>();
    const loadDone = load(sys, () => faultsDone || stopping, diskSeen);
    await runner.run(plan, phaseStart);
    const rest = phaseStart + seconds * 1000 - Date.now();
    if (rest > 0) await sleep(rest);
    faultsDone = true;
    await loadDone;

    // Drain: every fault healed, no new episodes (the operators stop; the agents go on).
    log('fault phase over: stopping new episodes, then draining');
    await Promise.all(
      sys.groups.map(async (g) => {
        if (g.proxy?.isCut) g.proxy.heal();
        if (!g.fleet) await sys.startGroup(g, 0);
        else await sys.quietGroup(g);
      }),
    );
    const drainDeadline = Date.now() + drainS * 1000;
    let last: Awaited<ReturnType<typeof drainState>> | null = null;
    let drained = false;
    while (Date.now() < drainDeadline) {
      last = await drainState(sys);
      const s = last.state;
      if (s.pending === 0 && s.recording === 0 && s.unindexed === 0 && s.unverified === 0 && s.webhooksPending === 0) {
        drained = true;
        break;
      }
      log(`draining: ${JSON.stringify(s)}`);
      await sleep(3000);
    }
    // Settled or not, check with what is there now.
    last = await drainState(sys);
    memory.stop();
    log('checking invariants');
    // Pools reconnect on the next query after the database is back: a grace of 15 s.
    const outages = runner.records.filter((r) => r.fault.kind === 'postgres-restart').map((r) => ({ from: r.startedAt, to: (r.healedAt ?? Date.now()) + 15_000 }));
    const { invariants, outageFiveHundreds } = await checkInvariants({ sys, robots: last.robots, cloud: last.cloud, api, memory, outages });
    const failedFaults = runner.records.filter((r) => r.error).map((r) => `${r.fault.kind} at ${r.fault.atS} s (${r.what}): ${r.error}`);
    passed = printReport({ faults: faultCounts(runner.records), failedFaults, invariants, outageFiveHundreds, memory, api, sys, drained, drain: last.state, diskSeen: diskSeen.size });
    return passed ? 0 : 1;
  } catch (err) {
    process.stdout.write(`SOAK ERROR (seed ${seed}): ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.stdout.write(`RESULT: FAIL — replay with: npm run soak -- --minutes ${minutes} --seed ${seed}\n`);
    return 1;
  } finally {
    memory.stop();
    await sys.close();
    // A failed run keeps its data (logs of processes that exited, the robots' directories).
    if (!values.keep && passed) await dir[Symbol.asyncDispose]();
    else log(`data kept in ${dir.path}`);
  }
}

process.exit(await main());
