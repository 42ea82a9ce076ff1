/**
 * Webhook delivery from a real `fleet-cloud serve` to a local HTTPS receiver across many
 * subscriptions (orgs × subscriptions, events queued through the /test endpoint, which goes
 * through the same persisted queue as ingest), in two parts:
 *  - throughput: the receiver holds its first requests until every event is queued, so the queues
 *    are full; deliveries/s is then the drain of that backlog, next to a bare undici POST loop to
 *    the same receiver at the same concurrency in the same run. (Measured from the first queued
 *    event instead, the figure would be the rate at which one client can queue events through the
 *    API, on the same core as the deliveries.) Both sides are measured equally warm: as many
 *    backlogs of the same size as the bare loop's warm-up rounds (`--warm-backlogs`, 3) are
 *    drained unmeasured first (the cloud's first drain runs its delivery path cold, at about half
 *    its warm rate), and the bare loop, in a process of its own as the worker is
 *    (bench/bare-post-loop.js), runs its warm-up rounds before its measured ones. Cold, each side's
 *    figure was a sample of its JIT warm-up (the bare loop's 2,500 requests took 0.3-0.6 s) and
 *    the bare loop moved 2x between runs.
 *  - latency: then `--paced` more events at `--rate` per second, one at a time across the
 *    subscriptions (a load the worker keeps up with), and the p50/p95 delay from sending the /test
 *    request to the receiver getting the delivery.
 * Prints figures and the ratio; asserts nothing about time.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { createTestPki, startHttpsReceiver } from '../cloud/src/egress/test-https.js';
import { startCloud, type CloudProcess } from '../test/support/cloud.js';
import { parseBenchArgs, type BenchModule } from './lib/args.js';
import { fmt, table } from './lib/measure.js';
import { BENCH_SERVE_ARGS, liftRequestLimits } from './lib/limits.js';
import { BenchFailure, row } from './lib/summary.js';

/** The worker attempts up to this many queue heads at once (DeliveryWorker's default). */
const WORKER_CONCURRENCY = 8;
/** The receiver holds requests at most this long (the worker gives a receiver 10 s). */
const MAX_HOLD_MS = 8000;
/** The bare loop's rounds: unmeasured ones first, then the measured ones (the median is the figure). */
const BARE_WARMUP_ROUNDS = 3;
const BARE_ROUNDS = 3;
const BARE_LOOP = fileURLToPath(new URL('./bare-post-loop.js', import.meta.url));
const WORKER_DRAIN = fileURLToPath(new URL('./worker-drain.js', import.meta.url));

/** CPU ms (user + system, every thread) a process has used so far (Linux /proc). */
function cpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100;
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

async function orgWithAdminKey(cloud: CloudProcess, name: string): Promise<string> {
  const org = await cloud.cli(['orgs', 'create', '--name', name, '--tier', 'enterprise']);
  if (org.code !== 0) throw new Error(`orgs create: ${org.stderr}`);
  const key = await cloud.cli(['keys', 'create', '--org', org.stdout.trim(), '--name', `${name} admin`, '--scopes', 'admin']);
  if (key.code !== 0) throw new Error(`keys create: ${key.stderr}`);
  await liftRequestLimits(cloud);
  return key.stdout.trim();
}

async function waitFor(check: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) return false;
    await new Promise((r) => setTimeout(r, 20));
  }
  return true;
}

export const webhooks: BenchModule = {
  description: 'webhook deliveries/s and p50 ingest-to-delivery delay vs a bare undici POST loop',
  async run(argv) {
    const args = parseBenchArgs(argv, {
      orgs: { type: 'string' },
      subs: { type: 'string' },
      events: { type: 'string' },
      wait: { type: 'string' },
      paced: { type: 'string' },
      'warm-backlogs': { type: 'string' },
      rate: { type: 'string' },
    });
    const waitS = Math.max(1, Number(args.extra.wait ?? 600));
    const orgs = Math.max(1, Number(args.extra.orgs ?? 5));
    const subsPerOrg = Math.min(5, Math.max(1, Number(args.extra.subs ?? 5)));
    const eventsPerSub = Math.max(1, Number(args.extra.events ?? 100));
    const total = orgs * subsPerOrg * eventsPerSub;
    const paced = Math.max(1, Number(args.extra.paced ?? 200));
    const pacedRate = Math.max(1, Number(args.extra.rate ?? 100));
    // As many unmeasured drains as the baselines' warm-up rounds: one left the cloud's delivery
    // path still warming (0.35 ms of CPU a delivery against 0.21 for the same worker alone).
    const warmBacklogs = Math.max(1, Number(args.extra['warm-backlogs'] ?? BARE_WARMUP_ROUNDS));

    const pki = createTestPki();
    const receivedAt = new Map<string, number>();
    let bodyBytes = 0;
    // While the gate is closed the receiver answers nobody: the worker's first attempts wait, and
    // everything queued meanwhile stays queued.
    let held: (() => void)[] | null = [];
    const rx = await startHttpsReceiver(pki.issue(['localhost'], ['127.0.0.1']), (req, res) => {
      const id = req.headers['x-service-event-id'];
      if (typeof id === 'string' && !id.startsWith('bare_') && !receivedAt.has(id)) receivedAt.set(id, performance.now());
      bodyBytes = req.body.length;
      if (held) held.push(() => res.writeHead(200).end());
      else res.writeHead(200).end();
    });
    const openGate = () => {
      const waiting = held ?? [];
      held = null;
      for (const answer of waiting) answer();
      return waiting.length;
    };
    // Only the figures of this run matter: drop what the receiver keeps per request.
    const trim = setInterval(() => rx.requests.splice(0), 1000);
    const cloud = await startCloud({ args: ['--egress-allow-loopback', '--egress-ca-file', pki.caFile, ...BENCH_SERVE_ARGS], logLevel: 'warn' });
    try {
      // (a) through the cloud
      const subs: { key: string; id: string }[] = [];
      for (let o = 0; o < orgs; o++) {
        const key = o === 0 ? cloud.adminKey : await orgWithAdminKey(cloud, `bench org ${o}`);
        for (let s = 0; s < subsPerOrg; s++) {
          const res = await cloud.fetch('/v1/webhooks', {
            method: 'POST',
            key,
            json: { url: `https://127.0.0.1:${rx.port}/hook/${o}/${s}`, events: ['episode.finalized'] },
          });
          if (res.status !== 201) throw new Error(`create subscription: ${res.status} ${await res.text()}`);
          subs.push({ key, id: ((await res.json()) as { id: string }).id });
        }
      }
      // Queues eventsPerSub events on every subscription while the receiver holds the worker's
      // first attempts, then lets the backlog drain.
      const backlog = async () => {
        receivedAt.clear();
        held = [];
        const t0 = performance.now();
        // The receiver must not hold an attempt into the worker's receiver timeout.
        const holdLimit = setTimeout(openGate, MAX_HOLD_MS);
        await Promise.all(
          subs.map(async (sub) => {
            for (let i = 0; i < eventsPerSub; i++) {
              const res = await cloud.fetch(`/v1/webhooks/${sub.id}/test`, { method: 'POST', key: sub.key });
              if (res.status !== 202) throw new Error(`test event: ${res.status} ${await res.text()}`);
              await res.arrayBuffer();
            }
          }),
        );
        clearTimeout(holdLimit);
        const queuedMs = performance.now() - t0;
        const gateEarly = held === null;
        const gateAt = gateEarly ? t0 + MAX_HOLD_MS : performance.now();
        const cpu0 = cpuMs(cloud.process.pid);
        const before = receivedAt.size;
        openGate();
        const complete = await waitFor(() => receivedAt.size >= total, waitS * 1000);
        // An incomplete run has no rate: the missing deliveries are the slowest ones.
        if (!complete) throw new BenchFailure(`webhooks: INCOMPLETE, ${receivedAt.size} of ${total} deliveries within ${waitS} s; no rate or ratio`);
        const cpu = cpuMs(cloud.process.pid) - cpu0;
        const lastAt = Math.max(...receivedAt.values());
        // What arrived after the gate opened, over the time it took (the released ones had arrived).
        const drained = gateEarly ? [...receivedAt.values()].filter((at) => at > gateAt).length : total - before;
        return { queuedMs, gateEarly, drained, rate: (drained / (lastAt - gateAt)) * 1000, cpuPerDelivery: cpu / drained };
      };
      const warming: Awaited<ReturnType<typeof backlog>>[] = [];
      for (let i = 0; i < warmBacklogs; i++) warming.push(await backlog());
      const { queuedMs, gateEarly, drained, rate: cloudRate, cpuPerDelivery } = await backlog();

      // Latency: paced events, one at a time, round robin over the subscriptions.
      const createdAt = new Map<string, number>();
      const p0 = performance.now();
      for (let i = 0; i < paced; i++) {
        const due = p0 + (i * 1000) / pacedRate;
        const wait = due - performance.now();
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
        const sub = subs[i % subs.length]!;
        const sent = performance.now();
        const res = await cloud.fetch(`/v1/webhooks/${sub.id}/test`, { method: 'POST', key: sub.key });
        if (res.status !== 202) throw new Error(`test event: ${res.status} ${await res.text()}`);
        createdAt.set(((await res.json()) as { event_id: string }).event_id, sent);
      }
      const pacedDone = await waitFor(() => [...createdAt.keys()].every((id) => receivedAt.has(id)), waitS * 1000);
      if (!pacedDone) throw new BenchFailure(`webhooks: INCOMPLETE, paced events not all delivered within ${waitS} s`);
      const delays = [...createdAt].map(([id, at]) => receivedAt.get(id)! - at).sort((a, b) => a - b);

      // (b) bare undici POST loop, same receiver, same body size, same concurrency, its own process;
      // (c) the same loop through the worker's egress client with its signature and headers: the
      // worker's HTTP part alone, without its queue and outcomes.
      const medianOf = (stdout: string) => {
        const rounds = (JSON.parse(stdout) as { perS: number; cpuMs: number }[]).sort((x, y) => x.perS - y.perS);
        return { rounds, median: rounds[Math.floor(rounds.length / 2)]! };
      };
      const options = { origin: rx.origin('127.0.0.1'), caFile: pki.caFile, count: total, concurrency: WORKER_CONCURRENCY, bodyBytes: bodyBytes || 200, warmup: BARE_WARMUP_ROUNDS, rounds: BARE_ROUNDS };
      const loop = async (via: 'bare' | 'egress') => medianOf((await promisify(execFile)(process.execPath, [BARE_LOOP, JSON.stringify({ ...options, via })])).stdout);
      // (d) the experiment: the worker alone in a process of its own, its queues in SQLite as in
      // the cloud, then in memory (no durable outcome).
      const workerAlone = async (store: 'sqlite' | 'memory') => medianOf((await promisify(execFile)(process.execPath, [WORKER_DRAIN, JSON.stringify({ ...options, store })])).stdout);
      const { rounds: bareRounds, median: bare } = await loop('bare');
      const { rounds: egressRounds, median: viaEgress } = await loop('egress');
      const { rounds: sqliteRounds, median: withSqlite } = await workerAlone('sqlite');
      const { rounds: memoryRounds, median: inMemory } = await workerAlone('memory');
      const bareRate = bare.perS;

      process.stdout.write(
        `webhooks: ${orgs} orgs × ${subsPerOrg} subscriptions × ${eventsPerSub} events = ${total} deliveries` +
          ` (worker concurrency ${WORKER_CONCURRENCY}; backlog queued over ${fmt(queuedMs / 1000)} s, then drained;` +
          ` ${warming.length} backlog(s) drained before, unmeasured: ${warming.map((w) => `${fmt(w.rate, 0)}/s at ${fmt(w.cpuPerDelivery, 3)} ms`).join(', ')} of CPU per delivery)` +
          (gateEarly ? `; queueing outlasted the ${MAX_HOLD_MS / 1000} s hold, so the rate includes queueing` : '') +
          `; then ${paced} events at ${pacedRate}/s\n`,
      );
      process.stdout.write(
        `${table(
          ['target', 'deliveries', 'per s', 'CPU ms each', 'paced p50 delay ms', 'paced p95 delay ms'],
          [
            ['fleet-cloud webhooks', String(drained), fmt(cloudRate, 0), fmt(cpuPerDelivery, 3), fmt(percentile(delays, 50), 1), fmt(percentile(delays, 95), 1)],
            [`bare undici POST loop (median of ${BARE_ROUNDS}: ${bareRounds.map((r) => fmt(r.perS, 0)).join(', ')})`, String(total), fmt(bareRate, 0), fmt(bare.cpuMs / total, 3), '-', '-'],
            [`the same loop through the worker's egress client, signed (${egressRounds.map((r) => fmt(r.perS, 0)).join(', ')})`, String(total), fmt(viaEgress.perS, 0), fmt(viaEgress.cpuMs / total, 3), '-', '-'],
            [`the worker alone, queues in SQLite (${sqliteRounds.map((r) => fmt(r.perS, 0)).join(', ')})`, String(total), fmt(withSqlite.perS, 0), fmt(withSqlite.cpuMs / total, 3), '-', '-'],
            [`the worker alone, queues in memory, no outcome written (${memoryRounds.map((r) => fmt(r.perS, 0)).join(', ')})`, String(total), fmt(inMemory.perS, 0), fmt(inMemory.cpuMs / total, 3), '-', '-'],
          ],
        )}\n`,
      );
      process.stdout.write(`ratio (cloud / bare): ${fmt(cloudRate / bareRate, 3)}\n`);
      const subsTotal = orgs * subsPerOrg;
      return [
        row({ name: `webhook deliveries (backlog drain), ${subsTotal} subscriptions, ${total} events`, figure: cloudRate, unit: 'deliv/s', baseline: bareRate, baselineUnit: 'POST/s', baselineName: 'bare undici POST loop, same receiver' }),
        row({
          name: "webhook HTTP part alone: the worker's egress client and signature, CPU per request",
          figure: (viaEgress.cpuMs / total) * 1000,
          unit: 'µs',
          baseline: (bare.cpuMs / total) * 1000,
          baselineUnit: 'µs',
          baselineName: 'bare undici POST loop, same receiver',
        }),
        row({
          name: 'webhook worker alone, queues in SQLite (each outcome durable before its queue moves on)',
          figure: withSqlite.perS,
          unit: 'deliv/s',
          baseline: bareRate,
          baselineUnit: 'POST/s',
          baselineName: 'bare undici POST loop, same receiver',
        }),
        row({
          name: 'webhook worker alone, queues in memory (no outcome written: the experiment)',
          figure: inMemory.perS,
          unit: 'deliv/s',
          baseline: bareRate,
          baselineUnit: 'POST/s',
          baselineName: 'bare undici POST loop, same receiver',
        }),
        row({ name: `webhook ingest-to-delivery delay p50, ${pacedRate} events/s`, figure: percentile(delays, 50), unit: 'ms', baseline: null, baselineUnit: null }),
      ];
    } finally {
      openGate();
      clearInterval(trim);
      await cloud[Symbol.asyncDispose]();
      await rx.close();
      pki.cleanup();
    }
  },
};
