import { createServer } from 'node:net';
import { afterEach, describe, expect, test, vi } from 'vitest';
import { pino } from 'pino';
import { ManualClock, ManualScheduler } from '@fleet/protocol';
import { startTcpProxy, type TcpProxy } from '../../../test/support/tcp-proxy.js';
import { openStoreWaiting } from '../server.js';
import { createTestDatabase, postgresAvailable } from './test-store.js';

function manualTime() {
  const scheduler = new ManualScheduler(new ManualClock(0));
  return { clock: scheduler.clock, scheduler };
}

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A loopback port nothing listens on (bound, read, closed). */
async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
  const port = (s.address() as { port: number }).port;
  await new Promise<void>((resolve) => s.close(() => resolve()));
  return port;
}

/** A logger that keeps the messages of its warn lines. */
function recordingLogger() {
  const lines: { msg: string; attempt?: number; retry_in_ms?: number }[] = [];
  const logger = pino({ level: 'warn' }, { write: (l: string) => lines.push(JSON.parse(l) as (typeof lines)[number]) });
  return { logger, lines };
}

describe('a starting cloud waits for PostgreSQL to accept connections', () => {
  test('refused for the whole wait: one log line per attempt, then the connection error', async () => {
    const scheduler = new ManualScheduler(new ManualClock(0));
    const { logger, lines } = recordingLogger();
    const port = await freePort();
    const opening = openStoreWaiting({ dataDir: ':memory:', databaseUrl: `postgres://fleet:secret@127.0.0.1:${port}/fleet`, databaseWaitS: 2 }, { clock: scheduler.clock, scheduler }, logger);
    const settled = opening.then(
      () => 'opened',
      (err: unknown) => err,
    );
    // Waits of 500, 1000 and 500 ms (2 s in all): four attempts, three log lines.
    for (const [n, wait] of [
      [1, 500],
      [2, 1000],
      [3, 500],
    ] as const) {
      await vi.waitFor(() => expect(lines).toHaveLength(n), { timeout: 20_000 });
      expect(lines[n - 1]).toMatchObject({ msg: 'the database does not accept connections yet; waiting', attempt: n, retry_in_ms: wait });
      scheduler.advance(wait);
    }
    const err = await settled;
    expect(lines).toHaveLength(3);
    expect(String((err as Error).message ?? err) + JSON.stringify(err)).toMatch(/ECONNREFUSED/);
    // The password in the URL is in no log line.
    expect(JSON.stringify(lines)).not.toContain('secret');
  });

  test('no wait with --database-wait-s 0', async () => {
    const { logger, lines } = recordingLogger();
    const port = await freePort();
    await expect(openStoreWaiting({ dataDir: ':memory:', databaseUrl: `postgres://u:p@127.0.0.1:${port}/fleet`, databaseWaitS: 0 }, manualTime(), logger)).rejects.toThrow();
    expect(lines).toEqual([]);
  });

  const pg = postgresAvailable() ? test : test.skip;

  pg('opens as soon as the database answers', async () => {
    const db = await createTestDatabase();
    cleanups.push(() => db.drop());
    const target = new URL(db.url);
    const port = await freePort();
    const scheduler = new ManualScheduler(new ManualClock(0));
    const { logger, lines } = recordingLogger();
    const url = new URL(db.url);
    url.hostname = '127.0.0.1';
    url.port = String(port);
    const opening = openStoreWaiting({ dataDir: ':memory:', databaseUrl: url.toString(), databaseWaitS: 60 }, { clock: scheduler.clock, scheduler }, logger);
    await vi.waitFor(() => expect(lines).toHaveLength(1), { timeout: 20_000 });
    // PostgreSQL comes up (here: a proxy to it on the address the cloud was given).
    const proxy: TcpProxy = await startTcpProxy({ host: target.hostname, port: Number(target.port) }, port);
    cleanups.push(() => proxy.close());
    scheduler.advance(500);
    const store = await opening;
    cleanups.unshift(() => store.close());
    expect(await store.orgs.get('org_none')).toBeUndefined();
    expect(lines).toHaveLength(1);
  });

  pg('a refused password fails at once, without waiting', async () => {
    const db = await createTestDatabase();
    cleanups.push(() => db.drop());
    const url = new URL(db.url);
    url.username = 'nobody_here';
    url.password = 'wrong';
    const { logger, lines } = recordingLogger();
    await expect(openStoreWaiting({ dataDir: ':memory:', databaseUrl: url.toString(), databaseWaitS: 60 }, manualTime(), logger)).rejects.toThrow(/nobody_here|password|authentication|role/);
    expect(lines).toEqual([]);
  });
});
