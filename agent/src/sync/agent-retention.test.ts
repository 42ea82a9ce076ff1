import { access } from 'node:fs/promises';
import { join } from 'node:path';
import { HOUR, ManualClock, PRUNE_DELAY_MS } from '@fleet/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import type { Agent } from '../daemon.js';
import { openAgentStore } from '../store/sqlite.js';
import type { EpisodeRow } from '../store/types.js';
import { makeTempDir, removeTempDirs, startTestAgent } from '../test-support.js';
import { ManualScheduler } from '../time.js';
import { storeEpisode } from './test-storage.js';

const running = new Set<Agent>();
afterEach(async () => {
  for (const a of running) await a.stop();
  running.clear();
  await removeTempDirs();
});

const present = (dataDir: string, e: EpisodeRow) =>
  access(join(dataDir, e.dir, e.manifest.files[0]!.path)).then(
    () => true,
    () => false,
  );

/** An episode verified at one destination whose registered retention prunes, written before the agent runs. */
async function verifiedEpisode(dataDir: string, clock: ManualClock): Promise<EpisodeRow> {
  const store = openAgentStore(dataDir, clock);
  try {
    const e = await storeEpisode(store, dataDir, { 'recording.mcap': 4096 }, clock.now());
    await store.sync.add([{ episode_id: e.id, destination_id: 'dst_a' }], clock.now());
    await store.sync.update(e.id, 'dst_a', { state: 'granted', grantId: 'grt_1', retention: 'until_all_verified_plus_72h' }, clock.now());
    await store.sync.update(e.id, 'dst_a', { state: 'synced' }, clock.now());
    await store.sync.update(e.id, 'dst_a', { state: 'verified', nextAttemptAt: null }, clock.now());
    return e;
  } finally {
    await store.close();
  }
}

describe('Agent retention (daemon wiring, injected clock)', () => {
  it('the stored due time survives a restart: the running agent prunes at 72 h on its scheduler, a started agent prunes what fell due while it was off', async () => {
    const dataDir = await makeTempDir();
    const clock = new ManualClock();
    const first = await verifiedEpisode(dataDir, clock);
    const due1 = clock.now() + PRUNE_DELAY_MS;
    clock.advance(10 * HOUR);
    const second = await verifiedEpisode(dataDir, clock);
    const due2 = clock.now() + PRUNE_DELAY_MS;

    let scheduler = new ManualScheduler(clock);
    let t = await startTestAgent({ dataDir, clock, scheduler });
    running.add(t.agent);
    while (clock.now() < due1 - 1) scheduler.advance(Math.min(HOUR, due1 - 1 - clock.now()));
    // Whatever the timers set going has finished (no window to wait out): a check that pruned
    // early would have removed the file by now.
    await t.agent.retentionIdle();
    expect(await present(dataDir, first)).toBe(true);
    scheduler.advance(1);
    await expect.poll(() => present(dataDir, first)).toBe(false);
    expect(await present(dataDir, second)).toBe(true);

    // Stopped across the second due time; the next start prunes it before anything else.
    await t.agent.stop();
    running.delete(t.agent);
    clock.set(due2 + HOUR);
    scheduler = new ManualScheduler(clock);
    t = await startTestAgent({ dataDir, clock, scheduler });
    running.add(t.agent);
    expect(await present(dataDir, second)).toBe(false);
    await t.agent.stop();
    running.delete(t.agent);

    const store = openAgentStore(dataDir, clock);
    try {
      expect((await store.sync.localCopy(first.id))!.prunedAt).toBe(due1);
      expect((await store.sync.localCopy(second.id))!.prunedAt).toBe(due2 + HOUR);
      const pending = await store.outbox.pending({ afterSeq: 0, limit: 100 });
      expect(pending.filter((m) => m.kind === 'episode.pruned').map((m) => m.msgId)).toEqual([`pruned:${first.id}`, `pruned:${second.id}`]);
    } finally {
      await store.close();
    }
  });
});
