/**
 * Stores for tests, on either engine. `FLEET_TEST_DATABASE=postgres` runs every suite that opens
 * its store here on PostgreSQL (a fresh database per store, copied from a migrated template and
 * dropped when the store closes); the default is SQLite in memory. `describeStore` runs a suite
 * on both engines in every run, the PostgreSQL half when a server is available (see
 * test/support/global-setup.ts). Only `*.test.ts` files and test support import this module.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterEach, beforeEach, describe, inject } from 'vitest';
import { systemClock, systemScheduler, type TimeSource } from '@fleet/protocol';
import { openPgStore, type PgStore } from './postgres/store.js';
import { openSqliteStore, type SqliteStore } from './sqlite/store.js';
import { EPISODE_LINE_COLUMNS, type EpisodeLineRow } from './shared/episode-lines.js';
import type { EpisodeRow, Store } from './shared/types.js';

export type TestEngine = 'sqlite' | 'postgres';

/**
 * The system's time, for the stores of tests that move no clock of theirs into the store: the
 * snapshot lease's waits and the migrations' stamps are real (a test that times them passes its own).
 */
export const REAL_TIME: TimeSource = { clock: systemClock, scheduler: systemScheduler };

/** The engine the suites run on: FLEET_TEST_DATABASE (sqlite by default). */
export function testEngine(): TestEngine {
  const v = process.env.FLEET_TEST_DATABASE ?? 'sqlite';
  if (v !== 'sqlite' && v !== 'postgres') throw new Error(`FLEET_TEST_DATABASE must be sqlite or postgres, not ${v}`);
  return v;
}

export function postgresAvailable(): boolean {
  return inject('fleetPostgres') !== null;
}

/** A new, empty, migrated PostgreSQL database; `drop()` removes it (connections still open are ended). */
export async function createTestDatabase(): Promise<{ url: string; name: string; drop(): Promise<void> }> {
  const pgInfo = inject('fleetPostgres');
  if (!pgInfo) throw new Error('no PostgreSQL server in this test run');
  const name = `fleet_t_${randomBytes(6).toString('hex')}`;
  await withAdmin(pgInfo.adminUrl, (c) => c.query(`CREATE DATABASE ${name} TEMPLATE ${pgInfo.template}`));
  return {
    url: pgInfo.urlTemplate.replace('{db}', name),
    name,
    drop: () => withAdmin(pgInfo.adminUrl, (c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)).then(() => undefined),
  };
}

async function withAdmin<T>(url: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

export type TestStore = (SqliteStore | PgStore) & {
  readonly engine: TestEngine;
  /** PostgreSQL: the database URL (a second store on it is a second replica). */
  readonly url?: string;
  /** SQLite on disk: the data directory. */
  readonly dataDir?: string;
};

/**
 * A store on `engine`: SQLite in memory (or in `dataDir`), or a fresh PostgreSQL database.
 * Closing it drops the PostgreSQL database.
 */
export async function openTestStore(engine: TestEngine = testEngine(), opts: { dataDir?: string } = {}): Promise<TestStore> {
  if (engine === 'sqlite') return Object.assign(openSqliteStore(opts.dataDir ?? ':memory:', REAL_TIME), { engine, ...(opts.dataDir ? { dataDir: opts.dataDir } : {}) });
  const db = await createTestDatabase();
  const store = await openPgStore(db.url);
  const close = store.close.bind(store);
  let closed: Promise<void> | null = null;
  store.close = () => (closed ??= close().finally(() => db.drop()));
  return Object.assign(store, { engine, url: db.url });
}

/**
 * A second store on the same data, like a second process or replica: a second PostgreSQL pool
 * on the same database, or a second SQLite connection on the same file (the store must have been
 * opened with a `dataDir`). Closing the twin leaves the data alone.
 */
export async function openTwin(store: TestStore): Promise<Store> {
  if (store.engine === 'postgres') return openPgStore(store.url!);
  if (!store.dataDir) throw new Error('a SQLite twin needs a store opened on a data directory');
  return openSqliteStore(store.dataDir, { create: false, ...REAL_TIME });
}

/**
 * Runs `suite` once per engine, each under `name [engine]`; the PostgreSQL run is skipped (and
 * named so) when this test run has no PostgreSQL server. With FLEET_TEST_DATABASE set, only
 * that engine's run.
 */
export function describeStore(name: string, suite: (open: () => Promise<TestStore>, engine: TestEngine) => void): void {
  // A pass that names its engine (`npm test` runs one per engine) runs that variant only; a run
  // that names none (a developer's `vitest run <file>`) runs both.
  const only = process.env.FLEET_TEST_DATABASE;
  const sqliteSuite = only === 'postgres' ? describe.skip : describe;
  const pgSuite = postgresAvailable() && only !== 'sqlite' ? describe : describe.skip;
  sqliteSuite(`${name} [sqlite]`, () => suite(() => openTestStore('sqlite'), 'sqlite'));
  pgSuite(`${name} [postgres]`, () => suite(() => openTestStore('postgres'), 'postgres'));
}

/**
 * The SQLite handle of a test store, for the few tests about SQLite itself (its planner, its
 * files). Throws on PostgreSQL: a test of behaviour goes through the store interface instead.
 */
export function sqliteDb(store: Store): SqliteStore['db'] {
  if ((store as Partial<TestStore>).engine === 'postgres' || !('prepare' in (store as SqliteStore).db)) {
    throw new Error('this test reads the SQLite database directly; it has no PostgreSQL variant');
  }
  return (store as SqliteStore).db;
}

/**
 * Every row of every table, as JSON text per table: for checks that something (a secret, a
 * plaintext key) is stored nowhere, whatever the engine.
 */
export async function dumpTables(store: Store): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  const t = store as TestStore;
  if (t.engine === 'postgres') {
    const pgStore = t as PgStore;
    const tables = await pgStore.db.many<{ name: string }>("SELECT tablename AS name FROM pg_tables WHERE schemaname = 'public'");
    for (const { name } of tables) out[name] = JSON.stringify(await pgStore.db.many(`SELECT * FROM "${name}"`));
    return out;
  }
  const db = sqliteDb(store);
  for (const name of db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").pluck().all() as string[]) {
    out[name] = JSON.stringify(db.prepare(`SELECT * FROM "${name}"`).all());
  }
  return out;
}

/** How many rows `table` holds, whatever the engine (for checks that a purge or a delete happened). */
export async function countRows(store: Store, table: string): Promise<number> {
  if (!/^[a-z_]+$/.test(table)) throw new Error(`not a table name: ${table}`);
  const t = store as TestStore;
  if (t.engine === 'postgres') return (await (t as PgStore).db.one<{ n: number }>(`SELECT COUNT(*) AS n FROM ${table}`))!.n;
  return sqliteDb(store).prepare(`SELECT COUNT(*) FROM ${table}`).pluck().get() as number;
}

/**
 * Two PostgreSQL stores on one new database, as two replicas would hold it: opened before each
 * test of the suite that calls this (then `setup` on the first), closed after it.
 */
export function pgTwinsPerTest(setup?: (first: PgStore) => Promise<void>): { readonly first: PgStore; readonly second: PgStore } {
  const pair = {} as { first: PgStore; second: PgStore };
  beforeEach(async () => {
    pair.first = (await openTestStore('postgres')) as PgStore;
    pair.second = (await openTwin(pair.first as TestStore)) as PgStore;
    await setup?.(pair.first);
  });
  afterEach(async () => {
    await pair.second.close();
    await pair.first.close();
  });
  return pair;
}

export type LineColumn = (typeof EPISODE_LINE_COLUMNS)[number];

/** A line row by column name. */
export function lineByColumn(row: EpisodeLineRow): Record<LineColumn, unknown> {
  return Object.fromEntries(EPISODE_LINE_COLUMNS.map((c, i) => [c, row[i]])) as Record<LineColumn, unknown>;
}

/** The line row of an episode row, by column name: its stored values, JSON columns as their text. */
export function lineOf(e: EpisodeRow): Record<LineColumn, unknown> {
  const r = e.report;
  return {
    seq: e.seq,
    id: e.id,
    robot_id: e.robotId,
    recording_session_id: r.recording_session_id,
    episode_seq: r.episode_seq,
    session_name: r.session_name,
    task_id: r.task_id,
    task_name: r.task_name,
    subtask_id: r.subtask_id,
    operator_id: r.operator_id,
    operator_name: r.operator_name,
    outcome: e.outcome,
    recorded_outcome: e.recordedOutcome,
    control_mode: r.control_mode,
    policy_version_id: r.policy_version_id,
    eval_id: r.eval_id,
    started_at: Date.parse(r.started_at),
    ended_at: r.ended_at === null ? null : Date.parse(r.ended_at),
    duration_s: r.duration_s,
    message_count: r.message_count,
    bag_size_bytes: r.bag_size_bytes,
    bag_uri: r.bag_uri ?? null,
    metadata: JSON.stringify(e.metadata),
    annotations: JSON.stringify(e.annotations),
    manifest: JSON.stringify(e.manifest),
    reported_at: e.reportedAt,
  };
}
