import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { chmod, mkdir, readdir, readFile, stat, writeFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { ManualClock } from '@fleet/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import { RefusalError } from '../errors.js';
import { openAgentStore, type SqliteAgentStore } from '../store/sqlite.js';
import { captureLogs, makeTempDir, removeTempDirs, type LogCapture } from '../test-support.js';
import { systemScheduler } from '../time.js';
import { checkCommandRecorderConfig, CommandRecorder, CommandRecorderConfigSchema, commandArgv, type CommandRecorderConfigInput } from './command-recorder.js';
import type { EpisodeFacts } from '../rules/episode-facts.js';
import type { Recorder, RecorderExit, RecordingHandle, RecordingInfo } from './recorder.js';
import { RecordingStateMachine } from './state-machine.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  await removeTempDirs();
  scripts = undefined;
});

/** The environment the programs start from (the entry point would hand in the agent's own). */
const BASE_ENV = { PATH: process.env.PATH, INHERITED: 'from the agent' };

// A stand-in for `ros2 bag record`: appends to bag.mcap until SIGINT, then writes a trailer and
// exits 0. SIGUSR1 makes it die mid-recording with code 5 and a last word on stderr.
const WRITER = `
const fs = require('node:fs');
const fd = fs.openSync('bag.mcap', 'w');
const timer = setInterval(() => fs.writeSync(fd, 'msg\\n'), 10);
process.on('SIGINT', () => { clearInterval(timer); fs.writeSync(fd, 'END\\n'); fs.closeSync(fd); process.exit(0); });
process.on('SIGUSR1', () => { console.error('x'.repeat(3000)); console.error('lost the connection to /joint_states'); process.exit(5); });
`;

let scripts: string | undefined;
/** Writes `source` as a script file and returns its path (programs are run as `node <file>`). */
async function script(name: string, source: string): Promise<string> {
  scripts ??= await makeTempDir();
  const path = join(scripts, `${name}.cjs`);
  await writeFile(path, source);
  return path;
}

function recorder(input: Omit<CommandRecorderConfigInput, 'kind'>, logs: LogCapture = captureLogs()): CommandRecorder {
  const config = CommandRecorderConfigSchema.parse({ kind: 'command', stop_timeout_ms: 10_000, start_grace_ms: 0, ...input });
  return new CommandRecorder(config, { scheduler: systemScheduler, logger: logs.logger, env: BASE_ENV });
}

async function writer(extra: Omit<CommandRecorderConfigInput, 'kind' | 'command'> = {}, logs?: LogCapture): Promise<CommandRecorder> {
  return recorder({ command: [process.execPath, await script('writer', WRITER)], ...extra }, logs);
}

/** An empty episode directory whose path holds a space and both quotes. */
async function episodeDir(): Promise<string> {
  const dir = join(await makeTempDir(), `data dir 'q" x`, 'episodes', 'ep_x');
  await mkdir(dir, { recursive: true });
  return dir;
}

const info: RecordingInfo = { robotId: 'rbt_test', episodeId: 'ep_x', startedAt: 0, taskId: 'task-7' };
const size = async (path: string) => (await stat(path).catch(() => ({ size: 0 }))).size;
const grown = (dir: string) => expect.poll(() => size(join(dir, 'bag.mcap'))).toBeGreaterThan(20);
const readPid = async (dir: string) => (JSON.parse(await readFile(join(dir, '.tmp-recorder.pid'), 'utf8')) as { pid: number }).pid;

/** Whether `pid` runs (a zombie, dead but not yet reaped by its parent, does not). */
function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

/** A process of the test's own that is not the recorder's (for the reused-pid check). */
function bystander(): number {
  const child = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' });
  cleanups.push(async () => {
    child.kill('SIGKILL');
  });
  return child.pid!;
}

describe('CommandRecorderConfigSchema', () => {
  const parse = (input: Record<string, unknown>) => CommandRecorderConfigSchema.safeParse({ kind: 'command', ...input });
  const issues = (input: Record<string, unknown>) => parse(input).error?.issues.map((i) => ({ path: i.path, message: i.message }));

  it('takes an argv or a shell line with defaults for the rest', () => {
    expect(parse({ command: ['ros2', 'bag', 'record', '--output', '{dir}/bag'] }).data).toEqual({
      kind: 'command',
      command: ['ros2', 'bag', 'record', '--output', '{dir}/bag'],
      env: {},
      stop_timeout_ms: 30_000,
      start_grace_ms: 1_000,
      output_max_bytes: 65_536,
    });
    expect(parse({ shell: 'source /opt/ros/humble/setup.bash && exec ros2 bag record -o {dir}/bag ${ROS_EXTRA}', env: { ROS_DOMAIN_ID: '7' } }).success).toBe(true);
  });

  it('refuses an unknown placeholder, both or neither of command and shell, an unknown key, a wrong type', () => {
    const argvIssues = issues({ command: ['ros2', '{dir}/{episode}'] });
    expect(argvIssues?.map((i) => i.path)).toEqual([['command', 1]]);
    expect(argvIssues?.[0]?.message).toContain('unknown placeholder {episode} (known: {dir}, {episode_id}, {robot_id}, {task_id})');
    const shellIssues = issues({ shell: 'exec ros2 {robot}' });
    expect(shellIssues?.map((i) => i.path)).toEqual([['shell']]);
    expect(shellIssues?.[0]?.message).toContain('unknown placeholder {robot}');
    expect(issues({ command: ['a'], shell: 'b' })?.[0]?.message).toMatch(/exactly one of `command`/);
    expect(issues({})?.[0]?.message).toMatch(/exactly one of `command`/);
    expect(issues({ command: ['a'], stop_timeout: 5 })?.[0]?.message).toMatch(/stop_timeout/);
    expect(issues({ command: 'ros2 bag record' })?.[0]?.path).toEqual(['command']);
    expect(issues({ command: [] })?.[0]?.path).toEqual(['command']);
    expect(issues({ command: ['a'], env: { 'NOT A NAME': 'x' } })?.[0]?.path).toEqual(['env', 'NOT A NAME']);
  });
});

describe('commandArgv', () => {
  it('replaces the placeholders in every argv element; no task is an empty string', () => {
    const cfg = CommandRecorderConfigSchema.parse({ kind: 'command', command: ['rec', '--out={dir}/bag', '{episode_id}-{robot_id}', 'x{task_id}y', '${HOME}', '{"json": 1}'] });
    expect(commandArgv(cfg, '/d', info)).toEqual(['rec', '--out=/d/bag', 'ep_x-rbt_test', 'xtask-7y', '${HOME}', '{"json": 1}']);
    expect(commandArgv(cfg, '/d', { ...info, taskId: null })[3]).toBe('xy');
  });

  it("shell-quotes each value in a shell line and leaves the shell's own ${...} alone", () => {
    const cfg = CommandRecorderConfigSchema.parse({ kind: 'command', shell: 'exec rec -o {dir}/bag ${X} {task_id}' });
    expect(commandArgv(cfg, `/a b/it's`, { ...info, taskId: null })).toEqual(['/bin/bash', '-c', `exec rec -o '/a b/it'\\''s'/bag \${X} ''`]);
  });
});

describe('checkCommandRecorderConfig', () => {
  const cfg = (input: Record<string, unknown>) => CommandRecorderConfigSchema.parse({ kind: 'command', ...input });

  it('finds argv[0] on PATH or as an absolute executable, and /bin/bash for a shell line', async () => {
    const bin = await makeTempDir();
    await writeFile(join(bin, 'ros2'), '#!/bin/sh\n');
    await chmod(join(bin, 'ros2'), 0o755);
    await writeFile(join(bin, 'not-executable'), '');
    expect(checkCommandRecorderConfig(cfg({ command: ['ros2', 'bag'] }), { PATH: `/nowhere:${bin}` })).toEqual([]);
    expect(checkCommandRecorderConfig(cfg({ command: ['ros2'], env: { PATH: bin } }), { PATH: '/nowhere' })).toEqual([]);
    expect(checkCommandRecorderConfig(cfg({ command: [join(bin, 'ros2')] }), {})).toEqual([]);
    expect(checkCommandRecorderConfig(cfg({ shell: 'exec ros2 bag record' }), {})).toEqual([]);
  });

  it('reports a program that is missing, not executable, a directory or a relative path', async () => {
    const bin = await makeTempDir();
    await writeFile(join(bin, 'not-executable'), '');
    expect(checkCommandRecorderConfig(cfg({ command: ['ros2'] }), { PATH: bin })).toEqual([expect.stringMatching(/^missing program: recorder program ros2 is not on PATH/)]);
    expect(checkCommandRecorderConfig(cfg({ command: ['ros2'] }), {})).toEqual([expect.stringMatching(/PATH is empty/)]);
    expect(checkCommandRecorderConfig(cfg({ command: [join(bin, 'not-executable')] }), {})).toEqual([expect.stringMatching(/is not an executable file/)]);
    expect(checkCommandRecorderConfig(cfg({ command: [bin] }), {})).toEqual([expect.stringMatching(/is not an executable file/)]);
    expect(checkCommandRecorderConfig(cfg({ command: ['bin/ros2'] }), { PATH: bin })).toEqual([expect.stringMatching(/relative path/)]);
  });
});

describe('CommandRecorder', () => {
  it('runs the argv in the episode directory with the placeholders (an absolute {dir}) and the environment', async () => {
    const dir = await episodeDir();
    const logs = captureLogs();
    const probe = await script(
      'probe',
      // probe.json last: once it is there, the SIGINT handler is set and the output printed.
      `const fs = require('node:fs');
       process.on('SIGINT', () => process.exit(0));
       console.error('hello on stderr');
       console.log('hello on stdout');
       fs.writeFileSync('probe.json', JSON.stringify({ argv: process.argv.slice(2), cwd: process.cwd(), env: { FROM_CONFIG: process.env.FROM_CONFIG, INHERITED: process.env.INHERITED } }));
       setInterval(() => {}, 1000);`,
    );
    const rec = recorder({ command: [process.execPath, probe, '{dir}/bag', '{episode_id}', '{robot_id}', '{task_id}'], env: { FROM_CONFIG: 'seven' } }, logs);
    // Given relative (a relative data directory), {dir} is still absolute.
    const handle = await rec.start(relative(process.cwd(), dir), info);
    await expect.poll(() => size(join(dir, 'probe.json'))).toBeGreaterThan(0);
    expect(JSON.parse(await readFile(join(dir, 'probe.json'), 'utf8'))).toEqual({
      argv: [`${dir}/bag`, 'ep_x', 'rbt_test', 'task-7'],
      cwd: dir,
      env: { FROM_CONFIG: 'seven', INHERITED: 'from the agent' },
    });
    expect(await handle.stop()).toEqual({ files: ['probe.json'], messageCount: null });
    const lines = logs.records.filter((r) => r.stream !== undefined).map((r) => ({ stream: r.stream, msg: r.msg, episode_id: r.episode_id, level: r.level }));
    expect(lines).toEqual(
      expect.arrayContaining([
        { stream: 'stderr', msg: 'hello on stderr', episode_id: 'ep_x', level: 30 },
        { stream: 'stdout', msg: 'hello on stdout', episode_id: 'ep_x', level: 30 },
      ]),
    );
  });

  it('runs a shell line with each value quoted, in a group, so SIGINT reaches what the shell started', async () => {
    const dir = await episodeDir();
    const logs = captureLogs();
    // A command after the writer keeps bash from exec'ing it: bash waits on the writer, which
    // only sees SIGINT because the whole group gets it.
    const rec = recorder({ shell: `printf '%s\\n' {dir} {task_id} "$FROM_CONFIG" > args.txt; "$NODE" "$WRITER"; echo "writer exited with $?"`, env: { FROM_CONFIG: 'seven', NODE: process.execPath, WRITER: await script('writer', WRITER) } }, logs);
    const handle = await rec.start(dir, { ...info, taskId: null });
    await grown(dir);
    expect(await readFile(join(dir, 'args.txt'), 'utf8')).toBe(`${dir}\n\nseven\n`);
    expect((await handle.stop()).files).toEqual(['args.txt', 'bag.mcap']);
    expect(await readFile(join(dir, 'bag.mcap'), 'utf8')).toMatch(/^(msg\n)+END\n$/);
    expect(logs.messages()).toContain('writer exited with 0');
    expect(logs.messages().some((m) => m.includes('killing it'))).toBe(false);
  });

  it('stop() interrupts the program, which closes its file; the pid file is gone and was never a recorded file', async () => {
    const dir = await episodeDir();
    const handle = await (await writer()).start(dir, info);
    await grown(dir);
    expect(await readdir(dir)).toContain('.tmp-recorder.pid');
    expect(await handle.stop()).toEqual({ files: ['bag.mcap'], messageCount: null });
    expect(await readFile(join(dir, 'bag.mcap'), 'utf8')).toMatch(/^(msg\n)+END\n$/);
    expect(await readdir(dir)).toEqual(['bag.mcap']);
  });

  it('kills a program that ignores SIGINT after stop_timeout_ms and keeps its files', async () => {
    const dir = await episodeDir();
    const logs = captureLogs();
    const stubborn = await script('stubborn', `process.on('SIGINT', () => {}); require('node:fs').writeFileSync('bag.mcap', 'partial'); setInterval(() => {}, 1000);`);
    const handle = await recorder({ command: [process.execPath, stubborn], stop_timeout_ms: 300 }, logs).start(dir, info);
    await expect.poll(() => size(join(dir, 'bag.mcap'))).toBeGreaterThan(0);
    const pid = await readPid(dir);
    expect(await handle.stop()).toEqual({ files: ['bag.mcap'], messageCount: null });
    expect(alive(pid)).toBe(false);
    expect(logs.messages()).toContain(`${process.execPath} did not exit after SIGINT; killing it`);
    expect(logs.records.find((r) => r.msg === 'recorder program exited')).toMatchObject({ code: null, signal: 'SIGKILL' });
  });

  it('abort() kills the program and deletes its files', async () => {
    const dir = await episodeDir();
    const handle = await (await writer()).start(dir, info);
    await grown(dir);
    const pid = await readPid(dir);
    await handle.abort();
    expect(await readdir(dir)).toEqual([]);
    expect(alive(pid)).toBe(false);
  });

  it('refuses the start when the program exits within start_grace_ms, with its exit and last line; nothing is left running', async () => {
    const dir = await episodeDir();
    const quitter = await script('quitter', `console.log('[INFO] starting'); console.error('[ERROR] no such topic: /joint_states'); process.exit(3);`);
    const err = await recorder({ command: [process.execPath, quitter], start_grace_ms: 30_000 })
      .start(dir, info)
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RefusalError);
    expect(err).toMatchObject({ code: 'failed', message: `${process.execPath} exited with code 3 at start: [ERROR] no such topic: /joint_states` });
    expect(await readdir(dir)).toEqual([]);

    const killed = await script('killed', `process.kill(process.pid, 'SIGKILL');`);
    await expect(recorder({ command: [process.execPath, killed], start_grace_ms: 30_000 }).start(dir, info)).rejects.toMatchObject({
      code: 'failed',
      message: `${process.execPath} was killed by SIGKILL at start: (no output)`,
    });
    await expect(recorder({ shell: 'exit 4', start_grace_ms: 30_000 }).start(dir, info)).rejects.toMatchObject({ code: 'failed', message: '/bin/bash -c exited with code 4 at start: (no output)' });
  });

  it('refuses the start of a program that does not exist', async () => {
    const dir = await episodeDir();
    const err = await recorder({ command: ['/nonexistent/ros2', 'bag'] })
      .start(dir, info)
      .catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'failed' });
    expect((err as Error).message).toMatch(/^\/nonexistent\/ros2 could not be started: .*ENOENT/);
    await expect(recorder({ command: ['surely-not-a-program-on-path'] }).start(dir, info)).rejects.toBeInstanceOf(RefusalError);
    expect(await readdir(dir)).toEqual([]);
  });

  it('logs at most output_max_bytes of output per episode, then one line saying how much was dropped', async () => {
    const dir = await episodeDir();
    const logs = captureLogs();
    // 10,486 lines of 99 bytes and a newline: 1,048,600 bytes, all written before the SIGINT.
    const chatty = await script(
      'chatty',
      `process.on('SIGINT', () => process.exit(0));
       const line = 'x'.repeat(99) + '\\n';
       for (let b = Buffer.from(line.repeat(10486)); b.length > 0; ) b = b.subarray(require('node:fs').writeSync(1, b));
       require('node:fs').writeFileSync('printed', '');
       setInterval(() => {}, 1000);`,
    );
    const handle = await recorder({ command: [process.execPath, chatty], output_max_bytes: 4096 }, logs).start(dir, info);
    await expect.poll(() => readdir(dir)).toContain('printed');
    await handle.stop();
    const lines = logs.records.filter((r) => r.stream === 'stdout');
    const loggedBytes = lines.reduce((n, r) => n + Buffer.byteLength(String(r.msg)) + 1, 0);
    expect(loggedBytes).toBeLessThanOrEqual(4096);
    expect(lines).toHaveLength(40);
    const notes = logs.records.filter((r) => r.dropped_bytes !== undefined);
    expect(notes).toEqual([expect.objectContaining({ episode_id: 'ep_x', dropped_bytes: 1_048_600 - loggedBytes, output_max_bytes: 4096, level: 40 })]);
  });

  it('logs a line longer than 8 KiB in pieces rather than holding it', async () => {
    const dir = await episodeDir();
    const logs = captureLogs();
    const long = await script('long', `process.on('SIGINT', () => process.exit(0)); process.stdout.write('y'.repeat(20000)); setInterval(() => {}, 1000);`);
    const handle = await recorder({ command: [process.execPath, long] }, logs).start(dir, info);
    await expect.poll(() => logs.records.filter((r) => r.stream === 'stdout').length).toBeGreaterThanOrEqual(2);
    await handle.stop();
    const pieces = logs.records.filter((r) => r.stream === 'stdout').map((r) => String(r.msg).length);
    expect(Math.max(...pieces)).toBeLessThanOrEqual(8192);
    expect(pieces.reduce((a, b) => a + b, 0)).toBe(20000);
  });

  it('recover() after an agent crash stops the program still writing, so its file is closed', async () => {
    const dir = await episodeDir();
    // The agent "dies": the handle is never used again, the program goes on writing.
    await (await writer()).start(dir, info);
    await grown(dir);
    const pid = await readPid(dir);
    const recovered = await (await writer()).recover(dir);
    expect(recovered).toEqual({ files: ['bag.mcap'], messageCount: null });
    expect(await readFile(join(dir, 'bag.mcap'), 'utf8')).toMatch(/END\n$/);
    expect(alive(pid)).toBe(false);
    expect(await readdir(dir)).toEqual(['bag.mcap']);
  });

  it('recover() kills a left-over program that ignores SIGINT after stop_timeout_ms', async () => {
    const dir = await episodeDir();
    const stubborn = await script('stubborn', `process.on('SIGINT', () => {}); require('node:fs').writeFileSync('bag.mcap', 'partial'); setInterval(() => {}, 1000);`);
    await recorder({ command: [process.execPath, stubborn] }).start(dir, info);
    await expect.poll(() => size(join(dir, 'bag.mcap'))).toBeGreaterThan(0);
    const pid = await readPid(dir);
    const logs = captureLogs();
    expect(await recorder({ command: [process.execPath, stubborn], stop_timeout_ms: 300 }, logs).recover(dir)).toEqual({ files: ['bag.mcap'], messageCount: null });
    expect(alive(pid)).toBe(false);
    expect(logs.messages()).toContain('recorder program did not stop on SIGINT; killing it');
  });

  it('recover() never signals a process that only has the same pid (another start time)', async () => {
    const dir = await episodeDir();
    const other = bystander();
    await expect.poll(() => stat(`/proc/${other}/stat`).then(() => true, () => false)).toBe(true);
    const bootId = (await readFile('/proc/sys/kernel/random/boot_id', 'utf8')).trim();
    await writeFile(join(dir, '.tmp-recorder.pid'), JSON.stringify({ pid: other, start_time: '1', boot_id: bootId, program: process.execPath }));
    await writeFile(join(dir, 'bag.mcap'), 'kept');
    expect(await (await writer()).recover(dir)).toEqual({ files: ['bag.mcap'], messageCount: null });
    expect(alive(other)).toBe(true);
    expect(await readdir(dir)).toEqual(['bag.mcap']);
  });

  it('reports a program that ends by itself, once, to a listener registered before or after', async () => {
    const dir = await episodeDir();
    const handle = await (await writer()).start(dir, info);
    await grown(dir);
    process.kill(await readPid(dir), 'SIGUSR1');
    const exit = await new Promise((resolve) => handle.onUnexpectedEnd!(resolve));
    expect(exit).toMatchObject({ code: 5, signal: null });
    expect((exit as { output_tail: string }).output_tail).toMatch(/lost the connection to \/joint_states\n$/);
    const late = await new Promise((resolve) => handle.onUnexpectedEnd!(resolve));
    expect(late).toEqual(exit);
    expect(Buffer.byteLength((exit as { output_tail: string }).output_tail)).toBeLessThanOrEqual(1024);
    // Its files are still there to finalize.
    expect((await handle.stop()).files).toEqual(['bag.mcap']);
  });

  it('does not report an end that stop() asked for', async () => {
    const dir = await episodeDir();
    const handle = await (await writer()).start(dir, info);
    const ends: unknown[] = [];
    handle.onUnexpectedEnd!((e) => ends.push(e));
    await grown(dir);
    await handle.stop();
    expect(ends).toEqual([]);
  });
});

describe('CommandRecorder under the RecordingStateMachine', () => {
  async function machine(rec: CommandRecorder): Promise<{ machine: RecordingStateMachine; store: SqliteAgentStore; dataDir: string; logs: LogCapture }> {
    const dataDir = await makeTempDir();
    const store = openAgentStore(dataDir, new ManualClock());
    const logs = captureLogs();
    const m = new RecordingStateMachine({
      store,
      recorder: rec,
      robotId: 'rbt_test',
      dataDir,
      clock: new ManualClock(),
      scheduler: systemScheduler,
      logger: logs.logger,
      finalizingDelayMs: 0,
      finalizeRetryMs: 1000,
      aliveIntervalMs: 60_000,
    });
    await m.init();
    cleanups.push(async () => {
      await m.close();
      await store.close();
    });
    return { machine: m, store, dataDir, logs };
  }

  it('a program that dies mid-recording ends the episode as a failure with metadata.recorder_exit', async () => {
    const t = await machine(await writer());
    await t.machine.setContext({ task_id: 'pick-cube' });
    const started = await t.machine.start({ source: 'test' });
    const dir = join(t.dataDir, 'episodes', started.episode_id);
    await grown(dir);
    process.kill(await readPid(dir), 'SIGUSR1');
    await expect.poll(async () => (await t.store.episodes.ids()).includes(started.episode_id)).toBe(true);
    expect(t.machine.state).toBe('idle');
    const facts = JSON.parse(await readFile(join(dir, 'episode.json'), 'utf8')) as EpisodeFacts;
    expect(facts.outcome).toBe('failure');
    expect(facts.task_id).toBe('pick-cube');
    const exit = facts.metadata.recorder_exit as { code: number | null; signal: string | null; output_tail: string };
    expect(Object.keys(exit).sort()).toEqual(['code', 'output_tail', 'signal']);
    expect(exit).toMatchObject({ code: 5, signal: null });
    expect(exit.output_tail).toMatch(/lost the connection to \/joint_states\n$/);
    expect(Buffer.byteLength(exit.output_tail)).toBeLessThanOrEqual(1024);
    expect(facts.bag_size_bytes).toBeGreaterThan(0);
    expect(t.logs.records.find((r) => r.msg === 'recording state changed' && r.event === 'fail')).toMatchObject({ source: 'recorder' });
  });

  it('a program killed mid-recording reports its signal', async () => {
    const t = await machine(await writer());
    const started = await t.machine.start({ source: 'test' });
    const dir = join(t.dataDir, 'episodes', started.episode_id);
    await grown(dir);
    process.kill(await readPid(dir), 'SIGKILL');
    await expect.poll(async () => (await t.store.episodes.ids()).includes(started.episode_id)).toBe(true);
    const facts = JSON.parse(await readFile(join(dir, 'episode.json'), 'utf8')) as EpisodeFacts;
    expect(facts).toMatchObject({ outcome: 'failure', metadata: { recorder_exit: { code: null, signal: 'SIGKILL', output_tail: '' } } });
  });

  it('a finished episode keeps its outcome and has no recorder_exit', async () => {
    const t = await machine(await writer());
    const started = await t.machine.start({ source: 'test' });
    const dir = join(t.dataDir, 'episodes', started.episode_id);
    await grown(dir);
    await t.machine.finish({ source: 'test' });
    await t.machine.whenSettled();
    const facts = JSON.parse(await readFile(join(dir, 'episode.json'), 'utf8')) as EpisodeFacts;
    expect(facts.outcome).toBe('success');
    expect(facts.metadata).toEqual({});
    expect(await readFile(join(dir, 'bag.mcap'), 'utf8')).toMatch(/END\n$/);
  });

  it('a program that exits at start refuses the verb as failed and leaves the robot as it was', async () => {
    const quitter = await script('quitter', `console.error('bad topic'); process.exit(2);`);
    const t = await machine(recorder({ command: [process.execPath, quitter], start_grace_ms: 30_000 }));
    await expect(t.machine.start({ source: 'test' })).rejects.toMatchObject({ code: 'failed', message: `${process.execPath} exited with code 2 at start: bad topic` });
    expect(t.machine.state).toBe('idle');
    expect(await t.store.recording.get()).toBeUndefined();
    expect(await readdir(join(t.dataDir, 'episodes')).catch(() => [])).toEqual([]);
  });
});

describe('RecordingStateMachine: a recording that ends by itself (onUnexpectedEnd)', () => {
  /** A recorder whose handles end when the test says so. */
  class EndingRecorder implements Recorder {
    readonly ends: ((exit: RecorderExit) => void)[] = [];
    async start(dir: string): Promise<RecordingHandle> {
      await writeFile(join(dir, 'data.bin'), 'data');
      return {
        stats: () => ({ messageCount: 1, bytes: 4 }),
        stop: async () => ({ files: ['data.bin'], messageCount: 1 }),
        abort: async () => undefined,
        onUnexpectedEnd: (listener) => this.ends.push(listener),
      };
    }
  }

  const exit: RecorderExit = { code: 1, signal: null, output_tail: 'boom\n' };

  async function facts(dataDir: string, episodeId: string): Promise<EpisodeFacts> {
    return JSON.parse(await readFile(join(dataDir, 'episodes', episodeId, 'episode.json'), 'utf8')) as EpisodeFacts;
  }

  async function open(rec: Recorder) {
    const dataDir = await makeTempDir();
    const store = openAgentStore(dataDir, new ManualClock());
    const logs = captureLogs();
    const m = new RecordingStateMachine({ store, recorder: rec, robotId: 'rbt_test', dataDir, clock: new ManualClock(), scheduler: systemScheduler, logger: logs.logger, finalizingDelayMs: 0, finalizeRetryMs: 1000, aliveIntervalMs: 60_000 });
    await m.init();
    cleanups.push(async () => {
      await m.close();
      await store.close();
    });
    return { machine: m, store, dataDir };
  }

  it('while recording: the episode fails with recorder_exit', async () => {
    const rec = new EndingRecorder();
    const t = await open(rec);
    const a = await t.machine.start({ source: 'test' });
    rec.ends[0]!(exit);
    await expect.poll(() => t.store.episodes.ids()).toContain(a.episode_id);
    expect(await facts(t.dataDir, a.episode_id)).toMatchObject({ outcome: 'failure', metadata: { recorder_exit: exit } });
  });

  it('too late (already finishing) or for an earlier episode: nothing changes', async () => {
    const rec = new EndingRecorder();
    const t = await open(rec);
    const a = await t.machine.start({ source: 'test' });
    await t.machine.finish({ source: 'test' });
    rec.ends[0]!(exit);
    await t.machine.whenSettled();
    expect(await facts(t.dataDir, a.episode_id)).toMatchObject({ outcome: 'success', metadata: {} });

    const b = await t.machine.start({ source: 'test' });
    rec.ends[0]!(exit);
    // The report went through the machine's queue: a verb after it sees its effect, if any.
    expect((await t.machine.discard({ source: 'test' })).outcome).toBe('discarded');
    await t.machine.whenSettled();
    expect(await facts(t.dataDir, b.episode_id)).toMatchObject({ outcome: 'discarded', metadata: {} });
  });
});
