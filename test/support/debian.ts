/**
 * The Debian packages the suites run for real (PostgreSQL, mosquitto, chromium, ffmpeg, lintian), installed
 * with apt-get when the tests run as root and a package's binary is missing, so that a fresh
 * machine needs no manual step. vitest's global setup installs every missing one in a single
 * apt-get call before any worker starts: two workers each installing its own package at once
 * would meet on dpkg's lock. The per-package helpers (postgres.ts, mosquitto.ts, browser.ts and
 * the LeRobot export test) call `ensureDebianPackages` for their own package too, for the soak
 * and the benchmarks that run without vitest; then they wait for the lock rather than fail on it.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

export interface DebianPackage {
  /** The Debian package name. */
  readonly name: string;
  /** The path the tests use (a binary, or PostgreSQL's bin directory), or null when it is missing. */
  find(): string | null;
  /**
   * Install its recommended packages too (chromium: they bring the fonts pages and screenshots are
   * drawn with). The others install with `--no-install-recommends`.
   */
  readonly recommends?: boolean;
}

/** The first of `paths` that exists; every one of `alongside` must exist too. */
const firstOf =
  (paths: readonly string[], alongside: readonly string[] = []) =>
  (): string | null =>
    alongside.every((p) => existsSync(p)) ? (paths.find((p) => existsSync(p)) ?? null) : null;

const PG_BASE = '/usr/lib/postgresql';

/** PostgreSQL from Debian: /usr/lib/postgresql/<v>/bin, the newest version that has pg_ctl. */
export const POSTGRESQL: DebianPackage = {
  name: 'postgresql',
  find: () => {
    if (!existsSync(PG_BASE)) return null;
    const versions = readdirSync(PG_BASE)
      .filter((v) => existsSync(join(PG_BASE, v, 'bin', 'pg_ctl')))
      .sort((a, b) => Number(b) - Number(a));
    return versions.length ? join(PG_BASE, versions[0]!, 'bin') : null;
  },
};
export const MOSQUITTO: DebianPackage = { name: 'mosquitto', find: firstOf(['/usr/sbin/mosquitto', '/usr/bin/mosquitto']) };
export const CHROMIUM_PACKAGE: DebianPackage = { name: 'chromium', find: firstOf(['/usr/bin/chromium']), recommends: true };
/** ffmpeg encodes the LeRobot export's videos; its ffprobe is one of the test's independent readers. */
export const FFMPEG: DebianPackage = { name: 'ffmpeg', find: firstOf(['/usr/bin/ffmpeg'], ['/usr/bin/ffprobe']) };

/** Debian's package checker, run on the agent's .deb (test/agent-package.test.ts); it brings dpkg-shlibdeps (dpkg-dev) too. */
export const LINTIAN: DebianPackage = { name: 'lintian', find: firstOf(['/usr/bin/lintian'], ['/usr/bin/dpkg-shlibdeps']) };

/** Every package some suite needs. */
/** The Redis a broker cluster's nodes share (test/support/broker-cluster.ts). */
export const REDIS: DebianPackage = { name: 'redis-server', find: firstOf(['/usr/bin/redis-server']) };
/** The broker candidates bench/brokers.ts measures (not needed by any suite). */
export const NATS: DebianPackage = { name: 'nats-server', find: firstOf(['/usr/bin/nats-server', '/usr/sbin/nats-server']) };
export const RABBITMQ: DebianPackage = { name: 'rabbitmq-server', find: firstOf(['/usr/lib/rabbitmq/bin/rabbitmq-server'], ['/usr/lib/rabbitmq/bin/rabbitmqctl', '/usr/bin/epmd']) };
export const EJABBERD: DebianPackage = { name: 'ejabberd', find: firstOf(['/usr/sbin/ejabberdctl'], ['/usr/bin/epmd']) };
export const TEST_PACKAGES: readonly DebianPackage[] = [POSTGRESQL, MOSQUITTO, REDIS, CHROMIUM_PACKAGE, FFMPEG, LINTIAN];

const isRoot = process.getuid?.() === 0;

/**
 * Installs the packages of `wanted` that are missing, when running as root (one `apt-get update`,
 * then one install per recommends group, each waiting up to 10 minutes for dpkg's lock). Returns
 * the names still missing afterwards (all the missing ones when not root or apt-get failed).
 */
export function ensureDebianPackages(wanted: readonly DebianPackage[], log: (line: string) => void = (l) => console.warn(l)): string[] {
  const missing = wanted.filter((p) => p.find() === null);
  if (missing.length === 0) return [];
  if (!isRoot) return missing.map((p) => p.name);
  log(`${missing.map((p) => p.name).join(', ')}: not installed; installing the Debian package${missing.length > 1 ? 's' : ''} (apt-get install -y ${missing.map((p) => p.name).join(' ')})`);
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  const lock = ['-o', 'DPkg::Lock::Timeout=600'];
  const update = spawnSync('apt-get', [...lock, 'update'], { stdio: 'ignore', env });
  if (update.status !== 0) log(`apt-get update failed (exit ${update.status}); trying the install with the package lists there are`);
  for (const recommends of [false, true]) {
    const group = missing.filter((p) => Boolean(p.recommends) === recommends);
    if (group.length === 0) continue;
    const args = [...lock, 'install', '-y', ...(recommends ? [] : ['--no-install-recommends']), ...group.map((p) => p.name)];
    const install = spawnSync('apt-get', args, { stdio: 'ignore', env });
    if (install.status !== 0) log(`apt-get ${args.slice(2).join(' ')} failed (exit ${install.status})`);
  }
  const still = missing.filter((p) => p.find() === null).map((p) => p.name);
  if (still.length > 0) log(`${still.join(', ')}: still not installed; install ${still.length > 1 ? 'them' : 'it'} by hand (apt-get install -y ${still.join(' ')})`);
  return still;
}
