/**
 * The Python SDK (python/src/fleet, in its venv from python/requirements-dev.txt) against the
 * `fleet` CLI on the same rows of the same cloud, in the same run:
 * - every episode read through the SDK (`episodes.iterate()` over /v1/episodes keyset pages at
 *   the default page size and at the largest the API allows; `episodes.export()` and
 *   `episodes.export_lines()` over the NDJSON export) vs `fleet episodes export --out FILE` of
 *   the same rows: rows per second each, and the ratio (issue 42's target: >= 0.8);
 * - the manifest of a snapshotted dataset of N members into a pandas DataFrame
 *   (`datasets.to_pandas()`): seconds and the Python process's peak RSS, vs `fleet datasets
 *   manifest ID --out FILE` of the same manifest.
 * Every side is a process of its own, timed from spawn to exit and its peak RSS taken from
 * wait4 by the same stopwatch (bench/python/sdk_bench.py `run`), so Node's and Python's start-up
 * count alike. The index is seeded through the store's own ingest (bench/episodes.ts), with no
 * eval or discarded episodes so that a snapshot of `{}` pins all N. A wrong row count, a
 * duplicate or a failed process fails the run. Asserts nothing about time.
 *
 * The list pages are also read by a bare fetch loop in this process (JSON.parse of each page, no
 * models), against which the SDK's in-process rate shows what is the SDK's and what the API's.
 *
 *   npm run bench -- python [--episodes N] [--rounds R] [--profile] [--sdk-src DIR]
 *
 * `--profile` adds untimed runs of the SDK under cProfile and prints their top entries;
 * `--sdk-src` measures another copy of python/src (PYTHONPATH) the same way.
 */
import { createReadStream, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { cleanEnv, REPO_ROOT, startCloud } from '../test/support/cloud.js';
import { runProcess } from '../test/support/process.js';
import { ensurePythonEnv, PYTHON_DEV_REQUIREMENTS } from '../test/support/python.js';
import { parseBenchArgs, type BenchModule } from './lib/args.js';
import { storeIngest } from './episodes.js';
import { BENCH_SERVE_ARGS, liftRequestLimits } from './lib/limits.js';
import { fmt, table } from './lib/measure.js';
import { syntheticReport } from './lib/reports.js';
import { BenchFailure, row, type SummaryRow } from './lib/summary.js';

const SDK_BENCH = fileURLToPath(new URL('./python/sdk_bench.py', import.meta.url));
const FLEET_CLI = join(REPO_ROOT, 'packages', 'client', 'dist', 'cli.js');
/** The API's page sizes (docs/api.md): lists 50 by default and at most 100; export and manifest 1,000 and 5,000. */
const LIST_MAX = 100;
const STREAM_MAX = 5000;
const TARGET = 'ratio ≥ 0.8';

function log(msg: string): void {
  process.stderr.write(`bench python: ${msg}\n`);
}

/** What the stopwatch (`sdk_bench.py run`) saw of one process. */
interface Timed {
  wall_s: number;
  maxrss_kib: number;
  exit: number;
}

/** What an SDK mode of sdk_bench.py reports about itself. */
interface SdkReport {
  mode: string;
  rows: number;
  unique: number;
  import_s: number;
  run_s: number;
  maxrss_kib_before: number;
  maxrss_kib: number;
  columns?: number;
  frame_mib?: number;
}

interface Side {
  label: string;
  rows: number;
  wall_s: number;
  maxrss_mib: number;
  sdk?: SdkReport;
}

async function countLines(file: string): Promise<number> {
  let n = 0;
  for await (const chunk of createReadStream(file) as AsyncIterable<Buffer>) {
    for (let i = chunk.indexOf(10); i !== -1; i = chunk.indexOf(10, i + 1)) n++;
  }
  return n;
}

/** Every /v1/episodes page at `limit`, following the cursor, parsed and dropped: the API alone. */
async function bareListLoop(base: string, key: string, limit: number): Promise<{ rows: number; s: number }> {
  let rows = 0;
  let cursor: string | null = null;
  const t0 = performance.now();
  do {
    const res: Response = await fetch(`${base}/v1/episodes?limit=${limit}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, { headers: { authorization: `Bearer ${key}` } });
    const text = await res.text();
    if (!res.ok) throw new BenchFailure(`GET /v1/episodes: HTTP ${res.status} ${text.slice(0, 200)}`);
    const page = JSON.parse(text) as { episodes: unknown[]; cursor: string | null };
    rows += page.episodes.length;
    cursor = page.cursor;
  } while (cursor);
  return { rows, s: (performance.now() - t0) / 1000 };
}

const median = (xs: readonly number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor((s.length - 1) / 2)]!;
};

export const python: BenchModule = {
  description: 'the Python SDK iterating N episodes (list pages, export) vs `fleet episodes export` of the same rows; a dataset manifest of N into pandas vs the CLI',
  async run(argv) {
    const args = parseBenchArgs(argv, {
      episodes: { type: 'string', default: '100000' },
      rounds: { type: 'string', default: '1' },
      profile: { type: 'boolean', default: false },
      'sdk-src': { type: 'string', default: join(REPO_ROOT, 'python', 'src') },
    });
    const n = Number(args.extra.episodes);
    const rounds = Number(args.extra.rounds);
    if (!Number.isInteger(n) || n < 10) throw new Error(`--episodes must be a whole number >= 10, got ${String(args.extra.episodes)}`);
    if (!Number.isInteger(rounds) || rounds < 1) throw new Error(`--rounds must be a whole number >= 1, got ${String(args.extra.rounds)}`);
    const profile = args.extra.profile === true;
    // Another build of the SDK (a scratch copy with a change to try) is measured the same way.
    const sdkSrc = String(args.extra['sdk-src']);

    const python = ensurePythonEnv(log, PYTHON_DEV_REQUIREMENTS);
    const dir = mkdtempSync(join(tmpdir(), 'fleet-bench-python-'));
    try {
      log(`${n} episodes, ${rounds} round(s); node ${process.version}, ${python}; filling the index...`);
      const dataDir = join(dir, 'cloud');
      // No eval or discarded episodes: a snapshot of `{}` leaves those out, and the dataset is to have all N members.
      const { key } = await storeIngest(dataDir, n, (i) => ({ ...syntheticReport(i), eval_id: null, outcome: i % 10 === 0 ? 'failure' : 'success' }));
      await using cloud = await startCloud({ dataDir, logLevel: 'warn', args: BENCH_SERVE_ARGS });
      await liftRequestLimits(cloud);

      const post = async (path: string, body: unknown) => {
        const res = await cloud.fetch(path, { method: 'POST', key, json: body });
        if (!res.ok) throw new BenchFailure(`POST ${path}: HTTP ${res.status} ${await res.text()}`);
        return (await res.json()) as Record<string, unknown>;
      };
      log(`dataset of every episode, snapshotted...`);
      const dataset = await post('/v1/datasets', { name: 'python bench', filter: {} });
      const datasetId = String(dataset.id);
      const snap = await post(`/v1/datasets/${datasetId}/snapshot`, {});
      if (Number(snap.episode_count) !== n) throw new BenchFailure(`snapshot: ${String(snap.episode_count)} members, expected ${n}`);

      const env = cleanEnv({
        PYTHONPATH: sdkSrc,
        PYTHONDONTWRITEBYTECODE: '1',
        // The CLI reads no config file of the machine's: the address and key come from here.
        HOME: dir,
        XDG_CONFIG_HOME: join(dir, 'config'),
        FLEET_URL: cloud.http,
        FLEET_API_KEY: key,
      });
      /** One process under the stopwatch; its stdout lines and what the stopwatch measured. */
      const stopwatch = async (label: string, command: readonly string[]): Promise<{ timed: Timed; lines: string[] }> => {
        const r = await runProcess(python, [SDK_BENCH, 'run', '--', ...command], { name: label, env, timeoutMs: 30 * 60_000 });
        const lines = r.stdout.trim().split('\n');
        let timed: Timed | null = null;
        try {
          timed = JSON.parse(lines.at(-1) ?? '') as Timed;
        } catch {
          // Reported below with the output.
        }
        if (r.code !== 0 || !timed || timed.exit !== 0) {
          throw new BenchFailure(`${label}: exit ${timed ? timed.exit : String(r.code ?? r.signal)}\n${r.stderr.split('\n').slice(-15).join('\n')}`);
        }
        return { timed, lines: lines.slice(0, -1) };
      };
      const sdk = async (label: string, mode: string, extra: readonly string[] = []): Promise<Side> => {
        const { timed, lines } = await stopwatch(label, [python, SDK_BENCH, mode, ...extra]);
        const report = lines.map((l) => (l.startsWith('{') ? (JSON.parse(l) as Partial<SdkReport>) : {})).find((r) => r.mode === mode) as SdkReport | undefined;
        if (!report) throw new BenchFailure(`${label}: no report line in its output`);
        if (report.rows !== n || report.unique !== n) throw new BenchFailure(`${label}: ${report.rows} rows, ${report.unique} distinct, of ${n}`);
        return { label, rows: report.rows, wall_s: timed.wall_s, maxrss_mib: timed.maxrss_kib / 1024, sdk: report };
      };
      const cli = async (label: string, command: readonly string[], out: string, expectLines: number): Promise<Side> => {
        const { timed } = await stopwatch(label, [process.execPath, FLEET_CLI, ...command]);
        const lines = await countLines(out);
        rmSync(out, { force: true });
        if (lines !== expectLines) throw new BenchFailure(`${label}: ${lines} lines written, expected ${expectLines}`);
        return { label, rows: n, wall_s: timed.wall_s, maxrss_mib: timed.maxrss_kib / 1024 };
      };

      const out = join(dir, 'out.ndjson');
      const bare = async (label: string, limit: number): Promise<Side> => {
        const r = await bareListLoop(cloud.http, key, limit);
        if (r.rows !== n) throw new BenchFailure(`${label}: ${r.rows} rows of ${n}`);
        return { label, rows: r.rows, wall_s: r.s, maxrss_mib: Number.NaN };
      };
      type Plan = { key: string; run: () => Promise<Side> };
      const plan: Plan[] = [
        { key: 'cli', run: () => cli('fleet episodes export (page 1000, default)', ['episodes', 'export', '--out', out], out, n) },
        { key: 'bare-list', run: () => bare('bare fetch loop, list page 50, in-process', 50) },
        { key: 'iterate', run: () => sdk('episodes.iterate() (list page 50, default)', 'iterate') },
        { key: 'bare-list-max', run: () => bare(`bare fetch loop, list page ${LIST_MAX}, in-process`, LIST_MAX) },
        { key: 'iterate-max', run: () => sdk(`episodes.iterate(limit=${LIST_MAX}) (list page ${LIST_MAX}, the largest)`, 'iterate', ['--limit', String(LIST_MAX)]) },
        { key: 'export', run: () => sdk('episodes.export() (models, export page 1000)', 'export') },
        { key: 'lines', run: () => sdk('episodes.export_lines() (dicts, export page 1000)', 'export-lines') },
        { key: 'lines-max', run: () => sdk(`episodes.export_lines(limit=${STREAM_MAX}) (dicts, export page ${STREAM_MAX})`, 'export-lines', ['--limit', String(STREAM_MAX)]) },
        { key: 'cli-max', run: () => cli(`fleet episodes export --page-size ${STREAM_MAX}`, ['episodes', 'export', '--out', out, '--page-size', String(STREAM_MAX)], out, n) },
        { key: 'manifest-cli', run: () => cli('fleet datasets manifest --out (page 1000)', ['datasets', 'manifest', datasetId, '--out', out], out, n + 1) },
        { key: 'pandas', run: () => sdk('datasets.to_pandas() (manifest page 1000)', 'to-pandas', ['--dataset', datasetId]) },
      ];
      // Rounds interleave the sides, so load from the rest of the machine falls on both alike;
      // each side's figure is its median round.
      const runs = new Map<string, Side[]>();
      for (let r = 0; r < rounds; r++) {
        for (const p of plan) {
          log(`round ${r + 1}/${rounds}: ${p.key}...`);
          const side = await p.run();
          (runs.get(p.key) ?? runs.set(p.key, []).get(p.key)!).push(side);
        }
      }
      const pick = (k: string): Side => {
        const all = runs.get(k)!;
        const m = median(all.map((s) => s.wall_s));
        return { ...all.find((s) => s.wall_s === m)!, maxrss_mib: median(all.map((s) => s.maxrss_mib)) };
      };
      const rps = (s: Side) => s.rows / s.wall_s;
      const base = pick('cli');
      const baseMax = pick('cli-max');
      const reads: { key: string; against: Side }[] = [
        { key: 'iterate', against: base },
        { key: 'iterate-max', against: base },
        { key: 'export', against: base },
        { key: 'lines', against: base },
        { key: 'lines-max', against: baseMax },
      ];
      // The SDK's own time spent reading list pages (its in-process clock) against the same pages
      // read bare: what is left of the ratio to the CLI once the API's list pages are set aside.
      const apiAlone = [
        { key: 'iterate', bare: pick('bare-list') },
        { key: 'iterate-max', bare: pick('bare-list-max') },
      ].map(({ key: k, bare: b }) => ({ s: pick(k), bare: b, sdkRps: n / pick(k).sdk!.run_s }));
      const manifestCli = pick('manifest-cli');
      const pandas = pick('pandas');
      const p = pandas.sdk!;

      process.stdout.write(
        `${table(
          [`read every episode, ${n} rows (process spawn to exit)`, 's', 'rows/s', 'in-process rows/s', 'import s', 'peak RSS MiB', 'baseline rows/s', 'ratio'],
          [
            [base.label, fmt(base.wall_s, 2), fmt(rps(base), 0), '-', '-', fmt(base.maxrss_mib, 0), '-', '-'],
            [baseMax.label, fmt(baseMax.wall_s, 2), fmt(rps(baseMax), 0), '-', '-', fmt(baseMax.maxrss_mib, 0), '-', '-'],
            ...reads.map(({ key: k, against }) => {
              const s = pick(k);
              return [`SDK ${s.label}`, fmt(s.wall_s, 2), fmt(rps(s), 0), fmt(n / s.sdk!.run_s, 0), fmt(s.sdk!.import_s, 2), fmt(s.maxrss_mib, 0), fmt(rps(against), 0), fmt(rps(s) / rps(against), 3)];
            }),
          ],
        )}\n(baseline: the CLI at the same export page size, 1000 unless marked; /v1/episodes rows carry no files or locations, the export's do; ${rounds} round(s), median)\n\n` +
          `${table(
            ['the list pages alone, in-process', 'bare fetch rows/s', 'SDK rows/s', 'ratio'],
            apiAlone.map((a) => [`${a.bare.label} vs SDK ${a.s.label}`, fmt(rps(a.bare), 0), fmt(a.sdkRps, 0), fmt(a.sdkRps / rps(a.bare), 3)]),
          )}\n(the bench's own fetch and JSON.parse of the same pages: no process start, no models)\n\n` +
          `${table(
            [`dataset manifest, ${n} members (process spawn to exit)`, 's', 'peak RSS MiB', 'baseline s', 'baseline MiB', 'ratio s', 'ratio MiB'],
            [
              [manifestCli.label, fmt(manifestCli.wall_s, 2), fmt(manifestCli.maxrss_mib, 0), '-', '-', '-', '-'],
              [
                `SDK ${pandas.label}`,
                fmt(pandas.wall_s, 2),
                fmt(pandas.maxrss_mib, 0),
                fmt(manifestCli.wall_s, 2),
                fmt(manifestCli.maxrss_mib, 0),
                fmt(pandas.wall_s / manifestCli.wall_s, 3),
                fmt(pandas.maxrss_mib / manifestCli.maxrss_mib, 3),
              ],
            ],
          )}\n(to_pandas(): ${fmt(p.run_s, 2)} s in the call, ${fmt(p.import_s, 2)} s importing fleet, pandas and pyarrow; RSS ${fmt(p.maxrss_kib_before / 1024, 0)} MiB after the imports, ` +
          `peak ${fmt(p.maxrss_kib / 1024, 0)} MiB (+${fmt((p.maxrss_kib - p.maxrss_kib_before) / 1024, 0)} MiB); DataFrame ${p.rows} x ${p.columns ?? '?'}, ${fmt(p.frame_mib ?? Number.NaN, 0)} MiB deep)\n`,
      );

      if (profile) {
        for (const [mode, extra] of [
          ['iterate', []],
          ['export-lines', []],
          ['to-pandas', ['--dataset', datasetId]],
        ] as const) {
          const file = join(dir, `${mode}.pstats.txt`);
          log(`cProfile of ${mode} (not timed)...`);
          await sdk(`profile ${mode}`, mode, [...extra, '--profile', file]);
          process.stdout.write(`\n== cProfile: sdk_bench.py ${mode} ${extra.join(' ')}\n${readFileSync(file, 'utf8')}\n`);
        }
      }

      process.stdout.write(
        `${JSON.stringify({
          bench: 'python',
          episodes: n,
          rounds,
          sides: Object.fromEntries([...runs.keys()].map((k) => [k, pick(k)])),
        })}\n`,
      );
      const rows: SummaryRow[] = reads.map(({ key: k, against }) => {
        const s = pick(k);
        return row({ name: `SDK ${s.label}, ${n} rows`, figure: rps(s), unit: 'rows/s', baseline: rps(against), baselineUnit: 'rows/s', baselineName: against.label, target: TARGET });
      });
      rows.push(
        ...apiAlone.map((a) =>
          row({ name: `SDK ${a.s.label}, in-process, ${n} rows`, figure: a.sdkRps, unit: 'rows/s', baseline: rps(a.bare), baselineUnit: 'rows/s', baselineName: `${a.bare.label}, same pages` }),
        ),
        row({ name: `SDK datasets.to_pandas(), ${n} members`, figure: pandas.wall_s, unit: 's', baseline: manifestCli.wall_s, baselineUnit: 's', baselineName: 'fleet datasets manifest --out, same manifest' }),
        row({ name: `SDK datasets.to_pandas(), ${n} members, peak RSS`, figure: pandas.maxrss_mib, unit: 'MiB', baseline: manifestCli.maxrss_mib, baselineUnit: 'MiB', baselineName: 'fleet datasets manifest --out, peak RSS' }),
      );
      return rows;
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
};
