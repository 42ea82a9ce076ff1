import { spawn, type ChildProcess } from 'node:child_process';
import { readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Scheduler } from '../../time.js';
import { deleteDataFiles, listDataFiles } from '../finalize.js';
import type { RecordedFiles, Recorder, RecorderStats, RecordingHandle, RecordingInfo } from '../recorder.js';

/**
 * An example of plugging a real recorder into the agent (docs/recording.md): each episode runs
 * an external program that writes its files into the episode directory, for instance
 *
 *     new ProcessRecorder({
 *       command: 'ros2',
 *       args: (dir) => ['bag', 'record', '--storage', 'mcap', '--output', join(dir, 'bag'), '/joint_states', '/camera/image_raw'],
 *       scheduler: systemScheduler,
 *     })
 *
 * `ros2 bag record` and `mcap record`-style tools close their files cleanly on SIGINT, which is
 * what `stop()` sends. The agent then checksums whatever the program left in the directory.
 */
export interface ProcessRecorderOptions {
  /** The program to run, looked up on PATH. */
  command: string;
  /** Its arguments for one episode; `dir` is the (empty) episode directory, also its working directory. */
  args: (dir: string, info: RecordingInfo) => string[];
  scheduler: Scheduler;
  /** How long `stop()` waits for the program to close its files after SIGINT before SIGKILL. Default 30 s. */
  stopTimeoutMs?: number;
}

/**
 * The program's pid, kept in the episode directory so that the agent's next start can stop a
 * program that outlived a crashed agent. The `.tmp-` in its name keeps it out of the manifest.
 */
const PID_FILE = '.tmp-recorder.pid';

export class ProcessRecorder implements Recorder {
  constructor(private readonly opts: ProcessRecorderOptions) {}

  async start(dir: string, info: RecordingInfo): Promise<RecordingHandle> {
    const child = spawn(this.opts.command, this.opts.args(dir, info), { cwd: dir, stdio: ['ignore', 'inherit', 'inherit'] });
    await new Promise<void>((resolve, reject) => {
      child.once('spawn', resolve);
      child.once('error', reject);
    });
    await writeFile(join(dir, PID_FILE), `${child.pid}\n${this.opts.command}\n`);
    return new ProcessRecording(this.opts, child, dir);
  }

  /**
   * After an agent crash the program may still be running (a child is not killed with its
   * parent): stop it the way `stop()` would, so its files are closed, then take every file.
   */
  async recover(dir: string): Promise<RecordedFiles> {
    const [pidLine, command] = (await readFile(join(dir, PID_FILE), 'utf8').catch(() => '')).split('\n');
    const pid = Number(pidLine);
    if (Number.isInteger(pid) && pid > 0 && (await runs(pid, command ?? ''))) {
      process.kill(pid, 'SIGINT');
      await waitUntil(this.opts.scheduler, async () => !(await runs(pid, command ?? '')), this.opts.stopTimeoutMs ?? 30_000);
      if (await runs(pid, command ?? '')) process.kill(pid, 'SIGKILL');
    }
    await rm(join(dir, PID_FILE), { force: true });
    return { files: await listDataFiles(dir), messageCount: null };
  }
}

class ProcessRecording implements RecordingHandle {
  private readonly exited: Promise<void>;

  constructor(
    private readonly opts: ProcessRecorderOptions,
    private readonly child: ChildProcess,
    private readonly dir: string,
  ) {
    this.exited = new Promise((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) resolve();
      else child.once('exit', () => resolve());
    });
  }

  /** An external program does not report its figures; the agent counts the bytes at finalize. */
  stats(): RecorderStats {
    return { messageCount: 0, bytes: 0 };
  }

  async stop(): Promise<RecordedFiles> {
    await this.end('SIGINT');
    if (this.child.exitCode !== 0 && this.child.signalCode !== 'SIGINT') {
      // Still keep what it wrote: the agent finalizes the files as they are.
      throw new Error(`${this.opts.command} exited with ${this.child.exitCode ?? this.child.signalCode}`);
    }
    return { files: await listDataFiles(this.dir), messageCount: null };
  }

  async abort(): Promise<void> {
    await this.end('SIGKILL');
    await deleteDataFiles(this.dir);
  }

  /** Signals the program, waits for its exit (SIGKILL after the timeout) and drops the pid file. */
  private async end(signal: NodeJS.Signals): Promise<void> {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill(signal);
    const timer = this.opts.scheduler.setTimeout(() => this.child.kill('SIGKILL'), this.opts.stopTimeoutMs ?? 30_000);
    await this.exited;
    this.opts.scheduler.clearTimeout(timer);
    await rm(join(this.dir, PID_FILE), { force: true });
  }
}

/**
 * Whether `pid` runs `command` (Linux: its /proc entry), so a reused pid is never signalled. A
 * script started through its `#!` line (`ros2` is Python) has the interpreter first and the
 * script second.
 */
async function runs(pid: number, command: string): Promise<boolean> {
  const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => undefined);
  if (cmdline === undefined || cmdline === '') return false;
  return cmdline
    .split('\0')
    .slice(0, 2)
    .some((arg) => arg === command || arg.endsWith(`/${command}`));
}

/** Checks `done` every 100 ms on the scheduler until it holds or `timeoutMs` passed. */
async function waitUntil(scheduler: Scheduler, done: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  for (let waited = 0; waited < timeoutMs; waited += 100) {
    if (await done()) return;
    await new Promise<void>((resolve) => scheduler.setTimeout(resolve, 100));
  }
}
