/* global process */
// The baseline of the webhooks benchmark (bench/webhooks.ts): a bare undici POST loop, in its own
// process as the cloud's worker is, to the benchmark's receiver at the worker's concurrency. It
// runs `warmup` unmeasured rounds first (a cold loop's first 2,500 requests run at a third of its
// warm rate, and how far V8 gets in that time decides the figure), then `rounds` measured ones,
// each `count` requests on a fresh pool. Prints one JSON line: per measured round, POST/s and the
// CPU ms (user + system) the process spent on it.
//
// Usage: node bare-post-loop.js '<json options>'
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { Pool } from 'undici';

const { origin, caFile, count, concurrency, bodyBytes, warmup, rounds } = JSON.parse(process.argv[2] ?? '{}');
const ca = readFileSync(caFile, 'utf8');
const body = 'x'.repeat(bodyBytes);

async function round(r) {
  const pool = new Pool(origin, { connections: concurrency, connect: { ca } });
  let next = 0;
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < count) {
        const n = next++;
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
  await pool.close();
  return { perS: (count / ms) * 1000, cpuMs: (cpu.user + cpu.system) / 1000 };
}

for (let r = 0; r < warmup; r++) await round(r);
const measured = [];
for (let r = 0; r < rounds; r++) measured.push(await round(warmup + r));
process.stdout.write(`${JSON.stringify(measured)}\n`);
