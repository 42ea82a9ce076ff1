/**
 * PostgreSQL only: a connection the server ends while the store holds it (a restart, a failover:
 * "terminating connection due to administrator command") fails that transaction and nothing
 * else. pg emits such an end as an 'error' event on the client; while a transaction holds the
 * client, the pool does not listen, and an unheard 'error' event ends the process. The first
 * 30-minute soak lost every replica this way when PostgreSQL stopped under robot traffic.
 */
import { describe, expect, it } from 'vitest';
import { pgTwinsPerTest, postgresAvailable } from '../test-store.js';

(postgresAvailable() ? describe : describe.skip)('PgDb on a connection the server ends', () => {
  const twins = pgTwinsPerTest();

  it('a backend terminated between two statements of a transaction rejects that transaction; the process and the pool go on', async () => {
    let pid = 0;
    let terminated!: () => void;
    const killed = new Promise<void>((resolve) => (terminated = resolve));
    const tx = twins.first.db.tx(async (sql) => {
      pid = Number((await sql.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid);
      // Between statements: no query is active, so pg reports the end as an 'error' event.
      await killed;
      await sql.query('SELECT 1');
    });
    await expect.poll(() => pid).toBeGreaterThan(0);
    await twins.second.db.query('SELECT pg_terminate_backend($1)', [pid]);
    // The FATAL reaches the idle client as an 'error' event before the next statement is sent.
    await expect
      .poll(async () => (await twins.second.db.one<{ n: number }>('SELECT count(*)::int AS n FROM pg_stat_activity WHERE pid = $1', [pid]))?.n)
      .toBe(0);
    await new Promise((r) => setImmediate(r));
    terminated();
    await expect(tx).rejects.toThrow();
    // The pool hands out a working connection next.
    expect((await twins.first.db.one<{ one: number }>('SELECT 1 AS one'))?.one).toBe(1);
    expect(await twins.first.db.tx(async (sql) => (await sql.query<{ two: number }>('SELECT 2 AS two')).rows[0]!.two)).toBe(2);
  });
});
