import { rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { formatEpisode, formatEpisodeList } from './episodes-format.js';
import { listEpisodeViews, showEpisodeView } from './episodes-view.js';
import { openTestMachine, removeTempDirs, type TestMachine } from './test-support.js';

const open: TestMachine[] = [];
afterEach(async () => {
  for (const t of open.splice(0)) await t.close();
  await removeTempDirs();
});

async function machine(): Promise<TestMachine> {
  const t = await openTestMachine();
  open.push(t);
  return t;
}

async function record(t: TestMachine, ms: number, end: 'finish' | 'fail' | 'discard' = 'finish'): Promise<string> {
  const { episode_id } = await t.machine.start();
  for (let done = 0; done < ms; done += 100) {
    t.scheduler.advance(100);
    await t.recorder.settled();
  }
  await t.machine.apply(end);
  await t.machine.whenSettled();
  return episode_id;
}

const receipt = { status: 200, etag: '"e"', checksumSha256: null };

describe('episodes list and show', () => {
  it('lists the newest first with the recording one on top: directories, files with sizes, replicas per destination', async () => {
    const t = await machine();
    const first = await record(t, 500);
    const second = await record(t, 300, 'fail');
    const row = (await t.store.episodes.get(first))!;
    const file = row.manifest.files[0]!;
    // One destination verified, one half way through a multipart upload after a failed attempt.
    await t.store.sync.add(
      [
        { episode_id: first, destination_id: 'dst_a' },
        { episode_id: first, destination_id: 'dst_b' },
      ],
      t.clock.now(),
    );
    await t.store.sync.fileDone(first, 'dst_a', file.path, { uploadId: null, bytesSent: file.size_bytes, sha256Sent: file.sha256, md5Sent: 'm', receipt }, t.clock.now());
    await t.store.sync.update(first, 'dst_a', { state: 'verified', nextAttemptAt: null }, t.clock.now());
    await t.store.sync.beginMultipart(first, 'dst_b', file.path, 'up-1', 1000, t.clock.now());
    await t.store.sync.partDone(first, 'dst_b', file.path, 'up-1', { partNumber: 1, size: 1000, etag: '"p1"', md5: 'm' }, t.clock.now());
    const retryAt = t.clock.now() + 10_000;
    await t.store.sync.update(first, 'dst_b', { state: 'syncing', lastError: 'http_503: Slow Down', failures: 1, nextAttemptAt: retryAt }, t.clock.now());
    const recording = await t.machine.start();
    t.scheduler.advance(200);
    await t.recorder.settled();

    const views = await listEpisodeViews({ store: t.store, dataDir: t.dataDir }, 50);
    expect(views.map((v) => [v.id, v.state, v.outcome])).toEqual([
      [recording.episode_id, 'recording', null],
      [second, 'finalized', 'failure'],
      [first, 'finalized', 'success'],
    ]);
    const [now, , old] = views;
    const dir = join(t.dataDir, 'episodes', first);
    expect(old).toMatchObject({
      dir,
      files: [{ path: 'recording.mcap', abs_path: join(dir, 'recording.mcap'), size_bytes: file.size_bytes, sha256: file.sha256 }],
      total_bytes: row.manifest.total_bytes,
      prune_due_at: null,
      pruned_at: null,
    });
    expect(old!.sync).toEqual([
      { destination_id: 'dst_a', state: 'verified', active: false, bytes_sent: file.size_bytes, bytes_total: file.size_bytes, last_error: null, note: null, next_attempt_at: null },
      {
        destination_id: 'dst_b',
        state: 'syncing',
        active: false,
        bytes_sent: 1000,
        bytes_total: file.size_bytes,
        last_error: 'http_503: Slow Down',
        note: null,
        next_attempt_at: new Date(retryAt).toISOString(),
      },
    ]);
    // The recording one: its file as it grows on disk, no checksum yet.
    const growing = join(t.dataDir, 'episodes', recording.episode_id, 'recording.mcap');
    expect(now!.files).toEqual([{ path: 'recording.mcap', abs_path: growing, size_bytes: (await stat(growing)).size, sha256: null }]);

    expect((await listEpisodeViews({ store: t.store, dataDir: t.dataDir }, 2)).map((v) => v.id)).toEqual([recording.episode_id, second]);

    const text = formatEpisodeList(views);
    expect(text).toContain(`${first}  finalized, success`);
    expect(text).toContain(`  dir        ${dir}`);
    expect(text).toContain('  file       recording.mcap  ');
    expect(text).toMatch(/ {2}sync {7}dst_b {2}syncing {2}1000 B \/ .* next attempt /);
    expect(text).toContain('    last error: http_503: Slow Down');
  });

  it('shows one episode with times and checksums; a missing file shows as missing; an unknown id is undefined', async () => {
    const t = await machine();
    const id = await record(t, 400);
    const row = (await t.store.episodes.get(id))!;
    await rm(join(t.dataDir, 'episodes', id, 'recording.mcap'));
    const v = (await showEpisodeView({ store: t.store, dataDir: t.dataDir }, id))!;
    expect(v).toMatchObject({ id, state: 'finalized', outcome: 'success', interrupted: false, started_at: row.facts.started_at, ended_at: row.facts.ended_at, sync: [] });
    expect(v.files[0]!.size_bytes).toBeNull();
    const text = formatEpisode(v, { detail: true });
    expect(text).toContain(`  file       recording.mcap  missing  sha256 ${row.manifest.files[0]!.sha256}`);
    expect(text).toContain('  sync       no destination assigned');
    expect(await showEpisodeView({ store: t.store, dataDir: t.dataDir }, 'ep_2222222222aaaaaaaaaaaaaaaa')).toBeUndefined();
  });
});
