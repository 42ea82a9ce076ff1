import { parentPort, workerData } from 'node:worker_threads';
import Database from 'better-sqlite3';
import type { EpisodeFilter } from '../shared/types.js';
import { buildListQuery, ListPlanner } from './list-plan.js';

/**
 * The store's background thread (started by BackgroundThread): it checkpoints the WAL (see
 * checkpointer) and reads dataset snapshots' memberships (see SqliteDatasets.snapshot). It has its own read-only connection per snapshot, inside one read
 * transaction, so every window of the membership sees the database as of the same instant (WAL
 * snapshot isolation); it plans and runs each window's query and hands the window's seqs to the
 * cloud, which writes them on its own connection in short transactions. The reading and planning
 * (about half of a snapshot's work) never run on the cloud's event loop, and the write lock stays
 * with the cloud's one writer: a second writing connection would make ingest wait in SQLite's
 * busy handler, whose growing sleeps (1, 2, 5, 10, 15… ms) turn a few milliseconds of lock into
 * tens.
 */

export interface BackgroundWorkerData {
  /** Marks the thread as ours: a module loaded in some other worker (a test runner's) does nothing. */
  fleetBackgroundThread: true;
  file: string;
  /** Checkpoint the WAL this often (PASSIVE), so the cloud's connection does not have to; null: never. */
  checkpointEveryMs: number | null;
}

export interface SnapshotJob {
  kind: 'job';
  job: number;
  orgId: string;
  filter: EpisodeFilter;
  /** Seqs read per window: starts at `initial`, adapts to `targetMs` of reading within [min, max]. */
  window: { initial: number; min: number; max: number };
  targetMs: number;
  /**
   * One Int32: 0 until the read transaction's view is fixed, then VIEW_FIXED (or VIEW_FAILED).
   * The caller blocks on it (Atomics.wait), so the membership is the database's as of the call.
   */
  started: SharedArrayBuffer;
}

export type SnapshotControl = SnapshotJob | { kind: 'written'; job: number } | { kind: 'cancel'; job: number } | { kind: 'checkpoint'; job: number };

export type SnapshotReport =
  | { kind: 'window'; job: number; seqs: Float64Array }
  | { kind: 'done'; job: number }
  | { kind: 'checkpointed'; job: number }
  | { kind: 'failed'; job: number; message: string };

export const VIEW_FIXED = 1;
export const VIEW_FAILED = 2;
/** Windows handed over and not yet written: reading stays at most this far ahead of the writes. */
export const WINDOWS_AHEAD = 2;

const yieldToLoop = () => new Promise<void>((resolve) => setImmediate(resolve));

function signal(started: SharedArrayBuffer, state: number): void {
  const view = new Int32Array(started);
  if (Atomics.compareExchange(view, 0, 0, state) === 0) Atomics.notify(view, 0);
}

interface Running {
  cancelled: boolean;
  /** Windows handed over whose 'written' has not come back. */
  ahead: number;
  /** Called when a 'written' or a cancel comes. */
  wake: (() => void) | null;
}

/**
 * Copies the WAL's committed pages into the database file, on a connection of this thread's.
 * SQLite otherwise checkpoints in the connection whose commit takes the WAL past
 * `wal_autocheckpoint` pages, synchronously: the cloud's, blocking its event loop for tens of
 * milliseconds (45 ms measured behind a snapshot's member writes). PASSIVE never waits for a
 * reader or a writer and never holds the write lock.
 */
function checkpointer(file: string): () => void {
  let db: Database.Database | null = null;
  return () => {
    try {
      db ??= new Database(file, { fileMustExist: true });
      db.pragma('wal_checkpoint(PASSIVE)');
    } catch {
      // The next one tries again; the cloud's own fallback checkpoint bounds the WAL meanwhile.
      db?.close();
      db = null;
    }
  };
}

function serve(port: NonNullable<typeof parentPort>, file: string, checkpoint: () => void): void {
  const running = new Map<number, Running>();
  const post = (r: SnapshotReport, transfer: ArrayBuffer[] = []) => port.postMessage(r, transfer);

  async function run(job: SnapshotJob): Promise<void> {
    const state: Running = { cancelled: false, ahead: 0, wake: null };
    running.set(job.job, state);
    let reader: Database.Database | null = null;
    try {
      reader = new Database(file, { readonly: true, fileMustExist: true });
      reader.pragma('busy_timeout = 5000');
      reader.exec('BEGIN');
      // The read transaction's view is fixed by its first read: this one.
      const top = reader.prepare<[string], { m: number | null }>('SELECT max(seq) AS m FROM episodes WHERE org_id = ?').get(job.orgId)?.m ?? 0;
      signal(job.started, VIEW_FIXED);
      const statements = new Map<string, Database.Statement<unknown[]>>();
      const planner = new ListPlanner(reader);
      const { initial, min, max } = job.window;
      let window = initial;
      for (let after = 0; after < top; ) {
        while (state.ahead >= WINDOWS_AHEAD && !state.cancelled) await new Promise<void>((resolve) => (state.wake = resolve));
        if (state.cancelled) throw new Error('the snapshot was cancelled');
        const t0 = performance.now();
        const upTo = Math.min(top, after + window);
        const driver = planner.plan(job.orgId, job.filter, after, upTo);
        if (driver !== 'empty') {
          const { sql, params } = buildListQuery(job.orgId, job.filter, after, -1, 'e.seq', upTo, driver);
          let stmt = statements.get(sql);
          if (!stmt) statements.set(sql, (stmt = reader.prepare<unknown[]>(sql).pluck()));
          const seqs = Float64Array.from(stmt.all(...params) as number[]);
          if (seqs.length > 0) {
            state.ahead++;
            post({ kind: 'window', job: job.job, seqs }, [seqs.buffer]);
          }
        }
        after = upTo;
        const ms = performance.now() - t0;
        if (ms < job.targetMs / 2) window = Math.min(max, window * 2);
        else if (ms > job.targetMs) window = Math.max(min, Math.floor(window / 2));
        // Control messages ('written', a cancel, another snapshot's start) are read between windows.
        await yieldToLoop();
      }
      reader.exec('COMMIT');
      post({ kind: 'done', job: job.job });
    } catch (err) {
      signal(job.started, VIEW_FAILED);
      post({ kind: 'failed', job: job.job, message: err instanceof Error ? err.message : String(err) });
    } finally {
      reader?.close();
      running.delete(job.job);
    }
  }

  port.on('message', (m: SnapshotControl) => {
    if (m.kind === 'job') return void run(m);
    if (m.kind === 'checkpoint') {
      checkpoint();
      return post({ kind: 'checkpointed', job: m.job });
    }
    const state = running.get(m.job);
    if (!state) return;
    if (m.kind === 'written') state.ahead--;
    else state.cancelled = true;
    state.wake?.();
    state.wake = null;
  });
}

const data = workerData as Partial<BackgroundWorkerData> | null;
if (parentPort && data?.fleetBackgroundThread === true && typeof data.file === 'string') {
  const checkpoint = checkpointer(data.file);
  serve(parentPort, data.file, checkpoint);
  if (typeof data.checkpointEveryMs === 'number') setInterval(checkpoint, data.checkpointEveryMs).unref();
}
