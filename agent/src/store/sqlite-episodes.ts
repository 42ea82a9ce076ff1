import type Database from 'better-sqlite3';
import type { CommandReply } from '@fleet/protocol';
import type { EpisodeFacts, EpisodeManifest, EpisodeOutcome } from '../rules/episode-facts.js';
import type { CommandIntent, CommandResultStore, EpisodeRow, EpisodeStore, RememberedCommand, StoredCommandResult } from './types.js';

type Db = Database.Database;

export interface EpisodeDbRow {
  id: string;
  recording_session_id: string;
  episode_seq: number;
  outcome: EpisodeOutcome;
  facts: string;
  manifest: string;
  finalized_at: number;
  interrupted: number;
  dir: string;
}

export function episodeFromDb(r: EpisodeDbRow): EpisodeRow {
  return {
    id: r.id,
    recordingSessionId: r.recording_session_id,
    episodeSeq: r.episode_seq,
    outcome: r.outcome,
    facts: JSON.parse(r.facts) as EpisodeFacts,
    manifest: JSON.parse(r.manifest) as EpisodeManifest,
    finalizedAt: r.finalized_at,
    interrupted: r.interrupted === 1,
    dir: r.dir,
  };
}

export class SqliteEpisodes implements EpisodeStore {
  constructor(private readonly db: Db) {}

  async get(id: string): Promise<EpisodeRow | undefined> {
    const r = this.db.prepare('SELECT * FROM episodes WHERE id = ?').get(id) as EpisodeDbRow | undefined;
    return r ? episodeFromDb(r) : undefined;
  }

  async list(opts: { limit?: number; afterFinalizedAt?: number } = {}): Promise<EpisodeRow[]> {
    const rows = this.db
      .prepare('SELECT * FROM episodes WHERE finalized_at > ? ORDER BY finalized_at, rowid LIMIT ?')
      .all(opts.afterFinalizedAt ?? -1, opts.limit ?? -1) as EpisodeDbRow[];
    return rows.map(episodeFromDb);
  }

  async ids(): Promise<string[]> {
    return this.db.prepare('SELECT id FROM episodes ORDER BY id').pluck().all() as string[];
  }
}

/**
 * Stores an answer in place of an intent or an expired row. Also used inside the recording
 * transactions, so a state change and its command result commit together.
 */
export function insertCommandResult(db: Db, r: StoredCommandResult): void {
  db.prepare(`INSERT OR REPLACE INTO command_results (cmd_id, command, state, reply, received_at) VALUES (?, ?, 'answered', ?, ?)`).run(
    r.cmdId,
    r.command,
    JSON.stringify(r.reply),
    r.receivedAt,
  );
}

interface CommandResultDbRow {
  cmd_id: string;
  command: string;
  state: 'running' | 'answered';
  reply: string | null;
  received_at: number;
}

export class SqliteCommandResults implements CommandResultStore {
  /** Prepared once: every command the robot receives looks its id up first. */
  private readonly select: Database.Statement<[string, number], CommandResultDbRow>;

  constructor(private readonly db: Db) {
    this.select = db.prepare('SELECT cmd_id, command, state, reply, received_at FROM command_results WHERE cmd_id = ? AND received_at >= ?');
  }

  async get(cmdId: string, notBefore: number): Promise<RememberedCommand | undefined> {
    return this.read(cmdId, notBefore);
  }

  async begin(intent: CommandIntent, notBefore: number): Promise<RememberedCommand | undefined> {
    return this.db
      .transaction(() => {
        const existing = this.read(intent.cmdId, notBefore);
        if (existing) return existing;
        this.db
          .prepare(`INSERT OR REPLACE INTO command_results (cmd_id, command, state, reply, received_at) VALUES (?, ?, 'running', NULL, ?)`)
          .run(intent.cmdId, intent.command, intent.receivedAt);
        return undefined;
      })
      .immediate();
  }

  async put(r: StoredCommandResult): Promise<void> {
    insertCommandResult(this.db, r);
  }

  async prune(olderThan: number): Promise<number> {
    return this.db.prepare('DELETE FROM command_results WHERE received_at < ?').run(olderThan).changes;
  }

  private read(cmdId: string, notBefore: number): RememberedCommand | undefined {
    const r = this.select.get(cmdId, notBefore);
    if (!r) return undefined;
    const base = { cmdId: r.cmd_id, command: r.command, receivedAt: r.received_at };
    return r.reply === null ? { state: 'running', ...base } : { state: 'answered', ...base, reply: JSON.parse(r.reply) as CommandReply };
  }
}
