import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { REPO_ROOT, cleanEnv } from './support/cloud.js';
import { exitWithin, spawnProcess } from './support/process.js';

/**
 * `npm run demo` as a user runs it (minus the build, done by `npm test`): one process that
 * starts the cloud, an S3 store, the grant provider and a fleet, and logs episodes until Ctrl-C.
 * It gets its own TMPDIR, so "temp dirs removed" means that directory is empty afterwards.
 */

let tmp: string;
beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'demo-e2e-'));
});
afterAll(async () => {
  await rm(tmp, { recursive: true, force: true });
});

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code !== 'ESRCH';
  }
};

describe('npm run demo', () => {
  test('prints the addresses and key, logs an episode verified with its object in the bucket, and on SIGINT stops every child, removes its temp dirs and exits 0', { timeout: 180_000 }, async () => {
    await using demo = spawnProcess(process.execPath, ['--import', 'tsx', join('demo', 'run.ts'), '--robots', '2', '--episodes-per-minute', '12'], {
      name: 'demo',
      cwd: REPO_ROOT,
      env: cleanEnv({ TMPDIR: tmp }),
    });
    const pidsLine = await demo.waitForStdout((l) => l.startsWith('pids: '), { timeoutMs: 90_000, description: 'the pids: line' });
    const pids = Object.fromEntries(pidsLine.slice('pids: '.length).split(' ').map((kv) => kv.split('=') as [string, string]));
    expect(Object.keys(pids).sort()).toEqual(['cloud', 'fleet', 'provider', 's3']);
    const out = () => demo.stdoutLines.join('\n');
    expect(out()).toMatch(/API {10}http:\/\/127\.0\.0\.1:\d+\/v1/);
    expect(out()).toMatch(/API docs {5}http:\/\/127\.0\.0\.1:\d+\/docs/);
    expect(out()).toMatch(/admin key {4}ak_/);
    expect(out()).toContain(`bucket files ${tmp}`);

    const verified = await demo.waitForStdout((l) => / → verified {2}\(bucket key /.test(l), { timeoutMs: 120_000, description: 'an episode verified' });
    const key = /\(bucket key (\S+)\)/.exec(verified)![1]!;
    await demo.waitForStdout((l) => l.includes(`bucket  + ${key}`), { timeoutMs: 15_000, description: `an object under ${key}` });
    const before = Object.values(pids).map(Number);
    for (const pid of before) expect(alive(pid), `pid ${pid}`).toBe(true);

    demo.child.kill('SIGINT');
    const exit = await exitWithin(demo, 60_000);
    expect(exit, demo.describe()).toEqual({ code: 0, signal: null });
    expect(out()).toContain('everything stopped, temp dirs removed');
    for (const pid of before) expect(alive(pid), `pid ${pid} still running`).toBe(false);
    // tsx keeps its compile cache under TMPDIR (tsx-<uid>), as with any `tsx` run; nothing else may stay.
    expect((await readdir(tmp)).filter((name) => !/^tsx-\d+$/.test(name))).toEqual([]);
    expect(demo.stderrLines.filter((l) => l.trim() !== '')).toEqual([]);
  });
});
