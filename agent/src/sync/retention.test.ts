import { access } from 'node:fs/promises';
import { join } from 'node:path';
import { EpisodePrunedSchema, HOUR, ManualClock, type RetentionDirective } from '@fleet/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import { openAgentStore, type SqliteAgentStore } from '../store/sqlite.js';
import type { EpisodeRow } from '../store/types.js';
import { captureLogs, makeTempDir, removeTempDirs } from '../test-support.js';
import { ManualScheduler } from '../time.js';
import { Retention } from './retention.js';
import { storeEpisode } from './test-storage.js';

const KEEP = 'keep';
const PRUNE = 'until_all_verified_plus_72h';
const H72 = 72 * HOUR;

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  await removeTempDirs();
});

interface Rig {
  dataDir: string;
  store: SqliteAgentStore;
  clock: ManualClock;
  scheduler: ManualScheduler;
  retention: Retention;
  reports: number;
}

/** A store, clock and scheduler; `retention` is started (a restart is `restart()`). */
async function rig(at?: { dataDir: string; clock: ManualClock }): Promise<Rig & { restart(): Promise<void> }> {
  const dataDir = at?.dataDir ?? (await makeTempDir());
  const clock = at?.clock ?? new ManualClock();
  const r = { dataDir, clock, scheduler: new ManualScheduler(clock), reports: 0 } as Rig & { restart(): Promise<void> };
  const open = async () => {
    r.store = openAgentStore(dataDir, clock);
    r.scheduler = new ManualScheduler(clock);
    r.retention = new Retention({ store: r.store, dataDir, clock, scheduler: r.scheduler, logger: captureLogs().logger, onReport: () => (r.reports += 1) });
    await r.retention.start();
  };
  const close = async () => {
    await r.retention.stop();
    await r.store.close();
  };
  await open();
  r.restart = async () => {
    await close();
    await open();
  };
  cleanups.push(close);
  return r;
}

async function episode(r: Rig): Promise<EpisodeRow> {
  return storeEpisode(r.store, r.dataDir, { 'recording.mcap': 2048, 'cams/left.bin': 512 }, r.clock.now());
}

/** The replica is assigned and granted with the destination's directive (what the grant message carries). */
async function assign(r: Rig, e: EpisodeRow, dest: string, retention: RetentionDirective): Promise<void> {
  await r.store.sync.add([{ episode_id: e.id, destination_id: dest }], r.clock.now());
  await r.store.sync.update(e.id, dest, { state: 'granted', retention, grantId: `grt_${dest}` }, r.clock.now());
}

async function verify(r: Rig, e: EpisodeRow, dest: string): Promise<void> {
  for (const state of ['syncing', 'synced', 'verified'] as const) await r.store.sync.update(e.id, dest, { state, nextAttemptAt: state === 'verified' ? null : r.clock.now() }, r.clock.now());
  // What the uploader does after a verification.
  r.retention.kick();
  await r.retention.idle();
}

/** Moves the injected clock to `t` the way time passes: timers fire as they fall due, each check runs to its end. */
async function advanceTo(r: Rig, t: number): Promise<void> {
  while (r.clock.now() < t) {
    r.scheduler.advance(Math.min(HOUR, t - r.clock.now()));
    await r.retention.idle();
  }
}

const exists = (path: string) =>
  access(path).then(
    () => true,
    () => false,
  );

async function filesPresent(r: Rig, e: EpisodeRow): Promise<boolean[]> {
  return Promise.all(e.manifest.files.map((f) => exists(join(r.dataDir, e.dir, ...f.path.split('/')))));
}

async function prunedReports(r: Rig) {
  const rows = await r.store.outbox.pending({ afterSeq: 0, limit: 100 });
  return rows.filter((m) => m.kind === 'episode.pruned').map((m) => ({ msgId: m.msgId, body: EpisodePrunedSchema.parse(JSON.parse(m.bodyJson)) }));
}

describe('Retention', () => {
  it('until_all_verified_plus_72h: not pruned at 72 h - 1 ms after the LAST destination verified, pruned at 72 h; files go, rows stay, episode.pruned is queued once', async () => {
    const r = await rig();
    const e = await episode(r);
    await assign(r, e, 'dst_a', PRUNE);
    await assign(r, e, 'dst_b', PRUNE);
    await verify(r, e, 'dst_a');
    // One destination verified is not all of them.
    expect((await r.store.sync.localCopy(e.id))!.pruneDueAt).toBeNull();
    await advanceTo(r, r.clock.now() + 5 * HOUR);
    await verify(r, e, 'dst_b');
    const lastVerified = r.clock.now();
    expect((await r.store.sync.localCopy(e.id))!.pruneDueAt).toBe(lastVerified + H72);

    await advanceTo(r, lastVerified + H72 - 1);
    expect(await filesPresent(r, e)).toEqual([true, true]);
    expect(await prunedReports(r)).toEqual([]);

    await advanceTo(r, lastVerified + H72);
    expect(await filesPresent(r, e)).toEqual([false, false]);
    expect(await r.store.episodes.get(e.id)).toMatchObject({ id: e.id, manifest: e.manifest });
    expect((await r.store.sync.list()).map((x) => x.state)).toEqual(['verified', 'verified']);
    expect(await r.store.sync.localCopy(e.id)).toMatchObject({ prunedAt: lastVerified + H72 });
    expect(await prunedReports(r)).toEqual([{ msgId: `pruned:${e.id}`, body: { episode_id: e.id, pruned_at: lastVerified + H72 } }]);
    expect(r.reports).toBe(1);

    // Later checks and a restart prune nothing again and report nothing again.
    await r.restart();
    await advanceTo(r, r.clock.now() + 100 * HOUR);
    expect(await prunedReports(r)).toHaveLength(1);
    // Only the hourly look remains.
    expect(r.scheduler.pending).toBe(1);
  });

  it('keep wins when the destinations of one episode disagree', async () => {
    const r = await rig();
    const e = await episode(r);
    await assign(r, e, 'dst_a', PRUNE);
    await assign(r, e, 'dst_b', KEEP);
    await verify(r, e, 'dst_a');
    await verify(r, e, 'dst_b');
    expect((await r.store.sync.localCopy(e.id))!.pruneDueAt).toBeNull();
    await advanceTo(r, r.clock.now() + 1000 * HOUR);
    expect(await filesPresent(r, e)).toEqual([true, true]);
    expect(await prunedReports(r)).toEqual([]);
  });

  it('an episode not verified at every destination is never pruned, however long it waits; a new assignment after verification clears the due time', async () => {
    const r = await rig();
    const partly = await episode(r);
    await assign(r, partly, 'dst_a', PRUNE);
    await assign(r, partly, 'dst_b', PRUNE);
    await verify(r, partly, 'dst_a');
    await r.store.sync.update(partly.id, 'dst_b', { state: 'synced', nextAttemptAt: null, note: 'no usable receipt' }, r.clock.now());
    const never = await episode(r);
    await r.store.sync.add([{ episode_id: never.id, destination_id: 'dst_a' }], r.clock.now());

    const later = await episode(r);
    await assign(r, later, 'dst_a', PRUNE);
    await verify(r, later, 'dst_a');
    expect((await r.store.sync.localCopy(later.id))!.pruneDueAt).toBe(r.clock.now() + H72);
    // The cloud routes it to a second destination before the time is up.
    await r.store.sync.add([{ episode_id: later.id, destination_id: 'dst_b' }], r.clock.now());
    expect((await r.store.sync.localCopy(later.id))!.pruneDueAt).toBeNull();

    await advanceTo(r, r.clock.now() + 1000 * HOUR);
    for (const e of [partly, never, later]) expect(await filesPresent(r, e)).toEqual([true, true]);
    expect(await prunedReports(r)).toEqual([]);
  });

  it('the cloud dropping the one unfinished assignment of an otherwise verified episode starts its time; the hourly look finds it', async () => {
    const r = await rig();
    const e = await episode(r);
    await assign(r, e, 'dst_a', PRUNE);
    await r.store.sync.add([{ episode_id: e.id, destination_id: 'dst_gone' }], r.clock.now());
    await verify(r, e, 'dst_a');
    const verifiedAt = r.clock.now();
    expect((await r.store.sync.localCopy(e.id))!.pruneDueAt).toBeNull();
    // The complete assignment list no longer names dst_gone (its destination was revoked).
    await r.store.sync.reconcile([], r.clock.now() + HOUR);
    expect((await r.store.sync.localCopy(e.id))!.pruneDueAt).toBe(verifiedAt + H72);
    await advanceTo(r, verifiedAt + H72);
    expect(await filesPresent(r, e)).toEqual([false, false]);
  });

  it('the timer is stored: a restart between verification and the due time still prunes on time, and one after it prunes at start', async () => {
    const r = await rig();
    const e1 = await episode(r);
    await assign(r, e1, 'dst_a', PRUNE);
    await verify(r, e1, 'dst_a');
    const due1 = r.clock.now() + H72;
    const e2 = await episode(r);
    await assign(r, e2, 'dst_a', PRUNE);
    r.clock.advance(10 * HOUR);
    await verify(r, e2, 'dst_a');
    const due2 = r.clock.now() + H72;

    // The agent restarts (new store handle, new scheduler: nothing survives in memory).
    await r.restart();
    await advanceTo(r, due1 - 1);
    expect(await filesPresent(r, e1)).toEqual([true, true]);
    await advanceTo(r, due1);
    expect(await filesPresent(r, e1)).toEqual([false, false]);
    expect(await filesPresent(r, e2)).toEqual([true, true]);

    // Off across the second due time: the start-up check prunes it.
    await r.retention.stop();
    await r.store.close();
    r.clock.set(due2 + 5 * HOUR);
    const again = await rig({ dataDir: r.dataDir, clock: r.clock });
    expect(await filesPresent(again, e2)).toEqual([false, false]);
    expect(await again.store.sync.localCopy(e2.id)).toMatchObject({ prunedAt: due2 + 5 * HOUR });
    expect((await prunedReports(again)).map((m) => m.body.episode_id)).toEqual([e1.id, e2.id]);
  });
});
