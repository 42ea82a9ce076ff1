/**
 * A real PostgreSQL server for the tests, started from the binaries on the machine (PostgreSQL
 * 15 from Debian: /usr/lib/postgresql/<v>/bin). Running as root it installs the Debian package
 * when the binaries are missing, and runs the server as the `postgres` user (PostgreSQL refuses
 * root). The cluster lives in a temporary directory, listens on 127.0.0.1 only, and uses a
 * generated password (scram-sha-256).
 */
import { execFile, execFileSync, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, chownSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { ensureDebianPackages, POSTGRESQL } from './debian.js';

export interface PgServer {
  /** URL of database `db` on this server, as the test role. */
  url(db: string): string;
  readonly port: number;
  /** The cluster's data directory (its `postmaster.pid` names the server's pid while it runs). */
  readonly dataDir: string;
  /** `pg_ctl restart -m fast`: every connection drops, the data stays. */
  restart(): Promise<void>;
  /** `pg_ctl stop -m fast` (the data stays): nothing listens until `up()`. Does not block the event loop. */
  down(): Promise<void>;
  /** Starts a server stopped by `down()` again, on the same port and data. */
  up(): Promise<void>;
  stop(): Promise<void>;
}

const isRoot = process.getuid?.() === 0;

/** The binaries, installed from Debian when running as root and they are missing; null when unavailable. */
export function ensurePostgresBinaries(log: (line: string) => void = () => undefined): string | null {
  const found = POSTGRESQL.find();
  if (found || !isRoot) return found;
  if (ensureDebianPackages([POSTGRESQL], log).length > 0) {
    log('postgresql: apt-get failed; PostgreSQL tests are skipped');
    return null;
  }
  return POSTGRESQL.find();
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

/**
 * `durable: true` keeps fsync and full-page writes on (benchmarks: comparable with SQLite in WAL
 * with synchronous=NORMAL, which also skips the per-commit flush but survives a crash).
 */
export async function startPostgres(binDir: string, opts: { maxConnections?: number; durable?: boolean } = {}): Promise<PgServer> {
  const dir = mkdtempSync(join(tmpdir(), 'fleet-pg-'));
  const data = join(dir, 'data');
  const password = randomBytes(18).toString('base64url');
  const pwfile = join(dir, 'pw');
  writeFileSync(pwfile, `${password}\n`, { mode: 0o600 });
  let uid: number | undefined;
  if (isRoot) {
    uid = Number(execFileSync('id', ['-u', 'postgres']).toString().trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres']).toString().trim());
    chownSync(dir, uid, gid);
    chownSync(pwfile, uid, gid);
  }
  chmodSync(dir, 0o700);
  // As root every command runs as `postgres` (runuser); otherwise as the current user.
  const run = (cmd: string, args: string[]): void => {
    const [file, argv] = isRoot ? ['runuser', ['-u', 'postgres', '--', join(binDir, cmd), ...args]] : [join(binDir, cmd), args];
    const r = spawnSync(file, argv, { encoding: 'utf8', cwd: dir });
    if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')} failed (${r.status}): ${r.stderr || r.stdout}`);
  };
  run('initdb', ['-D', data, '-U', 'fleet', `--pwfile=${pwfile}`, '--auth=scram-sha-256', '-E', 'UTF8', '--locale=C', '--no-sync']);
  const port = await freePort();
  const settings = [
    `-p ${port}`,
    `-k ${dir}`,
    '-c listen_addresses=127.0.0.1',
    `-c max_connections=${opts.maxConnections ?? 400}`,
    // Test clusters are thrown away: no need to survive a power cut.
    ...(opts.durable ? [] : ['-c fsync=off', '-c full_page_writes=off']),
    '-c synchronous_commit=off',
    '-c shared_buffers=128MB',
  ].join(' ');
  const ctlArgs = (args: string[]) => ['-D', data, '-l', join(dir, 'server.log'), '-w', '-t', '120', '-o', settings, ...args];
  const ctl = (...args: string[]) => run('pg_ctl', ctlArgs(args));
  // The same, asynchronously: a caller that keeps serving sockets (proxies in the same process) while it waits.
  const ctlAsync = (...args: string[]) =>
    new Promise<void>((resolve, reject) => {
      const [file, argv] = isRoot ? ['runuser', ['-u', 'postgres', '--', join(binDir, 'pg_ctl'), ...ctlArgs(args)]] : [join(binDir, 'pg_ctl'), ctlArgs(args)];
      execFile(file, argv, { cwd: dir, encoding: 'utf8' }, (err, stdout, stderr) => (err ? reject(new Error(`pg_ctl ${args.join(' ')} failed: ${stderr || stdout}`)) : resolve()));
    });
  ctl('start');
  let stopped = false;
  return {
    port,
    dataDir: data,
    url: (db) => `postgres://fleet:${encodeURIComponent(password)}@127.0.0.1:${port}/${db}`,
    async restart() {
      ctl('restart', '-m', 'fast');
    },
    down: () => ctlAsync('stop', '-m', 'fast'),
    up: () => ctlAsync('start'),
    async stop() {
      if (stopped) return;
      stopped = true;
      try {
        ctl('stop', '-m', 'immediate');
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  };
}

/** Creates database `name` on `server` (as the test role) and returns its URL. */
export async function createDatabase(server: PgServer, name: string): Promise<string> {
  const c = new pg.Client({ connectionString: server.url('postgres') });
  await c.connect();
  try {
    await c.query(`CREATE DATABASE ${name}`);
  } finally {
    await c.end();
  }
  return server.url(name);
}
