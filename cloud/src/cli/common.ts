// What every `fleet-cloud` command group shares: how a command fails, where it finds the store,
// and the options that say so. Command groups live beside this file (serve, accounts, sync,
// tools); cli.ts only assembles them.
import { Option } from 'commander';
import { systemClock, systemScheduler } from '@fleet/protocol';
import { ApiError } from '../errors.js';
import { MissingDatabaseError, MissingPgSchemaError, openStore, type Store } from '../store/index.js';

export const dataDirOption = () =>
  new Option('--data-dir <dir>', 'data directory (SQLite index, first-start admin key)').env('FLEET_DATA_DIR').default('./data');
export const databaseUrlOption = () =>
  new Option('--database-url <url>', 'keep the index in PostgreSQL (postgres://user:password@host/db) instead of SQLite in the data directory').env(
    'FLEET_DATABASE_URL',
  );
export const orgOption = () => new Option('--org <org>', 'organization id').makeOptionMandatory();

/** Where a command finds the store: the data directory, or a PostgreSQL URL. */
export interface StoreOpts {
  dataDir: string;
  databaseUrl?: string;
}

/** One line on stderr and exit 1: an operator's mistake is not a crash. */
export function fail(message: string): never {
  process.stderr.write(`fleet-cloud: ${message}\n`);
  process.exit(1);
}

export function zodFail(what: string, issues: readonly { path: PropertyKey[]; message: string }[]): never {
  fail(`invalid ${what}: ${issues.map((i) => `${i.path.map(String).join('.') || '(root)'}: ${i.message}`).join('; ')}`);
}

export const printJson = (value: unknown): void => {
  process.stdout.write(`${JSON.stringify(value)}\n`);
};

/** Administration commands work on an existing database only; `serve` is what creates one. */
export async function withStore<T>(where: StoreOpts, fn: (store: Store) => Promise<T>): Promise<T> {
  let store: Store;
  try {
    store = await openStore({ dataDir: where.dataDir, databaseUrl: where.databaseUrl, create: false, clock: systemClock, scheduler: systemScheduler });
  } catch (err) {
    if (err instanceof MissingDatabaseError || err instanceof MissingPgSchemaError) fail(err.message);
    throw err;
  }
  try {
    return await fn(store);
  } finally {
    await store.close();
  }
}

/** Runs an administration change on an existing organization; an `ApiError` is one line on stderr. */
export async function withOrg<T>(where: StoreOpts, orgId: string, fn: (store: Store) => Promise<T>): Promise<T> {
  return withStore(where, async (store) => {
    if (!(await store.orgs.get(orgId))) fail(`no organization ${orgId}`);
    try {
      return await fn(store);
    } catch (err) {
      if (err instanceof ApiError) fail(`${err.code}: ${err.message}`);
      throw err;
    }
  });
}
