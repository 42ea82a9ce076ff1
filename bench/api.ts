/**
 * The cost of the /v1 pipeline (API-key lookup, scope and entitlement checks, zod serialization,
 * SQLite read) against a bare Fastify route, both in their own processes, measured in the same
 * run with the same load. Prints figures and ratios; asserts nothing about time.
 */
import { existsSync, readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { fileURLToPath } from 'node:url';
import { REPO_ROOT, startCloud } from '../test/support/cloud.js';
import { spawnProcess } from '../test/support/process.js';
import { fmt, measure, ratio, table, type Figures, type LoadOptions, type Target } from './lib/measure.js';
import { parseBenchArgs, type BenchModule } from './lib/args.js';
import { BENCH_SERVE_ARGS, liftRequestLimits } from './lib/limits.js';
import { row } from './lib/summary.js';

const BARE_SERVER = fileURLToPath(new URL('./bare-fastify.ts', import.meta.url));

/** User + system CPU time of a process so far, in µs (Linux /proc; null elsewhere). */
function cpuMicros(pid: number): number | null {
  const path = `/proc/${pid}/stat`;
  if (!existsSync(path)) return null;
  // Fields after the command name: utime and stime are the 12th and 13th, in clock ticks (100 Hz).
  const fields = readFileSync(path, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10_000;
}

/**
 * Measures a target as `measure` does (warm-up, then the measured run), and the server's CPU
 * time per answered request over the measured run: steadier than requests/s on a machine whose
 * cores the load generator and other work share.
 */
async function measureWithCpu(target: Target, load: LoadOptions, pid: number): Promise<Figures & { cpu_us_per_request: number | null }> {
  if (load.warmupS > 0) await measure(target, { ...load, durationS: load.warmupS, warmupS: 0 });
  const before = cpuMicros(pid);
  const figures = await measure(target, { ...load, warmupS: 0 });
  const after = cpuMicros(pid);
  const cpu = before === null || after === null ? null : Math.round(((after - before) / figures.requests) * 10) / 10;
  return { ...figures, cpu_us_per_request: cpu };
}

export const api: BenchModule = {
  description: 'authenticated GET /v1/api-keys on fleet-cloud serve vs GET /bare on a bare Fastify',
  async run(argv) {
    const args = parseBenchArgs(argv, { 'log-level': { type: 'string', default: 'warn' } });
    const load: LoadOptions = { durationS: args.duration, connections: args.connections, warmupS: args.warmup };
    const logLevel = String(args.extra['log-level']);

    await using cloud = await startCloud({ logLevel, args: BENCH_SERVE_ARGS });
    await liftRequestLimits(cloud);
    await using bare = spawnProcess(process.execPath, ['--import', 'tsx', BARE_SERVER], { name: 'bare fastify', cwd: REPO_ROOT });
    const bareLine = await bare.waitForStdout((l) => l.startsWith('{"http"'), { description: 'the bare server address' });
    const bareUrl = (JSON.parse(bareLine) as { http: string }).http;

    process.stderr.write(
      `bench api: ${load.durationS} s x ${load.connections} connections per target (+${load.warmupS} s warm-up), ` +
        `cloud log level ${logLevel}, node ${process.version}, ${availableParallelism()} CPUs\n`,
    );
    const cloudFigures = await measureWithCpu(
      { label: 'cloud GET /v1/api-keys', url: `${cloud.http}/v1/api-keys`, headers: { authorization: `Bearer ${cloud.adminKey}` } },
      load,
      cloud.process.pid,
    );
    const bareFigures = await measureWithCpu({ label: 'bare  GET /bare', url: `${bareUrl}/bare` }, load, bare.pid);
    const r = ratio(cloudFigures, bareFigures);

    process.stdout.write(
      `${table(
        ['target', 'req/s', 'p50 ms', 'p99 ms', 'server CPU µs/req'],
        [
          [cloudFigures.label, fmt(cloudFigures.rps, 0), fmt(cloudFigures.p50_ms), fmt(cloudFigures.p99_ms), fmt(cloudFigures.cpu_us_per_request ?? Number.NaN, 1)],
          [bareFigures.label, fmt(bareFigures.rps, 0), fmt(bareFigures.p50_ms), fmt(bareFigures.p99_ms), fmt(bareFigures.cpu_us_per_request ?? Number.NaN, 1)],
          ['ratio cloud/bare', fmt(r.rps, 3), fmt(r.p50, 3), fmt(r.p99, 3), fmt((cloudFigures.cpu_us_per_request ?? Number.NaN) / (bareFigures.cpu_us_per_request ?? Number.NaN), 3)],
        ],
      )}\n`,
    );
    process.stdout.write(
      `${JSON.stringify({
        bench: 'api',
        duration_s: load.durationS,
        connections: load.connections,
        node: process.version,
        cloud: cloudFigures,
        bare: bareFigures,
        ratio_cloud_over_bare: r,
      })}\n`,
    );
    return [
      row({ name: `authenticated GET /v1/api-keys, ${load.connections} conns`, figure: cloudFigures.rps, unit: 'req/s', baseline: bareFigures.rps, baselineUnit: 'req/s', baselineName: 'bare Fastify route' }),
      row({ name: 'authenticated GET /v1/api-keys, p50', figure: cloudFigures.p50_ms, unit: 'ms', baseline: bareFigures.p50_ms, baselineUnit: 'ms', baselineName: 'bare Fastify route' }),
    ];
  },
};
