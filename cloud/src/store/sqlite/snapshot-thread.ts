import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { SnapshotJob, SnapshotReport, SnapshotWorkerData } from './snapshot-worker.js';

/**
 * How long `begin` blocks the event loop, at most, for the thread to fix its read view: its first
 * read, plus the thread's start when it was not warmed (`warm`). Only a thread that cannot run
 * at all comes near it.
 */
const VIEW_WAIT_MS = 15_000;

interface Running {
  resolve: (count: number) => void;
  reject: (err: Error) => void;
  onProgress: (count: number) => void;
}

export type SnapshotSpec = Omit<SnapshotJob, 'kind' | 'job' | 'started'>;

/**
 * The cloud's side of the snapshot thread (snapshot-worker.ts): started on first use (or by
 * `warm`), one per database file, kept only while a snapshot runs from keeping the process alive.
 */
export class SnapshotThread {
  private worker: Worker | null = null;
  private readonly running = new Map<number, Running>();
  private nextJob = 1;
  private closed = false;

  constructor(private readonly file: string) {}

  /** Starts the thread now, so the first snapshot does not wait for it. */
  warm(): void {
    if (!this.closed) this.ensure();
  }

  /**
   * Starts a snapshot's membership and returns once its read view is fixed (blocking the event
   * loop for that first read: the membership is the database's as of this call, whatever is
   * written after it returns). `done` resolves with the member count once every window is
   * written; `onProgress` hears the count after each window.
   */
  begin(spec: SnapshotSpec, onProgress: (count: number) => void): { done: Promise<number> } {
    if (this.closed) throw new Error('the store is closed');
    const worker = this.ensure();
    const job = this.nextJob++;
    const started = new SharedArrayBuffer(4);
    const done = new Promise<number>((resolve, reject) => this.running.set(job, { resolve, reject, onProgress }));
    if (this.running.size === 1) worker.ref();
    worker.postMessage({ kind: 'job', job, started, ...spec } satisfies SnapshotJob);
    if (Atomics.wait(new Int32Array(started), 0, 0, VIEW_WAIT_MS) === 'timed-out') {
      worker.postMessage({ kind: 'cancel', job });
      this.settle(job)?.reject(new Error(`the snapshot thread did not start reading within ${VIEW_WAIT_MS} ms`));
    }
    // A view that failed (VIEW_FAILED): `done` rejects with the thread's reason when it arrives.
    return { done };
  }

  async close(): Promise<void> {
    this.closed = true;
    const worker = this.worker;
    this.worker = null;
    this.failAll(new Error('the store was closed during the snapshot'));
    if (worker) await worker.terminate();
  }

  private ensure(): Worker {
    if (this.worker) return this.worker;
    const worker = startWorker({ fleetSnapshotThread: true, file: this.file });
    worker.unref();
    worker.on('message', (r: SnapshotReport) => {
      if (r.kind === 'progress') return this.running.get(r.job)?.onProgress(r.count);
      const job = this.settle(r.job);
      if (r.kind === 'done') job?.resolve(r.count);
      else job?.reject(new Error(r.message));
    });
    const gone = (err: Error) => {
      if (this.worker !== worker) return;
      this.worker = null;
      this.failAll(err);
    };
    worker.on('error', gone);
    worker.on('exit', (code) => gone(new Error(`the snapshot thread exited (${code})`)));
    this.worker = worker;
    return worker;
  }

  private settle(job: number): Running | undefined {
    const r = this.running.get(job);
    this.running.delete(job);
    if (this.running.size === 0) this.worker?.unref();
    return r;
  }

  private failAll(err: Error): void {
    const all = [...this.running.values()];
    this.running.clear();
    for (const r of all) r.reject(err);
  }
}

/**
 * The built thread (dist/…/snapshot-worker.js); from the TypeScript sources (tests), the same
 * module through tsx, which the worker registers for itself before loading it.
 */
function startWorker(data: SnapshotWorkerData): Worker {
  const js = new URL('./snapshot-worker.js', import.meta.url);
  if (existsSync(fileURLToPath(js))) return new Worker(js, { workerData: data });
  const ts = new URL('./snapshot-worker.ts', import.meta.url).href;
  const source = `import('tsx/esm/api').then((tsx) => { tsx.register(); return import(${JSON.stringify(ts)}); });`;
  return new Worker(source, { eval: true, workerData: data });
}
