/**
 * `npm run bench -- <name> [options]`: builds, then runs one benchmark. Benchmarks print figures
 * and ratios against a baseline measured in the same run; they assert nothing about time.
 */
import type { BenchModule } from './lib/args.js';

/** Every benchmark by name; each module is loaded only when asked for. */
const BENCHMARKS: Readonly<Record<string, () => Promise<BenchModule>>> = {
  api: async () => (await import('./api.js')).api,
  commands: async () => (await import('./commands.js')).commands,
  episodes: async () => (await import('./episodes.js')).episodes,
  datasets: async () => (await import('./datasets.js')).datasets,
  webhooks: async () => (await import('./webhooks.js')).webhooks,
  upload: async () => (await import('./upload.js')).upload,
};

function usage(): string {
  return [
    'usage: npm run bench -- <name> [--duration S] [--connections N] [--warmup S] [benchmark options]',
    `benchmarks: ${Object.keys(BENCHMARKS).join(', ')}`,
  ].join('\n');
}

// Ctrl-C: exit through process.exit so the spawned servers are killed by the exit hook.
process.once('SIGINT', () => process.exit(130));
process.once('SIGTERM', () => process.exit(143));

const [name, ...rest] = process.argv.slice(2);
const load = name === undefined ? undefined : BENCHMARKS[name];
if (!load) {
  process.stderr.write(`${name === undefined ? 'missing benchmark name' : `unknown benchmark ${name}`}\n${usage()}\n`);
  process.exit(2);
}
try {
  const bench = await load();
  await bench.run(rest);
} catch (err) {
  process.stderr.write(`bench ${name}: ${err instanceof Error ? err.message : String(err)}\n${usage()}\n`);
  process.exit(1);
}
