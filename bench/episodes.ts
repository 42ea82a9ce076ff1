/**
 * The episode index: how fast reports are indexed (over MQTT from robots, and through the
 * store) against raw SQLite inserts of the same count in the same run; how fast filtered list
 * pages answer at 1,000,000 episodes; and export throughput with the server's peak memory.
 * Prints figures and ratios; asserts nothing about time.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import Database from 'better-sqlite3';
import mqtt from 'mqtt';
import { systemClock, topics, type OutboxAck } from '@fleet/protocol';
import { createApiKey } from '../cloud/src/api-keys.js';
import { openSqliteStore } from '../cloud/src/store/index.js';
import { startCloud } from '../test/support/cloud.js';
import { parseBenchArgs, type BenchModule } from './lib/args.js';
import { fmt, table } from './lib/measure.js';
import { robotOf, syntheticReport } from './lib/reports.js';
import { BENCH_SERVE_ARGS, liftRequestLimits } from './lib/limits.js';

const BATCH = 1000;

function rate(n: number, ms: number): number {
  return (n / ms) * 1000;
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

function rssOf(pid: number): { rss_mb: number; peak_mb: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (field: string) => Number(new RegExp(`${field}:\\s+(\\d+)`).exec(status)?.[1] ?? NaN);
  return { rss_mb: kb('VmRSS') / 1024, peak_mb: kb('VmHWM') / 1024 };
}

/** Baseline: the same number of rows, one JSON column, batched into transactions of BATCH. */
function rawSqliteInsert(dir: string, n: number): number {
  const db = new Database(join(dir, 'raw.sqlite'));
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.exec('CREATE TABLE raw (id TEXT PRIMARY KEY, org_id TEXT NOT NULL, body TEXT NOT NULL)');
  const insert = db.prepare('INSERT INTO raw (id, org_id, body) VALUES (?, ?, ?)');
  const tx = db.transaction((from: number, to: number) => {
    for (let i = from; i < to; i++) {
      const r = syntheticReport(i, 'r');
      insert.run(r.id, 'org_bench', JSON.stringify(r));
    }
  });
  const t0 = performance.now();
  for (let i = 0; i < n; i += BATCH) tx(i, Math.min(n, i + BATCH));
  const ms = performance.now() - t0;
  db.close();
  return rate(n, ms);
}

/** Fills a cloud data dir with n episodes through the store's own ingest; returns rows/s and the admin key. */
export async function storeIngest(dataDir: string, n: number): Promise<{ rps: number; orgId: string; key: string }> {
  const store = openSqliteStore(dataDir);
  const orgId = 'org_bench';
  await store.orgs.create({ id: orgId, name: 'bench', tier: 'enterprise', createdAt: systemClock.now() });
  const org = (await store.orgs.get(orgId))!;
  const { key } = await createApiKey(store, systemClock, { org, name: 'bench', scopes: ['admin'], expiresAt: null, createdBy: 'bench' });
  const t0 = performance.now();
  for (let i = 0; i < n; i += BATCH) {
    const items = [];
    for (let j = i; j < Math.min(n, i + BATCH); j++) {
      items.push({ orgId, robotId: robotOf(j), report: syntheticReport(j), reportedAt: systemClock.now() });
    }
    await store.episodes.ingest(items);
    if (i > 0 && i % 100_000 === 0) process.stderr.write(`  indexed ${i}\n`);
  }
  const ms = performance.now() - t0;
  await store.close();
  return { rps: rate(n, ms), orgId, key };
}

/** Enrolled robots publish outbox reports over MQTT and wait for the cloud's acks. */
async function mqttIngest(robots: number, perRobot: number, inFlight: number): Promise<{ rps: number; acked: number }> {
  await using cloud = await startCloud({ logLevel: 'warn', args: BENCH_SERVE_ARGS });
  await liftRequestLimits(cloud);
  const tokenRes = await cloud.fetch('/v1/robots/enrollment-tokens', { method: 'POST', json: { max_uses: robots } });
  const { token } = (await tokenRes.json()) as { token: string };
  const clients = [];
  for (let r = 0; r < robots; r++) {
    const res = await cloud.fetch('/v1/robots/enroll', { method: 'POST', key: null, json: { token } });
    const e = (await res.json()) as { robot_id: string; mqtt: { url: string; password: string } };
    const c = await mqtt.connectAsync(e.mqtt.url, { protocolVersion: 4, clientId: e.robot_id, username: e.robot_id, password: e.mqtt.password });
    await c.subscribeAsync(topics.outboxAck(e.robot_id), { qos: 1 });
    clients.push({ id: e.robot_id, c });
  }
  let acked = 0;
  const t0 = performance.now();
  await Promise.all(
    clients.map(({ id, c }, r) => {
      return new Promise<void>((resolve) => {
        let sent = 0;
        let done = 0;
        const send = () => {
          const i = r * perRobot + sent++;
          const body = syntheticReport(i, `m${r}x`);
          void c.publishAsync(topics.outbox(id), JSON.stringify({ msg_id: `episode.report:${body.id}`, kind: 'episode.report', body }), { qos: 1 });
        };
        c.on('message', (_t, payload) => {
          const ack = JSON.parse(payload.toString()) as OutboxAck;
          if (!ack.ok) throw new Error(`refused: ${JSON.stringify(ack)}`);
          acked++;
          done++;
          if (sent < perRobot) send();
          if (done === perRobot) resolve();
        });
        for (let k = 0; k < Math.min(inFlight, perRobot); k++) send();
      });
    }),
  );
  const ms = performance.now() - t0;
  await Promise.all(clients.map(({ c }) => c.endAsync()));
  return { rps: rate(acked, ms), acked };
}

async function timedGets(base: string, key: string, paths: string[]): Promise<{ p50: number; p99: number; n: number }> {
  const times: number[] = [];
  for (const p of paths) {
    const t0 = performance.now();
    const res = await fetch(`${base}${p}`, { headers: { authorization: `Bearer ${key}` } });
    await res.arrayBuffer();
    if (!res.ok) throw new Error(`${p}: HTTP ${res.status}`);
    times.push(performance.now() - t0);
  }
  times.sort((a, b) => a - b);
  return { p50: percentile(times, 50), p99: percentile(times, 99), n: times.length };
}

export const episodes: BenchModule = {
  description: 'indexing rate (MQTT and store) vs raw SQLite inserts; list pages and export at 1,000,000 episodes',
  async run(argv) {
    const args = parseBenchArgs(argv, {
      episodes: { type: 'string', default: '1000000' },
      'mqtt-robots': { type: 'string', default: '20' },
      'mqtt-per-robot': { type: 'string', default: '500' },
      requests: { type: 'string', default: '200' },
    });
    const n = Number(args.extra.episodes);
    const robots = Number(args.extra['mqtt-robots']);
    const perRobot = Number(args.extra['mqtt-per-robot']);
    const requests = Number(args.extra.requests);
    const dir = mkdtempSync(join(tmpdir(), 'fleet-bench-episodes-'));
    try {
      process.stderr.write(`bench episodes: ${n} episodes, node ${process.version}\n`);
      process.stderr.write('raw SQLite batched insert...\n');
      const raw = rawSqliteInsert(dir, n);
      process.stderr.write('store ingest (the cloud\'s own transaction: row, indexes, attributes, event)...\n');
      const dataDir = join(dir, 'cloud');
      const ingest = await storeIngest(dataDir, n);
      process.stderr.write(`MQTT ingest: ${robots} robots x ${perRobot} reports...\n`);
      const viaMqtt = await mqttIngest(robots, perRobot, 32);

      process.stderr.write('list pages and export at full size...\n');
      await using cloud = await startCloud({ dataDir, logLevel: 'warn', args: BENCH_SERVE_ARGS });
      await liftRequestLimits(cloud);
      const rssStart = rssOf(cloud.process.pid);
      const pick = (k: number) => Array.from({ length: requests }, (_, i) => k + i);
      const lists = {
        'no filter': await timedGets(cloud.http, ingest.key, pick(0).map(() => '/v1/episodes?limit=50')),
        robot_id: await timedGets(cloud.http, ingest.key, pick(0).map((i) => `/v1/episodes?limit=50&robot_id=${robotOf(i)}`)),
        'task_id + outcome': await timedGets(cloud.http, ingest.key, pick(0).map((i) => `/v1/episodes?limit=50&task_id=task-${i % 20}&outcome=failure`)),
        'metadata.common (all carry it)': await timedGets(cloud.http, ingest.key, pick(0).map(() => '/v1/episodes?limit=50&metadata.common=yes')),
        'metadata.site (10%)': await timedGets(cloud.http, ingest.key, pick(0).map((i) => `/v1/episodes?limit=50&metadata.site=site-${i % 10}`)),
        'metadata.site + robot_id': await timedGets(cloud.http, ingest.key, pick(0).map((i) => `/v1/episodes?limit=50&metadata.site=site-${i % 10}&robot_id=${robotOf(i)}`)),
      };

      // Export every row, page by page, as a pipeline would.
      let exported = 0;
      let cursor: string | null = null;
      const t0 = performance.now();
      do {
        const res: Response = await fetch(`${cloud.http}/v1/episodes/export?limit=5000${cursor ? `&cursor=${cursor}` : ''}`, {
          headers: { authorization: `Bearer ${ingest.key}` },
        });
        const text = await res.text();
        exported += text.length === 0 ? 0 : text.split('\n').length - 1;
        cursor = res.headers.get('x-next-cursor');
      } while (cursor);
      const exportMs = performance.now() - t0;
      const rssEnd = rssOf(cloud.process.pid);

      process.stdout.write(
        `${table(
          ['indexing', 'rows/s', 'ratio to raw'],
          [
            ['raw SQLite batched insert (baseline)', fmt(raw, 0), '1.000'],
            ['store ingest (batches of 1000)', fmt(ingest.rps, 0), fmt(ingest.rps / raw, 3)],
            [`over MQTT (${robots} robots, 32 in flight each)`, fmt(viaMqtt.rps, 0), fmt(viaMqtt.rps / raw, 3)],
          ],
        )}\n\n${table(
          ['GET /v1/episodes at ' + n, 'p50 ms', 'p99 ms'],
          Object.entries(lists).map(([k, v]) => [k, fmt(v.p50), fmt(v.p99)]),
        )}\n\nexport: ${exported} rows in ${fmt(exportMs / 1000, 1)} s = ${fmt(rate(exported, exportMs), 0)} rows/s; ` +
          `cloud RSS ${fmt(rssStart.rss_mb, 0)} MB before, peak ${fmt(rssEnd.peak_mb, 0)} MB\n`,
      );
      process.stdout.write(
        `${JSON.stringify({
          bench: 'episodes',
          episodes: n,
          raw_insert_rps: raw,
          store_ingest_rps: ingest.rps,
          mqtt_ingest_rps: viaMqtt.rps,
          mqtt_acked: viaMqtt.acked,
          list_ms: lists,
          export_rows: exported,
          export_rps: rate(exported, exportMs),
          cloud_rss_mb_before: rssStart.rss_mb,
          cloud_peak_rss_mb: rssEnd.peak_mb,
        })}\n`,
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
};
