import { afterEach, describe, expect, it } from 'vitest';
import { makeTempDir, removeTempDirs } from '../test-support.js';
import { storeEpisode } from '../sync/test-storage.js';
import { openAgentStore } from './sqlite.js';

afterEach(removeTempDirs);

const receipt = { status: 200, etag: '"e"', checksumSha256: null };

describe('SqliteSync', () => {
  it('keeps upload ids, parts and receipts written as they happen across a reopen (a kill -9 loses nothing done)', async () => {
    const dir = await makeTempDir();
    let store = openAgentStore(dir);
    const e = await storeEpisode(store, dir, { 'a.bin': 10 }, 1000);
    await store.sync.add([{ episode_id: e.id, destination_id: 'd1' }], 1000);
    await store.sync.beginMultipart(e.id, 'd1', 'big.bin', 'up-1', 5, 1001);
    await store.sync.partDone(e.id, 'd1', 'big.bin', 'up-1', { partNumber: 2, size: 5, etag: '"p2"', md5: 'm2', sha256: 's2' }, 1002);
    await store.sync.fileDone(e.id, 'd1', 'a.bin', { uploadId: null, bytesSent: 10, sha256Sent: 'x', md5Sent: 'y', receipt }, 1003);
    // No clean close: the database file is all the next process has.
    store = openAgentStore(dir);
    const files = await store.sync.files(e.id, 'd1');
    expect(files).toEqual([
      { path: 'a.bin', uploadId: null, partSize: null, complete: true, bytesSent: 10, sha256Sent: 'x', md5Sent: 'y', receipt, parts: [] },
      { path: 'big.bin', uploadId: 'up-1', partSize: 5, complete: false, bytesSent: null, sha256Sent: null, md5Sent: null, receipt: null, parts: [{ partNumber: 2, size: 5, etag: '"p2"', md5: 'm2', sha256: 's2' }] },
    ]);
    // Another upload id for the file starts over; a part for a stale upload id is refused.
    await store.sync.beginMultipart(e.id, 'd1', 'big.bin', 'up-2', 5, 1004);
    expect((await store.sync.files(e.id, 'd1')).find((f) => f.path === 'big.bin')!.parts).toEqual([]);
    await expect(store.sync.partDone(e.id, 'd1', 'big.bin', 'up-1', { partNumber: 1, size: 5, etag: '"p"', md5: 'm', sha256: 's' }, 1005)).rejects.toThrow(/not the current one/);
    await store.close();
  });

  it('a state change and its report commit together; reconcile drops unfinished assignments only', async () => {
    const dir = await makeTempDir();
    const store = openAgentStore(dir);
    await store.sync.add(
      [
        { episode_id: 'ep_a', destination_id: 'd' },
        { episode_id: 'ep_b', destination_id: 'd' },
        { episode_id: 'ep_c', destination_id: 'd' },
      ],
      1,
    );
    const row = await store.sync.update('ep_a', 'd', { state: 'granted', grantId: 'g' }, 2, { msgId: 'replica:ep_a:d:granted:1', kind: 'replica.state', body: { x: 1 }, createdAt: 2 });
    expect(row).toMatchObject({ state: 'granted', grantId: 'g', reports: 1 });
    expect((await store.outbox.get('replica:ep_a:d:granted:1'))?.kind).toBe('replica.state');
    await store.sync.update('ep_b', 'd', { state: 'verified', nextAttemptAt: null }, 3);
    const { added, removed } = await store.sync.reconcile([{ episode_id: 'ep_d', destination_id: 'd' }], 4);
    expect(added).toBe(1);
    expect(removed.map((r) => r.episode_id).sort()).toEqual(['ep_a', 'ep_c']);
    expect((await store.sync.list()).map((r) => r.episodeId)).toEqual(['ep_b', 'ep_d']);
    expect((await store.sync.due(4, 10)).map((r) => r.episodeId)).toEqual(['ep_d']);
    expect(await store.sync.nextDueAt()).toBe(4);
    await store.close();
  });
});
