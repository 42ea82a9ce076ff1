import { readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { LocalMissingSchema, ManualClock, PRUNE_DELAY_MS, ReplicaReportSchema, type Pressure, type RetentionDirective, type SyncMessage, type SyncRequest } from '@fleet/protocol';
import { Agent as HttpAgent } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { openAgentStore, type SqliteAgentStore } from '../store/sqlite.js';
import type { EpisodeRow } from '../store/types.js';
import { captureLogs, makeTempDir, removeTempDirs, type LogCapture } from '../test-support.js';
import { ManualScheduler } from '../time.js';
import { RateLimiter } from './rate-limit.js';
import { FakeSyncCloud, paceOnManualClock, storeEpisode, testCertificates, TestStorage } from './test-storage.js';
import { uploadDispatcher } from './trust.js';
import { Uploader, type UploaderOptions } from './uploader.js';

const DEST = 'dst_main';
type GrantRequest = Extract<SyncRequest, { type: 'grant.request' }>;

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  await removeTempDirs();
});

interface Rig {
  store: SqliteAgentStore;
  dataDir: string;
  clock: ManualClock;
  scheduler: ManualScheduler;
  cloud: FakeSyncCloud;
  storage: TestStorage;
  uploader: Uploader;
  logs: LogCapture;
  /** The shared upload limit, when the rig has one. */
  limiter: RateLimiter | undefined;
  episode(files: Record<string, number>): Promise<EpisodeRow>;
  assign(...episodes: EpisodeRow[]): Promise<void>;
  replica(e: EpisodeRow, dest?: string): Promise<Awaited<ReturnType<SqliteAgentStore['sync']['get']>>>;
  reports(): Promise<{ msgId: string; body: ReturnType<typeof ReplicaReportSchema.parse> }[]>;
  /** Answers grant requests for `e` with a grant of the storage (multipart when partSize is given). */
  grantWith(opts?: { partSize?: number; protocol?: 'http-put' | 's3-multipart'; retention?: RetentionDirective }): (req: GrantRequest) => SyncMessage;
  verified: string[];
}

async function rig(opts: Partial<Pick<UploaderOptions, 'concurrency' | 'partParallel' | 'retryScheduleMs' | 'jitter' | 'random' | 'grantTimeoutMs'>> & { allowHttp?: boolean; storage?: TestStorage; dispatcher?: HttpAgent; pressure?: () => Promise<Pressure>; uploadLimit?: number } = {}): Promise<Rig> {
  const dataDir = await makeTempDir();
  const clock = new ManualClock();
  const store = openAgentStore(dataDir, clock);
  const scheduler = new ManualScheduler(clock);
  const logs = captureLogs();
  const cloud = new FakeSyncCloud();
  const storage = opts.storage ?? (await TestStorage.start());
  const dispatcher = opts.dispatcher ?? new HttpAgent();
  const verified: string[] = [];
  const limiter = opts.uploadLimit ? new RateLimiter({ bytesPerSecond: opts.uploadLimit, clock, scheduler }) : undefined;
  const uploader = new Uploader({
    store,
    dataDir,
    transport: cloud,
    http: {
      dispatcher,
      allowHttp: opts.allowHttp ?? true,
      timeoutMs: 10_000,
      ...(limiter ? { limiter } : {}),
    },
    clock,
    scheduler,
    logger: logs.logger,
    random: opts.random ?? (() => 0.5),
    onReport: () => undefined,
    onVerified: (id) => verified.push(id),
    ...(opts.pressure ? { pressure: opts.pressure } : {}),
    ...(opts.concurrency ? { concurrency: opts.concurrency } : {}),
    ...(opts.partParallel ? { partParallel: opts.partParallel } : {}),
    ...(opts.retryScheduleMs ? { retryScheduleMs: opts.retryScheduleMs } : {}),
    ...(opts.jitter !== undefined ? { jitter: opts.jitter } : {}),
    ...(opts.grantTimeoutMs ? { grantTimeoutMs: opts.grantTimeoutMs } : {}),
  });
  cloud.deliver = (p) => uploader.handleMessage(p);
  cleanups.push(async () => {
    await uploader.stop();
    await dispatcher.close();
    await storage.close();
    await store.close();
  });
  await uploader.start();
  let grants = 0;
  const r: Rig = {
    store,
    dataDir,
    clock,
    scheduler,
    cloud,
    storage,
    uploader,
    logs,
    verified,
    limiter,
    episode: () => Promise.reject(new Error('replaced below')),
    async assign(...episodes) {
      // The cloud's complete list (the answer to assignments.request) names them too.
      cloud.assignments.push(...episodes.map((e) => ({ episode_id: e.id, destination_id: DEST })));
      await store.sync.add(
        episodes.map((e) => ({ episode_id: e.id, destination_id: DEST })),
        clock.now(),
      );
    },
    replica: (e, dest = DEST) => store.sync.get(e.id, dest),
    async reports() {
      const rows = await store.outbox.pending({ afterSeq: 0, limit: 1000 });
      return rows.filter((x) => x.kind === 'replica.state').map((x) => ({ msgId: x.msgId, body: ReplicaReportSchema.parse(JSON.parse(x.bodyJson)) }));
    },
    grantWith(g = {}) {
      // The same upload id for a file while its multipart is in flight, as a provider must.
      const uploads = new Map<string, string>();
      return (req) => {
        const resume = new Map((req.resume?.[0]?.uploads ?? []).map((u) => [u.path, u.upload_id]));
        grants += 1;
        return {
          type: 'grant',
          req_id: req.req_id,
          episode_id: req.episode_id,
          destination_id: req.destination_id,
          grant_id: `grt_${grants}`,
          expires_at: clock.now() + 3_600_000,
          protocol: g.protocol ?? (g.partSize ? 's3-multipart' : 'http-put'),
          object_key: `robots/${req.episode_id}`,
          retention: g.retention ?? 'keep',
          files: manifests.get(req.episode_id)!.map((f) => {
            const key = `${req.episode_id}/${f.path}`;
            const mk = `${req.episode_id}:${f.path}`;
            const known = resume.get(f.path) ?? uploads.get(mk);
            const entry = storage.grantFile(f.path, key, f.size_bytes, g.partSize, known);
            if ('upload_id' in entry) uploads.set(mk, entry.upload_id);
            return entry;
          }),
        };
      };
    },
  };
  const manifests = new Map<string, EpisodeRow['manifest']['files']>();
  r.episode = async (files) => {
    const e = await storeEpisode(store, dataDir, files, clock.now());
    manifests.set(e.id, e.manifest.files);
    return e;
  };
  return r;
}

async function bytesOf(r: Rig, e: EpisodeRow, path: string): Promise<Buffer> {
  return readFile(join(r.dataDir, e.dir, ...path.split('/')));
}

describe('Uploader', () => {
  it('http-put: streams each file in one PUT, byte-identical; reports granted, syncing, synced, verified in order', async () => {
    const r = await rig();
    const e = await r.episode({ 'recording.mcap': 300_000, 'cams/left.bin': 1234 });
    await r.assign(e);
    r.cloud.answer = r.grantWith();
    r.uploader.connected();
    await expect.poll(async () => (await r.replica(e))?.state).toBe('verified');
    expect(r.storage.objects.get(`${e.id}/recording.mcap`)!.body.equals(await bytesOf(r, e, 'recording.mcap'))).toBe(true);
    expect(r.storage.objects.get(`${e.id}/cams/left.bin`)!.body.equals(await bytesOf(r, e, 'cams/left.bin'))).toBe(true);
    const reports = await r.reports();
    expect(reports.map((x) => x.body.state)).toEqual(['granted', 'syncing', 'synced', 'verified']);
    expect(reports.map((x) => x.msgId)).toEqual([
      `replica:${e.id}:${DEST}:granted:1`,
      `replica:${e.id}:${DEST}:syncing:2`,
      `replica:${e.id}:${DEST}:synced:3`,
      `replica:${e.id}:${DEST}:verified:4`,
    ]);
    expect(reports.every((x) => x.body.grant_id === 'grt_1' && x.body.error === null && x.body.object_key === `robots/${e.id}`)).toBe(true);
    const row = await r.replica(e);
    expect(row).toMatchObject({ nextAttemptAt: null, lastError: null, grantId: 'grt_1', retention: 'keep' });
    // The first request after connect asks for the assignment list; the grant request carries the disk's pressure.
    expect(r.cloud.requests[0]!.type).toBe('assignments.request');
    const req = r.cloud.grantRequests()[0]!;
    expect(req.resume).toBeUndefined();
    expect(req.pressure!.free_bytes).toBeGreaterThan(0);
    expect(req.pressure!.backlog_bytes).toBe(e.manifest.total_bytes);
    expect(req.pressure!.hours_to_full).toEqual(expect.any(Number));
  });

  it('s3-multipart: parts in parallel (bounded), byte-identical, a file smaller than a part goes by PUT', async () => {
    const r = await rig({ partParallel: 3 });
    r.storage.behaviour.partDelayMs = 15;
    const e = await r.episode({ 'recording.mcap': 20 * 64 * 1024 + 100, 'small.json': 500 });
    await r.assign(e);
    r.cloud.answer = r.grantWith({ partSize: 64 * 1024 });
    r.uploader.connected();
    await expect.poll(async () => (await r.replica(e))?.state, { timeout: 10_000 }).toBe('verified');
    expect(r.storage.objects.get(`${e.id}/recording.mcap`)!.body.equals(await bytesOf(r, e, 'recording.mcap'))).toBe(true);
    expect(r.storage.objects.get(`${e.id}/small.json`)!.body.equals(await bytesOf(r, e, 'small.json'))).toBe(true);
    expect(r.storage.maxPartsInFlight).toBeGreaterThan(1);
    expect(r.storage.maxPartsInFlight).toBeLessThanOrEqual(3);
    const files = await r.store.sync.files(e.id, DEST);
    const mcap = files.find((f) => f.path === 'recording.mcap')!;
    expect(mcap.parts.map((p) => p.partNumber)).toEqual(Array.from({ length: 21 }, (_, i) => i + 1));
    expect(mcap.complete).toBe(true);
    expect(mcap.sha256Sent).toBe(e.manifest.files.find((f) => f.path === 'recording.mcap')!.sha256);
  });

  it('resume: a failed part keeps the parts done; the next grant request names them and only the rest is sent', async () => {
    const r = await rig({ partParallel: 1, retryScheduleMs: [10_000], jitter: 0 });
    const e = await r.episode({ 'recording.mcap': 8 * 64 * 1024 });
    await r.assign(e);
    r.cloud.answer = r.grantWith({ partSize: 64 * 1024 });
    r.storage.behaviour.fail.push({ match: 'partNumber=5&', status: 500, times: 1 });
    r.uploader.connected();
    await expect.poll(async () => (await r.replica(e))?.lastError).toMatch(/^upload_failed: PUT part 5 of recording.mcap answered 500 InternalError; retrying at 2026-01-01T00:00:10/);
    const row = (await r.replica(e))!;
    expect(row.state).toBe('syncing');
    const [file] = await r.store.sync.files(e.id, DEST);
    expect(file!.parts.map((p) => p.partNumber)).toEqual([1, 2, 3, 4]);
    const errorReport = (await r.reports()).at(-1)!.body;
    expect(errorReport).toMatchObject({ state: 'syncing', grant_id: 'grt_1' });
    expect(errorReport.error).toMatch(/^upload_failed: /);

    const partPuts = () => r.storage.requests.filter((q) => q.method === 'PUT' && q.url.includes('partNumber=')).length;
    const before = partPuts();
    r.scheduler.advance(9_999);
    // What the advance set going has finished: a retry that came early would have asked by now.
    await r.uploader.idle();
    expect(r.cloud.grantRequests()).toHaveLength(1);
    r.scheduler.advance(1);
    await expect.poll(async () => (await r.replica(e))?.state).toBe('verified');
    const second = r.cloud.grantRequests()[1]!;
    expect(second.resume).toEqual([{ destination_id: DEST, uploads: [{ path: 'recording.mcap', upload_id: file!.uploadId, parts_done: [1, 2, 3, 4] }] }]);
    expect(partPuts() - before).toBe(4);
    expect(r.storage.objects.get(`${e.id}/recording.mcap`)!.body.equals(await bytesOf(r, e, 'recording.mcap'))).toBe(true);
    // A success after a failure clears the error.
    expect((await r.reports()).at(-1)!.body).toMatchObject({ state: 'verified', error: null });
  });

  it('live progress: during an upload the status shows bytes sent growing at the limit, per destination, then nothing pending', async () => {
    const rate = 256 * 1024;
    const r = await rig({ uploadLimit: rate, partParallel: 2 });
    const e = await r.episode({ 'recording.mcap': 2 * 1024 * 1024, 'meta.json': 300 });
    await r.assign(e);
    r.cloud.answer = r.grantWith({ partSize: 256 * 1024 });
    expect(await r.uploader.uploads()).toEqual([
      expect.objectContaining({ episode_id: e.id, destination_id: DEST, state: 'assigned', active: false, bytes_sent: 0, bytes_total: e.manifest.total_bytes, rate_bps: 0 }),
    ]);
    r.uploader.connected();
    const seen: { bytes: number; rate: number; state: string }[] = [];
    // The clock moves only once the live status has counted every byte the limiter let go, so the
    // rate it shows is the limiter's pace, not how long this machine took to read the file.
    await paceOnManualClock({
      limiter: r.limiter!,
      scheduler: r.scheduler,
      counted: async () => (await r.uploader.uploads()).reduce((sum, u) => sum + u.bytes_sent, 0),
      done: async () => (await r.replica(e))?.state === 'verified',
      onStep: async () => {
        if (r.clock.now() % 1000 !== 0) return;
        const [u] = await r.uploader.uploads();
        if (u?.active) seen.push({ bytes: u.bytes_sent, rate: u.rate_bps, state: u.state });
      },
    });
    // About 8 s of the injected clock at 256 KiB/s: a status each second, bytes growing each time.
    expect(seen.length).toBeGreaterThanOrEqual(5);
    for (let i = 1; i < seen.length; i++) expect(seen[i]!.bytes).toBeGreaterThan(seen[i - 1]!.bytes);
    expect(seen.every((x) => x.state === 'syncing')).toBe(true);
    // Once the window is full the rate is the limit, within the 64 KiB turn granularity.
    for (const x of seen.slice(5)) expect(Math.abs(x.rate - rate)).toBeLessThan(rate * 0.1);
    expect(await r.uploader.uploads()).toEqual([]);
  }, 30_000);
  it('URLs that expire after the upload moved on: asked again at once with resume, no failure and no error report; an expiry before any progress is a failure', async () => {
    const r = await rig({ partParallel: 1, retryScheduleMs: [10_000], jitter: 0 });
    const e = await r.episode({ 'recording.mcap': 8 * 64 * 1024 });
    await r.assign(e);
    r.cloud.answer = r.grantWith({ partSize: 64 * 1024 });
    r.storage.behaviour.fail.push({ match: 'partNumber=5&', status: 403, times: 1, message: 'Request has expired' });
    r.uploader.connected();
    await expect.poll(async () => (await r.replica(e))?.state).toBe('verified');
    const [first, second] = r.cloud.grantRequests();
    expect(r.cloud.grantRequests()).toHaveLength(2);
    expect(first!.resume).toBeUndefined();
    const [file] = await r.store.sync.files(e.id, DEST);
    expect(second!.resume).toEqual([{ destination_id: DEST, uploads: [{ path: 'recording.mcap', upload_id: file!.uploadId, parts_done: [1, 2, 3, 4] }] }]);
    const row = (await r.replica(e))!;
    expect(row).toMatchObject({ failures: 0, lastError: null });
    expect((await r.reports()).every((x) => x.body.error === null)).toBe(true);
    const puts = r.storage.requests.filter((q) => q.method === 'PUT' && q.url.includes('partNumber=')).map((q) => Number(/partNumber=(\d+)/.exec(q.url)![1]));
    expect(puts).toEqual([1, 2, 3, 4, 5, 5, 6, 7, 8]);

    // The first request of a grant already expired: nothing moved, so it is a failure with backoff.
    const e2 = await r.episode({ 'b.bin': 1000 });
    r.cloud.assignments.push({ episode_id: e2.id, destination_id: DEST });
    r.storage.behaviour.fail.push({ match: 'b.bin', status: 403, times: 1, message: 'Request has expired' });
    r.cloud.answer = r.grantWith();
    await r.store.sync.add([{ episode_id: e2.id, destination_id: DEST }], r.clock.now());
    r.uploader.kick();
    await expect.poll(async () => (await r.replica(e2))?.lastError).toMatch(/^url_expired: PUT b.bin answered 403 AccessDenied \(Request has expired\); retrying at /);
    r.scheduler.advance(10_000);
    await expect.poll(async () => (await r.replica(e2))?.state).toBe('verified');
  });

  it('honours a deferral with jitter on the injected scheduler', async () => {
    const r = await rig({ random: () => 0, jitter: 0.2 });
    const e = await r.episode({ 'a.bin': 1000 });
    await r.assign(e);
    r.cloud.answer = (req) => ({ type: 'deferral', req_id: req.req_id, episode_id: req.episode_id, destination_id: req.destination_id, reason: 'deferred', message: 'storage busy', retry_after_s: 100 });
    r.uploader.connected();
    await expect.poll(async () => (await r.replica(e))?.note).toBe('deferred (deferred): storage busy');
    const row = (await r.replica(e))!;
    // random 0 with ±20 %: 100 s * 0.8.
    expect(row.nextAttemptAt! - r.clock.now()).toBe(80_000);
    expect(row.state).toBe('assigned');
    expect(await r.reports()).toEqual([]);
    r.scheduler.advance(79_999);
    await r.uploader.idle();
    expect(r.cloud.grantRequests()).toHaveLength(1);
    r.cloud.answer = r.grantWith();
    r.scheduler.advance(1);
    await expect.poll(async () => (await r.replica(e))?.state).toBe('verified');
    expect(r.cloud.grantRequests()).toHaveLength(2);
  });

  it('a 403 sets the error, keeps the state and retries with backoff; a grant request nobody answers times out and is retried', async () => {
    const r = await rig({ retryScheduleMs: [10_000, 60_000], jitter: 0, grantTimeoutMs: 5_000 });
    const e = await r.episode({ 'a.bin': 5000 });
    await r.assign(e);
    r.cloud.answer = () => null;
    r.uploader.connected();
    // Its timeout is armed before the request is sent.
    await expect.poll(() => r.cloud.grantRequests().length).toBe(1);
    r.scheduler.advance(5_000);
    await expect.poll(async () => (await r.replica(e))?.lastError).toMatch(/^grant_timeout: no answer to the grant request within 5 s; retrying at /);
    expect(await r.reports()).toEqual([]); // no grant yet: nothing to report
    r.storage.behaviour.fail.push({ match: '/obj/', status: 403, times: 1 });
    r.cloud.answer = r.grantWith();
    r.scheduler.advance(10_000);
    await expect.poll(async () => (await r.replica(e))?.lastError).toMatch(/^upload_rejected: PUT a.bin answered 403 AccessDenied; retrying at 2026-01-01T00:01:15/);
    expect((await r.replica(e))!.state).toBe('syncing');
    expect((await r.reports()).map((x) => [x.body.state, x.body.error?.split(':')[0] ?? null])).toEqual([
      ['granted', null],
      ['syncing', null],
      ['syncing', 'upload_rejected'],
    ]);
    r.scheduler.advance(60_000);
    await expect.poll(async () => (await r.replica(e))?.state).toBe('verified');
  });

  it('one failing episode does not hold another back', async () => {
    const r = await rig({ concurrency: 2, retryScheduleMs: [60_000], jitter: 0 });
    const bad = await r.episode({ 'a.bin': 2000 });
    const good = await r.episode({ 'b.bin': 2000 });
    await r.assign(bad, good);
    r.storage.behaviour.fail.push({ match: bad.id, status: 500, times: 100 });
    r.cloud.answer = r.grantWith();
    r.uploader.connected();
    await expect.poll(async () => (await r.replica(good))?.state).toBe('verified');
    await expect.poll(async () => (await r.replica(bad))?.lastError).toMatch(/^upload_failed: /);
    // A third episode assigned later goes through while the bad one waits for its retry.
    const third = await r.episode({ 'c.bin': 10 });
    r.cloud.push({ type: 'assignments', assignments: [{ episode_id: third.id, destination_id: DEST }], complete: false });
    await expect.poll(async () => (await r.replica(third))?.state).toBe('verified');
    expect((await r.replica(bad))!.state).toBe('syncing');
  });

  it('an ETag that is not an MD5 leaves the replica synced with a note; no ETag on a PUT too', async () => {
    const r = await rig();
    r.storage.behaviour.etag = 'opaque';
    const e = await r.episode({ 'a.bin': 4000 });
    await r.assign(e);
    r.cloud.answer = r.grantWith();
    r.uploader.connected();
    await expect.poll(async () => (await r.replica(e))?.state).toBe('synced');
    await r.uploader.idle();
    const row = (await r.replica(e))!;
    expect(row.state).toBe('synced');
    expect(row.nextAttemptAt).toBeNull();
    expect(row.note).toMatch(/^not verified: a.bin: the store's ETag is not an MD5 of the body/);
    const last = (await r.reports()).at(-1)!.body;
    expect(last).toMatchObject({ state: 'synced', error: null });
    expect(last.note).toBe(row.note);
  });

  it('a file corrupted after finalize is never uploaded whole nor verified: the PUT is cut short and the replica fails', async () => {
    const r = await rig();
    const e = await r.episode({ 'a.bin': 200_000 });
    const file = join(r.dataDir, e.dir, 'a.bin');
    const bytes = await readFile(file);
    bytes[100_000] = bytes[100_000]! ^ 0xff;
    await writeFile(file, bytes);
    await r.assign(e);
    r.cloud.answer = r.grantWith();
    r.uploader.connected();
    await expect.poll(async () => (await r.replica(e))?.lastError).toMatch(/^file_changed: a.bin no longer matches its manifest .*; not retried$/);
    const row = (await r.replica(e))!;
    expect(row.state).toBe('syncing');
    expect(row.nextAttemptAt).toBeNull();
    expect(r.storage.objects.has(`${e.id}/a.bin`)).toBe(false);
    const states = (await r.reports()).map((x) => x.body.state);
    expect(states).not.toContain('verified');
    expect(states).not.toContain('synced');
    expect((await r.reports()).at(-1)!.body.error).toMatch(/^file_changed: /);
  });

  it('a failure in the state just reported is reported later than that state, even within the same millisecond (the cloud keeps only the newer of two reports in one state)', async () => {
    const r = await rig();
    const e = await r.episode({ 'a.bin': 200_000 });
    const file = join(r.dataDir, e.dir, 'a.bin');
    const bytes = await readFile(file);
    bytes[100_000] = bytes[100_000]! ^ 0xff;
    await writeFile(file, bytes);
    await r.assign(e);
    r.cloud.answer = r.grantWith();
    // The clock does not move: `syncing` and the failure happen in the same millisecond.
    r.uploader.connected();
    await expect.poll(async () => (await r.replica(e))?.lastError).toMatch(/^file_changed: /);
    const reports = (await r.reports()).map((x) => x.body);
    expect(reports.map((x) => [x.state, x.error === null ? null : x.error.split(':')[0]])).toEqual([
      ['granted', null],
      ['syncing', null],
      ['syncing', 'file_changed'],
    ]);
    expect(reports[2]!.at).toBeGreaterThan(reports[1]!.at);
  });

  it('files gone before a verified sync: each replica keeps its file_missing error, and the episode is reported missing once (episode.local_missing)', async () => {
    const r = await rig();
    const e = await r.episode({ 'a.bin': 1000, 'b.bin': 1000, 'c.bin': 10 });
    await rm(join(r.dataDir, e.dir, 'a.bin'));
    await rm(join(r.dataDir, e.dir, 'c.bin'));
    await r.assign(e);
    await r.store.sync.add([{ episode_id: e.id, destination_id: 'dst_other' }], r.clock.now());
    r.cloud.assignments.push({ episode_id: e.id, destination_id: 'dst_other' });
    r.cloud.answer = r.grantWith();
    r.uploader.connected();
    for (const dest of [DEST, 'dst_other']) {
      await expect.poll(async () => (await r.replica(e, dest))?.lastError).toMatch(/^file_missing: a.bin is missing from the episode directory; not retried$/);
    }
    const missing = (await r.store.outbox.pending({ afterSeq: 0, limit: 100 })).filter((m) => m.kind === 'episode.local_missing');
    expect(missing.map((m) => [m.msgId, LocalMissingSchema.parse(JSON.parse(m.bodyJson))])).toEqual([
      [`local_missing:${e.id}`, { episode_id: e.id, paths: ['a.bin', 'c.bin'], at: r.clock.now() }],
    ]);
    expect(await r.store.sync.localCopy(e.id)).toMatchObject({ localMissingAt: r.clock.now(), prunedAt: null });
    // The replica error is still reported as before.
    expect((await r.reports()).flatMap((x) => (x.body.error ? [x.body.error.split(':')[0]] : []))).toEqual(['file_missing', 'file_missing']);
  });

  it("the grant's retention (the destination's registered directive) is stored; verification sets the episode's prune time and tells retention", async () => {
    const r = await rig();
    const e = await r.episode({ 'a.bin': 1000 });
    await r.assign(e);
    r.cloud.answer = r.grantWith({ retention: 'until_all_verified_plus_72h' });
    r.uploader.connected();
    await expect.poll(async () => (await r.replica(e))?.state).toBe('verified');
    expect(await r.replica(e)).toMatchObject({ retention: 'until_all_verified_plus_72h' });
    expect(await r.store.sync.localCopy(e.id)).toMatchObject({ pruneDueAt: r.clock.now() + PRUNE_DELAY_MS, prunedAt: null });
    expect(r.verified).toEqual([e.id]);
  });

  it('a complete answered 200 with an <Error> document is a failure; the retry completes the same upload', async () => {
    const r = await rig({ retryScheduleMs: [1_000], jitter: 0 });
    const e = await r.episode({ 'a.bin': 3 * 1024 });
    await r.assign(e);
    r.cloud.answer = r.grantWith({ partSize: 1024 });
    r.storage.behaviour.completeError = 'InternalError';
    r.uploader.connected();
    await expect.poll(async () => (await r.replica(e))?.lastError).toMatch(/^complete_failed: POST complete a.bin answered 200 with an error document: InternalError/);
    expect((await r.replica(e))!.state).toBe('syncing');
    expect(r.storage.objects.has(`${e.id}/a.bin`)).toBe(false);
    r.storage.behaviour.completeError = null;
    r.scheduler.advance(1_000);
    await expect.poll(async () => (await r.replica(e))?.state).toBe('verified');
    // All three parts were done the first time: the retry only completes.
    expect(r.storage.requests.filter((q) => q.url.includes('partNumber=')).length).toBe(3);
    expect(r.storage.objects.get(`${e.id}/a.bin`)!.body.equals(await bytesOf(r, e, 'a.bin'))).toBe(true);
  });

  it('refuses plain http upload URLs without the opt-in, with a clear replica error', async () => {
    const r = await rig({ allowHttp: false });
    const e = await r.episode({ 'a.bin': 10 });
    await r.assign(e);
    r.cloud.answer = r.grantWith();
    r.uploader.connected();
    await expect.poll(async () => (await r.replica(e))?.lastError).toMatch(/^insecure_url: plain http upload URL refused for 127.0.0.1:\d+ \(start the agent with --allow-http-uploads to allow it\)/);
    expect(r.storage.requests).toEqual([]);
    expect((await r.replica(e))!.state).toBe('granted');
  });

  it('uploads over HTTPS to a private address trusted through an extra CA file', async () => {
    const pki = testCertificates();
    cleanups.push(() => pki.cleanup());
    const storage = await TestStorage.start({ key: pki.key, cert: pki.cert });
    const r = await rig({ allowHttp: false, storage, dispatcher: uploadDispatcher({ caFile: pki.caFile }) });
    const e = await r.episode({ 'a.bin': 50_000 });
    await r.assign(e);
    r.cloud.answer = r.grantWith({ partSize: 20_000 });
    r.uploader.connected();
    await expect.poll(async () => (await r.replica(e))?.state).toBe('verified');
    expect(storage.objects.get(`${e.id}/a.bin`)!.body.equals(await bytesOf(r, e, 'a.bin'))).toBe(true);
  });

  it('without the CA the HTTPS upload fails with a network error and is retried', async () => {
    const pki = testCertificates();
    cleanups.push(() => pki.cleanup());
    const storage = await TestStorage.start({ key: pki.key, cert: pki.cert });
    const r = await rig({ allowHttp: false, storage });
    const e = await r.episode({ 'a.bin': 100 });
    await r.assign(e);
    r.cloud.answer = r.grantWith();
    r.uploader.connected();
    await expect.poll(async () => (await r.replica(e))?.lastError).toMatch(/^network: PUT a.bin: .*; retrying at /);
  });

  it('reconciles with the complete assignment list, adds pushes, and skips episodes without files', async () => {
    const r = await rig();
    const kept = await r.episode({ 'a.bin': 10 });
    const dropped = await r.episode({ 'b.bin': 10 });
    const discarded = await r.episode({});
    await r.assign(kept, dropped);
    r.cloud.assignments.splice(0);
    r.cloud.assignments.push(
      { episode_id: kept.id, destination_id: DEST },
      { episode_id: discarded.id, destination_id: DEST },
    );
    r.cloud.answer = () => null; // hold grants
    r.uploader.connected();
    await expect.poll(async () => (await r.store.sync.list()).map((x) => x.episodeId).sort()).toEqual([kept.id, discarded.id].sort());
    await expect.poll(async () => (await r.replica(discarded))?.note).toBe('no files to upload (discarded or empty episode)');
    expect((await r.replica(discarded))!.nextAttemptAt).toBeNull();
    expect(r.cloud.grantRequests().map((q) => q.episode_id)).not.toContain(discarded.id);
    r.cloud.push({ type: 'assignments', assignments: [{ episode_id: dropped.id, destination_id: 'dst_other' }], complete: false });
    await expect.poll(async () => (await r.replica(dropped, 'dst_other'))?.state).toBe('assigned');
    // A malformed or unbounded message is dropped with a log line.
    r.uploader.handleMessage(Buffer.from('{"type":"grant"}'));
    r.uploader.handleMessage(Buffer.from('['.repeat(100) + ']'.repeat(100)));
    expect(r.logs.messages()).toContain('dropped a malformed sync message');
    expect(r.logs.messages()).toContain('dropped a sync message that is not bounded JSON');
  });

  it('asks for the complete list again a while after each answer, so an assignment whose push was lost is still seen without a reconnection', async () => {
    const r = await rig();
    const e = await r.episode({ 'a.bin': 10 });
    r.cloud.answer = () => null; // hold grants
    r.uploader.connected();
    const asked = () => r.cloud.requests.filter((q) => q.type === 'assignments.request').length;
    await expect.poll(asked).toBe(1);
    await expect.poll(() => r.logs.messages()).toContain('assignments reconciled with the cloud');
    expect(await r.replica(e)).toBeUndefined();
    // The cloud routes the episode now; its push never arrives (the link or a replica went down).
    r.cloud.assignments.push({ episode_id: e.id, destination_id: DEST });
    r.scheduler.advance(5 * 60_000 - 1);
    expect(asked()).toBe(1);
    r.scheduler.advance(1);
    await expect.poll(asked).toBe(2);
    await expect.poll(async () => (await r.replica(e))?.state).toBe('assigned');
    // Offline, nothing is asked.
    r.uploader.disconnected();
    r.scheduler.advance(10 * 60_000);
    expect(asked()).toBe(2);
  });

  it('an unanswered assignments.request is asked again after two grant timeouts, then after twice each wait up to the 5-minute refresh; never while the last ask has not left', async () => {
    const r = await rig();
    r.cloud.answerAssignments = false;
    r.uploader.connected();
    const asked = () => r.cloud.requests.filter((q) => q.type === 'assignments.request').length;
    const sent = () => new Promise<void>((resolve) => setImmediate(resolve));
    await expect.poll(asked).toBe(1);
    // The rig's grant timeout is the default 30 s: 60 s, 120 s, 240 s, then 300 s each.
    for (const [wait, count] of [[60_000, 2], [120_000, 3], [240_000, 4], [300_000, 5], [300_000, 6]] as const) {
      r.scheduler.advance(wait - 1);
      expect(asked()).toBe(count - 1);
      r.scheduler.advance(1);
      expect(asked()).toBe(count);
      await sent();
    }
    // An hour at once, no I/O in between: the first repeat is sent, and the ones after it wait
    // for it to leave instead of piling up behind it.
    r.scheduler.advance(3_600_000);
    expect(asked()).toBe(7);
    await sent();
    // Answered at last: the next ask is the refresh 5 minutes after the answer, and an
    // unanswered one after it starts again at 60 s.
    r.cloud.answerAssignments = true;
    r.scheduler.advance(300_000);
    await expect.poll(() => r.logs.messages()).toContain('assignments reconciled with the cloud');
    expect(asked()).toBe(8);
    r.cloud.answerAssignments = false;
    r.scheduler.advance(300_000);
    expect(asked()).toBe(9);
    await sent();
    r.scheduler.advance(60_000);
    expect(asked()).toBe(10);
  });

  it('after a stop mid-upload a new uploader on the reopened store resumes the same upload id and sends only the missing parts', async () => {
    const r = await rig({ partParallel: 1 });
    r.storage.behaviour.partDelayMs = 40;
    const e = await r.episode({ 'recording.mcap': 10 * 1024 });
    await r.assign(e);
    r.cloud.answer = r.grantWith({ partSize: 1024 });
    r.uploader.connected();
    await expect.poll(async () => (await r.store.sync.files(e.id, DEST))[0]?.parts.length ?? 0).toBeGreaterThanOrEqual(3);
    await r.uploader.stop();
    const [file] = await r.store.sync.files(e.id, DEST);
    const done = file!.parts.map((p) => p.partNumber);
    expect((await r.replica(e))!).toMatchObject({ state: 'syncing', lastError: null });

    const store = openAgentStore(r.dataDir, r.clock);
    const dispatcher = new HttpAgent();
    const next = new Uploader({
      store,
      dataDir: r.dataDir,
      transport: r.cloud,
      http: { dispatcher, allowHttp: true, timeoutMs: 10_000 },
      clock: r.clock,
      scheduler: r.scheduler,
      logger: r.logs.logger,
      random: () => 0.5,
      onReport: () => undefined,
    });
    cleanups.push(async () => {
      await next.stop();
      await dispatcher.close();
      await store.close();
    });
    r.cloud.deliver = (p) => next.handleMessage(p);
    r.storage.behaviour.partDelayMs = 0;
    // The part cut short by the stop may still reach the storage; it is not recorded, so it is sent again.
    await next.start();
    next.connected();
    await expect.poll(async () => (await store.sync.get(e.id, DEST))?.state).toBe('verified');
    expect(r.cloud.grantRequests().at(-1)!.resume).toEqual([{ destination_id: DEST, uploads: [{ path: 'recording.mcap', upload_id: file!.uploadId, parts_done: done }] }]);
    // Each part recorded as done went to the storage once (never again); the others at least once
    // (the one cut short may have reached it before the stop, whenever it arrived).
    const putsOf = (n: number) => r.storage.requests.filter((q) => q.method === 'PUT' && new URLSearchParams(q.url.split('?')[1]).get('partNumber') === String(n)).length;
    for (const n of done) expect(putsOf(n), `part ${n}`).toBe(1);
    for (let n = 1; n <= 10; n++) expect(putsOf(n), `part ${n}`).toBeGreaterThanOrEqual(1);
    expect(r.storage.objects.get(`${e.id}/recording.mcap`)!.body.equals(await bytesOf(r, e, 'recording.mcap'))).toBe(true);
  });

  it('a replica whose files were all sent before a crash is finished without a new grant', async () => {
    const r = await rig();
    r.storage.behaviour.etag = 'md5';
    const e = await r.episode({ 'a.bin': 100 });
    await r.assign(e);
    r.cloud.answer = r.grantWith();
    r.uploader.connected();
    await expect.poll(async () => (await r.replica(e))?.state).toBe('verified');
    // Put the replica back to where a crash after the last file (before `synced`) leaves it.
    await r.store.sync.update(e.id, DEST, { state: 'syncing', nextAttemptAt: r.clock.now() }, r.clock.now());
    const grants = r.cloud.grantRequests().length;
    r.uploader.kick();
    await expect.poll(async () => (await r.replica(e))?.state).toBe('verified');
    expect(r.cloud.grantRequests()).toHaveLength(grants);
  });

  it('an ETag that contradicts the bytes sent is a failure and the file is sent again', async () => {
    const r = await rig({ retryScheduleMs: [1_000], jitter: 0 });
    r.storage.behaviour.etag = 'wrong';
    const e = await r.episode({ 'a.bin': 100 });
    await r.assign(e);
    r.cloud.answer = r.grantWith();
    r.uploader.connected();
    await expect.poll(async () => (await r.replica(e))?.lastError).toMatch(/^receipt_mismatch: PUT a.bin: the store's ETag .* differs from the MD5 of the bytes sent/);
    expect((await r.store.sync.files(e.id, DEST)).filter((f) => f.complete)).toEqual([]);
    r.storage.behaviour.etag = 'md5';
    r.scheduler.advance(1_000);
    await expect.poll(async () => (await r.replica(e))?.state).toBe('verified');
    expect(r.storage.requests.filter((q) => q.method === 'PUT')).toHaveLength(2);
  });

  it('s3-multipart: part ETags that contradict the bytes sent are a failure, never verified; the parts are sent again', async () => {
    const r = await rig({ partParallel: 1, retryScheduleMs: [1_000], jitter: 0 });
    r.storage.behaviour.etag = 'wrong';
    const e = await r.episode({ 'recording.mcap': 3 * 1024 + 10 });
    await r.assign(e);
    r.cloud.answer = r.grantWith({ partSize: 1024 });
    r.uploader.connected();
    await expect.poll(async () => (await r.replica(e))?.lastError).toMatch(/^receipt_mismatch: PUT part 1 of recording.mcap: the store's ETag .* differs from the MD5 of the bytes sent/);
    await r.uploader.idle();
    expect((await r.replica(e))?.state).toBe('syncing');
    expect((await r.reports()).map((x) => x.body.state)).not.toContain('verified');
    expect(r.verified).toEqual([]);
    const [file] = await r.store.sync.files(e.id, DEST);
    expect([file!.complete, file!.parts]).toEqual([false, []]);
    r.storage.behaviour.etag = 'md5';
    r.scheduler.advance(1_000);
    await expect.poll(async () => (await r.replica(e))?.state).toBe('verified');
    expect(r.storage.objects.get(`${e.id}/recording.mcap`)!.body.equals(await bytesOf(r, e, 'recording.mcap'))).toBe(true);
  });
});

