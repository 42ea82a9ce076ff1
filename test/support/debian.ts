/**
 * The Debian packages the suites run for real (PostgreSQL, mosquitto, chromium, ffmpeg), installed
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
  /** Whether it is installed: the files the tests use are there. */
  installed(): boolean;
  /**
   * Install its recommended packages too (chromium: they bring the fonts pages and screenshots are
   * drawn with). The others install with `--no-install-recommends`.
   */
  readonly recommends?: boolean;
}

const anyOf = (...paths: string[]) => () => paths.some((p) => existsSync(p));

/** PostgreSQL 15 from Debian: its binaries live in /usr/lib/postgresql/<v>/bin (postgres.ts finds them). */
export const POSTGRESQL: DebianPackage = {
  name: 'postgresql',
  installed: () => existsSync('/usr/lib/postgresql') && readdirSync('/usr/lib/postgresql').some((v) => existsSync(join('/usr/lib/postgresql', v, 'bin', 'pg_ctl'))),
};
export const MOSQUITTO: DebianPackage = { name: 'mosquitto', installed: anyOf('/usr/sbin/mosquitto', '/usr/bin/mosquitto') };
export const CHROMIUM_PACKAGE: DebianPackage = { name: 'chromium', installed: anyOf('/usr/bin/chromium'), recommends: true };
/** ffmpeg encodes the LeRobot export's videos; its ffprobe is one of the test's independent readers. */
export const FFMPEG: DebianPackage = { name: 'ffmpeg', installed: () => existsSync('/usr/bin/ffmpeg') && existsSync('/usr/bin/ffprobe') };

/** Every package some suite needs. */
export const TEST_PACKAGES: readonly DebianPackage[] = [POSTGRESQL, MOSQUITTO, CHROMIUM_PACKAGE, FFMPEG];

const isRoot = process.getuid?.() === 0;

/**
 * Installs the packages of `wanted` that are missing, when running as root (one `apt-get update`,
 * then one install per recommends group, each waiting up to 10 minutes for dpkg's lock). Returns
 * the names still missing afterwards (all the missing ones when not root or apt-get failed).
 */
export function ensureDebianPackages(wanted: readonly DebianPackage[], log: (line: string) => void = (l) => console.warn(l)): string[] {
  const missing = wanted.filter((p) => !p.installed());
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
  const still = missing.filter((p) => !p.installed()).map((p) => p.name);
  if (still.length > 0) log(`${still.join(', ')}: still not installed; install ${still.length > 1 ? 'them' : 'it'} by hand (apt-get install -y ${still.join(' ')})`);
  return still;
}
