/**
 * The live event stream against a real `fleet-cloud serve`, in two parts:
 *  - delivery: `--streams` open `GET /v1/events/stream` connections (one organization, the
 *    console's case times many tabs or users) while enrolled robots ingest `--events` episode
 *    reports over MQTT; events/s is from the first report published to the moment every stream
 *    has received every `episode.finalized`. Next to it, in the same run and from the same
 *    ingest, webhook delivery of the same events to one subscription on a local HTTPS receiver
 *    (the baseline: the other way out of the same log). The ingest rate is printed too: both
 *    figures are bounded by it.
 *  - the console's first load: the gzipped size of the JS and CSS in console/dist/assets, what a
 *    browser fetches before the first page shows ("console not built" without the folder).
 * Prints figures and the ratio; asserts nothing about time.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { gzipSync } from 'node:zlib';
import { createTestPki, startHttpsReceiver } from '../cloud/src/egress/test-https.js';
import { REPO_ROOT, startCloud } from '../test/support/cloud.js';
import { parseBenchArgs, type BenchModule } from './lib/args.js';
import { BENCH_SERVE_ARGS, liftRequestLimits } from './lib/limits.js';
import { fmt, table } from './lib/measure.js';
import { enrollRobots, publishReports } from './lib/mqtt-ingest.js';
import { syntheticReport } from './lib/reports.js';
import { BenchFailure, row, type SummaryRow } from './lib/summary.js';

const FINALIZED = 'event: episode.finalized\n';

/** One open stream, counting the episode.finalized frames it has read and when it had `target`. */
interface StreamCounter {
  count: number;
  doneAt: number | null;
  close(): void;
}

async function openStream(url: string, key: string, target: () => number): Promise<StreamCounter> {
  const ac = new AbortController();
  const res = await fetch(`${url}/v1/events/stream?types=episode.finalized`, { headers: { authorization: `Bearer ${key}` }, signal: ac.signal });
  if (res.status !== 200 || !res.body) throw new BenchFailure(`event stream: HTTP ${res.status} ${await res.text()}`);
  const c: StreamCounter = { count: 0, doneAt: null, close: () => ac.abort() };
  const reader: ReadableStreamDefaultReader<Uint8Array> = res.body.getReader();
  const decoder = new TextDecoder();
  void (async () => {
    let tail = '';
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return;
        // Frames are counted by their event line; a line split across chunks is kept for the next.
        const text = tail + decoder.decode(value, { stream: true });
        let at = text.indexOf(FINALIZED);
        let last = 0;
        while (at >= 0) {
          c.count++;
          last = at + FINALIZED.length;
          at = text.indexOf(FINALIZED, last);
        }
        tail = text.slice(Math.max(last, text.length - FINALIZED.length));
        if (c.doneAt === null && c.count >= target()) c.doneAt = performance.now();
      }
    } catch {
      // Closed by the benchmark.
    }
  })();
  return c;
}

async function waitFor(check: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) return false;
    await new Promise((r) => setTimeout(r, 20));
  }
  return true;
}

/** The gzipped bytes of every .js and .css file in console/dist/assets, or null when it is not built. */
export function consoleFirstLoad(dir = join(REPO_ROOT, 'console', 'dist', 'assets')): { files: number; raw: number; gzip: number } | null {
  if (!existsSync(dir)) return null;
  let files = 0;
  let raw = 0;
  let gzip = 0;
  for (const name of readdirSync(dir)) {
    if (!/\.(js|css)$/.test(name)) continue;
    const bytes = readFileSync(join(dir, name));
    files++;
    raw += bytes.length;
    gzip += gzipSync(bytes, { level: 9 }).length;
  }
  return { files, raw, gzip };
}

export const stream: BenchModule = {
  description: 'events/s from ingest to N open event streams vs webhook delivery of the same events; the console first-load size',
  async run(argv) {
    const args = parseBenchArgs(argv, {
      streams: { type: 'string' },
      events: { type: 'string' },
      robots: { type: 'string' },
      'in-flight': { type: 'string' },
      wait: { type: 'string' },
    });
    const streams = Math.max(1, Number(args.extra.streams ?? 100));
    const robots = Math.max(1, Number(args.extra.robots ?? 10));
    const perRobot = Math.max(1, Math.ceil(Number(args.extra.events ?? 5000) / robots));
    const events = robots * perRobot;
    const inFlight = Math.max(1, Number(args.extra['in-flight'] ?? 16));
    const waitS = Math.max(1, Number(args.extra.wait ?? 300));
    const rows: SummaryRow[] = [];

    const pki = createTestPki();
    const delivered = new Set<string>();
    let webhookDoneAt: number | null = null;
    const rx = await startHttpsReceiver(pki.issue(['localhost'], ['127.0.0.1']), (req, res) => {
      const id = req.headers['x-service-event-id'];
      if (typeof id === 'string') delivered.add(id);
      if (webhookDoneAt === null && delivered.size >= events) webhookDoneAt = performance.now();
      res.writeHead(200).end();
    });
    const trim = setInterval(() => rx.requests.splice(0), 1000);
    const cloud = await startCloud({ args: ['--egress-allow-loopback', '--egress-ca-file', pki.caFile, '--event-streams-per-org', String(streams + 10), ...BENCH_SERVE_ARGS], logLevel: 'warn' });
    const open: StreamCounter[] = [];
    try {
      await liftRequestLimits(cloud);
      const hook = await cloud.fetch('/v1/webhooks', { method: 'POST', json: { url: `https://127.0.0.1:${rx.port}/hook`, events: ['episode.finalized'] } });
      if (hook.status !== 201) throw new BenchFailure(`create subscription: ${hook.status} ${await hook.text()}`);
      const clients = await enrollRobots(cloud, robots);
      for (let i = 0; i < streams; i++) open.push(await openStream(cloud.http, cloud.adminKey, () => events));

      const t0 = performance.now();
      const ingest = await publishReports(clients, perRobot, inFlight, (i) => syntheticReport(i, 'st'));
      const ingestRate = (ingest.acked / ingest.ms) * 1000;
      const streamsDone = await waitFor(() => open.every((s) => s.doneAt !== null), waitS * 1000);
      const hooksDone = await waitFor(() => webhookDoneAt !== null, waitS * 1000);
      for (const c of clients) await c.c.endAsync();
      if (!streamsDone) throw new BenchFailure(`stream: INCOMPLETE, ${open.filter((s) => s.doneAt !== null).length} of ${streams} streams got all ${events} events within ${waitS} s (least: ${Math.min(...open.map((s) => s.count))})`);
      if (!hooksDone) throw new BenchFailure(`stream: INCOMPLETE, ${delivered.size} of ${events} webhook deliveries within ${waitS} s`);
      const streamsAt = Math.max(...open.map((s) => s.doneAt!));
      const streamRate = (events / (streamsAt - t0)) * 1000;
      const webhookRate = (events / (webhookDoneAt! - t0)) * 1000;
      const extra = Math.max(...open.map((s) => s.count)) - events;

      process.stdout.write(
        `stream: ${robots} robots x ${perRobot} reports = ${events} episode.finalized events over MQTT (${inFlight} in flight each), ` +
          `ingested at ${fmt(ingestRate, 0)} reports/s; ${streams} open streams, 1 webhook subscription\n`,
      );
      process.stdout.write(
        `${table(
          ['way out', 'events', 'receivers', 'events/s (ingest start to last receipt)', 'frames/s'],
          [
            ['event stream', String(events), String(streams), fmt(streamRate, 0), fmt(streamRate * streams, 0)],
            ['webhooks (baseline)', String(events), '1', fmt(webhookRate, 0), fmt(webhookRate, 0)],
          ],
        )}\n`,
      );
      process.stdout.write(`ratio (streams / webhooks): ${fmt(streamRate / webhookRate, 3)}${extra > 0 ? `; ${extra} events more than sent on a stream (duplicates!)` : ''}\n`);
      if (extra > 0) throw new BenchFailure(`stream: a stream received ${extra} events more than were sent`);
      rows.push(
        row({
          name: `event stream: ${events} events to ${streams} open streams (all received by all)`,
          figure: streamRate,
          unit: 'events/s',
          baseline: webhookRate,
          baselineUnit: 'events/s',
          baselineName: 'webhook delivery of the same events, 1 subscription',
          note: `ingest ${fmt(ingestRate, 0)} reports/s over MQTT`,
        }),
      );
    } finally {
      for (const s of open) s.close();
      clearInterval(trim);
      await cloud[Symbol.asyncDispose]();
      await rx.close();
      pki.cleanup();
    }

    const size = consoleFirstLoad();
    if (size === null) {
      process.stdout.write('console first load: console not built (npm run build -w console)\n');
    } else {
      process.stdout.write(`console first load: ${size.files} JS/CSS files in console/dist/assets, ${fmt(size.raw / 1024, 1)} KiB, ${fmt(size.gzip / 1024, 1)} KiB gzipped\n`);
      rows.push(row({ name: `console first load (JS+CSS of console/dist/assets, gzip -9, ${size.files} files)`, figure: size.gzip / 1024, unit: 'KiB', baseline: size.raw / 1024, baselineUnit: 'KiB', baselineName: 'the same files uncompressed' }));
    }
    return rows;
  },
};
