import { createHash } from 'node:crypto';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createTestPki, type TestPki } from '../cloud/src/egress/test-https.js';
import { makeTempDir, type CloudProcess, type TempDir } from './support/cloud.js';
import { episodeFiles, getEpisode, listEpisodes, recordAtLeast } from './support/episodes.js';
import { writeProviderTls, type GrantProviderProcess } from './support/grant-provider.js';
import type { SpawnedProcess } from './support/process.js';
import { spawnAgent, startAgentProcess, type AgentProcess } from './support/robots.js';
import { completes, partPuts, type HeldRequest, type ProxiedRequest, type S3Proxy } from './support/s3-proxy.js';
import { s3ImplementationOfRun, type S3ServerProcess } from './support/s3-server.js';
import { startSyncStack, type SyncStack, type WebhookLog } from './support/sync-stack.js';
import { untilPast, waitFor } from './support/wait.js';

/**
 * Resume (issue 12, item 1), with real processes: fleet-cloud, a `fleet-agent start` process,
 * the reference grant provider over HTTPS and the signature-checking S3 server, with a proxy
 * between them and the store that forwards byte for byte and can hold one chosen request. The
 * agent is killed with SIGKILL while a part, a single PUT or a complete is held (so the kill
 * lands there every time), or while its verified write is stalled in SQLite; URLs expire while
 * a part is held. Each run ends with the bucket holding exactly the manifest's files under the
 * replica's object key (sha256 checked), each part accepted once for one upload id, the parts
 * sent after the restart being exactly the missing ones, and the replica verified once.
 */

const MiB = 1024 * 1024;
const PART = 5 * MiB;

let pki: TestPki;
let tmp: TempDir;
let tlsFiles: { certFile: string; keyFile: string; ca: string };

beforeAll(async () => {
  pki = createTestPki();
  tmp = await makeTempDir('fleet-resume-');
  tlsFiles = writeProviderTls(pki, tmp.path);
});
afterAll(async () => {
  await tmp?.[Symbol.asyncDispose]();
  pki?.cleanup();
});

const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/**
 * One part on the wire at a time, so "part 2 held" means part 1 is done and 3.. not sent; quick
 * retries. JSON recordings: one file per episode that holds the byte rate exactly (a ROS 2 bag's
 * zstd chunks make it smaller than the rate).
 */
const agentArgs = (bytesPerSecond: number, partParallel: number) => [
  '--recording-format',
  'json',
  '--bytes-per-second',
  String(bytesPerSecond),
  '--chunk-interval-ms',
  '50',
  '--outbox-ack-timeout-ms',
  '2000',
  '--allow-http-uploads',
  '--sync-part-parallel',
  String(partParallel),
  '--sync-retry-schedule-ms',
  '300',
];

interface Rig {
  stack: SyncStack;
  s3: S3ServerProcess;
  proxy: S3Proxy;
  cloud: CloudProcess;
  hooks: WebhookLog;
  destinationId: string;
  provider: GrantProviderProcess;
  agent: AgentProcess;
  /** The agent started again after a kill (the first one's data directory). */
  restarted: SpawnedProcess | undefined;
  restartProvider(): Promise<void>;
  restartAgent(): Promise<void>;
  dispose(): Promise<void>;
}

async function startRig(opts: { urlLifetimeS?: number; bytesPerSecond?: number; partParallel?: number } = {}): Promise<Rig> {
  const AGENT_ARGS = agentArgs(opts.bytesPerSecond ?? 8 * MiB, opts.partParallel ?? 1);
  // The provider talks to the store through the proxy too, so its presigned URLs name the proxy.
  const stack = await startSyncStack({
    pki,
    tls: tlsFiles,
    events: ['episode.synced', 'episode.verified', 'episode.failed'],
    providerArgs: [
      '--multipart-threshold-bytes',
      String(PART),
      '--part-size-bytes',
      String(PART),
      ...(opts.urlLifetimeS !== undefined ? ['--url-lifetime-s', String(opts.urlLifetimeS)] : []),
    ],
  });
  const cleanups: (() => PromiseLike<unknown>)[] = [() => stack.dispose()];
  const dispose = async () => {
    for (const c of cleanups.reverse()) await Promise.resolve(c()).catch(() => undefined);
  };
  try {
    const agent = await startAgentProcess(stack.cloud, { args: AGENT_ARGS });
    cleanups.push(() => agent[Symbol.asyncDispose]());
    const rig: Rig = {
      stack,
      s3: stack.s3,
      proxy: stack.proxy,
      cloud: stack.cloud,
      hooks: stack.hooks,
      destinationId: stack.destinationId,
      get provider() {
        return stack.provider!;
      },
      agent,
      restarted: undefined,
      async restartProvider() {
        await stack.stopProvider();
        await stack.startProvider();
      },
      async restartAgent() {
        const proc = await spawnAgent(agent.dataDir, { args: AGENT_ARGS });
        rig.restarted = proc;
        cleanups.push(() => proc.kill('SIGTERM'));
        await proc.waitForStdout((l) => l.includes('"state":"connected"'), { description: 'the restarted agent connected' });
      },
      dispose,
    };
    return rig;
  } catch (err) {
    await dispose();
    throw err;
  }
}

async function waitVerified(rig: Rig, episodeId: string) {
  return waitFor(
    async () => {
      const ep = await getEpisode(rig.cloud, episodeId);
      return ep?.replicas[0]?.state === 'verified' ? ep : undefined;
    },
    { timeoutMs: 90_000, description: `episode ${episodeId} verified` },
  );
}

/** SIGKILLs the agent while `held` is held, and waits until its connection is gone. */
async function killWhileHeld(rig: Rig, held: HeldRequest): Promise<void> {
  const exit = await rig.agent.kill('SIGKILL');
  expect(exit.signal).toBe('SIGKILL');
  await held.clientGone;
}

/**
 * The end state every resume must reach: one episode row, one replica (verified, no error, the
 * synced and verified webhooks once each), and the bucket holding exactly the manifest's files
 * under the replica's object key, byte for byte.
 */
async function expectSettled(rig: Rig, episodeId: string): Promise<void> {
  const ep = await waitVerified(rig, episodeId);
  expect(ep.replicas).toHaveLength(1);
  expect(ep.replicas[0]).toMatchObject({ destination_id: rig.destinationId, state: 'verified', error: null });
  expect((await listEpisodes(rig.cloud)).filter((e) => e.id === episodeId)).toHaveLength(1);

  const { manifest } = await episodeFiles(rig.agent.dataDir, episodeId);
  const prefix = ep.replicas[0]!.object_key!;
  expect(prefix).toEqual(expect.stringContaining(episodeId));
  const objects = await rig.s3.listObjects();
  // Exactly one object per file, and nothing under another key.
  expect(objects.map((o) => o.key).sort()).toEqual(manifest.files.map((f) => `${prefix}${f.path}`).sort());
  for (const f of manifest.files) {
    const obj = await rig.s3.getObject(`${prefix}${f.path}`);
    expect(obj!.body.length).toBe(f.size_bytes);
    expect(sha256(obj!.body)).toBe(f.sha256);
  }

  const of = (event: string) => rig.hooks.of(event, episodeId);
  await waitFor(() => (of('episode.verified').length > 0 ? true : undefined), { timeoutMs: 30_000, description: 'the verified webhook' });
  expect(of('episode.synced')).toHaveLength(1);
  expect(of('episode.verified')).toHaveLength(1);
}

/**
 * Parts on the wire: one upload id throughout, every part accepted exactly once, and the parts
 * sent in the `after` phase exactly `missing`.
 */
function expectPartsOnce(requests: readonly ProxiedRequest[], partCount: number, missing: readonly number[]): void {
  const parts = partPuts(requests);
  expect(new Set(parts.map((p) => p.uploadId)).size).toBe(1);
  const accepted = parts.filter((p) => p.status === 200).map((p) => p.partNumber!);
  expect(accepted.sort((a, b) => a - b)).toEqual(Array.from({ length: partCount }, (_, i) => i + 1));
  expect(parts.filter((p) => p.phase === 'after').map((p) => p.partNumber)).toEqual([...missing]);
  const done = completes(requests).filter((c) => c.status === 200);
  expect(done).toHaveLength(1);
  expect(done[0]!.uploadId).toBe(parts[0]!.uploadId);
}

/** The upload counts of each `grant issued` line the provider logged. */
function grantsIssued(provider: GrantProviderProcess): { uploads_resumed: number; uploads_found: number; uploads_created: number }[] {
  return provider.process.stderrLines
    .filter((l) => l.includes('"grant issued"'))
    .map((l) => {
      const j = JSON.parse(l) as { uploads_resumed: number; uploads_found: number; uploads_created: number };
      return { uploads_resumed: j.uploads_resumed, uploads_found: j.uploads_found, uploads_created: j.uploads_created };
    });
}

/** Every grant of this provider process continued the upload the robot's resume named. */
function expectResumedOnly(provider: GrantProviderProcess): void {
  const grants = grantsIssued(provider);
  expect(grants.length).toBeGreaterThan(0);
  for (const g of grants) expect(g).toEqual({ uploads_resumed: 1, uploads_found: 0, uploads_created: 0 });
}

const isPart = (n: number) => (r: ProxiedRequest) => r.method === 'PUT' && r.partNumber === n;

describe('a real S3 store failing requests', () => {
  test('a part answered 500, then 403, then a complete answered 200 with <Error>: each an episode.failed with its code, the robot asks again, one upload, verified byte for byte', async () => {
    const rig = await startRig();
    try {
      rig.proxy.inject(isPart(2), { status: 500, code: 'InternalError', message: 'We encountered an internal error' });
      rig.proxy.inject(isPart(2), { status: 403, code: 'AccessDenied', message: 'Access Denied' });
      rig.proxy.inject((r) => r.method === 'POST' && r.uploadId !== null, { status: 200, code: 'InternalError', message: 'complete failed' });
      const episodeId = await recordAtLeast(rig.agent.dataDir, 2 * PART + 1);
      await expectSettled(rig, episodeId);
      const failed = rig.hooks.of('episode.failed', episodeId) as { episode_id: string; error: { code: string; message: string } }[];
      // One failed attempt per injected answer, in order, each with the store's words.
      expect(failed.map((f) => f.error.code)).toEqual(['upload_failed', 'upload_rejected', 'complete_failed']);
      expect(failed[0]!.error.message).toMatch(/500/);
      expect(failed[1]!.error.message).toMatch(/403/);
      expect(failed[2]!.error.message).toMatch(/InternalError/);
      // The failed part went again under the same upload; the first complete was never done by the store.
      const parts = partPuts(rig.proxy.requests);
      expect(new Set(parts.map((p) => p.uploadId)).size).toBe(1);
      expect(parts.filter((p) => p.partNumber === 2).map((p) => p.status)).toEqual([500, 403, 200]);
      expect(completes(rig.proxy.requests).map((c) => c.status)).toEqual([200, 200]);
    } finally {
      await rig.dispose();
    }
  });
});

describe('sync resume after kill -9, expired URLs and a provider restart', () => {
  test('kill -9 mid-part, with the grant provider restarted meanwhile: the next start re-asks with resume, keeps the upload id and sends only the missing parts', async () => {
    const rig = await startRig();
    try {
      const held = rig.proxy.hold(isPart(2));
      const episodeId = await recordAtLeast(rig.agent.dataDir, 2 * PART + 1);
      const h = await held;
      await killWhileHeld(rig, h);
      const { manifest } = await episodeFiles(rig.agent.dataDir, episodeId);
      const parts = Math.ceil(manifest.files[0]!.size_bytes / PART);
      expect(manifest.files).toHaveLength(1);
      expect(parts).toBeGreaterThanOrEqual(3);
      // Part 1 was accepted before the kill; part 2 never reached the store.
      expect(partPuts(rig.proxy.requests).map((p) => [p.partNumber, p.status])).toEqual([
        [1, 200],
        [2, null],
      ]);

      await rig.restartProvider();
      rig.proxy.phase('after');
      await rig.restartAgent();
      await expectSettled(rig, episodeId);
      expectPartsOnce(rig.proxy.requests, parts, Array.from({ length: parts - 1 }, (_, i) => i + 2));
      // The restarted provider continued the upload the resume block named (no second CreateMultipartUpload).
      expect(rig.proxy.requests.filter((r) => r.method === 'POST' && r.url.includes('uploads') && r.uploadId === null)).toHaveLength(1);
      expectResumedOnly(rig.provider);
      expect(rig.restarted!.stderrLines.some((l) => l.includes('"resuming a multipart upload"') && l.includes('"parts_done":1'))).toBe(true);
    } finally {
      await rig.dispose();
    }
  });

  test('kill -9 with parts done out of order (three on the wire, part 2 held): resume names the parts done and only part 2 goes out again', async () => {
    const rig = await startRig({ partParallel: 3 });
    let db: Database.Database | undefined;
    try {
      const held = rig.proxy.hold(isPart(2));
      const episodeId = await recordAtLeast(rig.agent.dataDir, 2 * PART + 1);
      await held;
      const { manifest } = await episodeFiles(rig.agent.dataDir, episodeId);
      const parts = Math.ceil(manifest.files[0]!.size_bytes / PART);
      // Every other part written as done in the agent's store (its progress rows), then the kill.
      db = new Database(join(rig.agent.dataDir, 'agent.sqlite'), { readonly: true });
      const done = db.prepare('SELECT part_number FROM upload_parts WHERE episode_id = ? ORDER BY part_number').pluck();
      await waitFor(() => (done.all(episodeId).length === parts - 1 ? true : undefined), { timeoutMs: 60_000, description: 'every part but 2 stored as done' });
      expect(done.all(episodeId)).not.toContain(2);
      db.close();
      db = undefined;
      await rig.agent.kill('SIGKILL');

      rig.proxy.phase('after');
      await rig.restartAgent();
      await expectSettled(rig, episodeId);
      expectPartsOnce(rig.proxy.requests, parts, [2]);
    } finally {
      db?.close();
      await rig.dispose();
    }
  });

  test('kill -9 after the store completed the upload but before the agent heard: the next grant has a new upload id, the file is sent again to the same key', async () => {
    const rig = await startRig();
    try {
      const held = rig.proxy.hold((r) => r.method === 'POST' && r.uploadId !== null, { answer: true });
      const episodeId = await recordAtLeast(rig.agent.dataDir, 2 * PART + 1);
      const h = await held;
      expect(h.request.status).toBe(200);
      await killWhileHeld(rig, h);
      const { manifest } = await episodeFiles(rig.agent.dataDir, episodeId);
      const parts = Math.ceil(manifest.files[0]!.size_bytes / PART);

      rig.proxy.phase('after');
      await rig.restartAgent();
      await expectSettled(rig, episodeId);
      // The store no longer has the first upload: a second one, all of its parts, one complete each.
      const puts = partPuts(rig.proxy.requests);
      const [first, second] = [...new Set(puts.map((p) => p.uploadId))];
      expect(second).toBeDefined();
      expect(second).not.toBe(first);
      const all = Array.from({ length: parts }, (_, i) => i + 1);
      expect(puts.filter((p) => p.uploadId === first && p.status === 200).map((p) => p.partNumber)).toEqual(all);
      expect(puts.filter((p) => p.phase === 'after').map((p) => [p.uploadId, p.partNumber, p.status])).toEqual(all.map((n) => [second, n, 200]));
      expect(completes(rig.proxy.requests).map((c) => [c.uploadId, c.status])).toEqual([
        [first, 200],
        [second, 200],
      ]);
    } finally {
      await rig.dispose();
    }
  });

  test('kill -9 while the grant is in flight (the upload created, its id never stored): the next ask has no resume, and the provider finds that upload instead of creating another', async () => {
    const rig = await startRig();
    try {
      const isCreate = (r: ProxiedRequest) => r.method === 'POST' && r.uploadId === null && new URL(r.url, 'http://x').searchParams.has('uploads');
      const held = rig.proxy.hold(isCreate, { answer: true });
      const episodeId = await recordAtLeast(rig.agent.dataDir, 2 * PART + 1);
      const h = await held;
      expect(h.request.status).toBe(200);
      await rig.agent.kill('SIGKILL');
      await h.release();
      const { manifest } = await episodeFiles(rig.agent.dataDir, episodeId);
      const parts = Math.ceil(manifest.files[0]!.size_bytes / PART);
      expect(partPuts(rig.proxy.requests)).toEqual([]);

      rig.proxy.phase('after');
      await rig.restartAgent();
      await expectSettled(rig, episodeId);
      expect(rig.proxy.requests.filter(isCreate)).toHaveLength(1);
      expectPartsOnce(rig.proxy.requests, parts, Array.from({ length: parts }, (_, i) => i + 1));
      // The first grant may or may not have been answered (the robot was gone); the one after the restart found the upload.
      expect(grantsIssued(rig.provider).at(-1)).toEqual({ uploads_resumed: 0, uploads_found: 1, uploads_created: 0 });
    } finally {
      await rig.dispose();
    }
  });

  test('kill -9 between the last part and the complete: the next start sends no part, only the complete', async () => {
    const rig = await startRig();
    try {
      const held = rig.proxy.hold((r) => r.method === 'POST' && r.uploadId !== null);
      const episodeId = await recordAtLeast(rig.agent.dataDir, 2 * PART + 1);
      const h = await held;
      await killWhileHeld(rig, h);
      const { manifest } = await episodeFiles(rig.agent.dataDir, episodeId);
      const parts = Math.ceil(manifest.files[0]!.size_bytes / PART);
      expect(partPuts(rig.proxy.requests).filter((p) => p.status === 200)).toHaveLength(parts);
      expect(await rig.s3.listObjects()).toEqual([]);

      rig.proxy.phase('after');
      await rig.restartAgent();
      await expectSettled(rig, episodeId);
      expectPartsOnce(rig.proxy.requests, parts, []);
    } finally {
      await rig.dispose();
    }
  });

  test('kill -9 mid-PUT of a single-PUT file: the next start puts it again under the same key', async () => {
    // A slow recorder keeps the file well under the multipart threshold.
    const rig = await startRig({ bytesPerSecond: 256 * 1024 });
    try {
      const held = rig.proxy.hold((r) => r.method === 'PUT' && r.partNumber === null);
      const episodeId = await recordAtLeast(rig.agent.dataDir, 64 * 1024);
      const h = await held;
      await killWhileHeld(rig, h);
      expect(await rig.s3.listObjects()).toEqual([]);

      rig.proxy.phase('after');
      await rig.restartAgent();
      await expectSettled(rig, episodeId);
      const puts = rig.proxy.requests.filter((r) => r.method === 'PUT');
      expect(puts.map((p) => [p.phase, p.status])).toEqual([
        ['start', null],
        ['after', 200],
      ]);
      expect(puts[0]!.url.split('?')[0]).toBe(puts[1]!.url.split('?')[0]);
    } finally {
      await rig.dispose();
    }
  });

  test('kill -9 between synced and verified: the next start reports verified without a grant or a byte sent', async () => {
    const rig = await startRig();
    let db: Database.Database | undefined;
    try {
      // The verified write stalls inside SQLite (a trigger doing a huge join), so the kill lands
      // after `synced` was committed and before `verified` could be: the window is the real one,
      // only wider. The trigger goes in while the complete is held, once the recording is done
      // (a stalled agent does not answer `fleet-agent status`).
      const complete = rig.proxy.hold((r) => r.method === 'POST' && r.uploadId !== null);
      const episodeId = await recordAtLeast(rig.agent.dataDir, 2 * PART + 1);
      const held = await complete;
      db = new Database(join(rig.agent.dataDir, 'agent.sqlite'));
      db.pragma('busy_timeout = 5000');
      db.exec(`CREATE TABLE test_stall (x INTEGER);
        WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 20000) INSERT INTO test_stall SELECT x FROM c;
        CREATE TRIGGER test_stall_verified BEFORE UPDATE OF state ON replicas WHEN NEW.state = 'verified'
        BEGIN SELECT count(*) FROM test_stall a, test_stall b, test_stall c; END;`);
      expect(await held.release()).toBe(200);
      const state = db.prepare('SELECT state FROM replicas WHERE episode_id = ?').pluck();
      await waitFor(() => (state.get(episodeId) === 'synced' ? true : undefined), { timeoutMs: 60_000, description: 'the replica synced in the agent store' });
      await rig.agent.kill('SIGKILL');
      expect(state.get(episodeId)).toBe('synced');
      db.exec('DROP TRIGGER test_stall_verified; DROP TABLE test_stall;');
      db.close();
      db = undefined;
      const { manifest } = await episodeFiles(rig.agent.dataDir, episodeId);
      const parts = Math.ceil(manifest.files[0]!.size_bytes / PART);

      rig.proxy.phase('after');
      await rig.restartAgent();
      await expectSettled(rig, episodeId);
      expectPartsOnce(rig.proxy.requests, parts, []);
      // Nothing at all went to the store after the restart: no grant was needed.
      expect(rig.proxy.requests.filter((r) => r.phase === 'after')).toEqual([]);
    } finally {
      db?.close();
      await rig.dispose();
    }
  });

  // Needs a store that refuses an expired presigned URL: s3rver does, moto does not look at
  // X-Amz-Expires (test/support/moto-server.ts), so under FLEET_TEST_S3=moto this one is s3rver's alone.
  test.skipIf(s3ImplementationOfRun() === 'moto')('a part URL that expires while the part is held is a 403; the agent re-asks at once with resume (the provider restarted meanwhile), reports no error and sends only the missing parts of the same upload', async () => {
    const rig = await startRig({ urlLifetimeS: 15 });
    try {
      const held = rig.proxy.hold(isPart(2));
      const episodeId = await recordAtLeast(rig.agent.dataDir, 2 * PART + 1);
      const h = await held;
      // Past the URL's own expiry (X-Amz-Date + X-Amz-Expires), then let it reach the store.
      const q = new URL(h.request.url, 'http://x').searchParams;
      const signed = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(q.get('X-Amz-Date') ?? '')!;
      const signedAt = Date.UTC(+signed[1]!, +signed[2]! - 1, +signed[3]!, +signed[4]!, +signed[5]!, +signed[6]!);
      await untilPast(new Date(signedAt + Number(q.get('X-Amz-Expires')) * 1000 + 1000));
      await rig.restartProvider();
      rig.proxy.phase('after');
      expect(await h.release()).toBe(403);
      await expectSettled(rig, episodeId);
      const { manifest } = await episodeFiles(rig.agent.dataDir, episodeId);
      const parts = Math.ceil(manifest.files[0]!.size_bytes / PART);
      // The re-ask's URLs carry the same upload id; parts 2..n go out once, part 1 not again.
      expectPartsOnce(rig.proxy.requests, parts, Array.from({ length: parts - 1 }, (_, i) => i + 2));
      expectResumedOnly(rig.provider);
      // An expiry after the upload moved on is the grant's expected end, not a failure: no error reported.
      expect(rig.agent.process.stderrLines.some((l) => l.includes('"upload URLs expired mid-upload; asking again with resume"'))).toBe(true);
      expect(rig.hooks.deliveries.filter((d) => d.event === 'episode.failed')).toEqual([]);
    } finally {
      await rig.dispose();
    }
  });
});
