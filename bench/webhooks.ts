/**
 * Webhook delivery: deliveries/s from a real `fleet-cloud serve` to a local HTTPS receiver across
 * many subscriptions (orgs × subscriptions, events queued through the /test endpoint, which goes
 * through the same persisted queue as ingest), and the p50/p95 delay from event creation to the
 * receiver, next to a bare undici POST loop to the same receiver at the same concurrency in the
 * same run. Prints figures and the ratio; asserts nothing about time.
 */
import { performance } from 'node:perf_hooks';
import { Pool } from 'undici';
import { createTestPki, startHttpsReceiver } from '../cloud/src/egress/test-https.js';
import { startCloud, type CloudProcess } from '../test/support/cloud.js';
import { parseBenchArgs, type BenchModule } from './lib/args.js';
import { fmt, table } from './lib/measure.js';
import { BENCH_SERVE_ARGS, liftRequestLimits } from './lib/limits.js';
import { BenchFailure, row } from './lib/summary.js';

/** The worker attempts up to this many queue heads at once (DeliveryWorker's default). */
const WORKER_CONCURRENCY = 8;

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
    });
    const waitS = Math.max(1, Number(args.extra.wait ?? 600));
    const orgs = Math.max(1, Number(args.extra.orgs ?? 5));
    const subsPerOrg = Math.min(5, Math.max(1, Number(args.extra.subs ?? 5)));
    const eventsPerSub = Math.max(1, Number(args.extra.events ?? 100));
    const total = orgs * subsPerOrg * eventsPerSub;

    const pki = createTestPki();
    const receivedAt = new Map<string, number>();
    let bodyBytes = 0;
    const rx = await startHttpsReceiver(pki.issue(['localhost'], ['127.0.0.1']), (req, res) => {
      const id = req.headers['x-service-event-id'];
      if (typeof id === 'string' && !id.startsWith('bare_') && !receivedAt.has(id)) receivedAt.set(id, performance.now());
      bodyBytes = req.body.length;
      res.writeHead(200).end();
    });
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
      const createdAt = new Map<string, number>();
      const t0 = performance.now();
      await Promise.all(
        subs.map(async (sub) => {
          for (let i = 0; i < eventsPerSub; i++) {
            const sent = performance.now();
            const res = await cloud.fetch(`/v1/webhooks/${sub.id}/test`, { method: 'POST', key: sub.key });
            if (res.status !== 202) throw new Error(`test event: ${res.status} ${await res.text()}`);
            createdAt.set(((await res.json()) as { event_id: string }).event_id, sent);
          }
        }),
      );
      const queuedMs = performance.now() - t0;
      const complete = await waitFor(() => receivedAt.size >= total, waitS * 1000);
      const delivered = receivedAt.size;
      // An incomplete run has no rate: the missing deliveries are the slowest ones.
      if (!complete) throw new BenchFailure(`webhooks: INCOMPLETE, ${delivered} of ${total} deliveries within ${waitS} s; no rate or ratio`);
      const lastAt = Math.max(...receivedAt.values());
      const cloudMs = lastAt - t0;
      const delays = [...createdAt].map(([id, at]) => (receivedAt.get(id) ?? NaN) - at).filter(Number.isFinite).sort((a, b) => a - b);
      const cloudRate = (delivered / cloudMs) * 1000;

      // (b) bare undici POST loop, same receiver, same body size, same concurrency
      const pool = new Pool(rx.origin('127.0.0.1'), { connections: WORKER_CONCURRENCY, connect: { ca: pki.caPem } });
      const body = 'x'.repeat(bodyBytes || 200);
      let next = 0;
      const b0 = performance.now();
      await Promise.all(
        Array.from({ length: WORKER_CONCURRENCY }, async () => {
          while (next < total) {
            const n = next++;
            const res = await pool.request({
              method: 'POST',
              path: '/bare',
              headers: { 'content-type': 'application/json', 'x-service-event-id': `bare_${n}` },
              body,
            });
            await res.body.dump();
            if (res.statusCode !== 200) throw new BenchFailure(`bare POST: HTTP ${res.statusCode}`);
          }
        }),
      );
      const bareMs = performance.now() - b0;
      await pool.close();
      const bareRate = (total / bareMs) * 1000;

      process.stdout.write(
        `webhooks: ${orgs} orgs × ${subsPerOrg} subscriptions × ${eventsPerSub} events = ${total} deliveries` +
          ` (worker concurrency ${WORKER_CONCURRENCY}; events queued over ${fmt(queuedMs / 1000)} s)\n`,
      );
      process.stdout.write(
        `${table(
          ['target', 'deliveries', 'per s', 'p50 delay ms', 'p95 delay ms'],
          [
            ['fleet-cloud webhooks', String(delivered), fmt(cloudRate, 0), fmt(percentile(delays, 50), 1), fmt(percentile(delays, 95), 1)],
            ['bare undici POST loop', String(total), fmt(bareRate, 0), '-', '-'],
          ],
        )}\n`,
      );
      process.stdout.write(`ratio (cloud / bare): ${fmt(cloudRate / bareRate, 3)}\n`);
      const subsTotal = orgs * subsPerOrg;
      return [
        row({ name: `webhook deliveries, ${subsTotal} subscriptions, ${total} events`, figure: cloudRate, unit: 'deliv/s', baseline: bareRate, baselineUnit: 'POST/s', baselineName: 'bare undici POST loop, same receiver' }),
        row({ name: 'webhook ingest-to-delivery delay p50', figure: percentile(delays, 50), unit: 'ms', baseline: null, baselineUnit: null }),
      ];
    } finally {
      clearInterval(trim);
      await cloud[Symbol.asyncDispose]();
      await rx.close();
      pki.cleanup();
    }
  },
};
