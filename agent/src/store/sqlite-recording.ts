import type Database from 'better-sqlite3';
import { emptyOperatorContext, OPERATOR_CONTEXT_KEYS, type OperatorContext } from '../rules/operator-context.js';
import type { EpisodeOutcome, SubtaskStep } from '../rules/episode-facts.js';
import { insertCommandResult } from './sqlite-episodes.js';
import { insertImportSource } from './sqlite-imports.js';
import { insertOutboxMessage } from './sqlite-outbox.js';
import type {
  EpisodeRow,
  ImportSourceRow,
  NewOutboxMessage,
  OperatorContextStore,
  RecordingRow,
  RecordingSessionRow,
  RecordingSessionStore,
  RecordingStore,
  StoredCommandResult,
} from './types.js';

type Db = Database.Database;

interface RecordingDbRow {
  state: 'recording' | 'finalizing';
  episode_id: string;
  recording_session_id: string;
  session_name: string | null;
  episode_seq: number;
  started_at: number;
  alive_at: number;
  ended_at: number | null;
  outcome: EpisodeOutcome | null;
  context: string;
  dir: string;
}

const CURRENT_SESSION = 'current_session_id';

function fromDb(r: RecordingDbRow): RecordingRow {
  return {
    state: r.state,
    episodeId: r.episode_id,
    recordingSessionId: r.recording_session_id,
    sessionName: r.session_name,
    episodeSeq: r.episode_seq,
    startedAt: r.started_at,
    aliveAt: r.alive_at,
    endedAt: r.ended_at,
    outcome: r.outcome,
    context: { ...emptyOperatorContext(), ...(JSON.parse(r.context) as Partial<OperatorContext>) },
    dir: r.dir,
  };
}

export class SqliteRecording implements RecordingStore {
  constructor(private readonly db: Db) {}

  async get(): Promise<RecordingRow | undefined> {
    const r = this.db.prepare('SELECT * FROM recording WHERE slot = 1').get() as RecordingDbRow | undefined;
    return r ? fromDb(r) : undefined;
  }

  async steps(episodeId: string): Promise<SubtaskStep[]> {
    return this.db
      .prepare('SELECT at, subtask_id, subtask_name FROM recording_steps WHERE episode_id = ? ORDER BY step_index')
      .all(episodeId) as SubtaskStep[];
  }

  async begin(args: { recording: RecordingRow; session: RecordingSessionRow; firstStep?: SubtaskStep; commandResult?: StoredCommandResult; importSource?: ImportSourceRow }): Promise<void> {
    const { recording: r, session: s } = args;
    this.db.transaction(() => {
      this.db
        .prepare(
          `INSERT INTO recording (slot, state, episode_id, recording_session_id, session_name, episode_seq, started_at, alive_at, ended_at, outcome, context, dir)
           VALUES (1, 'recording', ?, ?, ?, ?, ?, ?, NULL, NULL, ?, ?)`,
        )
        .run(r.episodeId, r.recordingSessionId, r.sessionName, r.episodeSeq, r.startedAt, r.aliveAt, JSON.stringify(r.context), r.dir);
      this.db
        .prepare(
          `INSERT INTO recording_sessions (id, name, next_seq, created_at) VALUES (?, ?, ?, ?)
           ON CONFLICT (id) DO UPDATE SET next_seq = excluded.next_seq`,
        )
        .run(s.id, s.name, r.episodeSeq + 1, s.createdAt);
      this.db.prepare('INSERT OR REPLACE INTO agent_meta (key, value) VALUES (?, ?)').run(CURRENT_SESSION, s.id);
      if (args.firstStep) insertStep(this.db, r.episodeId, args.firstStep);
      if (args.commandResult) insertCommandResult(this.db, args.commandResult);
      if (args.importSource) insertImportSource(this.db, args.importSource);
    }).immediate();
  }

  async end(args: { episodeId: string; outcome: EpisodeOutcome; endedAt: number; commandResult?: StoredCommandResult }): Promise<void> {
    this.db.transaction(() => {
      const changed = this.db
        .prepare(`UPDATE recording SET state = 'finalizing', outcome = ?, ended_at = ?, alive_at = ? WHERE slot = 1 AND episode_id = ? AND state = 'recording'`)
        .run(args.outcome, args.endedAt, args.endedAt, args.episodeId).changes;
      if (changed !== 1) throw new Error(`recording ${args.episodeId} is not in state recording`);
      if (args.commandResult) insertCommandResult(this.db, args.commandResult);
    }).immediate();
  }

  async touch(episodeId: string, at: number): Promise<void> {
    this.db.prepare('UPDATE recording SET alive_at = max(alive_at, ?) WHERE slot = 1 AND episode_id = ?').run(at, episodeId);
  }

  async complete(e: EpisodeRow, report: NewOutboxMessage): Promise<void> {
    this.db.transaction(() => {
      this.db
        .prepare(
          `INSERT INTO episodes (id, recording_session_id, episode_seq, outcome, facts, manifest, finalized_at, interrupted, dir)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
        )
        .run(e.id, e.recordingSessionId, e.episodeSeq, e.outcome, JSON.stringify(e.facts), JSON.stringify(e.manifest), e.finalizedAt, e.interrupted ? 1 : 0, e.dir);
      insertOutboxMessage(this.db, report);
      this.db.prepare('DELETE FROM recording WHERE slot = 1 AND episode_id = ?').run(e.id);
      this.db.prepare('DELETE FROM recording_steps WHERE episode_id = ?').run(e.id);
    }).immediate();
  }
}

function insertStep(db: Db, episodeId: string, step: SubtaskStep): void {
  const next = db.prepare('SELECT coalesce(max(step_index) + 1, 0) FROM recording_steps WHERE episode_id = ?').pluck().get(episodeId) as number;
  db.prepare('INSERT INTO recording_steps (episode_id, step_index, at, subtask_id, subtask_name) VALUES (?, ?, ?, ?, ?)').run(
    episodeId,
    next,
    step.at,
    step.subtask_id,
    step.subtask_name,
  );
}

export class SqliteOperatorContext implements OperatorContextStore {
  constructor(private readonly db: Db) {}

  async get(): Promise<OperatorContext> {
    const ctx = emptyOperatorContext();
    const rows = this.db.prepare('SELECT key, value FROM operator_context').all() as { key: string; value: string }[];
    for (const { key, value } of rows) {
      if ((OPERATOR_CONTEXT_KEYS as readonly string[]).includes(key)) ctx[key as keyof OperatorContext] = value;
    }
    return ctx;
  }

  async set(args: { context: OperatorContext; step?: { episodeId: string; step: SubtaskStep }; newSession: boolean }): Promise<void> {
    this.db.transaction(() => {
      const put = this.db.prepare('INSERT OR REPLACE INTO operator_context (key, value) VALUES (?, ?)');
      const del = this.db.prepare('DELETE FROM operator_context WHERE key = ?');
      for (const key of OPERATOR_CONTEXT_KEYS) {
        const v = args.context[key];
        if (v === null) del.run(key);
        else put.run(key, v);
      }
      if (args.step) {
        const recording = this.db.prepare(`SELECT 1 FROM recording WHERE slot = 1 AND episode_id = ? AND state = 'recording'`).get(args.step.episodeId);
        if (recording) insertStep(this.db, args.step.episodeId, args.step.step);
      }
      if (args.newSession) this.db.prepare('DELETE FROM agent_meta WHERE key = ?').run(CURRENT_SESSION);
    }).immediate();
  }
}

export class SqliteRecordingSessions implements RecordingSessionStore {
  constructor(private readonly db: Db) {}

  async current(): Promise<RecordingSessionRow | undefined> {
    const r = this.db
      .prepare(
        `SELECT s.id, s.name, s.next_seq, s.created_at FROM agent_meta m JOIN recording_sessions s ON s.id = m.value WHERE m.key = ?`,
      )
      .get(CURRENT_SESSION) as { id: string; name: string | null; next_seq: number; created_at: number } | undefined;
    return r ? { id: r.id, name: r.name, nextSeq: r.next_seq, createdAt: r.created_at } : undefined;
  }
}
