import type { Clock, Scheduler } from '@fleet/protocol';
import { openSqliteStore } from './sqlite/store.js';
import { openPgStore } from './postgres/store.js';
import type { Store } from './shared/types.js';

export interface StoreConfig {
  /** The data directory: the SQLite database lives here unless a database URL is given. */
  dataDir: string;
  /** `postgres://...` or `postgresql://...`: the store is on PostgreSQL (several replicas may share it). */
  databaseUrl?: string | undefined;
  /** false: refuse to create a database (administration commands work on an existing one only). */
  create?: boolean;
  /** The cloud's clock and scheduler: SQLite's snapshot lease reads them. */
  clock: Clock;
  scheduler: Scheduler;
}

/** The one place that picks the store engine: SQLite in the data directory by default, PostgreSQL when a URL is given. */
export async function openStore(config: StoreConfig): Promise<Store> {
  if (config.databaseUrl) return openPgStore(config.databaseUrl, { create: config.create });
  return openSqliteStore(config.dataDir, {
    ...(config.create !== undefined ? { create: config.create } : {}),
    clock: config.clock,
    scheduler: config.scheduler,
  });
}
