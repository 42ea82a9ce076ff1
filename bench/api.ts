/**
 * The cost of the /v1 pipeline (API-key lookup, scope and entitlement checks, zod serialization,
 * SQLite read) against a bare Fastify route, both in their own processes, measured in the same
 * run with the same load. Prints figures and ratios; asserts nothing about time.
 */
import { availableParallelism } from 'node:os';
import { fileURLToPath } from 'node:url';
import { REPO_ROOT, startCloud } from '../test/support/cloud.js';
import { spawnProcess } from '../test/support/process.js';
import { fmt, measure, ratio, table, type LoadOptions } from './lib/measure.js';
import { parseBenchArgs, type BenchModule } from './lib/args.js';
import { BENCH_SERVE_ARGS, liftRequestLimits } from './lib/limits.js';
import { row } from './lib/summary.js';

const BARE_SERVER = fileURLToPath(new URL('./bare-fastify.ts', import.meta.url));

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
    const cloudFigures = await measure(
      { label: 'cloud GET /v1/api-keys', url: `${cloud.http}/v1/api-keys`, headers: { authorization: `Bearer ${cloud.adminKey}` } },
      load,
    );
    const bareFigures = await measure({ label: 'bare  GET /bare', url: `${bareUrl}/bare` }, load);
    const r = ratio(cloudFigures, bareFigures);

    process.stdout.write(
      `${table(
        ['target', 'req/s', 'p50 ms', 'p99 ms'],
        [
          [cloudFigures.label, fmt(cloudFigures.rps, 0), fmt(cloudFigures.p50_ms), fmt(cloudFigures.p99_ms)],
          [bareFigures.label, fmt(bareFigures.rps, 0), fmt(bareFigures.p50_ms), fmt(bareFigures.p99_ms)],
          ['ratio cloud/bare', fmt(r.rps, 3), fmt(r.p50, 3), fmt(r.p99, 3)],
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
