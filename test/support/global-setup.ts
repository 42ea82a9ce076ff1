/**
 * vitest global setup: one PostgreSQL server for the whole run, with a template database that
 * already has the schema, so that each test's database is one CREATE DATABASE ... TEMPLATE away.
 * Before that it installs the Debian packages the suites need that are missing (as root).
 * Tests read it with `inject('fleetPostgres')` (null when PostgreSQL is unavailable: not root
 * and not installed; the PostgreSQL variants are then skipped and say so).
 */
import type { TestProject } from 'vitest/node';
import pg from 'pg';
import { openPgStore } from '../../cloud/src/store/postgres/store.js';
import { ensureDebianPackages, TEST_PACKAGES } from './debian.js';
import { ensurePostgresBinaries, startPostgres, type PgServer } from './postgres.js';
import { ensurePythonEnv, PYTHON_DEV_REQUIREMENTS } from './python.js';

export interface FleetPostgres {
  /** A URL of the server's maintenance database `postgres` (for CREATE/DROP DATABASE). */
  adminUrl: string;
  /** Database URL template: replace `{db}`. */
  urlTemplate: string;
  /** A database with every migration applied, to copy. */
  template: string;
}

declare module 'vitest' {
  export interface ProvidedContext {
    fleetPostgres: FleetPostgres | null;
  }
}

let server: PgServer | null = null;

export async function setup(project: TestProject): Promise<void> {
  // Every Debian package a suite runs, installed at once before any worker starts (debian.ts).
  ensureDebianPackages(TEST_PACKAGES, (line) => process.stderr.write(`${line}\n`));
  // The venv of the Python readers (test/support/python.ts), built once here, before the workers.
  ensurePythonEnv((line) => process.stderr.write(`${line}\n`));
  // The Python SDK's venv (python/requirements-dev.txt: the SDK's tests, schemathesis, moto's S3
  // server), also before the workers: built inside a test it would eat that test's timeout.
  ensurePythonEnv((line) => process.stderr.write(`${line}\n`), PYTHON_DEV_REQUIREMENTS);
  const binDir = ensurePostgresBinaries((line) => process.stderr.write(`${line}\n`));
  if (!binDir) {
    if (process.env.FLEET_TEST_DATABASE === 'postgres') throw new Error('FLEET_TEST_DATABASE=postgres, but no PostgreSQL binaries were found (/usr/lib/postgresql/<v>/bin) and they cannot be installed without root');
    process.stderr.write('postgresql: not available; the PostgreSQL variants of the store tests are skipped\n');
    project.provide('fleetPostgres', null);
    return;
  }
  server = await startPostgres(binDir);
  const template = 'fleet_template';
  const admin = new pg.Client({ connectionString: server.url('postgres') });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${template}`);
  } finally {
    await admin.end();
  }
  const store = await openPgStore(server.url(template));
  await store.close();
  project.provide('fleetPostgres', { adminUrl: server.url('postgres'), urlTemplate: server.url('{db}'), template });
}

export async function teardown(): Promise<void> {
  await server?.stop();
  server = null;
}
