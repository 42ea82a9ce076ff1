/**
 * Datasets at 1,000,000 episodes: how long a snapshot takes (pinning every member in one
 * transaction) next to a bare `INSERT … SELECT` of the same seqs in the same database, and
 * manifest lines/s with the server's peak RSS next to the episode export of the same rows.
 * Prints figures and ratios; asserts nothing about time.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import Database from 'better-sqlite3';
import { DATABASE_FILE } from '../cloud/src/store/index.js';
import { startCloud } from '../test/support/cloud.js';
import { parseBenchArgs, type BenchModule } from './lib/args.js';
import { fmt, table } from './lib/measure.js';
import { storeIngest } from './episodes.js';
import { BENCH_SERVE_ARGS, liftRequestLimits } from './lib/limits.js';

function peakRssMb(pid: number): number {
  const m = /VmHWM:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m?.[1] ?? NaN) / 1024;
}

async function readPages(url: (cursor: string | null) => string, key: string): Promise<{ lines: number; ms: number }> {
  let lines = 0;
  let cursor: string | null = null;
  const t0 = performance.now();
  do {
    const res: Response = await fetch(url(cursor), { headers: { authorization: `Bearer ${key}` } });
    if (!res.ok) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
    const text = await res.text();
    lines += text.length === 0 ? 0 : text.split('\n').length - 1;
    cursor = res.headers.get('x-next-cursor');
  } while (cursor);
  return { lines, ms: performance.now() - t0 };
}

export const datasets: BenchModule = {
  description: 'snapshot of a 1,000,000-episode dataset vs a bare INSERT…SELECT; manifest lines/s vs export, peak RSS',
  async run(argv) {
    const args = parseBenchArgs(argv, { episodes: { type: 'string', default: '1000000' } });
    const n = Number(args.extra.episodes);
    const dir = mkdtempSync(join(tmpdir(), 'fleet-bench-datasets-'));
    try {
      process.stderr.write(`bench datasets: ${n} episodes, node ${process.version}\nfilling the index...\n`);
      const dataDir = join(dir, 'cloud');
      const { key } = await storeIngest(dataDir, n);

      // Baseline: copy the same seqs into a table in one statement, same database, no rules.
      const db = new Database(join(dataDir, DATABASE_FILE));
      db.exec('CREATE TABLE bench_copy (position INTEGER PRIMARY KEY, episode_seq INTEGER NOT NULL)');
      const t0 = performance.now();
      const copied = db.prepare("INSERT INTO bench_copy (episode_seq) SELECT seq FROM episodes WHERE org_id = 'org_bench' ORDER BY seq").run().changes;
      const rawMs = performance.now() - t0;
      db.exec('DROP TABLE bench_copy');
      db.close();

      await using cloud = await startCloud({ dataDir, logLevel: 'warn', args: BENCH_SERVE_ARGS });
      await liftRequestLimits(cloud);
      const post = async (path: string, body: unknown) => {
        const res = await fetch(`${cloud.http}${path}`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: JSON.stringify(body),
        });
        if (!res.ok) throw new Error(`${path}: HTTP ${res.status} ${await res.text()}`);
        return (await res.json()) as Record<string, unknown>;
      };
      const snapshot = async (name: string, filter: Record<string, string>) => {
        const ds = await post('/v1/datasets', { name, filter });
        const t = performance.now();
        const snap = await post(`/v1/datasets/${String(ds.id)}/snapshot`, {});
        return { id: String(ds.id), count: Number(snap.episode_count), ms: performance.now() - t };
      };
      const all = await snapshot('everything', {});
      const site = await snapshot('one site', { 'metadata.site': 'site-3' });
      const rss0 = peakRssMb(cloud.process.pid);

      const manifest = await readPages(
        (c) => `${cloud.http}/v1/datasets/${all.id}/manifest?limit=5000${c ? `&cursor=${c}` : ''}`,
        key,
      );
      const rssManifest = peakRssMb(cloud.process.pid);
      const exported = await readPages((c) => `${cloud.http}/v1/episodes/export?limit=5000${c ? `&cursor=${c}` : ''}`, key);

      const manifestRps = ((manifest.lines - 1) / manifest.ms) * 1000;
      const exportRps = (exported.lines / exported.ms) * 1000;
      process.stdout.write(
        `${table(
          ['snapshot', 'members', 'ms', 'ratio to baseline'],
          [
            ['bare INSERT…SELECT of every seq (baseline)', String(copied), fmt(rawMs, 0), '1.000'],
            ['POST snapshot, filter {} (rules applied)', String(all.count), fmt(all.ms, 0), fmt(all.ms / rawMs, 3)],
            ['POST snapshot, metadata.site=site-3', String(site.count), fmt(site.ms, 0), fmt(site.ms / rawMs, 3)],
          ],
        )}\n\n${table(
          ['read', 'lines', 'lines/s', 'ratio to export'],
          [
            ['episode export, limit 5000 (baseline)', String(exported.lines), fmt(exportRps, 0), '1.000'],
            ['dataset manifest, limit 5000', String(manifest.lines), fmt(manifestRps, 0), fmt(manifestRps / exportRps, 3)],
          ],
        )}\ncloud peak RSS: ${fmt(rss0, 0)} MB after the snapshots, ${fmt(rssManifest, 0)} MB after reading the manifest\n`,
      );
      process.stdout.write(
        `${JSON.stringify({
          bench: 'datasets',
          episodes: n,
          baseline_insert_select_ms: rawMs,
          snapshot_all: all,
          snapshot_site: site,
          manifest_lines: manifest.lines,
          manifest_lines_per_s: manifestRps,
          export_rows_per_s: exportRps,
          peak_rss_mb_after_snapshots: rss0,
          peak_rss_mb_after_manifest: rssManifest,
        })}\n`,
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
};
