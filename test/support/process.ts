import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';

/** How a child process ended: an exit code, or the signal that ended it. */
export interface ProcessExit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface SpawnOptions {
  /** Shown in error messages, e.g. `fleet-cloud serve`. */
  name?: string;
  cwd?: string;
  /** Merged over process.env; `undefined` removes a variable. */
  env?: Record<string, string | undefined>;
  /** Leads a process group of its own (as a shell job does): `process.kill(-pid, …)` signals all of it, as Ctrl-C does. */
  detached?: boolean;
}

export interface WaitOptions {
  timeoutMs?: number;
  /** What is being waited for, for the error message. */
  description?: string;
}

/**
 * A child process whose stdout and stderr are collected line by line. Tests wait for lines
 * instead of sleeping, and the process is killed on dispose whatever the test did.
 */
export interface SpawnedProcess extends AsyncDisposable {
  readonly name: string;
  readonly child: ChildProcess;
  readonly pid: number;
  readonly stdoutLines: readonly string[];
  readonly stderrLines: readonly string[];
  /** Settles once the process has exited and its output is fully read. */
  readonly exited: Promise<ProcessExit>;
  /** The exit, once it happened; null while running. */
  readonly exit: ProcessExit | null;
  /** The first stdout line (already printed or still to come) that matches. */
  waitForStdout(match: (line: string) => boolean, opts?: WaitOptions): Promise<string>;
  /** The first stderr line (already printed or still to come) that matches. */
  waitForStderr(match: (line: string) => boolean, opts?: WaitOptions): Promise<string>;
  /** Sends `signal`, waits for the exit; SIGKILLs if it does not come within `graceMs`. */
  kill(signal?: NodeJS.Signals, graceMs?: number): Promise<ProcessExit>;
  /** The last lines of both streams, for error messages. */
  describe(): string;
}

const DEFAULT_WAIT_MS = 20_000;
const DEFAULT_GRACE_MS = 5_000;

// Last resort: a worker that exits (a crashed test file, a timeout) must not leave servers
// behind. Disposal is the normal path; this only catches what it missed.
const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});

interface LineWaiter {
  match: (line: string) => boolean;
  resolve: (line: string) => void;
}

class LineStream {
  readonly lines: string[] = [];
  private waiters = new Set<LineWaiter>();

  push(line: string): void {
    this.lines.push(line);
    for (const w of this.waiters) {
      if (w.match(line)) {
        this.waiters.delete(w);
        w.resolve(line);
      }
    }
  }

  find(match: (line: string) => boolean): string | undefined {
    return this.lines.find(match);
  }

  /** Registers a waiter; the returned function removes it and says whether it was still waiting. */
  add(w: LineWaiter): () => boolean {
    this.waiters.add(w);
    return () => this.waiters.delete(w);
  }
}

function tail(lines: readonly string[], n = 20): string {
  return lines.length === 0 ? '  (nothing)' : lines.slice(-n).map((l) => `  ${l}`).join('\n');
}

export function spawnProcess(command: string, args: readonly string[], opts: SpawnOptions = {}): SpawnedProcess {
  const name = opts.name ?? [command, ...args].join(' ');
  const child = spawn(command, args, {
    cwd: opts.cwd,
    env: { ...process.env, ...opts.env },
    stdio: ['ignore', 'pipe', 'pipe'],
    ...(opts.detached ? { detached: true } : {}),
  });
  if (child.pid === undefined) {
    // spawn reports ENOENT and the like as an 'error' event; swallow it and fail here instead.
    child.once('error', () => undefined);
    throw new Error(`could not spawn ${name}`);
  }
  live.add(child);
  const pid = child.pid;
  const out = new LineStream();
  const err = new LineStream();
  const outDone = new Promise<void>((resolve) => createInterface({ input: child.stdout }).on('line', (l) => out.push(l)).on('close', resolve));
  const errDone = new Promise<void>((resolve) => createInterface({ input: child.stderr }).on('line', (l) => err.push(l)).on('close', resolve));
  let exit: ProcessExit | null = null;
  const exitedRaw = new Promise<ProcessExit>((resolve) => {
    child.once('exit', (code, signal) => {
      live.delete(child);
      resolve({ code, signal });
    });
    child.once('error', () => {
      live.delete(child);
      resolve({ code: null, signal: null });
    });
  });
  const exited = exitedRaw.then(async (e) => {
    await Promise.all([outDone, errDone]);
    exit = e;
    return e;
  });

  const describe = () => `${name} (pid ${pid})\nstdout:\n${tail(out.lines)}\nstderr:\n${tail(err.lines)}`;

  const waitFor = (stream: LineStream, which: string, match: (line: string) => boolean, w: WaitOptions = {}): Promise<string> => {
    const seen = stream.find(match);
    if (seen !== undefined) return Promise.resolve(seen);
    const what = w.description ?? `a matching ${which} line`;
    const timeoutMs = w.timeoutMs ?? DEFAULT_WAIT_MS;
    return new Promise<string>((resolve, reject) => {
      const stop = stream.add({
        match,
        resolve: (line) => {
          clearTimeout(timer);
          resolve(line);
        },
      });
      const timer = setTimeout(() => {
        stop();
        reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what} from ${describe()}`));
      }, timeoutMs);
      exited.then(
        (e) => {
          // The output is fully read by now: a line printed just before exiting has been seen.
          if (stop()) {
            clearTimeout(timer);
            reject(new Error(`${name} exited (code ${e.code}, signal ${e.signal}) before printing ${what}\n${describe()}`));
          }
        },
        () => undefined,
      );
    });
  };

  const kill = async (signal: NodeJS.Signals = 'SIGTERM', graceMs = DEFAULT_GRACE_MS): Promise<ProcessExit> => {
    if (exit === null && child.exitCode === null && child.signalCode === null) {
      child.kill(signal);
      const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
      try {
        return await exited;
      } finally {
        clearTimeout(timer);
      }
    }
    return exited;
  };

  return {
    name,
    child,
    pid,
    stdoutLines: out.lines,
    stderrLines: err.lines,
    exited,
    get exit() {
      return exit;
    },
    waitForStdout: (match, w) => waitFor(out, 'stdout', match, w),
    waitForStderr: (match, w) => waitFor(err, 'stderr', match, w),
    kill,
    describe,
    async [Symbol.asyncDispose]() {
      await kill('SIGTERM');
    },
  };
}

export interface RunResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Runs a command to completion (a CLI call), killing it if it outlives `timeoutMs`. */
export async function runProcess(command: string, args: readonly string[], opts: SpawnOptions & { timeoutMs?: number } = {}): Promise<RunResult> {
  await using proc = spawnProcess(command, args, opts);
  const timeoutMs = opts.timeoutMs ?? 30_000;
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<'timeout'>((resolve) => {
    timer = setTimeout(() => resolve('timeout'), timeoutMs);
  });
  const result = await Promise.race([proc.exited, timedOut]);
  clearTimeout(timer);
  if (result === 'timeout') throw new Error(`${proc.name} did not finish within ${timeoutMs} ms\n${proc.describe()}`);
  const text = (lines: readonly string[]) => (lines.length ? `${lines.join('\n')}\n` : '');
  return { code: result.code, signal: result.signal, stdout: text(proc.stdoutLines), stderr: text(proc.stderrLines) };
}

/** Resolves with the exit, or rejects if the process is still running after `timeoutMs`. */
export async function exitWithin(proc: SpawnedProcess, timeoutMs: number): Promise<ProcessExit> {
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${proc.name} still running ${timeoutMs} ms later\n${proc.describe()}`)), timeoutMs);
  });
  try {
    return await Promise.race([proc.exited, timedOut]);
  } finally {
    clearTimeout(timer);
  }
}
