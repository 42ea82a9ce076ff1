import { join } from 'node:path';
import Database from 'better-sqlite3';
import { ManualClock, type CommandReply } from '@fleet/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import { makeTempDir, removeTempDirs } from '../test-support.js';
import { MIGRATIONS } from './migrations.js';
import { AGENT_DATABASE_FILE, openAgentStore, type SqliteAgentStore } from './sqlite.js';

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

const okReply = (cmdId: string): CommandReply => ({ cmd_id: cmdId, ok: true, result: { pose: 'home' } });

describe('command results with intents', () => {
  it('an intent is running until its answer replaces it; a second begin within the window writes nothing', async () => {
    const s = await store();
    expect(await s.commandResults.begin({ cmdId: 'c1', command: 'go_home', receivedAt: 1000 }, 0)).toBeUndefined();
    expect(await s.commandResults.get('c1', 0)).toEqual({ state: 'running', cmdId: 'c1', command: 'go_home', receivedAt: 1000 });
    expect(await s.commandResults.begin({ cmdId: 'c1', command: 'go_home', receivedAt: 2000 }, 0)).toEqual({
      state: 'running',
      cmdId: 'c1',
      command: 'go_home',
      receivedAt: 1000,
    });
    await s.commandResults.put({ cmdId: 'c1', command: 'go_home', reply: okReply('c1'), receivedAt: 1000 });
    const answered = { state: 'answered', cmdId: 'c1', command: 'go_home', reply: okReply('c1'), receivedAt: 1000 };
    expect(await s.commandResults.get('c1', 0)).toEqual(answered);
    expect(await s.commandResults.begin({ cmdId: 'c1', command: 'go_home', receivedAt: 2000 }, 0)).toEqual(answered);
  });

  it('an expired row is taken over by a new intent, and prune forgets intents like answers', async () => {
    const s = await store();
    await s.commandResults.put({ cmdId: 'old', command: 'go_home', reply: okReply('old'), receivedAt: 1000 });
    expect(await s.commandResults.begin({ cmdId: 'old', command: 'stack.stop', receivedAt: 5000 }, 2000)).toBeUndefined();
    expect(await s.commandResults.get('old', 2000)).toMatchObject({ state: 'running', command: 'stack.stop', receivedAt: 5000 });
    expect(await s.commandResults.prune(6000)).toBe(1);
    expect(await s.commandResults.get('old', 0)).toBeUndefined();
  });

  it('migration 3 keeps the answers stored before intents existed', async () => {
    const dir = await makeTempDir();
    // A database as release two left it: migrations 1 and 2, one stored answer.
    const db = new Database(join(dir, AGENT_DATABASE_FILE));
    db.exec('CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL) STRICT');
    for (const m of MIGRATIONS.filter((x) => x.version <= 2)) {
      db.exec(m.sql);
      db.prepare('INSERT INTO schema_migrations VALUES (?, ?, 0)').run(m.version, m.name);
    }
    db.prepare('INSERT INTO command_results (cmd_id, command, reply, received_at) VALUES (?, ?, ?, ?)').run('c0', 'go_home', JSON.stringify(okReply('c0')), 1000);
    db.close();

    const s = await store(dir);
    expect(await s.commandResults.get('c0', 0)).toEqual({ state: 'answered', cmdId: 'c0', command: 'go_home', reply: okReply('c0'), receivedAt: 1000 });
    expect(await s.commandResults.prune(2000)).toBe(1);
  });
});
