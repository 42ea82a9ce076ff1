/**
 * A robot's own record, read from its agent's SQLite file (read-only, beside the running agent:
 * WAL lets a reader in): the episodes it finalized, its outbox, and its replicas (assignments,
 * verification and prune marks). Read from disk, it is there also while the agent is down.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';

export interface LocalEpisode {
  id: string;
  robotId: string;
  outcome: 'success' | 'failure' | 'discarded';
  taskId: string | null;
  interrupted: boolean;
  dir: string;
  manifest: { files: { path: string; size_bytes: number; sha256: string }[]; total_bytes: number };
  prunedAt: number | null;
  localMissingAt: number | null;
}

export interface LocalReplica {
  episodeId: string;
  destinationId: string;
  state: string;
  lastError: string | null;
  note: string | null;
  verifiedAt: number | null;
}

export interface RobotState {
  dataDir: string;
  episodes: LocalEpisode[];
  replicas: LocalReplica[];
  outboxPending: number;
  outboxRefused: number;
  /** An episode recording or finalizing right now. */
  recording: boolean;
}

export function readRobotState(dataDir: string): RobotState {
  const file = join(dataDir, 'agent.sqlite');
  if (!existsSync(file)) return { dataDir, episodes: [], replicas: [], outboxPending: 0, outboxRefused: 0, recording: false };
  const db = new Database(file, { readonly: true, fileMustExist: true });
  try {
    db.pragma('busy_timeout = 5000');
    const episodes = db
      .prepare<[], { id: string; outcome: LocalEpisode['outcome']; facts: string; manifest: string; interrupted: number; dir: string; pruned_at: number | null; local_missing_at: number | null }>(
        'SELECT id, outcome, facts, manifest, interrupted, dir, pruned_at, local_missing_at FROM episodes',
      )
      .all()
      .map((r): LocalEpisode => {
        const facts = JSON.parse(r.facts) as { robot_id: string; task_id: string | null };
        return {
          id: r.id,
          robotId: facts.robot_id,
          outcome: r.outcome,
          taskId: facts.task_id,
          interrupted: r.interrupted === 1,
          dir: join(dataDir, r.dir),
          manifest: JSON.parse(r.manifest) as LocalEpisode['manifest'],
          prunedAt: r.pruned_at,
          localMissingAt: r.local_missing_at,
        };
      });
    const replicas = db
      .prepare<[], { episode_id: string; destination_id: string; state: string; last_error: string | null; note: string | null; verified_at: number | null }>(
        'SELECT episode_id, destination_id, state, last_error, note, verified_at FROM replicas',
      )
      .all()
      .map((r) => ({ episodeId: r.episode_id, destinationId: r.destination_id, state: r.state, lastError: r.last_error, note: r.note, verifiedAt: r.verified_at }));
    const outbox = db.prepare<[], { state: string; n: number }>("SELECT state, COUNT(*) AS n FROM outbox WHERE state != 'acked' GROUP BY state").all();
    const recording = (db.prepare<[], { n: number }>('SELECT COUNT(*) AS n FROM recording').get()?.n ?? 0) > 0;
    return {
      dataDir,
      episodes,
      replicas,
      outboxPending: outbox.find((o) => o.state === 'pending')?.n ?? 0,
      outboxRefused: outbox.find((o) => o.state === 'refused')?.n ?? 0,
      recording,
    };
  } finally {
    db.close();
  }
}
