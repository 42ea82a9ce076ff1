import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { testReport } from '../../test-support.js';
import { openSqliteStore, type SqliteStore } from './store.js';
import { REAL_TIME } from '../test-store.js';

const T0 = Date.parse('2026-01-01T00:00:00Z');
const ORG = 'org_a';

let dir: string;
let store: SqliteStore;

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'fleet-background-'));
  store = openSqliteStore(dir, REAL_TIME);
  await store.orgs.create({ id: ORG, name: 'a', tier: 'enterprise', createdAt: T0 });
});
afterEach(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

const size = (file: string) => statSync(join(dir, file)).size;

describe("a serving store's background thread", () => {
  it('checkpoints the WAL, so the serving connection does not', async () => {
    store.startBackground();
    expect(store.db.pragma('wal_autocheckpoint', { simple: true })).toBe(0);
    const before = size('cloud.sqlite');
    // About 2,000 pages of WAL, which the connection no longer checkpoints: only the thread
    // copies them into the database file.
    for (let i = 0; i < 20; i++) {
      await store.episodes.ingest(Array.from({ length: 200 }, () => ({ orgId: ORG, robotId: 'rbt_1', report: testReport({ metadata: { note: 'x'.repeat(2000) } }), reportedAt: T0 })));
    }
    expect(size('cloud.sqlite-wal')).toBeGreaterThan(1000 * 4096);
    await expect.poll(() => size('cloud.sqlite'), { timeout: 30_000 }).toBeGreaterThan(before + 1000 * 4096);
  });

  it('gives checkpoints back to the connection when the thread stops unasked', async () => {
    store.startBackground();
    expect(store.db.pragma('wal_autocheckpoint', { simple: true })).toBe(0);
    const worker = (store as unknown as { thread: { worker: { terminate(): Promise<number> } | null } }).thread.worker;
    await worker!.terminate();
    await expect.poll(() => store.db.pragma('wal_autocheckpoint', { simple: true })).toBe(1000);
  });

  it('is not started by a store that is not serving (administration commands)', async () => {
    expect(store.db.pragma('wal_autocheckpoint', { simple: true })).toBe(1000);
  });
});
