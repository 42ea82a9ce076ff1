import { spawn, type ChildProcess } from 'node:child_process';
import { readFile, rm, writeFile } from 'node:fs/promises';
import { isAbsolute, join, resolve } from 'node:path';
import type { Logger } from 'pino';
import { z } from 'zod';
import { RefusalError } from '../errors.js';
import { executableProblem, resolveProgram } from '../programs.js';
import type { Scheduler, TimerHandle } from '../time.js';
import { RecorderOutput } from './command-output.js';
import { deleteDataFiles, listDataFiles } from './finalize.js';
import type { RecordedFiles, Recorder, RecorderExit, RecorderStats, RecordingHandle, RecordingInfo } from './recorder.js';

/** The placeholders a recorder command may hold, each replaced per episode. */
export const COMMAND_PLACEHOLDERS = ['dir', 'episode_id', 'robot_id', 'task_id'] as const;
export type CommandPlaceholder = (typeof COMMAND_PLACEHOLDERS)[number];

/**
 * `{name}` is a placeholder when `name` is an identifier. `${...}` is left alone: in `shell` it is
 * the shell's own expansion (`${ROS_DISTRO}`), and in an argv it is text for the program.
 */
const PLACEHOLDER = /(?<!\$)\{([A-Za-z_][A-Za-z0-9_]*)\}/g;

/** The shell a `shell` recorder runs in (`/bin/bash -c`, so it can `source` a ROS 2 setup file). */
export const RECORDER_SHELL = '/bin/bash';

function unknownPlaceholders(text: string): string[] {
  return [...text.matchAll(PLACEHOLDER)].map((m) => m[1]!).filter((name) => !(COMMAND_PLACEHOLDERS as readonly string[]).includes(name));
}

const placeholderIssue = (text: string): string | undefined => {
  const unknown = unknownPlaceholders(text);
  return unknown.length ? `unknown placeholder ${unknown.map((n) => `{${n}}`).join(', ')} (known: ${COMMAND_PLACEHOLDERS.map((n) => `{${n}}`).join(', ')})` : undefined;
};

/**
 * The `recorder` section of the agent's config file for `kind: command`: a program started for
 * each episode in the episode's directory, stopped with SIGINT (SIGKILL after `stop_timeout_ms`).
 */
export const CommandRecorderConfigSchema = z
  .strictObject({
    kind: z.literal('command'),
    /** The program and its arguments, run without a shell; argv[0] on PATH or an absolute path. */
    command: z
      .array(z.string().min(1))
      .min(1)
      .superRefine((argv, ctx) => {
        argv.forEach((arg, i) => {
          const issue = placeholderIssue(arg);
          if (issue) ctx.addIssue({ code: 'custom', message: issue, path: [i] });
        });
      })
      .optional(),
    /** A command line run by `/bin/bash -c` (to source a ROS 2 workspace first); placeholders are shell-quoted. */
    shell: z
      .string()
      .min(1)
      .superRefine((line, ctx) => {
        const issue = placeholderIssue(line);
        if (issue) ctx.addIssue({ code: 'custom', message: issue });
      })
      .optional(),
    /** Added to the agent's environment for the program (e.g. ROS_DOMAIN_ID). */
    env: z.record(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'an environment variable name'), z.string()).default({}),
    /** How long the program has to close its files after SIGINT before it is killed. */
    stop_timeout_ms: z.number().int().min(1).max(600_000).default(30_000),
    /** A program that exits within this long after it was started refuses the start. */
    start_grace_ms: z.number().int().min(0).max(60_000).default(1_000),
    /** Most bytes of the program's output (stdout and stderr, newlines included) logged per episode. */
    output_max_bytes: z.number().int().min(0).max(64 * 1024 * 1024).default(64 * 1024),
  })
  .superRefine((cfg, ctx) => {
    if ((cfg.command === undefined) === (cfg.shell === undefined)) {
      ctx.addIssue({ code: 'custom', message: 'give exactly one of `command` (an argv list) or `shell` (a command line)', path: cfg.command ? ['shell'] : ['command'] });
    }
  });

export type CommandRecorderConfig = z.output<typeof CommandRecorderConfigSchema>;
export type CommandRecorderConfigInput = z.input<typeof CommandRecorderConfigSchema>;

/** The environment a program starts from: names to values, unset names absent or undefined. */
export type ProgramEnv = Readonly<Record<string, string | undefined>>;

/** `value` as one word of a bash command line. */
export function shellQuote(value: string): string {
  return `'${value.replaceAll("'", `'\\''`)}'`;
}

function substitute(text: string, values: Record<CommandPlaceholder, string>, quote: (v: string) => string): string {
  return text.replace(PLACEHOLDER, (whole, name: string) => (name in values ? quote(values[name as CommandPlaceholder]) : whole));
}

/** The argv that runs `cfg` for one episode, placeholders replaced (for `shell`, quoted). */
export function commandArgv(cfg: CommandRecorderConfig, dir: string, info: RecordingInfo): string[] {
  const values: Record<CommandPlaceholder, string> = { dir, episode_id: info.episodeId, robot_id: info.robotId, task_id: info.taskId ?? '' };
  if (cfg.shell !== undefined) return [RECORDER_SHELL, '-c', substitute(cfg.shell, values, shellQuote)];
  return cfg.command!.map((arg) => substitute(arg, values, (v) => v));
}

/**
 * What keeps `cfg` from running, for `fleet-agent config check` before the agent connects: the
 * program (argv[0], or the shell) neither an executable file by absolute path nor found on the
 * PATH of `env` plus the config's own env. Empty when it can run.
 */
export function checkCommandRecorderConfig(cfg: CommandRecorderConfig, env: ProgramEnv): string[] {
  const program = cfg.shell !== undefined ? RECORDER_SHELL : cfg.command![0]!;
  if (program.includes('{')) return [];
  if (isAbsolute(program)) return executableProblem(program) === null ? [] : [`recorder program ${program} is not an executable file`];
  if (program.includes('/')) return [`recorder program ${program} is a relative path: give an absolute path or a name on PATH`];
  const path = cfg.env.PATH ?? env.PATH ?? '';
  const found = resolveProgram(program, path) !== undefined;
  return found ? [] : [`missing program: recorder program ${program} is not on PATH (${path || 'PATH is empty'})`];
}

export interface CommandRecorderDeps {
  /** Times the start grace, the stop timeout and recovery's waits. */
  scheduler: Scheduler;
  /** The program's output is logged here, one line per line. */
  logger: Logger;
  /** The environment the program starts from (the entry point hands in the agent's own); the config's env is added. */
  env?: ProgramEnv;
}

/**
 * The program's identity, kept in the episode directory so that the agent's next start can stop
 * a program that outlived a crashed agent. The `.tmp-` in its name keeps it out of the manifest.
 */
const PID_FILE = '.tmp-recorder.pid';

interface PidFile {
  pid: number;
  /** Field 22 of /proc/PID/stat: with the boot id, a reused pid is never taken for the program. */
  start_time: string;
  boot_id: string;
  program: string;
}

/** After its leader exits, how long the program's output pipes may stay open before they are let go. */
const OUTPUT_DRAIN_MS = 2_000;
/** How often recovery looks whether a program it signalled has gone. */
const POLL_MS = 50;

/**
 * The `command` recorder: one program per episode (`ros2 bag record --storage mcap …`), started
 * in the episode directory in a process group of its own, so that SIGINT reaches what it starts
 * too (a shell, `ros2` and its children). Exiting within `start_grace_ms` refuses the start;
 * exiting later, while recording, ends the episode as a failure (`onUnexpectedEnd`). `stop()`
 * sends SIGINT and keeps the files whatever the exit: rosbag2 closes its bag and exits 0 on
 * SIGINT, and a bag that closed with an error is still better kept than lost; the exit is logged.
 */
export class CommandRecorder implements Recorder {
  private readonly env: ProgramEnv;

  constructor(
    private readonly config: CommandRecorderConfig,
    private readonly deps: CommandRecorderDeps,
  ) {
    this.env = { ...deps.env, ...config.env };
  }

  async start(episodeDir: string, info: RecordingInfo): Promise<RecordingHandle> {
    // `{dir}` is absolute whatever the data directory was given as (the program runs inside it).
    const dir = resolve(episodeDir);
    const argv = commandArgv(this.config, dir, info);
    const program = this.config.shell !== undefined ? `${RECORDER_SHELL} -c` : argv[0]!;
    const output = new RecorderOutput({ logger: this.deps.logger, episodeId: info.episodeId, maxBytes: this.config.output_max_bytes });
    const child = spawn(argv[0]!, argv.slice(1), { cwd: dir, env: this.env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    output.attach(child.stdout, 'stdout');
    output.attach(child.stderr, 'stderr');
    try {
      await new Promise<void>((resolve, reject) => {
        child.once('spawn', resolve);
        child.once('error', reject);
      });
    } catch (err) {
      throw new RefusalError('failed', `${program} could not be started: ${(err as Error).message}`);
    }
    const recording = new CommandRecording(this.config, this.deps, child, dir, output, info.episodeId, program);
    try {
      await writePidFile(dir, child.pid!, program);
      this.deps.logger.info({ episode_id: info.episodeId, pid: child.pid, argv }, 'recorder program started');
      const exit = await recording.exitWithin(this.config.start_grace_ms);
      if (exit) throw new RefusalError('failed', `${program} ${describeExit(exit)} at start: ${lastLine(exit.output_tail) ?? '(no output)'}`);
    } catch (err) {
      // Nothing may be left behind: the state machine removes the directory, this the program.
      await recording.kill();
      throw err;
    }
    return recording;
  }

  /**
   * After an agent crash the program may still run (a child outlives its parent): stop it as
   * `stop()` would (SIGINT, then SIGKILL after the timeout), so its files are closed, then take
   * every file. Only the process the pid file names (same pid, start time and boot) is signalled.
   */
  async recover(dir: string): Promise<RecordedFiles> {
    const saved = await readPidFile(dir);
    if (saved && (await sameProcess(saved))) {
      this.deps.logger.warn({ pid: saved.pid, program: saved.program, dir }, 'stopping a recorder program left running by a previous agent');
      await signalProgram(saved, 'SIGINT');
      if (!(await this.waitGone(saved, this.config.stop_timeout_ms))) {
        this.deps.logger.warn({ pid: saved.pid, program: saved.program }, 'recorder program did not stop on SIGINT; killing it');
        await signalProgram(saved, 'SIGKILL');
        await this.waitGone(saved, this.config.stop_timeout_ms);
      }
    }
    await rm(join(dir, PID_FILE), { force: true });
    return { files: await listDataFiles(dir), messageCount: null };
  }

  /** Whether the process is gone within `ms` (looked at every 50 ms on the scheduler). */
  private async waitGone(saved: PidFile, ms: number): Promise<boolean> {
    for (let waited = 0; ; waited += POLL_MS) {
      if (!(await sameProcess(saved))) return true;
      if (waited >= ms) return false;
      await new Promise<void>((resolve) => this.deps.scheduler.setTimeout(resolve, POLL_MS));
    }
  }
}

class CommandRecording implements RecordingHandle {
  /** Resolves when the program has exited and its output is drained. */
  private readonly ended: Promise<RecorderExit>;
  /** stop(), abort() or a refused start is ending the program: its exit is expected. */
  private ending = false;
  /** start() is waiting out the grace period: an exit now refuses the start. */
  private starting = false;
  private endedOnItsOwn: RecorderExit | undefined;
  private listener: ((exit: RecorderExit) => void) | undefined;

  constructor(
    private readonly config: CommandRecorderConfig,
    private readonly deps: CommandRecorderDeps,
    private readonly child: ChildProcess,
    private readonly dir: string,
    private readonly output: RecorderOutput,
    private readonly episodeId: string,
    private readonly program: string,
  ) {
    this.ended = new Promise((resolve) => {
      child.once('exit', (code, signal) => {
        // What the program left running in its group goes with it (its pipes then close).
        killGroup(child.pid!, 'SIGKILL');
        let done = false;
        const finish = () => {
          if (done) return;
          done = true;
          this.deps.scheduler.clearTimeout(drained);
          this.output.end();
          resolve({ code, signal, output_tail: this.output.tail() });
        };
        // A process that left the group (setsid) may hold the pipes open: do not wait for it long.
        const drained = this.deps.scheduler.setTimeout(finish, OUTPUT_DRAIN_MS);
        this.output.whenDrained(finish);
      });
    });
    void this.ended.then((exit) => this.onEnd(exit));
    // Only a failed spawn emits 'error' here, and start() answers that; never an unhandled event.
    child.on('error', (err) => this.deps.logger.warn({ err, episode_id: episodeId }, 'recorder program error'));
  }

  /** An external program does not report its figures; the agent counts the bytes at finalize. */
  stats(): RecorderStats {
    return { messageCount: 0, bytes: 0 };
  }

  onUnexpectedEnd(listener: (exit: RecorderExit) => void): void {
    this.listener = listener;
    if (this.endedOnItsOwn) listener(this.endedOnItsOwn);
  }

  async stop(): Promise<RecordedFiles> {
    const exit = await this.end('SIGINT');
    if (exit.code !== 0) {
      this.deps.logger.warn({ episode_id: this.episodeId, code: exit.code, signal: exit.signal }, `recorder program ${describeExit(exit)} on stop; keeping its files`);
    }
    return { files: await listDataFiles(this.dir), messageCount: null };
  }

  async abort(): Promise<void> {
    await this.end('SIGKILL');
    await deleteDataFiles(this.dir);
  }

  /** The program's exit if it comes within `ms`, else undefined (it runs on). */
  async exitWithin(ms: number): Promise<RecorderExit | undefined> {
    if (ms <= 0) return undefined;
    let timer: TimerHandle | undefined;
    const timeout = new Promise<undefined>((resolve) => (timer = this.deps.scheduler.setTimeout(() => resolve(undefined), ms)));
    this.starting = true;
    const exit = await Promise.race([this.ended, timeout]);
    this.starting = false;
    this.deps.scheduler.clearTimeout(timer!);
    if (exit) this.ending = true;
    return exit;
  }

  /** Kills the program (a refused start): nothing of it is left. */
  async kill(): Promise<void> {
    await this.end('SIGKILL');
  }

  /** Signals the program's group, waits for its exit (SIGKILL after the timeout) and drops the pid file. */
  private async end(signal: NodeJS.Signals): Promise<RecorderExit> {
    this.ending = true;
    const running = this.child.exitCode === null && this.child.signalCode === null;
    if (running) killGroup(this.child.pid!, signal);
    const timer = running && signal !== 'SIGKILL' ? this.deps.scheduler.setTimeout(() => this.killAfterTimeout(), this.config.stop_timeout_ms) : undefined;
    const exit = await this.ended;
    if (timer !== undefined) this.deps.scheduler.clearTimeout(timer);
    await rm(join(this.dir, PID_FILE), { force: true });
    return exit;
  }

  private killAfterTimeout(): void {
    this.deps.logger.warn({ episode_id: this.episodeId, stop_timeout_ms: this.config.stop_timeout_ms }, `${this.program} did not exit after SIGINT; killing it`);
    killGroup(this.child.pid!, 'SIGKILL');
  }

  private onEnd(exit: RecorderExit): void {
    this.deps.logger.info({ episode_id: this.episodeId, code: exit.code, signal: exit.signal }, 'recorder program exited');
    if (this.ending || this.starting) return;
    this.endedOnItsOwn = exit;
    this.listener?.(exit);
  }
}

/** Signals every process of the group `pgid` leads; a group already gone is not an error. */
function killGroup(pgid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pgid, signal);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ESRCH') throw err;
  }
}

function describeExit(exit: Pick<RecorderExit, 'code' | 'signal'>): string {
  return exit.signal !== null ? `was killed by ${exit.signal}` : `exited with code ${exit.code}`;
}

function lastLine(text: string): string | undefined {
  return text
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '')
    .at(-1);
}

/** /proc/PID/stat's fields after the command name (which may hold spaces and parentheses). */
async function procStat(pid: number): Promise<string[] | undefined> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => undefined);
  if (stat === undefined) return undefined;
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
}

// Fields counted from 1 as proc(5) does; the slice above starts at field 3 (state).
const STATE = 3 - 3;
const PGRP = 5 - 3;
const START_TIME = 22 - 3;

async function bootId(): Promise<string> {
  return (await readFile('/proc/sys/kernel/random/boot_id', 'utf8').catch(() => '')).trim();
}

async function writePidFile(dir: string, pid: number, program: string): Promise<void> {
  const fields = await procStat(pid);
  const saved: PidFile = { pid, start_time: fields?.[START_TIME] ?? '', boot_id: await bootId(), program };
  await writeFile(join(dir, PID_FILE), `${JSON.stringify(saved)}\n`);
}

async function readPidFile(dir: string): Promise<PidFile | undefined> {
  try {
    const saved = JSON.parse(await readFile(join(dir, PID_FILE), 'utf8')) as Partial<PidFile>;
    if (!Number.isInteger(saved.pid) || saved.pid! <= 0 || !saved.start_time) return undefined;
    return { pid: saved.pid!, start_time: saved.start_time, boot_id: saved.boot_id ?? '', program: saved.program ?? '' };
  } catch {
    return undefined;
  }
}

/** Whether `saved` names a live process: the same pid, started at the same tick of the same boot. */
async function sameProcess(saved: PidFile): Promise<boolean> {
  const fields = await procStat(saved.pid);
  if (!fields || fields[STATE] === 'Z') return false;
  return fields[START_TIME] === saved.start_time && (await bootId()) === saved.boot_id;
}

/** Signals the program's group when it still leads one, else the process alone. */
async function signalProgram(saved: PidFile, signal: NodeJS.Signals): Promise<void> {
  const fields = await procStat(saved.pid);
  try {
    process.kill(fields?.[PGRP] === String(saved.pid) ? -saved.pid : saved.pid, signal);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ESRCH') throw err;
  }
}
