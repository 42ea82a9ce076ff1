import { join } from 'node:path';
import Database from 'better-sqlite3';
import { EpisodeReportSchema } from '@fleet/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import { AGENT_DATABASE_FILE } from '../store/sqlite.js';
import { openTestMachine, removeTempDirs, type TestMachine } from '../test-support.js';
import { episodeReportMsgId, toEpisodeReport } from './report.js';

const open: TestMachine[] = [];
async function machine(opts: Parameters<typeof openTestMachine>[0] = {}): Promise<TestMachine> {
  const t = await openTestMachine(opts);
  open.push(t);
  return t;
}

afterEach(async () => {
  for (const t of open.splice(0)) await t.close().catch(() => undefined);
  await removeTempDirs();
});

async function record(t: TestMachine, ms: number): Promise<void> {
  for (let done = 0; done < ms; done += 100) {
    t.scheduler.advance(Math.min(100, ms - done));
    await t.recorder.settled();
  }
}

/** Episodes and outbox rows as a fresh process would find them on disk. */
async function onDisk(t: TestMachine) {
  const db = new Database(join(t.dataDir, AGENT_DATABASE_FILE), { readonly: true });
  try {
    return {
      episodes: db.prepare('SELECT id FROM episodes ORDER BY id').pluck().all() as string[],
      outbox: db.prepare('SELECT msg_id FROM outbox ORDER BY seq').pluck().all() as string[],
    };
  } finally {
    db.close();
  }
}

/** The next start after a kill -9: a new machine on the same directory, the old one abandoned. */
function restart(t: TestMachine): Promise<TestMachine> {
  return machine({ dataDir: t.dataDir, clock: t.clock, robotId: t.robotId });
}

describe('the report is enqueued with the finalized episode', () => {
  it('finalizing writes the episode and its report in one go; the body is the protocol report', async () => {
    const t = await machine();
    await t.machine.setContext({ task_id: 'pick', subtask_id: 's1', operator_id: 'op' });
    const { episode_id } = await t.machine.start();
    await record(t, 500);
    await t.machine.finish();
    await t.machine.whenSettled();
    const row = await t.store.outbox.get(episodeReportMsgId(episode_id));
    expect(row).toMatchObject({ msgId: `episode.report:${episode_id}`, kind: 'episode.report', state: 'pending', attempts: 0 });
    const episode = (await t.store.episodes.get(episode_id))!;
    expect(row!.createdAt).toBe(episode.finalizedAt);
    const body = EpisodeReportSchema.parse(JSON.parse(row!.bodyJson));
    expect(body).toEqual(toEpisodeReport(episode));
    expect(body).toMatchObject({ id: episode_id, outcome: 'success', task_id: 'pick', operator_id: 'op' });
    expect(body.manifest.files.map((f) => f.path)).toEqual(['recording.mcap']);
  });

  it('a discarded episode is reported too: outcome discarded, empty manifest', async () => {
    const t = await machine();
    const { episode_id } = await t.machine.start();
    await record(t, 300);
    await t.machine.discard();
    await t.machine.whenSettled();
    const row = await t.store.outbox.get(episodeReportMsgId(episode_id));
    const body = EpisodeReportSchema.parse(JSON.parse(row!.bodyJson));
    expect(body).toMatchObject({ id: episode_id, outcome: 'discarded', manifest: { files: [], total_bytes: 0 }, bag_size_bytes: 0 });
  });

  it('a failing outbox insert rolls the episode back: neither exists until both can be written', async () => {
    const t = await machine();
    const { episode_id } = await t.machine.start();
    await record(t, 300);
    // Another connection makes every insert into the outbox fail (a full disk, say).
    const db = new Database(join(t.dataDir, AGENT_DATABASE_FILE));
    db.exec(`CREATE TRIGGER outbox_full BEFORE INSERT ON outbox BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END`);
    await t.machine.finish();
    await expect.poll(() => t.logs.messages().includes('finalization failed; retrying')).toBe(true);
    expect(await onDisk(t)).toEqual({ episodes: [], outbox: [] });
    expect(t.machine.state).toBe('finalizing');
    expect((await t.store.recording.get())?.state).toBe('finalizing');

    db.exec('DROP TRIGGER outbox_full');
    db.close();
    t.scheduler.advance(1000); // finalizeRetryMs
    await t.machine.whenSettled();
    expect(t.machine.state).toBe('idle');
    expect(await onDisk(t)).toEqual({ episodes: [episode_id], outbox: [episodeReportMsgId(episode_id)] });
  });

  it('kill -9 before the commit (store gone mid-finalize): the next start finalizes and enqueues it once', async () => {
    const first = await machine({ finalizingDelayMs: 10_000 });
    const { episode_id } = await first.machine.start();
    await record(first, 500);
    await first.machine.finish(); // acknowledged; finalizing waits on its delay
    await first.store.close(); // the process dies here: nothing more reaches the database
    first.scheduler.advance(10_000);
    await expect.poll(() => first.logs.messages().includes('finalization failed; retrying')).toBe(true);
    expect(await onDisk(first)).toEqual({ episodes: [], outbox: [] });

    const second = await restart(first);
    expect(await onDisk(second)).toEqual({ episodes: [episode_id], outbox: [episodeReportMsgId(episode_id)] });
    const body = EpisodeReportSchema.parse(JSON.parse((await second.store.outbox.get(episodeReportMsgId(episode_id)))!.bodyJson));
    expect(body).toMatchObject({ outcome: 'failure', interrupted: true, metadata: { interrupted: true, requested_outcome: 'success' } });
  });

  it('kill -9 after the commit: the next start has both, and enqueues nothing again', async () => {
    const first = await machine();
    const { episode_id } = await first.machine.start();
    await record(first, 300);
    await first.machine.finish();
    await first.machine.whenSettled();
    await first.store.close();
    const second = await restart(first);
    expect(await onDisk(second)).toEqual({ episodes: [episode_id], outbox: [episodeReportMsgId(episode_id)] });
    expect(await second.store.outbox.counts()).toEqual({ pending: 1, acked: 0, refused: 0 });
  });

  it('recovering a recording interrupted by a crash enqueues its report', async () => {
    const first = await machine();
    const { episode_id } = await first.machine.start();
    await record(first, 2000);
    // kill -9 while recording: the store is simply abandoned.
    const second = await restart(first);
    const row = await second.store.outbox.get(episodeReportMsgId(episode_id));
    expect(row?.state).toBe('pending');
    const body = EpisodeReportSchema.parse(JSON.parse(row!.bodyJson));
    expect(body).toMatchObject({ id: episode_id, outcome: 'failure', interrupted: true, metadata: { interrupted: true } });
    expect(body.manifest.files.map((f) => f.path)).toEqual(['recording.mcap']);
  });

  it('reports accumulate in finalization order', async () => {
    const t = await machine();
    const ids: string[] = [];
    for (const verb of ['finish', 'fail', 'discard', 'finish'] as const) {
      ids.push((await t.machine.start()).episode_id);
      await record(t, 200);
      await t.machine.apply(verb);
      await t.machine.whenSettled();
    }
    expect((await t.store.outbox.pending({ afterSeq: 0, limit: 10 })).map((r) => r.msgId)).toEqual(ids.map(episodeReportMsgId));
  });
});
