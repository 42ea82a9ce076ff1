/**
 * `npm run demo`: the whole service on this machine, syncing on its own, until Ctrl-C.
 *
 * Starts, each as its own process on loopback: a signature-checking S3-compatible store (the
 * tests' s3rver launcher), `fleet-cloud serve` on a temp data dir, the reference grant provider
 * over HTTPS (a throwaway CA made with openssl; the cloud trusts it through --egress-ca-file),
 * an `external` destination pointing at it, and `fleet-sim fleet` whose operators record
 * episodes by themselves. The console plays recordings straight from the bucket: the cloud
 * allows the bucket's origin (`--read-origin`) and the bucket has a CORS rule for the console's
 * origin, as a customer sets both up. Then it prints, once a second, how episodes go from
 * reported to verified and which objects appear in the bucket, and with the first verified
 * episode the console address that plays it. SIGINT/SIGTERM (or SIGHUP) stops every
 * process, newest first, removes the temp dirs and exits 0.
 *
 * Options: --robots N (3), --episodes-per-minute N (per robot, 4), --poll-ms MS (1000).
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Episode, Robot } from '@fleet/protocol';
import { createTestPki, type TestPki } from '../cloud/src/egress/test-https.js';
import { makeTempDir, startCloud, type CloudProcess } from '../test/support/cloud.js';
import { startGrantProvider } from '../test/support/grant-provider.js';
import { freePort, okJson } from '../test/support/http.js';
import type { SpawnedProcess } from '../test/support/process.js';
import { createEnrollmentToken, startFleet } from '../test/support/robots.js';
import { startS3Server, type S3ServerProcess } from '../test/support/s3-server.js';
import { EpisodeWatcher, formatBytes } from './watch.js';

const { values: opts } = parseArgs({
  options: {
    robots: { type: 'string', default: '3' },
    'episodes-per-minute': { type: 'string', default: '4' },
    'poll-ms': { type: 'string', default: '1000' },
  },
});
const robotCount = Number(opts.robots);
const perMinute = Number(opts['episodes-per-minute']);
const pollMs = Number(opts['poll-ms']);
if (!(Number.isInteger(robotCount) && robotCount >= 1 && perMinute > 0 && pollMs >= 100)) {
  process.stderr.write('usage: npm run demo -- [--robots N] [--episodes-per-minute N] [--poll-ms MS]\n');
  process.exit(2);
}

// The AWS SDK (the bucket listing here, the provider's presigner) warns on every start that its
// 2027 releases need Node 22; the version is pinned, and the warning is noise in a demo.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';

const time = () => new Date().toISOString().slice(11, 19);
const say = (line = '') => process.stdout.write(`${line}\n`);
const log = (line: string) => say(`${time()}  ${line}`);

// A signal may come at any point, also while starting: the start-up below checks `stopping`
// between steps, and everything started so far is stopped in reverse order.
let stopping: NodeJS.Signals | null = null;
let wake: () => void = () => undefined;
const stopped = new Promise<void>((resolve) => {
  wake = resolve;
});
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.on(signal, () => {
    if (stopping !== null) return; // Ctrl-C reaches the children too (same process group); one shutdown is enough
    stopping = signal;
    wake();
  });
}

/** What to undo, in start order; run newest first. */
const cleanups: { name: string; run: () => PromiseLike<void> }[] = [];
const processes: { name: string; proc: SpawnedProcess }[] = [];

class Stopping extends Error {}
const checkpoint = () => {
  if (stopping !== null) throw new Stopping();
};

async function start(): Promise<{ cloud: CloudProcess; s3: S3ServerProcess; robots: readonly string[] }> {
  const tmp = await makeTempDir('fleet-demo-');
  cleanups.push({ name: `temp dir ${tmp.path}`, run: () => tmp[Symbol.asyncDispose]() });

  // A CA for the grant provider's HTTPS certificate: the cloud sends grant requests over HTTPS only.
  let pki: TestPki;
  try {
    pki = createTestPki();
  } catch (err) {
    throw new Error(`could not make a CA for the grant provider's HTTPS certificate (is openssl on PATH?): ${err instanceof Error ? err.message : String(err)}`);
  }
  cleanups.push({ name: 'CA dir', run: async () => pki.cleanup() });
  const pair = pki.issue(['localhost'], ['127.0.0.1']);
  const tls = { certFile: join(tmp.path, 'provider.crt'), keyFile: join(tmp.path, 'provider.key'), ca: pki.caPem };
  writeFileSync(tls.certFile, pair.cert);
  writeFileSync(tls.keyFile, pair.key, { mode: 0o600 });
  checkpoint();

  const s3 = await startS3Server({ bucket: 'episodes' });
  cleanups.push({ name: 's3 store', run: () => s3.close() });
  processes.push({ name: 's3', proc: s3.process });
  checkpoint();

  // The console reads recordings from the bucket itself: the cloud's CSP lets the page connect to
  // the bucket's origin, and the bucket's CORS rule lets the console's origin read (docs/console.md).
  const bucketOrigin = new URL(s3.endpoint).origin;
  const cloud = await startCloud({
    dataDir: join(tmp.path, 'cloud'),
    logLevel: 'warn',
    args: ['--egress-allow-loopback', '--egress-ca-file', pki.caFile, '--read-origin', bucketOrigin],
  });
  cleanups.push({ name: 'cloud', run: () => cloud[Symbol.asyncDispose]() });
  processes.push({ name: 'cloud', proc: cloud.process });
  checkpoint();
  const consoleOrigins = [cloud.http, cloud.http.replace('//127.0.0.1:', '//localhost:')];
  await s3.setCors(consoleOrigins);
  checkpoint();

  // The destination first (its dsec_ secret is shown once), then the provider on the port it names.
  const port = await freePort();
  const destination = await okJson<{ id: string; secret: string }>(
    await cloud.fetch('/v1/destinations', { method: 'POST', json: { type: 'external', url: `https://127.0.0.1:${port}/grant` } }),
  );
  const provider = await startGrantProvider({ s3, secret: destination.secret, tls, args: ['--port', String(port), '--log-level', 'warn'] });
  cleanups.push({ name: 'grant provider', run: () => provider[Symbol.asyncDispose]() });
  processes.push({ name: 'provider', proc: provider.process });
  checkpoint();
  const check = await cloud.client().destinations.check(destination.id);
  if (check.result !== 'pass') throw new Error(`the destination check did not pass: ${JSON.stringify(check)}`);

  const token = await createEnrollmentToken(cloud, { maxUses: robotCount, namePrefix: 'demo' });
  checkpoint();
  const fleet = await startFleet(cloud, {
    count: robotCount,
    token: token.token,
    dataDir: join(tmp.path, 'fleet'),
    autoEpisodes: perMinute,
    logLevel: 'warn',
    // The S3 store is plain http on loopback.
    args: ['--allow-http-uploads', '--name-prefix', 'demo'],
  });
  cleanups.push({ name: 'fleet', run: () => fleet[Symbol.asyncDispose]() });
  processes.push({ name: 'fleet', proc: fleet.process });
  checkpoint();

  const key = cloud.adminKey;
  say('');
  say('Fleet demo: the cloud, an S3-compatible store, the reference grant provider and a simulated fleet.');
  say('');
  say(`  console      ${cloud.http}/console/  (sign in with the admin key)`);
  say(`  review queue ${cloud.http}${REVIEW_QUEUE}`);
  say(`  API          ${cloud.http}/v1`);
  say(`  API docs     ${cloud.http}/docs`);
  say(`  admin key    ${key}`);
  say(`               curl -s -H 'authorization: Bearer ${key}' ${cloud.http}/v1/episodes`);
  say(`  bucket       ${s3.bucket} at ${s3.endpoint} (path-style, access key and secret ${s3.accessKeyId})`);
  say(`  bucket files ${join(s3.dataDir, s3.bucket)} (s3rver's layout: <key>._S3rver_object)`);
  say(`  bucket CORS  GET, HEAD with Range from ${consoleOrigins.join(', ')}`);
  say(`  provider     ${provider.url}/grant  (destination ${destination.id})`);
  say(`  robots       ${fleet.robots.length}, each starting about ${perMinute} episodes a minute`);
  say(`  cloud data   ${cloud.dataDir}`);
  say(`pids: ${processes.map((p) => `${p.name}=${p.proc.pid}`).join(' ')}`);
  say('');
  say('Episodes go reported → granted → syncing → synced → verified. Ctrl-C stops everything.');
  say('');
  return { cloud, s3, robots: fleet.robots };
}

/** The review queue of the episodes nobody reviewed yet, with three tags to pick with keys 1-3. */
const REVIEW_QUEUE = '/console/review?has_annotation.qa_status=false&tags=good,blurry,collision';

/** Episodes started in the last few minutes: new ones, and those uploading (a few seconds each). */
const RECENT_MS = 5 * 60_000;

/**
 * The episodes to show this round: every page of those started within RECENT_MS (the list is in
 * index order, oldest first, so one page of everything would stop showing new episodes), plus,
 * one by one, any older episode the watcher still waits on (an upload being retried).
 */
async function pollEpisodes(cloud: CloudProcess, watcher: EpisodeWatcher): Promise<Episode[]> {
  const out: Episode[] = [];
  const from = encodeURIComponent(new Date(Date.now() - RECENT_MS).toISOString());
  let cursor: string | null = null;
  do {
    const q: string = `from=${from}&limit=100${cursor === null ? '' : `&cursor=${encodeURIComponent(cursor)}`}`;
    const page: { episodes: Episode[]; cursor: string | null } = await okJson(await cloud.fetch(`/v1/episodes?${q}`));
    out.push(...page.episodes);
    cursor = page.cursor;
  } while (cursor !== null);
  const listed = new Set(out.map((e) => e.id));
  for (const id of watcher.unsettled()) {
    if (!listed.has(id)) out.push(await okJson<Episode>(await cloud.fetch(`/v1/episodes/${id}`)));
  }
  return out;
}

async function watch(cloud: CloudProcess, s3: S3ServerProcess): Promise<void> {
  const names = new Map<string, string>();
  const refreshNames = async () => {
    const page = await okJson<{ robots: Robot[] }>(await cloud.fetch('/v1/robots?limit=100'));
    for (const r of page.robots) names.set(r.id, r.name);
  };
  await refreshNames();
  const watcher = new EpisodeWatcher((id) => names.get(id) ?? id);
  const objects = new Set<string>();
  let lastProblem = '';
  let playable = false;
  // A child that dies on its own ends the demo (with its last output), as a failed start does.
  const died = Promise.race(processes.map(async (p) => ({ ...p, exit: await p.proc.exited })));

  while (stopping === null) {
    try {
      const episodes = await pollEpisodes(cloud, watcher);
      if (episodes.some((e) => !names.has(e.robot_id))) await refreshNames();
      for (const line of watcher.update(episodes)) log(line);
      // The first episode whose recording is in the bucket: where to watch it in the console.
      const first = playable ? undefined : episodes.find((e) => e.outcome !== 'discarded' && e.replicas[0]?.state === 'verified');
      if (first) {
        playable = true;
        log(`play it      ${cloud.http}/console/episodes/${first.id}  (the console reads the recording from the bucket)`);
      }
      for (const o of (await s3.listObjects()).sort((a, b) => a.key.localeCompare(b.key))) {
        if (objects.has(o.key)) continue;
        objects.add(o.key);
        log(`bucket  + ${o.key}  ${formatBytes(o.size)}`);
      }
      lastProblem = '';
    } catch (err) {
      const problem = err instanceof Error ? err.message : String(err);
      if (problem !== lastProblem && stopping === null) log(`(polling failed, trying again: ${problem})`);
      lastProblem = problem;
    }
    const next = await Promise.race([sleep(pollMs).then(() => null), stopped.then(() => null), died]);
    if (next !== null && stopping === null) {
      throw new Error(`${next.name} exited on its own (code ${next.exit.code}, signal ${next.exit.signal})\n${next.proc.describe()}`);
    }
  }
  say('');
  log(`${stopping}: stopping (${watcher.verified} episodes verified, ${objects.size} objects in the bucket)`);
}

async function stopAll(): Promise<boolean> {
  let ok = true;
  for (const c of cleanups.reverse()) {
    try {
      await c.run();
      log(`stopped ${c.name}`);
    } catch (err) {
      ok = false;
      process.stderr.write(`demo: stopping ${c.name} failed: ${err instanceof Error ? err.message : String(err)}\n`);
    }
  }
  return ok;
}

let code = 0;
try {
  const { cloud, s3 } = await start();
  await watch(cloud, s3);
} catch (err) {
  if (!(err instanceof Stopping)) {
    process.stderr.write(`demo: ${err instanceof Error ? err.message : String(err)}\n`);
    code = 1;
  }
}
if (!(await stopAll())) code = 1;
if (code === 0) log('everything stopped, temp dirs removed');
process.exit(code);
