import { readFileSync } from 'node:fs';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { REPO_ROOT, cleanEnv } from './support/cloud.js';
import { exitWithin, spawnProcess } from './support/process.js';

/**
 * `npm run demo` as a user runs it (minus the build, done by `npm test`): package.json's command
 * through `sh`, in a process group of its own that gets SIGINT as a terminal's Ctrl-C sends it,
 * to every process of the group at once. One process starts the cloud, an S3 store, the grant
 * provider and a fleet, and logs episodes until then. It gets its own TMPDIR, so "temp dirs
 * removed" means that directory is empty afterwards.
 */

/** The demo script of package.json without its build step, with `args` appended as npm does. */
function demoCommand(args: readonly string[]): string {
  const script = (JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts.demo!;
  const build = 'npm run build && ';
  expect(script.startsWith(build), script).toBe(true);
  return `${script.slice(build.length)} ${args.join(' ')}`;
}

/** Every `a → b` step an episode's lines name, e.g. `granted → syncing`. */
function steps(lines: readonly string[]): string[] {
  const out: string[] = [];
  for (const line of lines) {
    const stages = /(?:reported|granted|syncing|synced|verified)(?: → (?:granted|syncing|synced|verified))+/.exec(line)?.[0].split(' → ') ?? [];
    for (let i = 1; i < stages.length; i++) out.push(`${stages[i - 1]} → ${stages[i]}`);
  }
  return out;
}

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
  test('prints the addresses and key, logs every stage of an episode up to verified with its object in the bucket, and on Ctrl-C stops every child, removes its temp dirs and exits 0', { timeout: 180_000 }, async () => {
    // npm runs scripts with node_modules/.bin on PATH.
    const PATH = `${join(REPO_ROOT, 'node_modules', '.bin')}:${process.env.PATH ?? ''}`;
    const spawned = spawnProcess('/bin/sh', ['-c', demoCommand(['--robots', '2', '--episodes-per-minute', '12'])], {
      name: 'demo',
      cwd: REPO_ROOT,
      env: cleanEnv({ TMPDIR: tmp, PATH }),
      detached: true,
    });
    // Whatever fails, nothing of the group outlives the test (a process left behind would also
    // hold the output pipes open).
    await using demo = Object.assign(spawned, {
      [Symbol.asyncDispose]: async () => {
        if (spawned.exit !== null) return;
        try {
          process.kill(-spawned.pid, 'SIGKILL');
        } catch {
          // The group is gone already.
        }
        await spawned.exited;
      },
    });
    const pidsLine = await demo.waitForStdout((l) => l.startsWith('pids: '), { timeoutMs: 90_000, description: 'the pids: line' });
    const pids = Object.fromEntries(pidsLine.slice('pids: '.length).split(' ').map((kv) => kv.split('=') as [string, string]));
    expect(Object.keys(pids).sort()).toEqual(['cloud', 'fleet', 'provider', 's3']);
    const out = () => demo.stdoutLines.join('\n');
    expect(out()).toMatch(/API {10}http:\/\/127\.0\.0\.1:\d+\/v1/);
    expect(out()).toMatch(/API docs {5}http:\/\/127\.0\.0\.1:\d+\/docs/);
    expect(out()).toMatch(/admin key {4}ak_/);
    expect(out()).toContain(`bucket files ${tmp}`);

    // The enrollment token reached the fleet through its environment: no command line shows it.
    for (const pid of Object.values(pids)) expect(readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ')).not.toMatch(/ret_/);

    const verified = await demo.waitForStdout((l) => / → verified {2}\(bucket key /.test(l), { timeoutMs: 120_000, description: 'an episode verified' });
    const key = /\(bucket key (\S+)\)/.exec(verified)![1]!;
    const episode = verified.split(/\s+/)[1]!;
    expect(steps(demo.stdoutLines.filter((l) => l.includes(episode)))).toEqual(['reported → granted', 'granted → syncing', 'syncing → synced', 'synced → verified']);
    await demo.waitForStdout((l) => l.includes(`bucket  + ${key}`), { timeoutMs: 15_000, description: `an object under ${key}` });

    // The console plays it from the bucket: where to open it, and the bucket's CORS rule lets the
    // console's origin read ranges (the preflight a browser sends for a Range it does not safelist).
    const origin = /console {6}(http:\/\/127\.0\.0\.1:\d+)\/console\/ {2}\(sign in with the admin key\)/.exec(out())?.[1];
    expect(origin, out()).toBeDefined();
    expect(out()).toContain(`review queue ${origin}/console/review?has_annotation.qa_status=false&tags=`);
    await demo.waitForStdout((l) => l.includes(`play it      ${origin}/console/episodes/ep_`), { timeoutMs: 15_000, description: 'the play it line' });
    const bucket = /bucket {7}(\S+) at (http:\/\/127\.0\.0\.1:\d+)/.exec(out());
    expect(bucket, out()).not.toBeNull();
    const preflight = await fetch(`${bucket![2]}/${bucket![1]}/${key}bag/bag_0.mcap`, {
      method: 'OPTIONS',
      headers: { origin: origin!, 'access-control-request-method': 'GET', 'access-control-request-headers': 'range' },
    });
    expect(preflight.status).toBe(200);
    expect(preflight.headers.get('access-control-allow-headers')).toBe('range');
    const before = Object.values(pids).map(Number);
    for (const pid of before) expect(alive(pid), `pid ${pid}`).toBe(true);

    // Ctrl-C: the terminal signals the whole foreground process group, the demo and its children.
    process.kill(-demo.pid, 'SIGINT');
    const exit = await exitWithin(demo, 60_000);
    expect(exit, demo.describe()).toEqual({ code: 0, signal: null });
    expect(out()).toContain('everything stopped, temp dirs removed');
    for (const pid of before) expect(alive(pid), `pid ${pid} still running`).toBe(false);
    // tsx keeps its compile cache under TMPDIR (tsx-<uid>), as with any `tsx` run; nothing else may stay.
    expect((await readdir(tmp)).filter((name) => !/^tsx-\d+$/.test(name))).toEqual([]);
    expect(demo.stderrLines.filter((l) => l.trim() !== '')).toEqual([]);
  });
});
