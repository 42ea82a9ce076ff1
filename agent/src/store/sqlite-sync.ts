import type Database from 'better-sqlite3';
import { PRUNE_DELAY_MS, type Assignment, type RetentionDirective } from '@fleet/protocol';
import { episodeFromDb, type EpisodeDbRow } from './sqlite-episodes.js';
import { insertOutboxMessage } from './sqlite-outbox.js';
import type { EpisodeRow, LocalCopyRow, LocalReplicaState, NewOutboxMessage, ReplicaPatch, ReplicaRow, SyncCounts, SyncStore, UploadFileRow, UploadPartRow, UploadReceipt } from './types.js';

type Db = Database.Database;

interface ReplicaDbRow {
  episode_id: string;
  destination_id: string;
  state: LocalReplicaState;
  grant_id: string | null;
  object_key: string | null;
  retention: string | null;
  attempts: number;
  failures: number;
  next_attempt_at: number | null;
  last_error: string | null;
  note: string | null;
  reports: number;
  assigned_at: number;
  updated_at: number;
}

function replicaFromDb(r: ReplicaDbRow): ReplicaRow {
  return {
    episodeId: r.episode_id,
    destinationId: r.destination_id,
    state: r.state,
    grantId: r.grant_id,
    objectKey: r.object_key,
    retention: r.retention as RetentionDirective | null,
    attempts: r.attempts,
    failures: r.failures,
    nextAttemptAt: r.next_attempt_at,
    lastError: r.last_error,
    note: r.note,
    reports: r.reports,
    assignedAt: r.assigned_at,
    updatedAt: r.updated_at,
  };
}

interface FileDbRow {
  path: string;
  upload_id: string | null;
  part_size: number | null;
  complete: number;
  bytes_sent: number | null;
  sha256_sent: string | null;
  md5_sent: string | null;
  receipt: string | null;
}

interface PartDbRow {
  path: string;
  upload_id: string;
  part_number: number;
  size: number;
  etag: string;
  md5: string | null;
}

const PATCH_COLUMNS: Record<keyof ReplicaPatch, string> = {
  state: 'state',
  grantId: 'grant_id',
  objectKey: 'object_key',
  retention: 'retention',
  attempts: 'attempts',
  failures: 'failures',
  nextAttemptAt: 'next_attempt_at',
  lastError: 'last_error',
  note: 'note',
};

export class SqliteSync implements SyncStore {
  constructor(private readonly db: Db) {}

  async add(assignments: readonly Assignment[], at: number): Promise<number> {
    return this.db.transaction(() => this.insertAll(assignments, at)).immediate();
  }

  async reconcile(complete: readonly Assignment[], at: number): Promise<{ added: number; removed: Assignment[] }> {
    return this.db
      .transaction(() => {
        const added = this.insertAll(complete, at);
        const wanted = new Set(complete.map((a) => `${a.episode_id}\u0000${a.destination_id}`));
        const open = this.db.prepare('SELECT episode_id, destination_id FROM replicas WHERE next_attempt_at IS NOT NULL').all() as {
          episode_id: string;
          destination_id: string;
        }[];
        const del = this.db.prepare('DELETE FROM replicas WHERE episode_id = ? AND destination_id = ?');
        const removed: Assignment[] = [];
        for (const r of open) {
          if (wanted.has(`${r.episode_id}\u0000${r.destination_id}`)) continue;
          del.run(r.episode_id, r.destination_id);
          this.recomputePruneDue(r.episode_id);
          removed.push({ episode_id: r.episode_id, destination_id: r.destination_id });
        }
        return { added, removed };
      })
      .immediate();
  }

  private insertAll(assignments: readonly Assignment[], at: number): number {
    const insert = this.db.prepare(
      `INSERT INTO replicas (episode_id, destination_id, state, next_attempt_at, assigned_at, updated_at) VALUES (?, ?, 'assigned', ?, ?, ?)
       ON CONFLICT (episode_id, destination_id) DO NOTHING`,
    );
    let n = 0;
    for (const a of assignments) {
      const added = insert.run(a.episode_id, a.destination_id, at, at, at).changes;
      // A new destination for an episode: it is not verified everywhere any more.
      if (added > 0) this.recomputePruneDue(a.episode_id);
      n += added;
    }
    return n;
  }

  /**
   * The stored pruning timer of an episode, derived from its replicas in the caller's
   * transaction: the last verified_at + 72 h when every replica is verified and every destination
   * said until_all_verified_plus_72h; otherwise none (any keep wins, an unverified replica holds
   * it). An episode already pruned keeps what it has.
   */
  private recomputePruneDue(episodeId: string): void {
    this.db
      .prepare(
        `UPDATE episodes SET prune_due_at = (
           SELECT CASE WHEN count(*) > 0
                        AND sum(state = 'verified') = count(*)
                        AND count(verified_at) = count(*)
                        AND sum(coalesce(retention, 'keep') = 'until_all_verified_plus_72h') = count(*)
                  THEN max(verified_at) + ? ELSE NULL END
           FROM replicas WHERE episode_id = episodes.id)
         WHERE id = ? AND pruned_at IS NULL`,
      )
      .run(PRUNE_DELAY_MS, episodeId);
  }

  async get(episodeId: string, destinationId: string): Promise<ReplicaRow | undefined> {
    const r = this.db.prepare('SELECT * FROM replicas WHERE episode_id = ? AND destination_id = ?').get(episodeId, destinationId) as ReplicaDbRow | undefined;
    return r ? replicaFromDb(r) : undefined;
  }

  async list(): Promise<ReplicaRow[]> {
    return (this.db.prepare('SELECT * FROM replicas ORDER BY assigned_at, episode_id, destination_id').all() as ReplicaDbRow[]).map(replicaFromDb);
  }

  async due(now: number, limit: number): Promise<ReplicaRow[]> {
    const rows = this.db
      .prepare('SELECT * FROM replicas WHERE next_attempt_at IS NOT NULL AND next_attempt_at <= ? ORDER BY next_attempt_at, assigned_at LIMIT ?')
      .all(now, limit) as ReplicaDbRow[];
    return rows.map(replicaFromDb);
  }

  async nextDueAt(): Promise<number | null> {
    return (this.db.prepare('SELECT min(next_attempt_at) FROM replicas WHERE next_attempt_at IS NOT NULL').pluck().get() as number | null) ?? null;
  }

  async update(episodeId: string, destinationId: string, patch: ReplicaPatch, at: number, report?: NewOutboxMessage): Promise<ReplicaRow> {
    return this.db
      .transaction(() => {
        const sets: string[] = ['updated_at = ?'];
        const values: (string | number | null)[] = [at];
        for (const [key, column] of Object.entries(PATCH_COLUMNS) as [keyof ReplicaPatch, string][]) {
          if (!(key in patch)) continue;
          sets.push(`${column} = ?`);
          values.push(patch[key] ?? null);
        }
        if (report) sets.push('reports = reports + 1');
        if (patch.state === 'verified') {
          sets.push('verified_at = coalesce(verified_at, ?)');
          values.push(at);
        }
        const changes = this.db.prepare(`UPDATE replicas SET ${sets.join(', ')} WHERE episode_id = ? AND destination_id = ?`).run(...values, episodeId, destinationId).changes;
        if (changes !== 1) throw new Error(`no replica ${episodeId} -> ${destinationId}`);
        if (report) insertOutboxMessage(this.db, report);
        if (patch.state !== undefined || patch.retention !== undefined) this.recomputePruneDue(episodeId);
        return replicaFromDb(this.db.prepare('SELECT * FROM replicas WHERE episode_id = ? AND destination_id = ?').get(episodeId, destinationId) as ReplicaDbRow);
      })
      .immediate();
  }

  async files(episodeId: string, destinationId: string): Promise<UploadFileRow[]> {
    const files = this.db.prepare('SELECT * FROM upload_files WHERE episode_id = ? AND destination_id = ? ORDER BY path').all(episodeId, destinationId) as FileDbRow[];
    const parts = this.db
      .prepare('SELECT * FROM upload_parts WHERE episode_id = ? AND destination_id = ? ORDER BY path, part_number')
      .all(episodeId, destinationId) as PartDbRow[];
    return files.map((f) => ({
      path: f.path,
      uploadId: f.upload_id,
      partSize: f.part_size,
      complete: f.complete === 1,
      bytesSent: f.bytes_sent,
      sha256Sent: f.sha256_sent,
      md5Sent: f.md5_sent,
      receipt: f.receipt === null ? null : (JSON.parse(f.receipt) as UploadReceipt),
      parts: parts
        .filter((p) => p.path === f.path && p.upload_id === f.upload_id)
        .map((p): UploadPartRow => ({ partNumber: p.part_number, size: p.size, etag: p.etag, md5: p.md5 })),
    }));
  }

  async beginMultipart(episodeId: string, destinationId: string, path: string, uploadId: string, partSize: number, at: number): Promise<void> {
    this.db
      .transaction(() => {
        const current = this.db
          .prepare('SELECT upload_id, part_size FROM upload_files WHERE episode_id = ? AND destination_id = ? AND path = ?')
          .get(episodeId, destinationId, path) as { upload_id: string | null; part_size: number | null } | undefined;
        if (current?.upload_id === uploadId && current.part_size === partSize) return;
        // Another upload (or another part size): what was done belongs to the old one.
        this.db.prepare('DELETE FROM upload_files WHERE episode_id = ? AND destination_id = ? AND path = ?').run(episodeId, destinationId, path);
        this.db
          .prepare('INSERT INTO upload_files (episode_id, destination_id, path, upload_id, part_size, updated_at) VALUES (?, ?, ?, ?, ?, ?)')
          .run(episodeId, destinationId, path, uploadId, partSize, at);
      })
      .immediate();
  }

  async partDone(episodeId: string, destinationId: string, path: string, uploadId: string, part: UploadPartRow, at: number): Promise<void> {
    this.db
      .transaction(() => {
        const current = this.db
          .prepare('SELECT upload_id FROM upload_files WHERE episode_id = ? AND destination_id = ? AND path = ?')
          .pluck()
          .get(episodeId, destinationId, path) as string | null | undefined;
        if (current !== uploadId) throw new Error(`part ${part.partNumber} of ${path} is for upload ${uploadId}, not the current one`);
        this.db
          .prepare(
            `INSERT OR REPLACE INTO upload_parts (episode_id, destination_id, path, upload_id, part_number, size, etag, md5, done_at)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
          )
          .run(episodeId, destinationId, path, uploadId, part.partNumber, part.size, part.etag, part.md5, at);
        this.db.prepare('UPDATE upload_files SET updated_at = ? WHERE episode_id = ? AND destination_id = ? AND path = ?').run(at, episodeId, destinationId, path);
      })
      .immediate();
  }

  async fileDone(
    episodeId: string,
    destinationId: string,
    path: string,
    done: { uploadId: string | null; bytesSent: number; sha256Sent: string; md5Sent: string | null; receipt: UploadReceipt },
    at: number,
  ): Promise<void> {
    this.db
      .prepare(
        `INSERT INTO upload_files (episode_id, destination_id, path, upload_id, complete, bytes_sent, sha256_sent, md5_sent, receipt, updated_at)
         VALUES (?, ?, ?, ?, 1, ?, ?, ?, ?, ?)
         ON CONFLICT (episode_id, destination_id, path) DO UPDATE SET
           upload_id = excluded.upload_id, complete = 1, bytes_sent = excluded.bytes_sent, sha256_sent = excluded.sha256_sent,
           md5_sent = excluded.md5_sent, receipt = excluded.receipt, updated_at = excluded.updated_at`,
      )
      .run(episodeId, destinationId, path, done.uploadId, done.bytesSent, done.sha256Sent, done.md5Sent, JSON.stringify(done.receipt), at);
  }

  async resetFile(episodeId: string, destinationId: string, path: string): Promise<void> {
    this.db.prepare('DELETE FROM upload_files WHERE episode_id = ? AND destination_id = ? AND path = ?').run(episodeId, destinationId, path);
  }

  async counts(): Promise<SyncCounts> {
    const r = this.db
      .prepare(
        `SELECT count(*) FILTER (WHERE next_attempt_at IS NOT NULL) AS open,
                count(*) FILTER (WHERE next_attempt_at IS NOT NULL AND last_error IS NOT NULL) AS failing,
                count(*) FILTER (WHERE state = 'verified') AS verified,
                count(*) FILTER (WHERE next_attempt_at IS NULL AND state <> 'verified') AS settled
         FROM replicas`,
      )
      .get() as SyncCounts;
    return { open: r.open, failing: r.failing, verified: r.verified, settled: r.settled };
  }

  async countsByState(): Promise<Record<LocalReplicaState, number>> {
    const out: Record<LocalReplicaState, number> = { assigned: 0, granted: 0, syncing: 0, synced: 0, verified: 0 };
    for (const r of this.db.prepare('SELECT state, count(*) AS n FROM replicas GROUP BY state').all() as { state: LocalReplicaState; n: number }[]) out[r.state] = r.n;
    return out;
  }

  async backlogBytes(): Promise<number> {
    return (
      (this.db
        .prepare(
          `SELECT coalesce(sum(json_extract(e.manifest, '$.total_bytes')), 0) FROM episodes e
           WHERE NOT EXISTS (SELECT 1 FROM replicas r WHERE r.episode_id = e.id AND r.state = 'verified')`,
        )
        .pluck()
        .get() as number | null) ?? 0
    );
  }

  async recordedBytesSince(since: number): Promise<number> {
    return (this.db.prepare(`SELECT coalesce(sum(json_extract(manifest, '$.total_bytes')), 0) FROM episodes WHERE finalized_at >= ?`).pluck().get(since) as number | null) ?? 0;
  }

  async localCopy(episodeId: string): Promise<LocalCopyRow | undefined> {
    const r = this.db.prepare('SELECT prune_due_at, pruned_at, local_missing_at FROM episodes WHERE id = ?').get(episodeId) as
      | { prune_due_at: number | null; pruned_at: number | null; local_missing_at: number | null }
      | undefined;
    return r ? { pruneDueAt: r.prune_due_at, prunedAt: r.pruned_at, localMissingAt: r.local_missing_at } : undefined;
  }

  async pruneDue(now: number, limit: number): Promise<EpisodeRow[]> {
    const rows = this.db
      .prepare(
        `SELECT e.* FROM episodes e
         WHERE e.prune_due_at IS NOT NULL AND e.prune_due_at <= ? AND e.pruned_at IS NULL
           AND EXISTS (SELECT 1 FROM replicas r WHERE r.episode_id = e.id)
           AND NOT EXISTS (SELECT 1 FROM replicas r WHERE r.episode_id = e.id AND (r.state <> 'verified' OR coalesce(r.retention, 'keep') <> 'until_all_verified_plus_72h'))
         ORDER BY e.prune_due_at, e.id LIMIT ?`,
      )
      .all(now, limit) as EpisodeDbRow[];
    return rows.map(episodeFromDb);
  }

  async nextPruneAt(): Promise<number | null> {
    return (this.db.prepare('SELECT min(prune_due_at) FROM episodes WHERE prune_due_at IS NOT NULL AND pruned_at IS NULL').pluck().get() as number | null) ?? null;
  }

  async markPruned(episodeId: string, at: number, report: NewOutboxMessage): Promise<boolean> {
    return this.db
      .transaction(() => {
        if (this.db.prepare('UPDATE episodes SET pruned_at = ? WHERE id = ? AND pruned_at IS NULL').run(at, episodeId).changes === 0) return false;
        insertOutboxMessage(this.db, report);
        return true;
      })
      .immediate();
  }

  async noteLocalMissing(episodeId: string, at: number, report: NewOutboxMessage): Promise<boolean> {
    return this.db
      .transaction(() => {
        const changes = this.db.prepare('UPDATE episodes SET local_missing_at = ? WHERE id = ? AND local_missing_at IS NULL AND pruned_at IS NULL').run(at, episodeId).changes;
        if (changes === 0) return false;
        insertOutboxMessage(this.db, report);
        return true;
      })
      .immediate();
  }
}
