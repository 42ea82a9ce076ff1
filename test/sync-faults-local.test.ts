import { access, open } from 'node:fs/promises';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { HOUR, PRUNE_DELAY_MS, type Episode } from '@fleet/protocol';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createTestPki, type TestPki } from '../cloud/src/egress/test-https.js';
import { startClockedAgent } from './support/clocked-agent.js';
import { makeTempDir, type CloudProcess, type TempDir } from './support/cloud.js';
import { episodeFiles, getEpisode, listEpisodes, recordAtLeast, recordEpisode, recordShortEpisode } from './support/episodes.js';
import { writeProviderTls } from './support/grant-provider.js';
import { okJson } from './support/http.js';
import { startAgentProcess } from './support/robots.js';
import { completes, partPuts } from './support/s3-proxy.js';
import { expectBucketHolds, startSyncStack, type ExpectedEpisode, type SyncStack } from './support/sync-stack.js';
import { waitFor } from './support/wait.js';

/**
 * Faults on the robot's side of sync (issue 12), with real processes: the S3 server, the
 * reference grant provider, `fleet-cloud serve`, and the agent — as `fleet-agent start` where
 * wall-clock time is enough, and as the same `Agent` code in this process on a clock the test
 * moves where hours must pass (a provider down for hours, retention's 72 h). Each test ends
 * with the bucket holding exactly the manifests' bytes of the episodes that verified.
 */

const MiB = 1024 * 1024;
const PART = 5 * MiB;

let pki: TestPki;
let tmp: TempDir;
let tls: { certFile: string; keyFile: string; ca: string };

beforeAll(async () => {
  pki = createTestPki();
  tmp = await makeTempDir('fleet-faults-local-');
  tls = writeProviderTls(pki, tmp.path);
});
afterAll(async () => {
  await tmp?.[Symbol.asyncDispose]();
  pki?.cleanup();
});

interface HealthRow {
  robot_id: string;
  episodes_reported: number;
  unverified: number;
  local_missing: number;
  pressure?: { free_bytes: number; backlog_bytes: number; hours_to_full: number | null; reported_at: string };
}
interface DestinationHealth {
  id: string;
  deferrals_24h: number;
  forwards_24h: number;
  last_deferral: { at: string; reason: string } | null;
}

async function healthRow(cloud: CloudProcess, robotId: string): Promise<HealthRow | undefined> {
  return (await okJson<{ robots: HealthRow[] }>(await cloud.fetch('/v1/sync-health/robots'))).robots.find((r) => r.robot_id === robotId);
}
async function destinationHealth(stack: SyncStack): Promise<DestinationHealth> {
  return (await okJson<{ destinations: DestinationHealth[] }>(await stack.cloud.fetch('/v1/destinations'))).destinations.find((d) => d.id === stack.destinationId)!;
}
function waitReplica(cloud: CloudProcess, episodeId: string, ok: (r: Episode['replicas'][number]) => boolean, what: string): Promise<Episode> {
  return waitFor(
    async () => {
      const ep = await getEpisode(cloud, episodeId);
      return ep?.replicas[0] && ok(ep.replicas[0]) ? ep : undefined;
    },
    { timeoutMs: 60_000, description: `${what} (${episodeId})` },
  );
}
const verified = (cloud: CloudProcess, id: string) => waitReplica(cloud, id, (r) => r.state === 'verified', 'the replica verified');
async function expected(cloud: CloudProcess, dataDir: string, id: string): Promise<ExpectedEpisode> {
  const ep = (await getEpisode(cloud, id))!;
  return { objectKey: ep.replicas[0]!.object_key!, manifest: (await episodeFiles(dataDir, id)).manifest };
}
const present = (dataDir: string, id: string, path: string) =>
  access(join(dataDir, 'episodes', id, ...path.split('/'))).then(
    () => true,
    () => false,
  );

/** When the agent's store says the episode's replica verified (robot clock). */
async function verifiedAt(dataDir: string, episodeId: string): Promise<number> {
  const db = new Database(join(dataDir, 'agent.sqlite'), { readonly: true });
  try {
    return (db.prepare('SELECT verified_at FROM replicas WHERE episode_id = ?').pluck().get(episodeId) as number | null)!;
  } finally {
    db.close();
  }
}

/** Overwrites `length` bytes at `offset` with other bytes: same size, other content. */
async function corrupt(file: string, offset: number, length = 4096): Promise<void> {
  const fh = await open(file, 'r+');
  try {
    const buf = Buffer.alloc(length);
    const { bytesRead } = await fh.read(buf, 0, length, offset);
    for (let i = 0; i < bytesRead; i++) buf[i] = buf[i]! ^ 0xa5;
    await fh.write(buf, 0, bytesRead, offset);
  } finally {
    await fh.close();
  }
}

describe('a local file corrupted after finalize (fleet-agent start)', () => {
  test('multipart and single PUT: the store never gets a complete object, episode.failed says file_changed, the episodes stay unverified and on disk; a healthy episode verifies', async () => {
    // The provider is down while the episodes are recorded and corrupted, so no byte left before.
    const stack = await startSyncStack({
      pki,
      tls,
      retention: 'until_all_verified_plus_72h',
      events: ['episode.failed', 'episode.verified', 'episode.pruned'],
      cloudArgs: ['--grant-retry-after-s', '1'],
      providerArgs: ['--multipart-threshold-bytes', String(PART), '--part-size-bytes', String(PART)],
      providerUp: false,
    });
    try {
      // 2 MiB/s: an episode finished right after it started stays well under one part (a single
      // PUT), and one of more than a part takes a few seconds to record. JSON recordings: one file
      // per episode that holds the byte rate exactly (a ROS 2 bag's zstd chunks make it smaller).
      await using agent = await startAgentProcess(stack.cloud, {
        args: ['--recording-format', 'json', '--bytes-per-second', String(2 * MiB), '--chunk-interval-ms', '50', '--outbox-ack-timeout-ms', '2000', '--allow-http-uploads', '--sync-part-parallel', '1', '--sync-retry-schedule-ms', '300'],
      });
      const dataDir = agent.dataDir;
      const multipart = await recordAtLeast(dataDir, PART + 1);
      const single = await recordShortEpisode(dataDir);
      const healthy = await recordEpisode(dataDir);
      const mp = (await episodeFiles(dataDir, multipart)).manifest.files;
      const sp = (await episodeFiles(dataDir, single)).manifest.files;
      expect(mp).toHaveLength(1);
      expect(mp[0]!.size_bytes).toBeGreaterThan(PART);
      expect(sp).toHaveLength(1);
      // Under one part: the provider grants it a single PUT.
      expect(sp[0]!.size_bytes).toBeLessThan(PART);
      // In part 2 of the multipart file (part 1 goes out and is accepted), in the middle of the other.
      await corrupt(join(dataDir, 'episodes', multipart, mp[0]!.path), PART + 1000);
      await corrupt(join(dataDir, 'episodes', single, sp[0]!.path), Math.floor(sp[0]!.size_bytes / 2));

      await stack.startProvider();
      await verified(stack.cloud, healthy);
      for (const id of [multipart, single]) {
        const ep = await waitReplica(stack.cloud, id, (r) => r.error?.startsWith('file_changed: ') === true, 'the file_changed replica error');
        expect(ep.replicas[0]!.state).not.toBe('verified');
        await waitFor(() => (stack.hooks.of('episode.failed', id).length > 0 ? true : undefined), { timeoutMs: 30_000, description: `episode.failed for ${id}` });
      }

      // The multipart upload's parts may be at the store, but the upload was never completed.
      const mpParts = partPuts(stack.proxy.requests).filter((r) => r.url.includes(multipart));
      expect(mpParts.find((p) => p.partNumber === 1)?.status).toBe(200);
      expect(completes(stack.proxy.requests).filter((r) => r.url.includes(multipart))).toEqual([]);
      // The single PUT never completed: its last piece is held until the digest is known, so the
      // body stops short of its Content-Length (a file of one piece may stop before any byte, and
      // the request then never reaches the store at all).
      expect(stack.proxy.requests.filter((r) => r.method === 'PUT' && r.url.includes(single))).toEqual([]);
      const cut = stack.proxy.incomplete.filter((r) => r.method === 'PUT' && r.url.includes(single));
      expect(cut.length).toBeLessThanOrEqual(1);
      for (const c of cut) expect(c.bodyBytes).toBeLessThan(sp[0]!.size_bytes);

      // Only the healthy episode is in the bucket, byte for byte.
      await expectBucketHolds(stack.s3, [await expected(stack.cloud, dataDir, healthy)]);

      // Reported once each (parked: asking again cannot help), with the reason.
      for (const id of [multipart, single]) {
        const failed = stack.hooks.of('episode.failed', id);
        expect(failed).toHaveLength(1);
        expect(failed[0]).toMatchObject({ episode_id: id, destination_id: stack.destinationId, error: { code: 'file_changed' } });
      }
      expect(stack.hooks.of('episode.verified', healthy)).toHaveLength(1);
      // Parked in the agent's store: no further attempt is scheduled.
      const db = new Database(join(dataDir, 'agent.sqlite'), { readonly: true });
      try {
        const row = db.prepare('SELECT last_error, next_attempt_at FROM replicas WHERE episode_id = ?');
        for (const id of [multipart, single]) expect(row.get(id)).toMatchObject({ last_error: expect.stringMatching(/^file_changed: /) as string, next_attempt_at: null });
      } finally {
        db.close();
      }

      // Unverified in sync health and in the episode list; nothing duplicated; the files stay.
      await waitFor(async () => ((await healthRow(stack.cloud, agent.robotId))?.unverified === 2 ? true : undefined), { description: 'two unverified in sync health' });
      expect(await healthRow(stack.cloud, agent.robotId)).toMatchObject({ episodes_reported: 3, unverified: 2, local_missing: 0 });
      expect((await listEpisodes(stack.cloud, 'sync_state=unverified')).map((e) => e.id).sort()).toEqual([multipart, single].sort());
      expect((await listEpisodes(stack.cloud)).map((e) => e.id).sort()).toEqual([multipart, single, healthy].sort());
      expect(await present(dataDir, multipart, mp[0]!.path)).toBe(true);
      expect(await present(dataDir, single, sp[0]!.path)).toBe(true);
      expect(stack.hooks.deliveries.filter((d) => d.event === 'episode.pruned')).toEqual([]);
    } finally {
      await stack.dispose();
    }
  });
});

describe('the grant provider down for hours (the agent on a clock the test moves)', () => {
  test('the robot keeps every episode and asks again at the deferral interval the whole time, each ask a deferral in destination health; when the provider returns every episode verifies, each object once', async () => {
    const RETRY_AFTER_S = 300;
    const stack = await startSyncStack({ pki, tls, events: ['episode.verified', 'episode.failed'], cloudArgs: ['--grant-retry-after-s', String(RETRY_AFTER_S)], providerUp: false });
    try {
      await using robot = await startClockedAgent(stack.cloud, { config: { bytesPerSecond: 64 * 1024 } });
      const ids: string[] = [];
      for (let i = 0; i < 3; i++) ids.push(await robot.record(1000));
      const outageStart = robot.clock.now();
      // The first asks (at finalize) are deferred: nothing listens where the provider was.
      await waitFor(async () => ((await robot.uploads()).filter((u) => u.note?.startsWith('deferred (unreachable)')).length === 3 ? true : undefined), {
        description: 'the three first asks deferred',
      });

      const OUTAGE = 6 * HOUR;
      await robot.advanceTo(outageStart + OUTAGE);

      // Every ask was a deferral; the waits between asks stayed at retry_after (± the 20 % jitter)
      // for the six hours: no growing backoff, no giving up, no failure counted.
      const deferred = robot.logs.records.filter((r) => r.msg === 'grant deferred');
      for (const id of ids) {
        const at = deferred.filter((r) => r.episode_id === id).map((r) => Date.parse(String(r.retry_at)));
        expect(at.length).toBeGreaterThanOrEqual(Math.floor(OUTAGE / (1.2 * RETRY_AFTER_S * 1000)));
        // Still asking when the outage ends: the next ask is due after it.
        expect(at.at(-1)!).toBeGreaterThan(outageStart + OUTAGE);
        for (let k = 1; k < at.length; k++) {
          const wait = at[k]! - at[k - 1]!;
          expect(wait).toBeGreaterThanOrEqual(0.8 * RETRY_AFTER_S * 1000);
          expect(wait).toBeLessThanOrEqual(1.2 * RETRY_AFTER_S * 1000);
        }
        expect(deferred.filter((r) => r.episode_id === id).every((r) => r.reason === 'unreachable')).toBe(true);
      }
      for (const u of await robot.uploads()) {
        expect(u).toMatchObject({ state: 'assigned', last_error: null });
        expect(Date.parse(u.next_attempt_at!)).toBeGreaterThan(robot.clock.now());
      }
      expect(robot.logs.records.filter((r) => r.msg === 'sync attempt failed; will retry' || r.msg === 'sync attempt failed; not retried')).toEqual([]);
      // Each ask reached the cloud and counted as a deferral of the destination.
      const health = await destinationHealth(stack);
      expect(health.deferrals_24h).toBe(deferred.length);
      expect(health.forwards_24h).toBe(deferred.length);
      expect(health.last_deferral?.reason).toMatch(/^unreachable: /);
      // The episodes are kept, unverified.
      for (const id of ids) {
        const { manifest } = await episodeFiles(robot.dataDir, id);
        for (const f of manifest.files) expect(await present(robot.dataDir, id, f.path)).toBe(true);
      }
      expect(await healthRow(stack.cloud, robot.robotId)).toMatchObject({ episodes_reported: 3, unverified: 3 });

      // The provider returns: the next ask of each episode gets a grant and the bytes go out.
      await stack.startProvider();
      await robot.advanceTo(robot.clock.now() + 1.2 * RETRY_AFTER_S * 1000);
      const done: ExpectedEpisode[] = [];
      for (const id of ids) {
        await verified(stack.cloud, id);
        done.push(await expected(stack.cloud, robot.dataDir, id));
      }
      await expectBucketHolds(stack.s3, done);
      // Each object (every file of each episode: a ROS 2 bag has two) went once; one episode row
      // and one verified event each.
      const files = (await Promise.all(ids.map((id) => episodeFiles(robot.dataDir, id)))).flatMap((e) => e.manifest.files);
      expect(files.length).toBeGreaterThanOrEqual(ids.length);
      const puts = stack.proxy.requests.filter((r) => r.method === 'PUT');
      expect(puts.map((r) => r.status)).toEqual(files.map(() => 200));
      expect(new Set(puts.map((r) => r.url.split('?')[0])).size).toBe(files.length);
      expect((await listEpisodes(stack.cloud)).map((e) => e.id).sort()).toEqual([...ids].sort());
      for (const id of ids) await waitFor(() => (stack.hooks.of('episode.verified', id).length === 1 ? true : undefined), { description: `episode.verified for ${id}` });
      expect(stack.hooks.deliveries.filter((d) => d.event === 'episode.failed')).toEqual([]);
    } finally {
      await stack.dispose();
    }
  });
});

describe('the disk nearly full (the agent on a clock the test moves)', () => {
  test('retention until_all_verified_plus_72h: verified episodes go exactly 72 h after they verified, one episode.pruned each; deferred and corrupted ones stay however low the free bytes; pressure reaches sync health and the grant requests', async () => {
    let deferAll = false;
    const deferredIds = new Set<string>();
    const deferral = { status: 200, body: { grant_id: null, destinations: [], retention: { local: 'keep' }, retry_after: 3600 } };
    const stack = await startSyncStack({
      pki,
      tls,
      retention: 'until_all_verified_plus_72h',
      events: ['episode.verified', 'episode.failed', 'episode.pruned'],
      // The provider defers what the test says, and grants the rest (as the reference provider).
      tap: (env) => (deferAll || deferredIds.has(env.episode_id) ? deferral : undefined),
    });
    let free = 64 * MiB;
    try {
      await using robot = await startClockedAgent(stack.cloud, { config: { bytesPerSecond: 64 * 1024 }, freeBytes: async () => free });
      const t0 = robot.clock.now();
      // Two episodes verify, the second 5 h after the first.
      const first = await robot.record(1000);
      await verified(stack.cloud, first);
      const firstVerifiedAt = await verifiedAt(robot.dataDir, first);
      await robot.advanceTo(t0 + 5 * HOUR);
      const second = await robot.record(1000);
      await verified(stack.cloud, second);
      const secondVerifiedAt = await verifiedAt(robot.dataDir, second);
      expect(secondVerifiedAt).toBeGreaterThanOrEqual(firstVerifiedAt + 5 * HOUR);

      // Two more never verify: one deferred by the provider, one whose file changed after finalize.
      deferAll = true;
      const deferredEp = await robot.record(1000);
      const corrupted = await robot.record(1000);
      await waitFor(async () => ((await robot.uploads()).filter((u) => u.note?.startsWith('deferred (deferred)')).length === 2 ? true : undefined), {
        description: 'both first asks deferred',
      });
      const cf = (await episodeFiles(robot.dataDir, corrupted)).manifest.files[0]!;
      await corrupt(join(robot.dataDir, 'episodes', corrupted, cf.path), Math.floor(cf.size_bytes / 2));
      deferredIds.add(deferredEp);
      deferAll = false;
      // The disk is nearly full from here on.
      free = 4096;
      await robot.advanceTo(robot.clock.now() + 1.2 * HOUR);
      await waitReplica(stack.cloud, corrupted, (r) => r.error?.startsWith('file_changed: ') === true, 'the file_changed replica error');

      // The grant requests carry the pressure, and sync health shows the last one.
      const last = stack.grantRequests.at(-1)!;
      expect(last.request.pressure).toMatchObject({ free_bytes: 4096, hours_to_full: expect.any(Number) as number });
      const unverifiedBytes = (await Promise.all([deferredEp, corrupted].map((id) => episodeFiles(robot.dataDir, id)))).reduce((n, e) => n + e.manifest.total_bytes, 0);
      expect(last.request.pressure!.backlog_bytes).toBe(unverifiedBytes);
      expect(stack.grantRequests.every((g) => g.request.pressure !== undefined)).toBe(true);
      const row = await waitFor(async () => {
        const r = await healthRow(stack.cloud, robot.robotId);
        return r?.pressure?.free_bytes === 4096 ? r : undefined;
      }, { description: 'the nearly full disk in sync health' });
      expect(row).toMatchObject({ episodes_reported: 4, unverified: 2, pressure: { backlog_bytes: unverifiedBytes, hours_to_full: expect.any(Number) as number } });
      // From here the provider defers for 12 hours at a time: the robot's clock crosses 200 hours
      // one ask at a time, and nothing below depends on how often it asks.
      deferral.body.retry_after = 12 * 3600;

      // 72 h after each verification, not a millisecond before.
      const path = (id: string) => episodeFiles(robot.dataDir, id).then((e) => e.manifest.files[0]!.path);
      const [p1, p2, p3, p4] = await Promise.all([first, second, deferredEp, corrupted].map(path));
      await robot.advanceTo(firstVerifiedAt + PRUNE_DELAY_MS - 1);
      expect(await present(robot.dataDir, first, p1!)).toBe(true);
      await robot.advanceTo(firstVerifiedAt + PRUNE_DELAY_MS);
      await expect.poll(() => present(robot.dataDir, first, p1!)).toBe(false);
      expect(await present(robot.dataDir, second, p2!)).toBe(true);
      free = 0;
      await robot.advanceTo(secondVerifiedAt + PRUNE_DELAY_MS - 1);
      expect(await present(robot.dataDir, second, p2!)).toBe(true);
      await robot.advanceTo(secondVerifiedAt + PRUNE_DELAY_MS);
      await expect.poll(() => present(robot.dataDir, second, p2!)).toBe(false);
      // Long after, with no free byte at all: the unverified ones are still there.
      await robot.advanceTo(t0 + 200 * HOUR);
      expect(await present(robot.dataDir, deferredEp, p3!)).toBe(true);
      expect(await present(robot.dataDir, corrupted, p4!)).toBe(true);

      // One episode.pruned per pruned episode, none for the others.
      for (const id of [first, second]) await waitFor(() => (stack.hooks.of('episode.pruned', id).length > 0 ? true : undefined), { description: `episode.pruned for ${id}` });
      await waitFor(async () => (robot.agent.status().outbox.pending === 0 ? true : undefined), { description: 'the outbox drained' });
      const pruned = stack.hooks.deliveries.filter((d) => d.event === 'episode.pruned');
      expect(pruned.map((d) => d.body.episode_id).sort()).toEqual([first, second].sort());
      await waitFor(async () => ((await healthRow(stack.cloud, robot.robotId))?.pressure?.free_bytes === 0 ? true : undefined), { description: 'free bytes 0 in sync health' });
      expect(await healthRow(stack.cloud, robot.robotId)).toMatchObject({ episodes_reported: 4, unverified: 2 });
      expect((await listEpisodes(stack.cloud, 'sync_state=unverified')).map((e) => e.id).sort()).toEqual([deferredEp, corrupted].sort());

      // The bucket holds the two verified episodes, byte for byte, and nothing of the others.
      await expectBucketHolds(stack.s3, [await expected(stack.cloud, robot.dataDir, first), await expected(stack.cloud, robot.dataDir, second)]);
    } finally {
      await stack.dispose();
    }
  });
});
