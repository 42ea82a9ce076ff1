import { join } from 'node:path';
import Database from 'better-sqlite3';
import { EpisodeReportSchema, ManualClock } from '@fleet/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import { toEpisodeReport } from '../recording/report.js';
import { makeTempDir, removeTempDirs } from '../test-support.js';
import { MIGRATIONS } from './migrations.js';
import { AGENT_DATABASE_FILE, openAgentStore, type SqliteAgentStore } from './sqlite.js';
import type { EpisodeRow, NewOutboxMessage } from './types.js';

const stores: SqliteAgentStore[] = [];
async function store(dataDir?: string): Promise<SqliteAgentStore> {
  const s = openAgentStore(dataDir ?? (await makeTempDir()), new ManualClock());
  stores.push(s);
  return s;
}

afterEach(async () => {
  for (const s of stores.splice(0)) await s.close();
  await removeTempDirs();
});

const msg = (id: string, createdAt = 1000, body: unknown = { n: id }): NewOutboxMessage => ({ msgId: id, kind: 'episode.report', body, createdAt });

describe('SQLite outbox', () => {
  it('lists pending messages in creation order, after a cursor, up to a limit', async () => {
    const s = await store();
    // Ids that sort the other way round and equal creation times: only the insertion order counts.
    for (const id of ['z', 'y', 'x', 'w']) await s.outbox.enqueue(msg(id));
    const all = await s.outbox.pending({ afterSeq: 0, limit: 100 });
    expect(all.map((r) => r.msgId)).toEqual(['z', 'y', 'x', 'w']);
    expect(all[0]).toMatchObject({ kind: 'episode.report', bodyJson: '{"n":"z"}', attempts: 0, lastSentAt: null, state: 'pending', refusal: null, settledAt: null });
    const after = await s.outbox.pending({ afterSeq: all[1]!.seq, limit: 1 });
    expect(after.map((r) => r.msgId)).toEqual(['x']);
  });

  it('ignores a second enqueue of the same msg_id', async () => {
    const s = await store();
    await s.outbox.enqueue(msg('a', 1, { v: 1 }));
    await s.outbox.enqueue(msg('a', 2, { v: 2 }));
    const rows = await s.outbox.pending({ afterSeq: 0, limit: 10 });
    expect(rows).toHaveLength(1);
    expect(rows[0]!.bodyJson).toBe('{"v":1}');
  });

  it('counts attempts, settles only pending messages, keeps refusal reasons', async () => {
    const s = await store();
    for (const id of ['a', 'b', 'c']) await s.outbox.enqueue(msg(id));
    await s.outbox.markSent(['a', 'b'], 5000);
    await s.outbox.markSent(['a'], 6000);
    expect(await s.outbox.get('a')).toMatchObject({ attempts: 2, lastSentAt: 6000 });
    expect(await s.outbox.get('c')).toMatchObject({ attempts: 0, lastSentAt: null });

    expect(await s.outbox.settle('a', { state: 'acked' }, 7000)).toBe(true);
    expect(await s.outbox.settle('b', { state: 'refused', code: 'validation_failed', message: 'id: not an episode id' }, 7001)).toBe(true);
    // Already settled, or unknown: nothing changes.
    expect(await s.outbox.settle('a', { state: 'refused', code: 'x', message: 'y' }, 8000)).toBe(false);
    expect(await s.outbox.settle('b', { state: 'acked' }, 8000)).toBe(false);
    expect(await s.outbox.settle('nope', { state: 'acked' }, 8000)).toBe(false);

    expect(await s.outbox.get('a')).toMatchObject({ state: 'acked', settledAt: 7000, refusal: null });
    expect(await s.outbox.get('b')).toMatchObject({ state: 'refused', settledAt: 7001, refusal: { code: 'validation_failed', message: 'id: not an episode id' } });
    expect(await s.outbox.counts()).toEqual({ pending: 1, acked: 1, refused: 1 });
    expect((await s.outbox.pending({ afterSeq: 0, limit: 10 })).map((r) => r.msgId)).toEqual(['c']);
  });

  it('prunes acknowledged messages settled before a time, never refused or pending ones', async () => {
    const s = await store();
    for (const id of ['old', 'new', 'refused', 'pending']) await s.outbox.enqueue(msg(id));
    await s.outbox.settle('old', { state: 'acked' }, 1000);
    await s.outbox.settle('new', { state: 'acked' }, 3000);
    await s.outbox.settle('refused', { state: 'refused', code: 'c', message: 'm' }, 1000);
    expect(await s.outbox.prune(2000)).toBe(1);
    expect(await s.outbox.get('old')).toBeUndefined();
    expect(await s.outbox.counts()).toEqual({ pending: 1, acked: 1, refused: 1 });
  });

  it('never reuses a sequence number, also after the newest row was pruned', async () => {
    const s = await store();
    await s.outbox.enqueue(msg('a'));
    const [a] = await s.outbox.pending({ afterSeq: 0, limit: 1 });
    await s.outbox.settle('a', { state: 'acked' }, 1);
    await s.outbox.prune(2);
    await s.outbox.enqueue(msg('b'));
    // A sender whose cursor is at `a` must still see `b`.
    expect((await s.outbox.pending({ afterSeq: a!.seq, limit: 1 })).map((r) => r.msgId)).toEqual(['b']);
  });

  it('keeps the outbox across a reopen', async () => {
    const dir = await makeTempDir();
    const first = openAgentStore(dir, new ManualClock());
    await first.outbox.enqueue(msg('a'));
    await first.close();
    const second = await store(dir);
    expect(await second.outbox.counts()).toEqual({ pending: 1, acked: 0, refused: 0 });
  });

  it('the migration reports episodes finalized before the outbox existed, in finalization order', async () => {
    const dir = await makeTempDir();
    // A database as the first release left it: migration 1 only, two finished episodes.
    const db = new Database(join(dir, AGENT_DATABASE_FILE));
    db.exec('CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL) STRICT');
    db.exec(MIGRATIONS[0]!.sql);
    db.prepare('INSERT INTO schema_migrations VALUES (1, ?, 0)').run(MIGRATIONS[0]!.name);
    const episodes = [episodeRow('ep_3333333333aaaaaaaaaaaaaaab', 2000, true), episodeRow('ep_3333333333aaaaaaaaaaaaaaaa', 1000, false)];
    for (const e of episodes) {
      db.prepare('INSERT INTO episodes (id, recording_session_id, episode_seq, outcome, facts, manifest, finalized_at, interrupted, dir) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)').run(
        e.id,
        e.recordingSessionId,
        e.episodeSeq,
        e.outcome,
        JSON.stringify(e.facts),
        JSON.stringify(e.manifest),
        e.finalizedAt,
        e.interrupted ? 1 : 0,
        e.dir,
      );
    }
    db.close();

    const s = await store(dir);
    const rows = await s.outbox.pending({ afterSeq: 0, limit: 10 });
    expect(rows.map((r) => r.msgId)).toEqual([`episode.report:${episodes[1]!.id}`, `episode.report:${episodes[0]!.id}`]);
    expect(rows.map((r) => r.createdAt)).toEqual([1000, 2000]);
    for (const r of rows) {
      const e = episodes.find((x) => r.msgId.endsWith(x.id))!;
      const body: unknown = JSON.parse(r.bodyJson);
      expect(body).toEqual(toEpisodeReport(e));
      expect(EpisodeReportSchema.safeParse(body).success).toBe(true);
    }
  });
});

function episodeRow(id: string, finalizedAt: number, interrupted: boolean): EpisodeRow {
  return {
    id,
    recordingSessionId: 'rs_3333333333aaaaaaaaaaaaaaaa',
    episodeSeq: finalizedAt / 1000,
    outcome: 'failure',
    facts: {
      id,
      robot_id: 'rbt_aaaaaaaaaaaaaaaaaaaaaaaaaa',
      recording_session_id: 'rs_3333333333aaaaaaaaaaaaaaaa',
      episode_seq: finalizedAt / 1000,
      session_name: null,
      task_id: 'task',
      task_name: null,
      subtask_id: null,
      operator_id: null,
      operator_name: null,
      control_mode: null,
      policy_version_id: null,
      eval_id: null,
      outcome: 'failure',
      started_at: '2025-01-01T00:00:00.000Z',
      ended_at: '2025-01-01T00:00:01.000Z',
      duration_s: 1,
      message_count: 10,
      bag_size_bytes: 3,
      metadata: interrupted ? { interrupted: true } : {},
      segments: [{ segment_index: 0, subtask_id: 's', subtask_name: 'S', start_offset_s: 0, end_offset_s: 1 }],
    },
    manifest: { files: [{ path: 'recording.mcap', size_bytes: 3, sha256: 'a'.repeat(64) }], total_bytes: 3 },
    finalizedAt,
    interrupted,
    dir: `episodes/${id}`,
  };
}
