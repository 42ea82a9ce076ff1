import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { BackgroundWorkerData, SnapshotControl, SnapshotJob, SnapshotReport } from './background-worker.js';

/**
 * How long `begin` blocks the event loop, at most, for the thread to fix its read view: its first
 * read, plus the thread's start when it was not warmed (`warm`). Only a thread that cannot run
 * at all comes near it.
 */
const VIEW_WAIT_MS = 15_000;

interface Running {
  resolve: () => void;
  reject: (err: Error) => void;
  write: (seqs: Float64Array) => Promise<void>;
  /** The windows' writes, one after the other in the order the thread read them. */
  writes: Promise<void>;
  failed: boolean;
}

export type SnapshotSpec = Omit<SnapshotJob, 'kind' | 'job' | 'started'>;

/**
 * The cloud's side of the store's background thread (background-worker.ts), one per database
 * file: started by `warm` (a serving store) or by the first snapshot. It keeps the process alive
 * only while a snapshot or a checkpoint asked for is under way.
 */
export class BackgroundThread {
  private worker: Worker | null = null;
  private readonly running = new Map<number, Running>();
  /** Checkpoints asked for and not done yet (a thread that goes away resolves them: best effort). */
  private readonly checkpoints = new Map<number, () => void>();
  private nextJob = 1;
  private closed = false;

  /** Checkpoint the WAL from the thread this often (set by `warm`); null: leave it to SQLite. */
  private checkpointEveryMs: number | null = null;
  /** Told when a thread that checkpoints stops unasked (the connection takes checkpoints back). */
  private onCheckpointsStopped: (() => void) | null = null;

  constructor(private readonly file: string) {}

  /**
   * Starts the thread now, so the first snapshot does not wait for it; with `checkpointEveryMs`
   * it also checkpoints the WAL that often (a thread started by a snapshot alone does not).
   */
  warm(opts: { checkpointEveryMs?: number; onCheckpointsStopped?: () => void } = {}): void {
    if (this.closed) return;
    if (opts.checkpointEveryMs !== undefined && this.checkpointEveryMs === null) {
      this.checkpointEveryMs = opts.checkpointEveryMs;
      this.onCheckpointsStopped = opts.onCheckpointsStopped ?? null;
      // A thread already running without checkpoints is replaced once it is idle.
      if (this.worker && this.running.size === 0) void this.stopWorker();
    }
    this.ensure();
  }

  private async stopWorker(): Promise<void> {
    const worker = this.worker;
    this.worker = null;
    await worker?.terminate();
  }

  /**
   * Starts reading a snapshot's membership and returns once its read view is fixed (blocking the
   * event loop for that first read: the membership is the database's as of this call, whatever is
   * written after it returns). `write` gets each window's seqs in order, one window at a time;
   * `done` resolves once every window is written, and rejects with the first failure (a window's
   * write, the thread's read), after which no window is written.
   */
  begin(spec: SnapshotSpec, write: (seqs: Float64Array) => Promise<void>): { done: Promise<void> } {
    if (this.closed) throw new Error('the store is closed');
    const worker = this.ensure();
    const job = this.nextJob++;
    const started = new SharedArrayBuffer(4);
    const done = new Promise<void>((resolve, reject) => this.running.set(job, { resolve, reject, write, writes: Promise.resolve(), failed: false }));
    if (this.running.size === 1) worker.ref();
    worker.postMessage({ kind: 'job', job, started, ...spec } satisfies SnapshotJob);
    if (Atomics.wait(new Int32Array(started), 0, 0, VIEW_WAIT_MS) === 'timed-out') {
      this.fail(job, new Error(`the background thread did not start reading within ${VIEW_WAIT_MS} ms`));
    }
    // A view that failed (VIEW_FAILED): `done` rejects with the thread's reason when it arrives.
    return { done };
  }

  /**
   * Checkpoints the WAL in the thread now (PASSIVE) and resolves when done: after a snapshot,
   * whose member pages the WAL holds (no checkpoint gets past its read transaction), so they are
   * copied before anyone reads them, and not by the cloud's connection on the event loop.
   */
  checkpoint(): Promise<void> {
    if (this.closed) return Promise.resolve();
    const worker = this.ensure();
    const job = this.nextJob++;
    return new Promise<void>((resolve) => {
      this.checkpoints.set(job, resolve);
      if (this.running.size === 0 && this.checkpoints.size === 1) worker.ref();
      worker.postMessage({ kind: 'checkpoint', job } satisfies SnapshotControl);
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const resolve of this.checkpoints.values()) resolve();
    this.checkpoints.clear();
    for (const job of [...this.running.keys()]) this.fail(job, new Error('the store was closed during the snapshot'));
    await this.stopWorker();
  }

  private ensure(): Worker {
    if (this.worker) return this.worker;
    const worker = startWorker({ fleetBackgroundThread: true, file: this.file, checkpointEveryMs: this.checkpointEveryMs });
    worker.unref();
    worker.on('message', (r: SnapshotReport) => this.onReport(worker, r));
    const gone = (err: Error) => {
      if (this.worker !== worker) return;
      this.worker = null;
      for (const job of [...this.running.keys()]) this.fail(job, err);
      for (const resolve of this.checkpoints.values()) resolve();
      this.checkpoints.clear();
      if (this.checkpointEveryMs !== null) {
        // The next thread (started by the next snapshot) checkpoints too; until then, nobody would.
        this.onCheckpointsStopped?.();
        this.onCheckpointsStopped = null;
      }
    };
    worker.on('error', gone);
    worker.on('exit', (code) => gone(new Error(`the background thread exited (${code})`)));
    this.worker = worker;
    return worker;
  }

  private onReport(worker: Worker, r: SnapshotReport): void {
    if (r.kind === 'checkpointed') {
      this.checkpoints.get(r.job)?.();
      this.checkpoints.delete(r.job);
      if (this.running.size === 0 && this.checkpoints.size === 0) worker.unref();
      return;
    }
    const run = this.running.get(r.job);
    if (!run || run.failed) return;
    if (r.kind === 'failed') return this.fail(r.job, new Error(r.message));
    if (r.kind === 'window') {
      run.writes = run.writes.then(async () => {
        if (run.failed) return;
        await run.write(r.seqs);
        worker.postMessage({ kind: 'written', job: r.job } satisfies SnapshotControl);
      });
    } else {
      run.writes = run.writes.then(() => {
        if (run.failed) return;
        this.settle(r.job);
        run.resolve();
      });
    }
    run.writes.catch((err: unknown) => this.fail(r.job, err instanceof Error ? err : new Error(String(err))));
  }

  /** Ends a job with `err`: the thread stops reading it, no window of it is written any more. */
  private fail(job: number, err: Error): void {
    const run = this.running.get(job);
    if (!run || run.failed) return;
    run.failed = true;
    this.worker?.postMessage({ kind: 'cancel', job } satisfies SnapshotControl);
    this.settle(job);
    run.reject(err);
  }

  private settle(job: number): void {
    this.running.delete(job);
    if (this.running.size === 0 && this.checkpoints.size === 0) this.worker?.unref();
  }
}

/**
 * The built thread (dist/…/background-worker.js); from the TypeScript sources (tests), the same
 * module through tsx, which the worker registers for itself before loading it.
 */
function startWorker(data: BackgroundWorkerData): Worker {
  const js = new URL('./background-worker.js', import.meta.url);
  if (existsSync(fileURLToPath(js))) return new Worker(js, { workerData: data });
  const ts = new URL('./background-worker.ts', import.meta.url).href;
  const source = `import('tsx/esm/api').then((tsx) => { tsx.register(); return import(${JSON.stringify(ts)}); });`;
  return new Worker(source, { eval: true, workerData: data });
}
