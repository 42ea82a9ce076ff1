import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { testReport } from '../../test-support.js';
import { openSqliteStore, type SqliteStore } from './store.js';
import { REAL_TIME } from '../test-store.js';

// Another connection may write the same file (`fleet-cloud` beside `serve`). A transaction that
// reads before it writes must be IMMEDIATE: a deferred one that has read cannot wait for another
// connection's write lock, SQLite answers SQLITE_BUSY at once.
const T0 = Date.parse('2026-01-01T00:00:00Z');
const ORG = 'org_a';

let dir: string;
let store: SqliteStore;

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'fleet-write-lock-'));
  store = openSqliteStore(dir, REAL_TIME);
  await store.orgs.create({ id: ORG, name: 'a', tier: 'enterprise', createdAt: T0 });
});
afterEach(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

/** Another connection, on another thread, holds the write lock for `ms` from when this resolves, then commits a change. */
async function holdWriteLock(ms: number): Promise<{ released: Promise<void> }> {
  const worker = new Worker(
    `const { parentPort, workerData } = require('node:worker_threads');
     const db = new (require('better-sqlite3'))(workerData.file);
     db.exec('BEGIN IMMEDIATE');
     // A commit that changes the database: a reader that began before it holds a stale view.
     db.exec('UPDATE orgs SET name = name');
     parentPort.postMessage('locked');
     Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, workerData.ms);
     db.exec('COMMIT');
     db.close();`,
    { eval: true, workerData: { file: join(dir, 'cloud.sqlite'), ms } },
  );
  const released = new Promise<void>((resolve, reject) => {
    worker.once('exit', () => resolve());
    worker.once('error', reject);
  });
  await new Promise<void>((resolve, reject) => {
    worker.once('message', () => resolve());
    worker.once('error', reject);
  });
  return { released };
}

describe('SQLite writes beside another writing connection', () => {
  it.each([
    ['an ingest (it looks the episode up first)', async () => void (await store.episodes.ingest([{ orgId: ORG, robotId: 'rbt_1', report: testReport(), reportedAt: T0 }]))],
    ['a key use noted (touch)', async () => store.apiKeys.touch(new Map([['key_none', T0]]))],
    ['a webhook deleted', async () => void (await store.webhooks.delete(ORG, 'wh_none'))],
  ])('%s waits for the lock instead of failing', async (_name, write) => {
    const { released } = await holdWriteLock(150);
    await expect(write()).resolves.toBeUndefined();
    await released;
  });
});
