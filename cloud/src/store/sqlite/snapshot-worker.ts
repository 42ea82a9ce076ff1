import { parentPort, workerData } from 'node:worker_threads';
import Database from 'better-sqlite3';
import type { EpisodeFilter } from '../shared/types.js';
import { buildListQuery, ListPlanner } from './list-plan.js';

/**
 * The thread that writes dataset snapshots' memberships (started by SnapshotThread, see
 * SqliteDatasets.snapshot). It has its own connections to the database file: a read-only one per
 * snapshot, inside one read transaction, so every window of the membership sees the database as
 * of the same instant (WAL snapshot isolation), and one writer that adds each window's members in
 * a short transaction of its own. Neither the reads nor the writes run on the cloud's event loop:
 * a report being ingested waits only for SQLite's write lock (one window's insert), never behind
 * the snapshot's reads, planning or JSON.
 */

export interface SnapshotWorkerData {
  /** Marks the thread as ours: a module loaded in some other worker (a test runner's) does nothing. */
  fleetSnapshotThread: true;
  file: string;
}

export interface SnapshotJob {
  kind: 'job';
  job: number;
  orgId: string;
  datasetId: string;
  /** The claim this snapshot holds; each window is written only while the dataset still carries it. */
  token: string;
  filter: EpisodeFilter;
  /** Seqs read per window: starts at `initial`, adapts to `targetMs` per window within [min, max]. */
  window: { initial: number; min: number; max: number };
  targetMs: number;
  /**
   * One Int32: 0 until the read transaction's view is fixed, then VIEW_FIXED (or VIEW_FAILED).
   * The caller blocks on it (Atomics.wait), so the membership is the database's as of the call.
   */
  started: SharedArrayBuffer;
}

export type SnapshotControl = SnapshotJob | { kind: 'cancel'; job: number };

export type SnapshotReport =
  | { kind: 'progress'; job: number; count: number }
  | { kind: 'done'; job: number; count: number }
  | { kind: 'failed'; job: number; message: string };

export const VIEW_FIXED = 1;
export const VIEW_FAILED = 2;

const yieldToLoop = () => new Promise<void>((resolve) => setImmediate(resolve));

function signal(started: SharedArrayBuffer, state: number): void {
  const view = new Int32Array(started);
  if (Atomics.compareExchange(view, 0, 0, state) === 0) Atomics.notify(view, 0);
}

function open(file: string, readonly: boolean): Database.Database {
  const db = new Database(file, { readonly, fileMustExist: true });
  db.pragma('busy_timeout = 5000');
  if (!readonly) {
    db.pragma('synchronous = NORMAL');
    db.pragma('foreign_keys = ON');
  }
  return db;
}

function serve(port: NonNullable<typeof parentPort>, file: string): void {
  const writer = open(file, false);
  const claimHeld = writer.prepare<[string, string]>('SELECT 1 FROM datasets WHERE id = ? AND snapshot_claim = ? AND snapshot_at IS NULL').pluck();
  const addMembers = writer.prepare('INSERT INTO dataset_members (dataset_id, position, episode_seq) SELECT ?, ? + key + 1, value FROM json_each(?)');
  const writeWindow = writer.transaction((datasetId: string, token: string, after: number, seqs: number[]): boolean => {
    if (claimHeld.get(datasetId, token) === undefined) return false;
    addMembers.run(datasetId, after, JSON.stringify(seqs));
    return true;
  });
  const cancelled = new Set<number>();
  const post = (r: SnapshotReport) => port.postMessage(r);

  async function run(job: SnapshotJob): Promise<void> {
    let reader: Database.Database | null = null;
    try {
      reader = open(file, true);
      reader.exec('BEGIN');
      // The read transaction's view is fixed by its first read: this one.
      const top = reader.prepare<[string], { m: number | null }>('SELECT max(seq) AS m FROM episodes WHERE org_id = ?').get(job.orgId)?.m ?? 0;
      signal(job.started, VIEW_FIXED);
      const statements = new Map<string, Database.Statement<unknown[]>>();
      const planner = new ListPlanner(reader);
      const { initial, min, max } = job.window;
      let window = initial;
      let count = 0;
      for (let after = 0; after < top; ) {
        if (cancelled.has(job.job)) throw new Error('the snapshot was cancelled');
        const t0 = performance.now();
        const upTo = Math.min(top, after + window);
        const driver = planner.plan(job.orgId, job.filter, after, upTo);
        if (driver !== 'empty') {
          const { sql, params } = buildListQuery(job.orgId, job.filter, after, -1, 'e.seq', upTo, driver);
          let stmt = statements.get(sql);
          if (!stmt) statements.set(sql, (stmt = reader.prepare<unknown[]>(sql).pluck()));
          const seqs = stmt.all(...params) as number[];
          if (seqs.length > 0) {
            if (!writeWindow.immediate(job.datasetId, job.token, count, seqs)) throw new Error(`dataset ${job.datasetId}: the snapshot claim was lost`);
            count += seqs.length;
            post({ kind: 'progress', job: job.job, count });
          }
        }
        after = upTo;
        const ms = performance.now() - t0;
        if (ms < job.targetMs / 2) window = Math.min(max, window * 2);
        else if (ms > job.targetMs) window = Math.max(min, Math.floor(window / 2));
        // Control messages (a cancel, another snapshot's start) are read between windows.
        await yieldToLoop();
      }
      reader.exec('COMMIT');
      post({ kind: 'done', job: job.job, count });
    } catch (err) {
      signal(job.started, VIEW_FAILED);
      post({ kind: 'failed', job: job.job, message: err instanceof Error ? err.message : String(err) });
    } finally {
      reader?.close();
      cancelled.delete(job.job);
    }
  }

  port.on('message', (m: SnapshotControl) => {
    if (m.kind === 'cancel') cancelled.add(m.job);
    else void run(m);
  });
}

const data = workerData as Partial<SnapshotWorkerData> | null;
if (parentPort && data?.fleetSnapshotThread === true && typeof data.file === 'string') {
  const port = parentPort;
  try {
    serve(port, data.file);
  } catch (err) {
    // Every job is answered, so no caller stays blocked waiting for a view that never comes.
    const message = `the snapshot thread could not open the database: ${err instanceof Error ? err.message : String(err)}`;
    port.on('message', (m: SnapshotControl) => {
      if (m.kind !== 'job') return;
      signal(m.started, VIEW_FAILED);
      port.postMessage({ kind: 'failed', job: m.job, message } satisfies SnapshotReport);
    });
  }
}
