import { spawn, spawnSync, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { mkdtemp, readFile, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { cleanEnv, REPO_ROOT } from './support/cloud.js';
import { freePort } from './support/http.js';
import { waitFor } from './support/wait.js';

/**
 * docs/quickstart.md, run as a reader runs it: every ```sh block in order, in one bash shell
 * with job control (as an interactive terminal has it), against real processes. The shell runs
 * in a temporary directory that looks like a fresh clone after `npm ci` (the checkout's tracked
 * top-level entries and node_modules, symlinked), so whatever the page writes (data/, sim/,
 * logs) lands there. The ports are the page's own variables, set to free ones in the
 * environment. Blocks marked `<!-- quickstart: skip -->` (npm ci) are not run.
 */

const DOC = join(REPO_ROOT, 'docs', 'quickstart.md');
const SKIP_MARKER = '<!-- quickstart: skip -->';
const DONE = '__quickstart_block_done__';
/** Longest a single block may take; the page's own waits give up after 60 s. */
const BLOCK_TIMEOUT_MS = 100_000;

export interface DocBlock {
  /** The heading the block is under. */
  heading: string;
  code: string;
  run: boolean;
}

/** The fenced code blocks of a Markdown page, `sh` ones marked to run unless a skip marker precedes them. */
export function shellBlocks(markdown: string): DocBlock[] {
  const blocks: DocBlock[] = [];
  let heading = '';
  const lines = markdown.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    if (line.startsWith('#')) heading = line.replace(/^#+\s*/, '');
    const fence = /^```(\w*)/.exec(line);
    if (!fence) continue;
    const start = i;
    const body: string[] = [];
    for (i++; i < lines.length && !lines[i]!.startsWith('```'); i++) body.push(lines[i]!);
    let prev = start - 1;
    while (prev >= 0 && lines[prev]!.trim() === '') prev--;
    const skipped = prev >= 0 && lines[prev]!.trim() === SKIP_MARKER;
    blocks.push({ heading, code: body.join('\n'), run: fence[1] === 'sh' && !skipped });
  }
  return blocks;
}

const trackedTopLevel = (): string[] => {
  const r = spawnSync('git', ['ls-files'], { cwd: REPO_ROOT, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`git ls-files failed: ${r.stderr}`);
  return [...new Set(r.stdout.split('\n').filter(Boolean).map((p) => p.split('/')[0]!))];
};

const parseJobs = (text: string): number[] => text.split('\n').filter(Boolean).map(Number);

const groupAlive = (pgid: number): boolean => {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code !== 'ESRCH';
  }
};

/** One bash process fed block by block on stdin; each block's output is collected. */
class DocShell {
  private readonly shell: ChildProcessWithoutNullStreams;
  private out = '';
  private err = '';
  private exited: { code: number | null; signal: NodeJS.Signals | null } | null = null;
  /** Process groups of the shell's background jobs, as last reported. */
  jobGroups: number[] = [];

  constructor(cwd: string, env: Record<string, string | undefined>) {
    // Its own process group, so cleanup can reach anything the page started.
    this.shell = spawn('bash', ['--noprofile', '--norc'], { cwd, env, detached: true, stdio: ['pipe', 'pipe', 'pipe'] });
    this.shell.stdout.setEncoding('utf8').on('data', (d: string) => (this.out += d));
    this.shell.stderr.setEncoding('utf8').on('data', (d: string) => (this.err += d));
    this.shell.on('exit', (code, signal) => (this.exited = { code, signal }));
    // Job control as in a terminal (each background job its own process group); stop at the first failure.
    this.shell.stdin.write('set -m -eo pipefail\n');
  }

  get pid(): number {
    return this.shell.pid!;
  }

  get stderr(): string {
    return this.err;
  }

  /** Runs `code` (stdin from /dev/null, as a terminal command would not read the script); resolves with its stdout. */
  async run(code: string): Promise<string> {
    const from = this.out.length;
    // The job list is written before the done marker, so that a reader who saw the marker finds
    // it whole: written after it, a loaded machine let the test read the file between its
    // truncation and its write (no jobs at all), or read the previous block's list.
    this.shell.stdin.write(`{\n${code}\n} < /dev/null\njobs -p > .quickstart-jobs.next && mv .quickstart-jobs.next .quickstart-jobs || true\necho ${DONE}\n`);
    await waitFor(
      () => {
        if (this.exited) throw new Error(`the shell exited (${JSON.stringify(this.exited)})`);
        return this.out.indexOf(DONE, from) >= 0 ? true : undefined;
      },
      { timeoutMs: BLOCK_TIMEOUT_MS, intervalMs: 100, description: 'the block to finish' },
    ).catch((err: Error) => {
      throw new Error(`${err.message}\n--- block ---\n${code}\n--- stdout ---\n${this.out.slice(from)}\n--- stderr (last 4000) ---\n${this.err.slice(-4000)}`);
    });
    return this.out.slice(from, this.out.indexOf(DONE, from));
  }

  /** Ends the shell and, whatever the page did, every process group it started. */
  async close(jobsFile: string): Promise<void> {
    if (!this.exited) this.shell.stdin.end();
    // The shell writes its jobs after every block, so a failed run still names what it started.
    const listed = await readFile(jobsFile, 'utf8').then(parseJobs, () => []);
    for (const g of [...new Set([...this.jobGroups, ...listed]), this.pid]) {
      if (groupAlive(g)) process.kill(-g, 'SIGKILL');
    }
  }
}

/**
 * A reader's terminal: no FLEET_* of the developer's, and none of what `npm`/`npx` put in the
 * environment of this test run (npm_* settings, node_modules/.bin on PATH), which would send the
 * page's `npx` to this run's prefix instead of the directory it runs in.
 */
function terminalEnv(extra: Record<string, string>): Record<string, string | undefined> {
  const env: Record<string, string | undefined> = { ...process.env, ...cleanEnv(extra) };
  for (const k of Object.keys(process.env)) if (k.toLowerCase().startsWith('npm_') || k === 'INIT_CWD') env[k] = undefined;
  env.PATH = (process.env.PATH ?? '')
    .split(':')
    .filter((p) => !p.includes('node_modules'))
    .join(':');
  return env;
}

const outputs: { heading: string; code: string; out: string }[] = [];
let dir: string;
let shell: DocShell;
let ports: Record<string, number>;

/** The page's prerequisites, checked first so a missing tool fails with its name, not mid-page. */
function checkTools(): void {
  for (const [tool, args] of [['jq', ['--version']], ['openssl', ['version']], ['curl', ['--version']]] as const) {
    const r = spawnSync(tool, args, { encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`docs/quickstart.md needs ${tool} on PATH`);
    const curl = tool === 'curl' ? /^curl (\d+)\.(\d+)/.exec(r.stdout) : null;
    if (curl && Number(curl[1]) * 100 + Number(curl[2]) < 776) throw new Error(`docs/quickstart.md needs curl 7.76 or newer (--fail-with-body), not ${curl[0]}`);
  }
}

beforeAll(async () => {
  checkTools();
  dir = await mkdtemp(join(tmpdir(), 'quickstart-'));
  for (const entry of [...trackedTopLevel(), 'node_modules']) await symlink(join(REPO_ROOT, entry), join(dir, entry));
  ports = {
    FLEET_HTTP_PORT: await freePort(),
    FLEET_MQTT_PORT: await freePort(),
    WEBHOOK_PORT: await freePort(),
    FLEET_PROVIDER_PORT: await freePort(),
    S3_PORT: await freePort(),
  };
  shell = new DocShell(dir, terminalEnv(Object.fromEntries(Object.entries(ports).map(([k, v]) => [k, String(v)]))));
});

afterAll(async () => {
  await shell?.close(join(dir, '.quickstart-jobs'));
  // QUICKSTART_KEEP=1 keeps the directory (logs, data) to look at after a failure.
  if (dir && !process.env.QUICKSTART_KEEP) await rm(dir, { recursive: true, force: true });
  else if (dir) process.stderr.write(`quickstart directory kept: ${dir}\n`);
});

const outputOf = (heading: string): string => outputs.filter((o) => o.heading.includes(heading)).map((o) => o.out).join('');
const jsonLines = (text: string): Record<string, unknown>[] =>
  text
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, unknown>);

describe('docs/quickstart.md', () => {
  test('marks its blocks: npm ci is skipped, everything else runs', async () => {
    const blocks = shellBlocks(await readFile(DOC, 'utf8'));
    const skipped = blocks.filter((b) => !b.run);
    expect(skipped.map((b) => b.code)).toEqual([expect.stringContaining('npm ci')]);
    expect(blocks.filter((b) => b.run).length).toBeGreaterThan(8);
  });

  test('runs from npm start to an object in the bucket, and its last step stops every process', { timeout: 900_000 }, async () => {
    const blocks = shellBlocks(await readFile(DOC, 'utf8')).filter((b) => b.run);
    const last = blocks[blocks.length - 1]!;
    expect(last.heading).toMatch(/^\d+\. Stop/);
    for (const block of blocks.slice(0, -1)) {
      outputs.push({ heading: block.heading, code: block.code, out: await shell.run(block.code) });
    }

    // The page's own output, step by step.
    expect(jsonLines(outputOf('Start the cloud'))[0]).toMatchObject({ tier: 'enterprise', features: { 'data.metadata': true } });
    const webhookLines = jsonLines(await readFile(join(dir, 'webhooks.log'), 'utf8'));
    expect(webhookLines[0]).toMatchObject({ verified: true, event: 'episode.finalized', payload: { test: true } });
    expect(jsonLines(outputOf('Where the recordings go')).at(-1)).toMatchObject({ result: 'pass', mode: 'granted' });
    const robots = jsonLines(outputOf('Enroll a simulated fleet'));
    expect(robots.map((r) => r.name).sort()).toEqual(['arm-0', 'arm-1', 'arm-2']);
    expect(robots.every((r) => r.connected === true)).toBe(true);

    const query = outputOf('Query, annotate').split('\n');
    const picked = jsonLines(query.slice(0, 1).join('\n'));
    expect(picked).toHaveLength(1);
    expect(picked[0]).toMatchObject({ task_id: 'pick-cube', operator_id: 'alice', outcome: 'success' });
    expect(query).toContainEqual('{"qa":"reviewed","note":"gripper slipped"}');
    expect(query).toContainEqual('{"outcome":"success","recorded_outcome":"failure"}');

    const manifest = (await readFile(join(dir, 'manifest.ndjson'), 'utf8')).trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
    // Two successes were recorded, and the failure was corrected to a success before the snapshot.
    expect(manifest[0]).toMatchObject({ name: 'successes', filter: { outcome: 'success' }, episode_count: 3 });
    expect(manifest).toHaveLength(4);
    for (const member of manifest.slice(1)) {
      expect(member).toMatchObject({ outcome: 'success' });
      const files = member.files as { path: string; sha256: string }[];
      expect(files.length).toBeGreaterThan(0);
      for (const f of files) expect(f.sha256).toMatch(/^[0-9a-f]{64}$/);
    }

    const bucket = outputOf('in the bucket');
    const keys = [...bucket.matchAll(/<Key>([^<]*)<\/Key>/g)].map((m) => m[1]!);
    const episodeIds = manifest.slice(1).map((m) => m.id as string);
    for (const id of episodeIds) expect(keys.some((k) => k.includes(id))).toBe(true);
    // The receiver verified one delivery per event: the test event and each episode's finalized and verified.
    const delivered = await waitFor(
      async () => {
        const lines = jsonLines(await readFile(join(dir, 'webhooks.log'), 'utf8')).filter((l) => l.verified === true && l.duplicate !== true);
        const ofEvent = (event: string) => lines.filter((l) => l.event === event).map((l) => (l.payload as { episode_id: string }).episode_id);
        const finalized = ofEvent('episode.finalized');
        return finalized.length >= 4 ? { finalized, verified: ofEvent('episode.verified') } : undefined;
      },
      { timeoutMs: 30_000, description: 'four episode.finalized deliveries' },
    );
    expect(delivered.finalized.filter((id) => episodeIds.includes(id)).sort()).toEqual([...episodeIds].sort());
    expect([...delivered.verified].sort()).toEqual([...episodeIds].sort());
    expect(webhookLines.every((l) => l.verified === true)).toBe(true);

    // The last step stops what the page started: every job's process group ends.
    shell.jobGroups = parseJobs(await readFile(join(dir, '.quickstart-jobs'), 'utf8'));
    expect(shell.jobGroups.length).toBeGreaterThanOrEqual(5);
    await shell.run(last.code);
    await waitFor(() => (shell.jobGroups.some(groupAlive) ? undefined : true), { timeoutMs: 30_000, description: 'every background job to exit' });
  });
});
