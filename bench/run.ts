/**
 * `npm run bench -- <name> [options]`: builds, then runs one benchmark. Benchmarks print figures
 * and ratios against a baseline measured in the same run; they assert nothing about time. A
 * failed request or an incomplete run fails the benchmark (exit 1).
 *
 * `npm run bench -- all [--only a,b] [--out FILE]` runs every benchmark at the sizes of ALL_ARGS
 * (chosen to fit in about 10 minutes on a 2-core machine), then prints one summary table (each
 * figure, its baseline and the ratio) and writes it as JSON to bench/results/latest.json. Each
 * ratio is compared with the same row of the committed reference run (bench/reference.json, or
 * `--reference FILE`): a ratio that moved by more than 20 % either way is marked in the table and
 * listed after it. The reference is replaced on purpose (`cp bench/results/latest.json
 * bench/reference.json`), in the commit that says why.
 */
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { availableParallelism, totalmem } from 'node:os';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { BenchModule } from './lib/args.js';
import { compareWithReference, readReference, REFERENCE_TOLERANCE } from './lib/reference.js';
import { summaryTable, type SummaryRow } from './lib/summary.js';

/** Every benchmark by name; each module is loaded only when asked for. */
const BENCHMARKS: Readonly<Record<string, () => Promise<BenchModule>>> = {
  api: async () => (await import('./api.js')).api,
  commands: async () => (await import('./commands.js')).commands,
  episodes: async () => (await import('./episodes.js')).episodes,
  datasets: async () => (await import('./datasets.js')).datasets,
  webhooks: async () => (await import('./webhooks.js')).webhooks,
  upload: async () => (await import('./upload.js')).upload,
  fleet: async () => (await import('./fleet.js')).fleet,
  scale: async () => (await import('./scale.js')).scale,
  scale100k: async () => (await import('./scale100k.js')).scale100k,
  stream: async () => (await import('./stream.js')).stream,
  lerobot: async () => (await import('./lerobot.js')).lerobot,
  agent: async () => (await import('./agent.js')).agent,
  python: async () => (await import('./python.js')).python,
  playback: async () => (await import('./playback.js')).playback,
  brokers: async () => (await import('./brokers.js')).brokers,
};

/**
 * The options of each benchmark under `all`: sizes that fit the whole run in about 10 minutes on
 * 2 cores. Rows name their sizes, so a smaller N than a single run's default shows in the table.
 */
const ALL_ARGS: Readonly<Record<string, readonly string[]>> = {
  api: ['--duration', '5', '--warmup', '1'],
  commands: ['--duration', '5', '--warmup', '1', '--skip-capacity'],
  episodes: ['--episodes', '1000000', '--mqtt-robots', '20', '--mqtt-per-robot', '1000', '--rounds', '20'],
  datasets: ['--episodes', '1000000'],
  webhooks: [],
  upload: ['--size-mib', '2048'],
  fleet: ['--robots', '50000', '--fit-open-files'],
  scale: ['--duration', '10'],
  stream: [],
  lerobot: ['--input', 'json', '--episodes', '20', '--seconds', '5'],
  agent: ['--duration', '10', '--warmup', '3'],
  python: ['--episodes', '100000'],
  // The 1 GB bag alone is written, uploaded and verified in minutes: `all` plays the 100 MB one.
  playback: ['--sizes', '100', '--runs', '2'],
};

/**
 * Benchmarks `all` leaves out unless `--only` names them: `brokers` installs and runs four other
 * brokers, `scale100k` holds 100,000 connections for a quarter of an hour; neither fits its 10 minutes.
 */
const ONLY_ALONE: ReadonlySet<string> = new Set(['brokers', 'scale100k']);

const DEFAULT_OUT = fileURLToPath(new URL('./results/latest.json', import.meta.url));
const DEFAULT_REFERENCE = fileURLToPath(new URL('./reference.json', import.meta.url));

function usage(): string {
  return [
    'usage: npm run bench -- <name> [--duration S] [--connections N] [--warmup S] [benchmark options]',
    '       npm run bench -- all [--only name,name] [--out FILE] [--reference FILE]',
    `benchmarks: ${Object.keys(BENCHMARKS).join(', ')}`,
  ].join('\n');
}

async function runAll(argv: string[]): Promise<number> {
  const { values } = parseArgs({ args: argv, strict: true, allowPositionals: false, options: { only: { type: 'string' }, out: { type: 'string' }, reference: { type: 'string' } } });
  const names = values.only ? values.only.split(',').map((s) => s.trim()) : Object.keys(BENCHMARKS).filter((n) => !ONLY_ALONE.has(n));
  for (const n of names) if (!BENCHMARKS[n]) throw new Error(`unknown benchmark ${n}`);
  const started = Date.now();
  const rows: SummaryRow[] = [];
  const runs: { bench: string; args: readonly string[]; seconds: number; ok: boolean; error?: string }[] = [];
  for (const n of names) {
    const args = ALL_ARGS[n] ?? [];
    process.stderr.write(`\n=== bench ${n} ${args.join(' ')}\n`);
    const t0 = Date.now();
    try {
      const bench = await BENCHMARKS[n]!();
      const got = await bench.run([...args]);
      rows.push(...got.map((r) => ({ ...r, name: `${n}: ${r.name}` })));
      runs.push({ bench: n, args, seconds: (Date.now() - t0) / 1000, ok: true });
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      process.stderr.write(`bench ${n} FAILED: ${message}\n`);
      runs.push({ bench: n, args, seconds: (Date.now() - t0) / 1000, ok: false, error: message });
    }
  }
  const seconds = (Date.now() - started) / 1000;
  const failed = runs.filter((r) => !r.ok);
  const referencePath = values.reference ?? DEFAULT_REFERENCE;
  const comparison = existsSync(referencePath) ? compareWithReference(rows, readReference(referencePath)) : null;
  process.stdout.write(
    `\n== summary: ${names.length} benchmarks in ${seconds.toFixed(0)} s, node ${process.version}, ${availableParallelism()} CPUs ` +
      `(ratio = figure / baseline; both measured in the same run)\n${summaryTable(comparison ? comparison.rows : rows)}\n`,
  );
  if (comparison) {
    const pct = Math.round(REFERENCE_TOLERANCE * 100);
    process.stdout.write(
      comparison.moved.length === 0
        ? `no ratio moved by more than ${pct} % from the reference (${referencePath})\n`
        : `${comparison.moved.length} ratio(s) moved by more than ${pct} % from the reference (${referencePath}), marked !:\n${comparison.moved.map((n) => `  ${n}`).join('\n')}\n`,
    );
    if (comparison.missing.length > 0) process.stdout.write(`in the reference but not in this run:\n${comparison.missing.map((n) => `  ${n}`).join('\n')}\n`);
  } else {
    process.stdout.write(`no reference run at ${referencePath}: nothing compared\n`);
  }
  for (const r of runs) process.stdout.write(`${r.ok ? 'ok    ' : 'FAILED'} ${r.bench} (${r.seconds.toFixed(0)} s)${r.error ? `: ${r.error}` : ''}\n`);
  const out = values.out ?? DEFAULT_OUT;
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(
    out,
    `${JSON.stringify({ at: new Date().toISOString(), node: process.version, cpus: availableParallelism(), mem_gib: Math.round(totalmem() / 2 ** 30), seconds, runs, rows, ...(comparison ? { reference: { path: referencePath, moved: comparison.moved, missing: comparison.missing } } : {}) }, null, 2)}\n`,
  );
  process.stdout.write(`written to ${out}\n`);
  return failed.length === 0 ? 0 : 1;
}

// Ctrl-C: exit through process.exit so the spawned servers are killed by the exit hook.
process.once('SIGINT', () => process.exit(130));
process.once('SIGTERM', () => process.exit(143));

const [name, ...rest] = process.argv.slice(2);
if (name === 'all') {
  try {
    process.exit(await runAll(rest));
  } catch (err) {
    process.stderr.write(`bench all: ${err instanceof Error ? err.message : String(err)}\n${usage()}\n`);
    process.exit(1);
  }
}
const load = name === undefined ? undefined : BENCHMARKS[name];
if (!load) {
  process.stderr.write(`${name === undefined ? 'missing benchmark name' : `unknown benchmark ${name}`}\n${usage()}\n`);
  process.exit(2);
}
try {
  const bench = await load();
  const rows = await bench.run(rest);
  if (rows.length > 0) process.stdout.write(`\n${summaryTable(rows)}\n`);
} catch (err) {
  process.stderr.write(`bench ${name}: FAILED: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
}
