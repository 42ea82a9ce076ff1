/**
 * The episode index, each figure next to a baseline doing the same work on the same data in the
 * same run:
 * - store ingest of N reports into an empty index vs a raw batched SQLite insert of the same N
 *   reports into an empty table;
 * - ingest over MQTT (enrolled robots publish outbox reports and wait for the cloud's acks,
 *   deduplicated by msg_id) into an empty cloud, one report per publish (outbox protocol 1) and
 *   in batches as the agent sends them to a cloud that takes them (protocol 2), each vs the
 *   store's own ingest of the same reports into an empty index (and that vs a raw batched insert);
 * - filtered list pages at N: every pair of two equality filters, with values that match and
 *   values whose intersection is empty, each query walking its cursor for several pages; p50 and
 *   p99 over all pages vs the same pages read by a bare SQL query on the same database file;
 * - export of every row at N (rows/s and the cloud's peak RSS growth) vs a raw SELECT of the same
 *   rows written as JSON lines.
 * Any failed request, refused report or missing ack fails the run. Asserts nothing about time.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import Database from 'better-sqlite3';
import { OUTBOX_BATCH_MAX, systemClock, systemScheduler, type EpisodeReport } from '@fleet/protocol';
import { createApiKey } from '../cloud/src/api-keys.js';
import { DATABASE_FILE, openSqliteStore } from '../cloud/src/store/index.js';
import { startCloud } from '../test/support/cloud.js';
import { parseBenchArgs, type BenchModule } from './lib/args.js';
import { fmt, table } from './lib/measure.js';
import { memoryMb, percentile, resetPeakRss } from './lib/proc.js';
import { robotOf, syntheticReport } from './lib/reports.js';
import { BENCH_SERVE_ARGS, liftRequestLimits } from './lib/limits.js';
import { BenchFailure, row, type SummaryRow } from './lib/summary.js';
import { enrollRobots, publishReports } from './lib/mqtt-ingest.js';

const BATCH = 1000;
const PAGE = 50;

function rate(n: number, ms: number): number {
  return (n / ms) * 1000;
}

function log(msg: string): void {
  process.stderr.write(`bench episodes: ${msg}\n`);
}

/**
 * Baseline of every ingest figure: the same reports, one JSON column, batched into transactions
 * of BATCH rows, into a fresh (empty) table like the index the figure starts from.
 */
export function rawSqliteInsert(file: string, n: number, report: (i: number) => EpisodeReport): number {
  const db = new Database(file);
  try {
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = NORMAL');
    db.exec('CREATE TABLE raw (id TEXT PRIMARY KEY, org_id TEXT NOT NULL, body TEXT NOT NULL)');
    const insert = db.prepare('INSERT INTO raw (id, org_id, body) VALUES (?, ?, ?)');
    const tx = db.transaction((from: number, to: number) => {
      for (let i = from; i < to; i++) {
        const r = report(i);
        insert.run(r.id, 'org_bench', JSON.stringify(r));
      }
    });
    const t0 = performance.now();
    for (let i = 0; i < n; i += BATCH) tx(i, Math.min(n, i + BATCH));
    return rate(n, performance.now() - t0);
  } finally {
    db.close();
  }
}

/** Fills a cloud data dir with n episodes through the store's own ingest; returns rows/s and the admin key. */
export async function storeIngest(dataDir: string, n: number, report: (i: number) => EpisodeReport = (i) => syntheticReport(i)): Promise<{ rps: number; orgId: string; key: string }> {
  const store = openSqliteStore(dataDir, { clock: systemClock, scheduler: systemScheduler });
  const orgId = 'org_bench';
  await store.orgs.create({ id: orgId, name: 'bench', tier: 'enterprise', createdAt: systemClock.now() });
  const org = (await store.orgs.get(orgId))!;
  const { key } = await createApiKey(store, systemClock, { org, name: 'bench', scopes: ['admin'], expiresAt: null, createdBy: 'bench' });
  const t0 = performance.now();
  for (let i = 0; i < n; i += BATCH) {
    const items = [];
    for (let j = i; j < Math.min(n, i + BATCH); j++) {
      items.push({ orgId, robotId: robotOf(j), report: report(j), reportedAt: systemClock.now() });
    }
    await store.episodes.ingest(items);
    if (i > 0 && i % 100_000 === 0) log(`indexed ${i}`);
  }
  const ms = performance.now() - t0;
  await store.close();
  return { rps: rate(n, ms), orgId, key };
}

/** The report robot r publishes as its k-th (the MQTT figure and its baseline use the same ones). */
const mqttReport = (perRobot: number) => (i: number) => syntheticReport(i, `m${Math.floor(i / perRobot)}x`);

/**
 * Enrolled robots publish outbox reports over MQTT, `inFlight` unacknowledged each, and count
 * each msg_id's ack once (QoS 1 may deliver an ack twice). A refused report, or no new ack for
 * `stallMs`, fails the run.
 */
async function mqttIngest(robots: number, perRobot: number, inFlight: number, batch: number, stallMs = 60_000): Promise<{ rps: number; acked: number; duplicates: number; publishes: number }> {
  await using cloud = await startCloud({ logLevel: 'warn', args: BENCH_SERVE_ARGS });
  await liftRequestLimits(cloud);
  const clients = await enrollRobots(cloud, robots);
  const report = mqttReport(perRobot);
  try {
    const { acked, duplicates, ms, publishes } = await publishReports(clients, perRobot, inFlight, report, { batch, stallMs });
    return { rps: rate(acked, ms), acked, duplicates, publishes };
  } finally {
    await Promise.all(clients.map(({ c }) => c.endAsync().catch(() => undefined)));
  }
}

/** Equality filters of the list benchmark and the value each takes for a report index modulo. */
const FILTERS: readonly { key: string; value: (v: number) => string; column?: string }[] = [
  { key: 'robot_id', column: 'robot_id', value: (v) => robotOf(v) },
  { key: 'task_id', column: 'task_id', value: (v) => `task-${v % 20}` },
  { key: 'operator_id', column: 'operator_id', value: (v) => `op-${v % 50}` },
  { key: 'outcome', column: 'outcome', value: (v) => ['success', 'failure', 'discarded'][v % 3]! },
  { key: 'metadata.site', value: (v) => `site-${v % 10}` },
];

interface ListQuery {
  pair: string;
  /** Both filters agree on one report index (rows exist) or deliberately disagree (most pairs: no row). */
  matching: boolean;
  filters: [key: string, value: string][];
}

/**
 * Every pair of two equality filters, `rounds` times with varied values: even rounds with values
 * that occur together, odd rounds with values that never do for the correlated pairs (robot and
 * task, site and task, ...): an empty intersection, the worst case of an index-driven scan.
 */
function listQueries(rounds: number): ListQuery[] {
  const out: ListQuery[] = [];
  for (let round = 0; round < rounds; round++) {
    for (let a = 0; a < FILTERS.length; a++) {
      for (let b = a + 1; b < FILTERS.length; b++) {
        const fa = FILTERS[a]!;
        const fb = FILTERS[b]!;
        const v = round * 37 + a * 11 + b * 3;
        const matching = round % 2 === 0;
        out.push({ pair: `${fa.key} + ${fb.key}`, matching, filters: [[fa.key, fa.value(v)], [fb.key, fb.value(matching ? v : v + 1)]] });
      }
    }
  }
  return out;
}

interface PageTimes {
  times: number[];
  rows: number;
  empty: number;
  perPair: Map<string, number[]>;
}

/** GET /v1/episodes for each query, following `cursor` for up to `pages` pages. */
async function listViaApi(base: string, key: string, queries: ListQuery[], pages: number): Promise<PageTimes> {
  const out: PageTimes = { times: [], rows: 0, empty: 0, perPair: new Map() };
  for (const q of queries) {
    let cursor: string | null = null;
    for (let p = 0; p < pages; p++) {
      const qs = new URLSearchParams([['limit', String(PAGE)], ...q.filters, ...(cursor ? [['cursor', cursor] as [string, string]] : [])]);
      const t0 = performance.now();
      const res: Response = await fetch(`${base}/v1/episodes?${qs.toString()}`, { headers: { authorization: `Bearer ${key}` } });
      const text = await res.text();
      const ms = performance.now() - t0;
      if (!res.ok) throw new BenchFailure(`GET /v1/episodes?${qs.toString()}: HTTP ${res.status} ${text.slice(0, 200)}`);
      const body = JSON.parse(text) as { episodes: unknown[]; cursor: string | null };
      out.times.push(ms);
      (out.perPair.get(q.pair) ?? out.perPair.set(q.pair, []).get(q.pair)!).push(ms);
      out.rows += body.episodes.length;
      if (body.episodes.length === 0) out.empty++;
      cursor = body.cursor;
      if (!cursor) break;
    }
  }
  out.times.sort((a, b) => a - b);
  return out;
}

/** The same pages as a bare SQL query on the same database file (no HTTP, no auth, no serialization). */
function listViaSql(file: string, orgId: string, queries: ListQuery[], pages: number): PageTimes {
  const db = new Database(file, { readonly: true });
  const out: PageTimes = { times: [], rows: 0, empty: 0, perPair: new Map() };
  try {
    const statements = new Map<string, Database.Statement>();
    for (const q of queries) {
      const where = ['e.org_id = ?', 'e.seq > ?'];
      const params: unknown[] = [];
      for (const [k, v] of q.filters) {
        const f = FILTERS.find((x) => x.key === k)!;
        if (f.column) where.push(`e.${f.column} = ?`);
        else where.push("EXISTS (SELECT 1 FROM episode_attrs x WHERE x.org_id = e.org_id AND x.layer = 'm' AND x.key = 'site' AND x.value = ? AND x.seq = e.seq)");
        params.push(v);
      }
      const sql = `SELECT e.* FROM episodes e WHERE ${where.join(' AND ')} ORDER BY e.seq LIMIT ?`;
      const stmt = statements.get(sql) ?? statements.set(sql, db.prepare(sql)).get(sql)!;
      let after = 0;
      for (let p = 0; p < pages; p++) {
        const t0 = performance.now();
        const rows = stmt.all(orgId, after, ...params, PAGE + 1) as { seq: number }[];
        const ms = performance.now() - t0;
        out.times.push(ms);
        (out.perPair.get(q.pair) ?? out.perPair.set(q.pair, []).get(q.pair)!).push(ms);
        const page = rows.slice(0, PAGE);
        out.rows += page.length;
        if (page.length === 0) out.empty++;
        if (rows.length <= PAGE) break;
        after = page[page.length - 1]!.seq;
      }
    }
  } finally {
    db.close();
  }
  out.times.sort((a, b) => a - b);
  return out;
}

/** Baseline of the export: every row of the org by a bare SELECT, written as JSON lines (and dropped). */
function rawExport(file: string, orgId: string): { rows: number; bytes: number; rps: number } {
  const db = new Database(file, { readonly: true });
  try {
    const t0 = performance.now();
    let rows = 0;
    let bytes = 0;
    for (const r of db.prepare('SELECT * FROM episodes WHERE org_id = ? ORDER BY seq').iterate(orgId)) {
      bytes += JSON.stringify(r).length + 1;
      rows++;
    }
    return { rows, bytes, rps: rate(rows, performance.now() - t0) };
  } finally {
    db.close();
  }
}

function num(raw: unknown, name: string, min = 1): number {
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min) throw new Error(`--${name} must be a whole number >= ${min}, got ${String(raw)}`);
  return n;
}

export const episodes: BenchModule = {
  description: 'indexing rate (store, MQTT) vs raw SQLite inserts of the same rows; filtered list pages and export at 1,000,000 episodes',
  async run(argv) {
    const args = parseBenchArgs(argv, {
      episodes: { type: 'string', default: '1000000' },
      'mqtt-robots': { type: 'string', default: '20' },
      'mqtt-per-robot': { type: 'string', default: '500' },
      'in-flight': { type: 'string', default: '32' },
      rounds: { type: 'string', default: '4' },
      pages: { type: 'string', default: '5' },
    });
    const n = num(args.extra.episodes, 'episodes');
    const robots = num(args.extra['mqtt-robots'], 'mqtt-robots');
    const perRobot = num(args.extra['mqtt-per-robot'], 'mqtt-per-robot');
    const inFlight = num(args.extra['in-flight'], 'in-flight');
    const rounds = num(args.extra.rounds, 'rounds');
    const pages = num(args.extra.pages, 'pages');
    const mqttN = robots * perRobot;
    const dir = mkdtempSync(join(tmpdir(), 'fleet-bench-episodes-'));
    try {
      log(`${n} episodes; MQTT ${robots} robots x ${perRobot} reports, ${inFlight} in flight each; node ${process.version}`);
      log(`raw SQLite batched insert of the same ${n} reports into an empty table...`);
      const raw = rawSqliteInsert(join(dir, 'raw-store.sqlite'), n, (i) => syntheticReport(i));
      log("store ingest into an empty index (the cloud's own transaction: row, indexes, attributes, event)...");
      const dataDir = join(dir, 'cloud');
      const ingest = await storeIngest(dataDir, n);
      log(`raw SQLite batched insert of the same ${mqttN} reports the robots send, into an empty table...`);
      const rawMqtt = rawSqliteInsert(join(dir, 'raw-mqtt.sqlite'), mqttN, mqttReport(perRobot));
      log(`store ingest of the same ${mqttN} reports into an empty index (the MQTT figures' baseline)...`);
      const storeMqtt = await storeIngest(join(dir, 'store-mqtt'), mqttN, mqttReport(perRobot));
      log(`MQTT ingest into an empty cloud: ${robots} robots x ${perRobot} reports, one per publish (outbox protocol 1)...`);
      const viaMqttSingle = await mqttIngest(robots, perRobot, inFlight, 1);
      const batch = Math.max(1, Math.min(OUTBOX_BATCH_MAX, Math.floor(inFlight / 2)));
      log(`MQTT ingest into an empty cloud: ${robots} robots x ${perRobot} reports, batches of up to ${batch} (outbox protocol 2, as the agent sends them)...`);
      const viaMqtt = await mqttIngest(robots, perRobot, inFlight, batch);

      log(`list pages and export at ${n}...`);
      await using cloud = await startCloud({ dataDir, logLevel: 'warn', args: BENCH_SERVE_ARGS });
      await liftRequestLimits(cloud);
      const dbFile = join(dataDir, DATABASE_FILE);
      const queries = listQueries(rounds);
      const api = await listViaApi(cloud.http, ingest.key, queries, pages);
      const sql = listViaSql(dbFile, ingest.orgId, queries, pages);
      if (api.rows !== sql.rows) throw new BenchFailure(`list: the API returned ${api.rows} rows, the bare SQL ${sql.rows}: they did not read the same pages`);

      // Export every row, page by page, as a pipeline would.
      const before = memoryMb(cloud.process.pid);
      const peakReset = resetPeakRss(cloud.process.pid);
      let exported = 0;
      let cursor: string | null = null;
      const t0 = performance.now();
      do {
        const res: Response = await fetch(`${cloud.http}/v1/episodes/export?limit=5000${cursor ? `&cursor=${cursor}` : ''}`, {
          headers: { authorization: `Bearer ${ingest.key}` },
        });
        const text = await res.text();
        if (!res.ok) throw new BenchFailure(`GET /v1/episodes/export: HTTP ${res.status} ${text.slice(0, 200)}`);
        exported += text.length === 0 ? 0 : text.split('\n').length - 1;
        cursor = res.headers.get('x-next-cursor');
      } while (cursor);
      const exportMs = performance.now() - t0;
      const after = memoryMb(cloud.process.pid);
      if (exported !== n) throw new BenchFailure(`export: ${exported} rows of ${n}`);
      const exportRps = rate(exported, exportMs);
      const rssGrowth = after.hwm - before.rss;
      const rawOut = rawExport(dbFile, ingest.orgId);

      const p = (xs: number[], q: number) => percentile([...xs].sort((a, b) => a - b), q);
      process.stdout.write(
        `${table(
          ['indexing into an empty index', 'rows', 'rows/s', 'baseline rows/s', 'ratio'],
          [
            ['store ingest (batches of 1000) vs raw batched insert', String(n), fmt(ingest.rps, 0), fmt(raw, 0), fmt(ingest.rps / raw, 3)],
            [`store ingest of the MQTT reports (batches of 1000) vs raw batched insert`, String(mqttN), fmt(storeMqtt.rps, 0), fmt(rawMqtt, 0), fmt(storeMqtt.rps / rawMqtt, 3)],
            [`over MQTT with acks, one per publish (${robots} robots, ${inFlight} in flight) vs store ingest`, String(mqttN), fmt(viaMqttSingle.rps, 0), fmt(storeMqtt.rps, 0), fmt(viaMqttSingle.rps / storeMqtt.rps, 3)],
            [`over MQTT with acks, batches of ${batch} (${robots} robots, ${inFlight} in flight) vs store ingest`, String(mqttN), fmt(viaMqtt.rps, 0), fmt(storeMqtt.rps, 0), fmt(viaMqtt.rps / storeMqtt.rps, 3)],
          ],
        )}\n(MQTT: acks counted once by msg_id, ${viaMqttSingle.duplicates + viaMqtt.duplicates} duplicates ignored; ${viaMqttSingle.publishes} and ${viaMqtt.publishes} report publishes)\n\n` +
          `${table(
            [`GET /v1/episodes at ${n}, limit ${PAGE}, up to ${pages} pages by cursor`, 'pages', 'p50 ms', 'p99 ms', 'SQL p50', 'SQL p99'],
            [
              ...[...api.perPair].map(([pair, xs]) => {
                const s = sql.perPair.get(pair) ?? [];
                return [pair, String(xs.length), fmt(p(xs, 50)), fmt(p(xs, 99)), fmt(p(s, 50), 3), fmt(p(s, 99), 3)];
              }),
              ['all pairs', String(api.times.length), fmt(percentile(api.times, 50)), fmt(percentile(api.times, 99)), fmt(percentile(sql.times, 50), 3), fmt(percentile(sql.times, 99), 3)],
            ],
          )}\n(${queries.length} queries over ${rounds} rounds, ${api.empty} empty pages (empty intersections), ${api.rows} rows; baseline: a bare SQL SELECT of the same pages on the same file)\n\n` +
          `export: ${exported} rows in ${fmt(exportMs / 1000, 1)} s = ${fmt(exportRps, 0)} rows/s (bare SELECT as JSON lines: ${fmt(rawOut.rps, 0)} rows/s, ratio ${fmt(exportRps / rawOut.rps, 3)}); ` +
          `cloud RSS ${fmt(before.rss, 0)} MiB before, peak ${fmt(after.hwm, 0)} MiB during (+${fmt(rssGrowth, 0)} MiB${peakReset ? '' : ', peak since start'})\n`,
      );
      const rows: SummaryRow[] = [
        row({ name: `store ingest, ${n} rows into empty`, figure: ingest.rps, unit: 'rows/s', baseline: raw, baselineUnit: 'rows/s', baselineName: 'raw batched insert, same rows' }),
        row({ name: `MQTT ingest with acks, ${mqttN} rows into empty`, figure: viaMqtt.rps, unit: 'rows/s', baseline: storeMqtt.rps, baselineUnit: 'rows/s', baselineName: `store ingest, same rows; batches of ${batch} per publish` }),
        row({ name: `MQTT ingest with acks, one per publish, ${mqttN} rows into empty`, figure: viaMqttSingle.rps, unit: 'rows/s', baseline: storeMqtt.rps, baselineUnit: 'rows/s', baselineName: 'store ingest, same rows; protocol 1' }),
        row({ name: `list page at ${n}, 2 filters, p50`, figure: percentile(api.times, 50), unit: 'ms', baseline: percentile(sql.times, 50), baselineUnit: 'ms', baselineName: 'bare SQL, same pages' }),
        row({ name: `list page at ${n}, 2 filters, p99`, figure: percentile(api.times, 99), unit: 'ms', baseline: percentile(sql.times, 99), baselineUnit: 'ms', baselineName: 'bare SQL, same pages' }),
        row({ name: `export at ${n}`, figure: exportRps, unit: 'rows/s', baseline: rawOut.rps, baselineUnit: 'rows/s', baselineName: 'bare SELECT as JSON lines' }),
        row({ name: `export at ${n}, peak RSS growth`, figure: rssGrowth, unit: 'MiB', baseline: null, baselineUnit: null }),
      ];
      process.stdout.write(
        `${JSON.stringify({
          bench: 'episodes',
          episodes: n,
          raw_insert_rps: raw,
          store_ingest_rps: ingest.rps,
          mqtt_reports: mqttN,
          raw_insert_mqtt_rows_rps: rawMqtt,
          store_ingest_mqtt_rows_rps: storeMqtt.rps,
          mqtt_ingest_rps: viaMqtt.rps,
          mqtt_batch: batch,
          mqtt_publishes: viaMqtt.publishes,
          mqtt_ingest_single_rps: viaMqttSingle.rps,
          mqtt_acked: viaMqtt.acked,
          mqtt_duplicate_acks: viaMqtt.duplicates,
          list: {
            queries: queries.length,
            pages: api.times.length,
            empty_pages: api.empty,
            api_p50_ms: percentile(api.times, 50),
            api_p99_ms: percentile(api.times, 99),
            sql_p50_ms: percentile(sql.times, 50),
            sql_p99_ms: percentile(sql.times, 99),
          },
          export_rows: exported,
          export_rps: exportRps,
          raw_export_rps: rawOut.rps,
          cloud_rss_mb_before_export: before.rss,
          cloud_peak_rss_mb_during_export: after.hwm,
        })}\n`,
      );
      return rows;
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
};
