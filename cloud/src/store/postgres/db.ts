import pg from 'pg';

/** A query runner: the pool, or one client inside a transaction. */
export interface Sql {
  query<R extends pg.QueryResultRow = Record<string, unknown>>(text: string, params?: readonly unknown[]): Promise<pg.QueryResult<R>>;
}

/** int8 (BIGINT, COUNT) as a JS number: every BIGINT here is a ms timestamp, a seq or a count, all below 2^53. */
const INT8_OID = 20;
const types: pg.CustomTypesConfig = {
  getTypeParser: ((oid: number, format?: 'text' | 'binary'): unknown =>
    oid === INT8_OID ? (v: string) => Number(v) : pg.types.getTypeParser(oid, format ?? 'text')) as pg.CustomTypesConfig['getTypeParser'],
};

/** SQLSTATEs after which the whole transaction may simply run again. */
const RETRYABLE = new Set(['40001', '40P01']);

/**
 * The PostgreSQL connection pool of one cloud process, with the two helpers every store module
 * uses: `one`/`many` for single statements on the pool and `tx` for a transaction on one client.
 */
export class PgDb {
  readonly pool: pg.Pool;

  constructor(url: string, opts: { max?: number } = {}) {
    this.pool = new pg.Pool({
      connectionString: url,
      max: opts.max ?? 10,
      types,
      // A replica that cannot reach the database answers 503 on /readyz instead of hanging.
      connectionTimeoutMillis: 10_000,
      idleTimeoutMillis: 30_000,
      application_name: 'fleet-cloud',
    });
    // An idle client whose connection drops (a database restart) emits 'error' on the pool; the
    // pool replaces it. Without a listener the process would exit.
    this.pool.on('error', () => undefined);
  }

  query<R extends pg.QueryResultRow = Record<string, unknown>>(text: string, params?: readonly unknown[]): Promise<pg.QueryResult<R>> {
    return this.pool.query<R>(text, params as unknown[]);
  }

  async one<R extends pg.QueryResultRow>(text: string, params?: readonly unknown[]): Promise<R | undefined> {
    return (await this.query<R>(text, params)).rows[0];
  }

  async many<R extends pg.QueryResultRow>(text: string, params?: readonly unknown[]): Promise<R[]> {
    return (await this.query<R>(text, params)).rows;
  }

  /**
   * Runs `fn` in one transaction (READ COMMITTED unless told), committing when it returns and
   * rolling back when it throws. A serialization failure or deadlock runs it again (a few times),
   * so `fn` must not have effects outside the database.
   */
  async tx<T>(fn: (sql: Sql) => Promise<T>, opts: { isolation?: 'read committed' | 'repeatable read' | 'serializable' } = {}): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      const client = await this.pool.connect();
      let broken = false;
      // While the transaction holds the client the pool does not listen to it: a connection the
      // server ends between two statements (a restart, "terminating connection due to
      // administrator command") arrives as an 'error' event, which unheard would end the process.
      // Heard here, it marks the client broken; the next statement fails and the caller sees that.
      const onError = (): void => {
        broken = true;
      };
      client.on('error', onError);
      try {
        await client.query(opts.isolation ? `BEGIN ISOLATION LEVEL ${opts.isolation.toUpperCase()}` : 'BEGIN');
        const out = await fn(client);
        await client.query('COMMIT');
        return out;
      } catch (err) {
        try {
          await client.query('ROLLBACK');
        } catch {
          broken = true;
        }
        const code = (err as { code?: string }).code;
        if (code && RETRYABLE.has(code) && attempt < 5) continue;
        throw err;
      } finally {
        client.off('error', onError);
        client.release(broken);
      }
    }
  }

  async close(): Promise<void> {
    await this.pool.end();
  }
}

/** Advisory lock keys (pg_advisory_xact_lock); one namespace for the whole schema. */
export const LOCKS = {
  /** Held while migrations run, so that replicas starting together apply each once. */
  migrations: 7_315_001,
  /**
   * Key space (first key of the two-key lock, the organization's hash the second) taken just
   * before an organization's events are inserted and held to commit: an organization's events
   * commit in id order, so a reader of that organization that has seen event N has seen every
   * one of its events below N (the webhook fan-out's and the event stream's cursors, which are
   * per organization). Two organizations never wait on each other.
   */
  events: 7_315_002,
  /** The same for an organization's episodes and their seq (the keyset of every listing and of routing). */
  episodes: 7_315_003,
  /** One webhook fan-out at a time across replicas (queue order per subscription). */
  fanOut: 7_315_004,
} as const;

/**
 * Takes `space`'s lock for each organization, held to commit, in one order: by the lock's own
 * key (the name's hash), each key once, so that two transactions locking overlapping sets never
 * deadlock, also when two names hash alike (they share a lock: they wait on each other, which
 * costs time, never correctness).
 */
export async function lockOrgs(sql: Sql, space: number, orgIds: Iterable<string>): Promise<void> {
  const orgs = [...new Set(orgIds)];
  if (orgs.length === 0) return;
  await sql.query('SELECT pg_advisory_xact_lock($1, k) FROM (SELECT DISTINCT hashtext(o) AS k FROM unnest($2::text[]) AS t(o) ORDER BY k) keys', [space, orgs]);
}
