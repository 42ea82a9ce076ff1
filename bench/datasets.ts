/**
 * Datasets at 1,000,000 episodes, each figure next to a baseline doing the same work on the same
 * data in the same run:
 * - a snapshot of every episode (pinning each member in one transaction) vs a bare
 *   `INSERT … SELECT` of the same seqs in the same database;
 * - a snapshot of the 10 % of one `metadata.site` vs a bare `INSERT … SELECT` of the same 10 %;
 * - the longest wait of an ingest write (one robot publishing reports over MQTT, one at a time,
 *   each until its ack) while the full snapshot runs, vs the longest wait of the same writer over
 *   the same length of time with no snapshot;
 * - manifest lines/s and the cloud's peak RSS growth vs the episode export of the same rows.
 * Any failed request or missing ack fails the run. Asserts nothing about time.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import Database from 'better-sqlite3';
import mqtt from 'mqtt';
import { disableNagle } from '@fleet/node-support';
import { topics, type OutboxAck } from '@fleet/protocol';
import { DATABASE_FILE } from '../cloud/src/store/index.js';
import { startCloud, type CloudProcess } from '../test/support/cloud.js';
import { parseBenchArgs, type BenchModule } from './lib/args.js';
import { fmt, table } from './lib/measure.js';
import { storeIngest } from './episodes.js';
import { BENCH_SERVE_ARGS, liftRequestLimits } from './lib/limits.js';
import { memoryMb, resetPeakRss } from './lib/proc.js';
import { syntheticReport } from './lib/reports.js';
import { BenchFailure, row } from './lib/summary.js';

const SITE = 'site-3';
const RULES = "eval_id IS NULL AND outcome != 'discarded'";

function log(msg: string): void {
  process.stderr.write(`bench datasets: ${msg}\n`);
}

async function readPages(url: (cursor: string | null) => string, key: string): Promise<{ lines: number; ms: number }> {
  let lines = 0;
  let cursor: string | null = null;
  const t0 = performance.now();
  do {
    const res: Response = await fetch(url(cursor), { headers: { authorization: `Bearer ${key}` } });
    const text = await res.text();
    if (!res.ok) throw new BenchFailure(`HTTP ${res.status}: ${text.slice(0, 200)}`);
    lines += text.length === 0 ? 0 : text.split('\n').length - 1;
    cursor = res.headers.get('x-next-cursor');
  } while (cursor);
  return { lines, ms: performance.now() - t0 };
}

/** Baselines: copy the same seqs into a table in one statement, same database, no rules. */
function rawCopies(file: string, orgId: string): { all: { rows: number; ms: number }; site: { rows: number; ms: number } } {
  const db = new Database(file);
  try {
    const copy = (sql: string, ...params: unknown[]) => {
      db.exec('CREATE TABLE bench_copy (position INTEGER PRIMARY KEY, episode_seq INTEGER NOT NULL)');
      const t0 = performance.now();
      const rows = db.prepare(sql).run(...params).changes;
      const ms = performance.now() - t0;
      db.exec('DROP TABLE bench_copy');
      return { rows, ms };
    };
    return {
      // The members a snapshot pins: without eval_id or outcome in the filter, it leaves out eval
      // and discarded episodes (routes/v1/datasets.ts); the copies take the same seqs.
      all: copy(`INSERT INTO bench_copy (episode_seq) SELECT seq FROM episodes WHERE org_id = ? AND ${RULES} ORDER BY seq`, orgId),
      site: copy(
        `INSERT INTO bench_copy (episode_seq) SELECT d.seq FROM episode_attrs d CROSS JOIN episodes e ON e.seq = d.seq WHERE d.org_id = ? AND d.layer = 'm' AND d.key = 'site' AND d.value = ? AND ${RULES} ORDER BY d.seq`,
        orgId,
        SITE,
      ),
    };
  } finally {
    db.close();
  }
}

/**
 * One enrolled robot publishing episode reports one at a time, each until its ack: the ingest
 * write whose wait a snapshot may lengthen. `writes` keeps [start, end] of every acked report.
 */
async function startWriter(cloud: CloudProcess, key: string) {
  const tokenRes = await cloud.fetch('/v1/robots/enrollment-tokens', { method: 'POST', key, json: { max_uses: 1 } });
  if (tokenRes.status !== 201) throw new BenchFailure(`enrollment token: HTTP ${tokenRes.status} ${await tokenRes.text()}`);
  const { token } = (await tokenRes.json()) as { token: string };
  const res = await cloud.fetch('/v1/robots/enroll', { method: 'POST', key: null, json: { token } });
  if (res.status !== 201) throw new BenchFailure(`enroll: HTTP ${res.status} ${await res.text()}`);
  const e = (await res.json()) as { robot_id: string; mqtt: { url: string; password: string } };
  const c = await mqtt.connectAsync(e.mqtt.url, { protocolVersion: 4, clientId: e.robot_id, username: e.robot_id, password: e.mqtt.password, reconnectPeriod: 0 });
  // As the agent does: with Nagle, a PUBACK and the next report wait for the broker's delayed
  // TCP ack (~40 ms), which is all a write's "wait" then measures.
  disableNagle(c.stream);
  await c.subscribeAsync(topics.outboxAck(e.robot_id), { qos: 1 });
  const writes: [start: number, end: number][] = [];
  let stop = false;
  let failure: Error | null = null;
  let waiting: { msgId: string; start: number; done: () => void } | null = null;
  c.on('message', (_t, payload) => {
    const ack = JSON.parse(payload.toString()) as OutboxAck;
    if (!waiting || ack.msg_id !== waiting.msgId) return; // a duplicate of an earlier ack
    if (!ack.ok) failure = new BenchFailure(`writer: report refused: ${JSON.stringify(ack)}`);
    writes.push([waiting.start, performance.now()]);
    waiting.done();
  });
  const loop = (async () => {
    for (let i = 0; !stop && !failure; i++) {
      const body = syntheticReport(i, 'w');
      const msgId = `episode.report:${body.id}`;
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new BenchFailure(`writer: no ack for ${msgId} within 120 s`)), 120_000);
        waiting = {
          msgId,
          start: performance.now(),
          done: () => {
            clearTimeout(timer);
            resolve();
          },
        };
        c.publishAsync(topics.outbox(e.robot_id), JSON.stringify({ msg_id: msgId, kind: 'episode.report', body }), { qos: 1 }).catch(reject);
      });
    }
  })();
  return {
    writes,
    /** The longest write that overlapped [from, to]. */
    longest(from: number, to: number): { ms: number; writes: number } {
      const overlapping = writes.filter(([s, e]) => e >= from && s <= to);
      return { ms: Math.max(0, ...overlapping.map(([s, e]) => e - s)), writes: overlapping.length };
    },
    async stop() {
      stop = true;
      try {
        await loop;
        if (failure) throw failure;
      } finally {
        await c.endAsync().catch(() => undefined);
      }
    },
  };
}

export const datasets: BenchModule = {
  description: 'snapshots of 1,000,000 and 10 % vs bare INSERT…SELECT of the same seqs; ingest wait behind a snapshot; manifest lines/s vs export, peak RSS',
  async run(argv) {
    const args = parseBenchArgs(argv, { episodes: { type: 'string', default: '1000000' }, 'idle-window': { type: 'string', default: '3' } });
    const n = Number(args.extra.episodes);
    const idleWindowMs = Number(args.extra['idle-window']) * 1000;
    if (!Number.isInteger(n) || n < 10) throw new Error(`--episodes must be a whole number >= 10, got ${String(args.extra.episodes)}`);
    const dir = mkdtempSync(join(tmpdir(), 'fleet-bench-datasets-'));
    try {
      log(`${n} episodes, node ${process.version}; filling the index...`);
      const dataDir = join(dir, 'cloud');
      const { key, orgId } = await storeIngest(dataDir, n);
      const raw = rawCopies(join(dataDir, DATABASE_FILE), orgId);

      await using cloud = await startCloud({ dataDir, logLevel: 'warn', args: BENCH_SERVE_ARGS });
      await liftRequestLimits(cloud);
      const post = async (path: string, body: unknown) => {
        const res = await fetch(`${cloud.http}${path}`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: JSON.stringify(body),
        });
        if (!res.ok) throw new BenchFailure(`${path}: HTTP ${res.status} ${await res.text()}`);
        return (await res.json()) as Record<string, unknown>;
      };
      const snapshot = async (name: string, filter: Record<string, string>) => {
        const ds = await post('/v1/datasets', { name, filter });
        const t = performance.now();
        const snap = await post(`/v1/datasets/${String(ds.id)}/snapshot`, {});
        const end = performance.now();
        return { id: String(ds.id), count: Number(snap.episode_count), ms: end - t, start: t, end };
      };
      log(`snapshot of ${SITE} (10 %)...`);
      const site = await snapshot('one site', { 'metadata.site': SITE });
      if (site.count !== raw.site.rows) throw new BenchFailure(`snapshot of ${SITE}: ${site.count} members, the bare copy ${raw.site.rows}`);

      log(`ingest writer: ${idleWindowMs / 1000} s without a snapshot, then during the snapshot of every episode...`);
      const writer = await startWriter(cloud, key);
      await sleep(500);
      const idleFrom = performance.now();
      await sleep(idleWindowMs);
      const idle = writer.longest(idleFrom, performance.now());
      const all = await snapshot('everything', {});
      await sleep(200);
      const behind = writer.longest(all.start, all.end);
      await writer.stop();
      if (all.count < raw.all.rows) throw new BenchFailure(`snapshot of everything: ${all.count} members, fewer than the ${raw.all.rows} episodes`);

      const before = memoryMb(cloud.process.pid);
      const peakReset = resetPeakRss(cloud.process.pid);
      const manifest = await readPages((c) => `${cloud.http}/v1/datasets/${all.id}/manifest?limit=5000${c ? `&cursor=${c}` : ''}`, key);
      const after = memoryMb(cloud.process.pid);
      const exported = await readPages((c) => `${cloud.http}/v1/episodes/export?limit=5000${c ? `&cursor=${c}` : ''}`, key);
      // The manifest starts with one header line.
      if (manifest.lines - 1 !== all.count) throw new BenchFailure(`manifest: ${manifest.lines - 1} member lines of ${all.count}`);

      const manifestRps = ((manifest.lines - 1) / manifest.ms) * 1000;
      const exportRps = (exported.lines / exported.ms) * 1000;
      const growth = after.hwm - before.rss;
      process.stdout.write(
        `${table(
          ['snapshot', 'members', 'ms', 'baseline ms', 'ratio'],
          [
            ['POST snapshot, filter {} vs bare INSERT…SELECT of every seq', String(all.count), fmt(all.ms, 0), fmt(raw.all.ms, 0), fmt(all.ms / raw.all.ms, 3)],
            [`POST snapshot, metadata.site=${SITE} vs bare INSERT…SELECT of the same seqs`, String(site.count), fmt(site.ms, 0), fmt(raw.site.ms, 0), fmt(site.ms / raw.site.ms, 3)],
          ],
        )}\n\n` +
          `ingest writer (one robot, one report at a time over MQTT): longest wait ${fmt(behind.ms, 0)} ms over ${behind.writes} writes during the full snapshot, ` +
          `${fmt(idle.ms, 0)} ms over ${idle.writes} writes in ${idleWindowMs / 1000} s without one (ratio ${fmt(behind.ms / idle.ms, 1)})\n\n` +
          `${table(
            ['read', 'lines', 'lines/s', 'ratio to export'],
            [
              ['episode export, limit 5000 (baseline)', String(exported.lines), fmt(exportRps, 0), '1.000'],
              ['dataset manifest, limit 5000', String(manifest.lines), fmt(manifestRps, 0), fmt(manifestRps / exportRps, 3)],
            ],
          )}\ncloud RSS ${fmt(before.rss, 0)} MiB before reading the manifest, peak ${fmt(after.hwm, 0)} MiB while reading it (+${fmt(growth, 0)} MiB${peakReset ? '' : ', peak since start'})\n`,
      );
      process.stdout.write(
        `${JSON.stringify({
          bench: 'datasets',
          episodes: n,
          baseline_insert_select_all_ms: raw.all.ms,
          baseline_insert_select_site_ms: raw.site.ms,
          snapshot_all: all,
          snapshot_site: site,
          ingest_longest_wait_ms_during_snapshot: behind.ms,
          ingest_longest_wait_ms_idle: idle.ms,
          manifest_lines: manifest.lines,
          manifest_lines_per_s: manifestRps,
          export_rows_per_s: exportRps,
          rss_mb_before_manifest: before.rss,
          peak_rss_mb_during_manifest: after.hwm,
        })}\n`,
      );
      return [
        row({ name: `snapshot of ${all.count} members`, figure: all.ms, unit: 'ms', baseline: raw.all.ms, baselineUnit: 'ms', baselineName: 'bare INSERT…SELECT, same seqs' }),
        row({ name: `snapshot of ${site.count} members (10 %)`, figure: site.ms, unit: 'ms', baseline: raw.site.ms, baselineUnit: 'ms', baselineName: 'bare INSERT…SELECT, same 10 %' }),
        row({ name: `ingest write longest wait behind snapshot of ${all.count}`, figure: behind.ms, unit: 'ms', baseline: idle.ms, baselineUnit: 'ms', baselineName: 'same writer, no snapshot' }),
        row({ name: `manifest of ${all.count}`, figure: manifestRps, unit: 'rows/s', baseline: exportRps, baselineUnit: 'rows/s', baselineName: 'episode export, same rows' }),
        row({ name: `manifest of ${all.count}, peak RSS growth`, figure: growth, unit: 'MiB', baseline: null, baselineUnit: null }),
      ];
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
};
