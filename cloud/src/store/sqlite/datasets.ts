import { randomUUID } from 'node:crypto';
import type { Clock, Scheduler } from '@fleet/protocol';
import { datasetFromDb, type DatasetDbRow } from '../shared/rows.js';
import type { Db } from './db.js';
import type { EpisodeDbRow, SqliteEpisodes } from './episodes.js';
import { buildListQuery } from './list-plan.js';
import type { BackgroundThread } from './background-thread.js';
import { EPISODE_LINE_SELECT, type EpisodeLineRow } from '../shared/episode-lines.js';
import type { DatasetRow, DatasetStore, EpisodeFilter, EpisodeLineBatch, EpisodeRow } from '../shared/types.js';

/** How long a snapshot in progress keeps its claim without writing a chunk (a dead process's claim expires). */
const SNAPSHOT_LEASE_MS = 30_000;
/** Target duration of one window's read in the background thread (off the event loop). */
const READ_TARGET_MS = 10;
/**
 * Target duration of one transaction writing members, on the event loop: the longest a report
 * being ingested waits behind a snapshot (a report's way takes a few turns of the loop).
 */
const WRITE_TARGET_MS = 3;
const MEMBERS_PER_WRITE = { initial: 1_000, min: 100, max: 20_000 };
const WAIT_POLL_MS = 20;

const yieldToLoop = () => new Promise<void>((resolve) => setImmediate(resolve));

interface DatasetClaimDbRow extends DatasetDbRow {
  snapshot_claim?: string | null;
  snapshot_lease_until?: number | null;
}


export class SqliteDatasets implements DatasetStore {
  private readonly insert;
  private readonly byId;
  private readonly page;
  private readonly pin;
  private readonly memberRows;
  private readonly memberLines;
  /** Seqs read per chunk of a snapshot: starts at `initial`, adapts to CHUNK_TARGET_MS within [min, max]. */
  snapshotWindow = { initial: 5_000, min: 500, max: 50_000 };
  private readonly claim;
  private readonly renew;
  private readonly release;
  private readonly pinClaimed;
  private readonly dropMembers;
  private readonly addMembers;
  /** Snapshots in progress (settled, failed or not), awaited by `close`. */
  private readonly inflight = new Set<Promise<void>>();

  /**
   * `clock` stamps the snapshot claim's lease (a wall-clock time in the database, read by every
   * process on the file); `scheduler` paces the wait behind another process's snapshot.
   */
  constructor(
    private readonly db: Db,
    private readonly episodes: SqliteEpisodes,
    private readonly clock: Clock,
    private readonly scheduler: Scheduler,
    /** The store's background thread; null for an in-memory database (no second connection). */
    private readonly thread: BackgroundThread | null,
  ) {
    this.insert = db.prepare(
      'INSERT INTO datasets (id, org_id, name, description, filter, created_by, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)',
    );
    this.byId = db.prepare<[string, string], DatasetClaimDbRow>('SELECT * FROM datasets WHERE org_id = ? AND id = ?');
    this.page = db.prepare<[string, string, number], DatasetClaimDbRow>('SELECT * FROM datasets WHERE org_id = ? AND id > ? ORDER BY id LIMIT ?');
    this.pin = db.prepare('UPDATE datasets SET snapshot_at = ?, episode_count = ? WHERE id = ? AND snapshot_at IS NULL');
    this.claim = db.prepare('UPDATE datasets SET snapshot_claim = ?, snapshot_lease_until = ? WHERE id = ? AND snapshot_at IS NULL');
    this.renew = db.prepare('UPDATE datasets SET snapshot_lease_until = ? WHERE id = ? AND snapshot_claim = ? AND snapshot_at IS NULL');
    this.release = db.prepare('UPDATE datasets SET snapshot_claim = NULL, snapshot_lease_until = NULL WHERE id = ? AND snapshot_claim = ?');
    this.pinClaimed = db.prepare(
      'UPDATE datasets SET snapshot_at = ?, episode_count = ?, snapshot_claim = NULL, snapshot_lease_until = NULL WHERE id = ? AND snapshot_claim = ? AND snapshot_at IS NULL',
    );
    this.addMembers = db.prepare(
      'INSERT INTO dataset_members (dataset_id, position, episode_seq) SELECT ?, ? + key + 1, value FROM json_each(?)',
    );
    this.dropMembers = db.prepare(
      'DELETE FROM dataset_members WHERE dataset_id = ? AND position IN (SELECT position FROM dataset_members WHERE dataset_id = ? LIMIT ?)',
    );
    this.memberLines = db.prepare<[string, number, number], EpisodeLineRow>(
      `SELECT ${EPISODE_LINE_SELECT} FROM dataset_members m CROSS JOIN episodes e ON e.seq = m.episode_seq
       WHERE m.dataset_id = ? AND m.position > ? ORDER BY m.position LIMIT ?`,
    ).raw(true);
    this.memberRows = db.prepare<[string, number, number], EpisodeDbRow>(
      `SELECT e.* FROM dataset_members m CROSS JOIN episodes e ON e.seq = m.episode_seq
       WHERE m.dataset_id = ? AND m.position > ? ORDER BY m.position LIMIT ?`,
    );
  }

  async create(row: Omit<DatasetRow, 'snapshotAt' | 'episodeCount'>): Promise<void> {
    this.insert.run(row.id, row.orgId, row.name, row.description, JSON.stringify(row.filter), row.createdBy, row.createdAt);
  }

  async get(orgId: string, id: string): Promise<DatasetRow | undefined> {
    const r = this.byId.get(orgId, id);
    return r && datasetFromDb(r);
  }

  async list(orgId: string, after: string | null, limit: number): Promise<DatasetRow[]> {
    return this.page.all(orgId, after ?? '', limit).map(datasetFromDb);
  }

  async snapshot(orgId: string, id: string, filter: EpisodeFilter, at: number): Promise<DatasetRow | 'already' | null> {
    // A private in-memory database has no second connection to read a consistent view from.
    if (this.db.memory) return this.snapshotInOneTransaction(orgId, id, filter, at);
    const run = this.snapshotInChunks(orgId, id, filter, at);
    const tracked = run.then(
      () => undefined,
      () => undefined,
    );
    this.inflight.add(tracked);
    void tracked.finally(() => this.inflight.delete(tracked));
    return run;
  }

  /** One IMMEDIATE transaction: simple, but it holds the write lock for the whole membership. */
  private snapshotInOneTransaction(orgId: string, id: string, filter: EpisodeFilter, at: number): DatasetRow | 'already' | null {
    const { sql, params } = buildListQuery(orgId, filter, 0, -1, 'e.seq');
    return this.db
      .transaction((): DatasetRow | 'already' | null => {
        const ds = this.byId.get(orgId, id);
        if (!ds) return null;
        if (ds.snapshot_at !== null) return 'already';
        const inserted = this.db
          .prepare(`INSERT INTO dataset_members (dataset_id, position, episode_seq) SELECT ?, ROW_NUMBER() OVER (ORDER BY seq), seq FROM (${sql})`)
          .run(id, ...params).changes;
        this.pin.run(at, inserted, id);
        return datasetFromDb({ ...ds, snapshot_at: at, episode_count: inserted });
      })
      .immediate();
  }

  /**
   * The membership is read by the store's background thread (background-worker.ts) on its own
   * connection, inside one read transaction, so every window sees the database as of the same
   * instant (WAL snapshot isolation), fixed before `snapshot` returns to the event loop: exactly
   * the episodes matching at that instant, whatever is ingested, re-annotated or synced meanwhile.
   * The thread plans and reads each window off the event loop; this connection, the only writer,
   * writes the members in transactions of about WRITE_TARGET_MS, so a report waits behind one of
   * them at most per turn of the loop. Members stay invisible (snapshot_at NULL, the manifest refuses a
   * live dataset) until the last transaction pins the count. A claim with a lease keeps a second
   * snapshot of the same dataset out; it waits and then sees `already`.
   */
  private async snapshotInChunks(orgId: string, id: string, filter: EpisodeFilter, at: number): Promise<DatasetRow | 'already' | null> {
    const token = randomUUID();
    let ds: DatasetClaimDbRow | undefined;
    for (;;) {
      const claimed = this.db
        .transaction((): DatasetClaimDbRow | 'already' | null | 'busy' => {
          const row = this.byId.get(orgId, id);
          if (!row) return null;
          if (row.snapshot_at !== null) return 'already';
          const now = this.clock.now();
          if (row.snapshot_claim && (row.snapshot_lease_until ?? 0) > now) return 'busy';
          this.claim.run(token, now + SNAPSHOT_LEASE_MS, id);
          return row;
        })
        .immediate();
      if (claimed === null) return null;
      if (claimed === 'already') return 'already';
      if (claimed !== 'busy') {
        ds = claimed;
        break;
      }
      await new Promise<void>((resolve) => this.scheduler.setTimeout(resolve, WAIT_POLL_MS));
    }
    let pinned = false;
    // Set once the snapshot has failed: a window's write in progress stops before its next transaction.
    let stopped = false;
    try {
      // Members left by a snapshot whose process died (its claim expired) go first.
      if (ds.snapshot_claim) await this.dropAllMembers(id, token);
      let count = 0;
      let size = MEMBERS_PER_WRITE.initial;
      const write = async (seqs: Float64Array) => {
        // A window's members, in transactions short enough that a report being ingested waits
        // behind one at most (the event loop runs in between), each while the claim is still ours.
        for (let i = 0; i < seqs.length; ) {
          if (stopped) throw new Error(`dataset ${id}: the snapshot has failed`);
          const part = Array.from(seqs.subarray(i, i + size));
          const t0 = performance.now();
          const written = this.db
            .transaction(() => {
              if (this.renew.run(this.clock.now() + SNAPSHOT_LEASE_MS, id, token).changes === 0) return false;
              this.addMembers.run(id, count, JSON.stringify(part));
              return true;
            })
            .immediate();
          if (!written) throw new Error(`dataset ${id}: the snapshot claim was lost`);
          count += part.length;
          i += part.length;
          const ms = performance.now() - t0;
          if (ms < WRITE_TARGET_MS / 2) size = Math.min(MEMBERS_PER_WRITE.max, size * 2);
          else if (ms > WRITE_TARGET_MS) size = Math.max(MEMBERS_PER_WRITE.min, Math.floor(size / 2));
          await yieldToLoop();
        }
      };
      const { done } = this.thread!.begin({ orgId, filter, window: this.snapshotWindow, targetMs: READ_TARGET_MS }, write);
      await done;
      pinned = this.db.transaction(() => this.pinClaimed.run(at, count, id, token).changes === 1).immediate();
      if (!pinned) throw new Error(`dataset ${id}: the snapshot claim was lost`);
      // The members' pages are all in the WAL (no checkpoint passes a read transaction): the
      // thread copies them now, before the answer (and the manifest reads that follow it).
      await this.thread!.checkpoint();
      return datasetFromDb({ ...ds, snapshot_at: at, episode_count: count });
    } finally {
      if (!pinned) {
        stopped = true;
        // Leave the dataset live and clean for a retry; if this fails too, the lease expires.
        try {
          await this.dropAllMembers(id, token, { release: true });
        } catch {
          /* the next snapshot takes the expired claim over */
        }
      }
    }
  }

  /** Stops the background thread; snapshots in progress fail and clean up before this resolves. */
  async close(): Promise<void> {
    await this.thread?.close();
    await Promise.all([...this.inflight]);
  }

  /**
   * Removes a dataset's members in bounded chunks while `token` holds its claim; with `release`,
   * the transaction that finds none left also gives the claim up, so no window the snapshot
   * thread may still write (it checks the claim) lands after the last one removed.
   */
  private async dropAllMembers(id: string, token: string, opts: { release?: boolean } = {}): Promise<void> {
    for (;;) {
      const removed = this.db
        .transaction(() => {
          if (this.renew.run(this.clock.now() + SNAPSHOT_LEASE_MS, id, token).changes === 0) return 0;
          const n = this.dropMembers.run(id, id, 10_000).changes;
          if (n === 0 && opts.release) this.release.run(id, token);
          return n;
        })
        .immediate();
      if (removed === 0) return;
      await yieldToLoop();
    }
  }

  async memberLineRows(datasetId: string, afterPos: number, limit: number): Promise<EpisodeLineBatch> {
    return this.episodes.lineBatch(this.memberLines.all(datasetId, afterPos, limit));
  }

  async members(datasetId: string, afterPos: number, limit: number): Promise<EpisodeRow[]> {
    return this.episodes.hydrate(this.memberRows.all(datasetId, afterPos, limit));
  }
}
