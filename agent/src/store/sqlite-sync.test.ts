import { join } from 'node:path';
import Database from 'better-sqlite3';
import { EPISODE_OUTCOMES, LOCAL_REPLICA_STATES, ManualClock } from '@fleet/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import { makeTempDir, removeTempDirs } from '../test-support.js';
import { storeEpisode } from '../sync/test-storage.js';
import { MIGRATIONS } from './migrations.js';
import { AGENT_DATABASE_FILE, openAgentStore } from './sqlite.js';

afterEach(removeTempDirs);

const receipt = { status: 200, etag: '"e"', checksumSha256: null };

describe('SqliteSync', () => {
  it("checks the replica states and outcomes the protocol lists (a shipped migration's SQL is never edited, so it is held to the lists here)", async () => {
    const dir = await makeTempDir();
    const store = openAgentStore(dir, new ManualClock());
    await store.close();
    const db = new Database(join(dir, AGENT_DATABASE_FILE), { readonly: true });
    const sql = (table: string) => (db.prepare("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?").get(table) as { sql: string }).sql;
    const checked = (table: string, column: string) => {
      const m = new RegExp(`\\b${column} TEXT[^,]*CHECK \\(${column} IN \\(([^)]*)\\)\\)`).exec(sql(table));
      return m ? m[1]!.split(',').map((v) => v.trim().replace(/^'|'$/g, '')) : null;
    };
    expect(checked('replicas', 'state')).toEqual([...LOCAL_REPLICA_STATES]);
    expect(checked('episodes', 'outcome')).toEqual([...EPISODE_OUTCOMES]);
    db.close();
  });

  it('keeps upload ids, parts and receipts written as they happen across a reopen (a kill -9 loses nothing done)', async () => {
    const dir = await makeTempDir();
    let store = openAgentStore(dir, new ManualClock());
    const e = await storeEpisode(store, dir, { 'a.bin': 10 }, 1000);
    await store.sync.add([{ episode_id: e.id, destination_id: 'd1' }], 1000);
    await store.sync.beginMultipart(e.id, 'd1', 'big.bin', 'up-1', 5, 1001);
    await store.sync.partDone(e.id, 'd1', 'big.bin', 'up-1', { partNumber: 2, size: 5, etag: '"p2"', md5: 'm2' }, 1002);
    await store.sync.fileDone(e.id, 'd1', 'a.bin', { uploadId: null, bytesSent: 10, sha256Sent: 'x', md5Sent: 'y', receipt }, 1003);
    // No clean close: the database file is all the next process has.
    store = openAgentStore(dir, new ManualClock());
    const files = await store.sync.files(e.id, 'd1');
    expect(files).toEqual([
      { path: 'a.bin', uploadId: null, partSize: null, complete: true, bytesSent: 10, sha256Sent: 'x', md5Sent: 'y', receipt, parts: [] },
      { path: 'big.bin', uploadId: 'up-1', partSize: 5, complete: false, bytesSent: null, sha256Sent: null, md5Sent: null, receipt: null, parts: [{ partNumber: 2, size: 5, etag: '"p2"', md5: 'm2' }] },
    ]);
    // Another upload id for the file starts over; a part for a stale upload id is refused.
    await store.sync.beginMultipart(e.id, 'd1', 'big.bin', 'up-2', 5, 1004);
    expect((await store.sync.files(e.id, 'd1')).find((f) => f.path === 'big.bin')!.parts).toEqual([]);
    await expect(store.sync.partDone(e.id, 'd1', 'big.bin', 'up-1', { partNumber: 1, size: 5, etag: '"p"', md5: 'm' }, 1005)).rejects.toThrow(/not the current one/);
    await store.close();
  });

  it('a state change and its report commit together; reconcile drops unfinished assignments only', async () => {
    const dir = await makeTempDir();
    const store = openAgentStore(dir, new ManualClock());
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

  it('migration 6 keeps the parts recorded by an older agent (their MD5s kept, the per-part SHA-256 dropped), so a resume still skips them', async () => {
    const dir = await makeTempDir();
    const db = new Database(join(dir, AGENT_DATABASE_FILE));
    db.exec('CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL) STRICT');
    for (const m of MIGRATIONS.filter((x) => x.version <= 5)) {
      db.exec(m.sql);
      db.prepare('INSERT INTO schema_migrations VALUES (?, ?, 0)').run(m.version, m.name);
    }
    db.prepare("INSERT INTO replicas (episode_id, destination_id, state, assigned_at, updated_at) VALUES ('ep_1', 'd1', 'syncing', 1, 1)").run();
    db.prepare("INSERT INTO upload_files (episode_id, destination_id, path, upload_id, part_size, updated_at) VALUES ('ep_1', 'd1', 'big.bin', 'up-1', 5, 1)").run();
    db.prepare("INSERT INTO upload_parts VALUES ('ep_1', 'd1', 'big.bin', 'up-1', 1, 5, '\"e1\"', 'm1', 's1', 2)").run();
    db.close();
    const store = openAgentStore(dir, new ManualClock(1234));
    // The migrations this open applied are stamped by the clock it was given.
    const check = new Database(join(dir, AGENT_DATABASE_FILE), { readonly: true });
    expect(check.prepare('SELECT DISTINCT applied_at FROM schema_migrations WHERE version > 5').pluck().all()).toEqual([1234]);
    check.close();
    const files = await store.sync.files('ep_1', 'd1');
    expect(files[0]!.parts).toEqual([{ partNumber: 1, size: 5, etag: '"e1"', md5: 'm1' }]);
    // A part whose ETag proved nothing has no MD5.
    await store.sync.partDone('ep_1', 'd1', 'big.bin', 'up-1', { partNumber: 2, size: 5, etag: '"opaque"', md5: null }, 3);
    expect((await store.sync.files('ep_1', 'd1'))[0]!.parts.map((p) => p.md5)).toEqual(['m1', null]);
    await store.close();
  });
});
