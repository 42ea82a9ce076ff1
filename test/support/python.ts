/**
 * The Python the tests run independent readers with (rosbags, mcap-ros2-support, Pillow): a
 * virtual environment built from the pinned `test/python/requirements.txt` with pyenv's Python
 * 3.12, never the system Python.
 *
 *   ensurePythonEnv(log?, requirements?) -> absolute path of the venv's `bin/python3`
 *
 * `requirements` defaults to the tests' file; another pinned file (a benchmark's peer tool whose
 * pins conflict with the tests') gets a venv of its own by the same rule.
 *
 * Where: `${XDG_CACHE_HOME:-~/.cache}/fleet/python/<key>/`, outside the clone, where <key> is the
 * first 16 hex digits of sha256(requirements file + Python version): a changed requirements file
 * or another Python gets a new venv, an unchanged one is reused (the call is then one stat).
 * pip's own cache is `.../fleet/python/pip-cache/`, shared by every key, so a rebuild after a pin
 * change downloads only what changed.
 *
 * How: under a lock (a `<key>.lock` directory holding the builder's pid; a dead builder's lock is
 * taken over), the venv is built in a sibling `<key>.build-<pid>-<time>/`, pip installs into it
 * with no timeout (a big install, such as LeRobot's torch, takes as long as it takes), and only
 * when pip succeeded does the symlink `<key>` appear (made under a temporary name, then renamed
 * into place). A crash mid-install leaves a build directory no symlink points to, never a
 * half-built venv that looks ready; the next builder deletes it. A symlink rather than a renamed
 * directory: a venv is not relocatable (its console scripts' shebangs name its path), so the
 * directory stays where pip built it.
 *
 * vitest's global setup calls it once before the workers start; each test calls it again (cheap).
 * The soak and benchmarks can call it outside vitest. Run tools as `python3 -m tool`.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { closeSync, existsSync, mkdirSync, openSync, readdirSync, readFileSync, readlinkSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The pinned requirements of the tests' Python readers. */
export const PYTHON_REQUIREMENTS = resolve(dirname(fileURLToPath(import.meta.url)), '..', 'python', 'requirements.txt');
/** The pinned requirements of the Python SDK's development and tests (its own venv: schemathesis, moto, mypy). */
export const PYTHON_DEV_REQUIREMENTS = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', 'python', 'requirements-dev.txt');

const PYENV_ROOT = process.env.PYENV_ROOT ?? '/root/.pyenv';

/** pyenv's newest 3.12.x interpreter (the `python3.12` shim refuses without a pyenv version set). */
export function findPython312(): { path: string; version: string } {
  const versionsDir = join(PYENV_ROOT, 'versions');
  const versions = existsSync(versionsDir)
    ? readdirSync(versionsDir)
        .filter((v) => /^3\.12\.\d+$/.test(v) && existsSync(join(versionsDir, v, 'bin', 'python3.12')))
        .sort((a, b) => Number(b.split('.')[2]) - Number(a.split('.')[2]))
    : [];
  const version = versions[0];
  if (!version) throw new Error(`no Python 3.12 under ${versionsDir} (expected ${versionsDir}/3.12.*/bin/python3.12); install it with pyenv (pyenv install 3.12)`);
  return { path: join(versionsDir, version, 'bin', 'python3.12'), version };
}

function cacheRoot(): string {
  const base = process.env.XDG_CACHE_HOME || join(homedir(), '.cache');
  return join(base, 'fleet', 'python');
}

const sleepCell = new Int32Array(new SharedArrayBuffer(4));
/** A synchronous pause between looks at another process's lock (this helper is synchronous). */
function pause(ms: number): void {
  Atomics.wait(sleepCell, 0, 0, ms);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Takes the `<key>.lock` directory, waiting while a live process holds it; returns its release. */
function lock(lockDir: string, log: (line: string) => void): () => void {
  let announced = false;
  for (;;) {
    try {
      mkdirSync(lockDir);
      writeFileSync(join(lockDir, 'pid'), String(process.pid));
      return () => rmSync(lockDir, { recursive: true, force: true });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    let owner = NaN;
    try {
      owner = Number(readFileSync(join(lockDir, 'pid'), 'utf8'));
    } catch {
      // The owner made the directory but has not written its pid yet: look again shortly.
    }
    if (Number.isInteger(owner) && owner > 0 && !alive(owner)) {
      log(`python: the builder of ${basename(lockDir)} (pid ${owner}) is gone; taking its lock over`);
      rmSync(lockDir, { recursive: true, force: true });
      continue;
    }
    if (!announced) {
      log(`python: another process (pid ${Number.isNaN(owner) ? '?' : owner}) is building the test venv; waiting for it`);
      announced = true;
    }
    pause(500);
  }
}

/**
 * The absolute path of the test venv's `bin/python3`, building the venv first when there is none
 * for the current requirements file and Python. Throws with pip's output tail when pip fails.
 */
export function ensurePythonEnv(log: (line: string) => void = (l) => console.warn(l), requirementsPath: string = PYTHON_REQUIREMENTS): string {
  const python = findPython312();
  const requirements = readFileSync(requirementsPath, 'utf8');
  const key = createHash('sha256').update(requirements).update('\0').update(python.version).digest('hex').slice(0, 16);
  const root = cacheRoot();
  const ready = join(root, key);
  const pythonIn = (dir: string): string => join(dir, 'bin', 'python3');
  if (existsSync(pythonIn(ready))) return pythonIn(ready);

  mkdirSync(root, { recursive: true });
  const release = lock(join(root, `${key}.lock`), log);
  try {
    // Someone else may have finished while we waited for the lock.
    if (existsSync(pythonIn(ready))) return pythonIn(ready);
    // Builds of this key that never became ready (a crash, a failed pip) are only litter now.
    for (const entry of readdirSync(root)) {
      if (entry.startsWith(`${key}.build-`)) rmSync(join(root, entry), { recursive: true, force: true });
    }
    rmSync(ready, { force: true }); // a dangling symlink (its build directory was deleted by hand)

    const build = join(root, `${key}.build-${process.pid}-${Date.now()}`);
    log(`python: building the venv ${ready} (Python ${python.version}, ${requirementsPath}); pip's output goes to ${join(build, 'pip-install.log')}`);
    const venv = spawnSync(python.path, ['-m', 'venv', build], { encoding: 'utf8' });
    if (venv.status !== 0) throw new Error(`python: ${python.path} -m venv ${build} failed (exit ${venv.status}): ${venv.stderr}`);
    const logPath = join(build, 'pip-install.log');
    const logFd = openSync(logPath, 'w');
    let pip;
    try {
      // No timeout: pip reports its own network failures; a large install is slow, not stuck.
      pip = spawnSync(
        pythonIn(build),
        ['-m', 'pip', 'install', '--no-input', '--disable-pip-version-check', '--cache-dir', join(root, 'pip-cache'), '--requirement', requirementsPath],
        { stdio: ['ignore', logFd, logFd], env: { ...process.env, PIP_REQUIRE_VIRTUALENV: '1' } },
      );
    } finally {
      closeSync(logFd);
    }
    if (pip.status !== 0) {
      const tail = readFileSync(logPath, 'utf8').split('\n').slice(-25).join('\n');
      throw new Error(`python: pip install -r ${requirementsPath} failed (exit ${pip.status ?? pip.signal}); the venv is not used. Last lines of ${logPath}:\n${tail}`);
    }
    // The symlink appears whole or not at all: made under a temporary name, then renamed.
    const link = `${ready}.link-${process.pid}`;
    rmSync(link, { force: true });
    symlinkSync(basename(build), link);
    renameSync(link, ready);
    if (readlinkSync(ready) !== basename(build)) throw new Error(`python: ${ready} does not point at ${build}`);
    return pythonIn(ready);
  } finally {
    release();
  }
}
