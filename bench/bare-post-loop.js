/* global process */
// The baseline of the webhooks benchmark (bench/webhooks.ts): a bare undici POST loop, in its own
// process as the cloud's worker is, to the benchmark's receiver at the worker's concurrency. It
// runs `warmup` unmeasured rounds first (a cold loop's first 2,500 requests run at a third of its
// warm rate, and how far V8 gets in that time decides the figure), then `rounds` measured ones,
// each `count` requests on a fresh pool. Prints one JSON line: per measured round, POST/s and the
// CPU ms (user + system) the process spent on it.
//
// With `via: "egress"` the same loop goes through what the webhook worker sends with instead:
// the cloud's egress client (built, cloud/dist) with a signature per request and the worker's
// headers and options. Its CPU per request next to the bare loop's is the worker's HTTP part
// alone, without the queue and its durable outcomes.
//
// Usage: node bare-post-loop.js '<json options>'
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { Pool } from 'undici';

const { origin, caFile, count, concurrency, bodyBytes, warmup, rounds, via = 'bare' } = JSON.parse(process.argv[2] ?? '{}');
const ca = readFileSync(caFile, 'utf8');
const body = 'x'.repeat(bodyBytes);

/** The worker's request (cloud/src/webhooks/delivery.ts): its client, headers, signature and options. */
async function egressSender() {
  const { EgressClient } = await import('../cloud/dist/egress/client.js');
  const { signPayload } = await import('@fleet/protocol');
  const egress = new EgressClient({ allowLoopback: true, ca });
  const secret = 'whsec_bench_0123456789abcdefghijklmnopqrstuv';
  const send = (r, n) =>
    egress.post(`${origin}/hook/bare/${n % 25}`, {
      headers: {
        'content-type': 'application/json',
        'user-agent': 'fleet-webhooks/1',
        'x-service-event': 'episode.finalized',
        'x-service-event-id': `bare_${r}_${n}`,
        'x-service-signature': signPayload(body, [secret], Math.floor(Date.now() / 1000)),
      },
      body,
      timeoutMs: 10_000,
      maxResponseBytes: 64 * 1024,
      discardBody: true,
    });
  return { send, close: () => egress.close() };
}
const viaEgress = via === 'egress' ? await egressSender() : null;

async function round(r) {
  // Only the bare loop has a pool per round; the egress client keeps its own across rounds, as
  // the worker does.
  const pool = viaEgress ? null : new Pool(origin, { connections: concurrency, connect: { ca } });
  let next = 0;
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < count) {
        const n = next++;
        if (viaEgress) {
          const { status } = await viaEgress.send(r, n);
          if (status !== 200) throw new Error(`egress POST: HTTP ${status}`);
          continue;
        }
        const res = await pool.request({
          method: 'POST',
          path: '/bare',
          headers: { 'content-type': 'application/json', 'x-service-event-id': `bare_${r}_${n}` },
          body,
        });
        await res.body.dump();
        if (res.statusCode !== 200) throw new Error(`bare POST: HTTP ${res.statusCode}`);
      }
    }),
  );
  const ms = performance.now() - t0;
  const cpu = process.cpuUsage(c0);
  await pool?.close();
  return { perS: (count / ms) * 1000, cpuMs: (cpu.user + cpu.system) / 1000 };
}

for (let r = 0; r < warmup; r++) await round(r);
const measured = [];
for (let r = 0; r < rounds; r++) measured.push(await round(warmup + r));
await viaEgress?.close();
process.stdout.write(`${JSON.stringify(measured)}\n`);
