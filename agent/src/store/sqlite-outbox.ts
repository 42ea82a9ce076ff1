import type Database from 'better-sqlite3';
import type { NewOutboxMessage, OutboxCounts, OutboxKind, OutboxRow, OutboxState, OutboxStore } from './types.js';

type Db = Database.Database;

interface OutboxDbRow {
  seq: number;
  msg_id: string;
  kind: OutboxKind;
  body: string;
  created_at: number;
  attempts: number;
  last_sent_at: number | null;
  state: OutboxState;
  refusal_code: string | null;
  refusal_message: string | null;
  settled_at: number | null;
}

function fromDb(r: OutboxDbRow): OutboxRow {
  return {
    seq: r.seq,
    msgId: r.msg_id,
    kind: r.kind,
    bodyJson: r.body,
    createdAt: r.created_at,
    attempts: r.attempts,
    lastSentAt: r.last_sent_at,
    state: r.state,
    refusal: r.state === 'refused' ? { code: r.refusal_code ?? '', message: r.refusal_message ?? '' } : null,
    settledAt: r.settled_at,
  };
}

/** Used inside the recording transaction, so an episode and its report commit together. */
export function insertOutboxMessage(db: Db, m: NewOutboxMessage): void {
  db.prepare(`INSERT INTO outbox (msg_id, kind, body, created_at) VALUES (?, ?, ?, ?) ON CONFLICT (msg_id) DO NOTHING`).run(
    m.msgId,
    m.kind,
    JSON.stringify(m.body),
    m.createdAt,
  );
}

export class SqliteOutbox implements OutboxStore {
  constructor(private readonly db: Db) {}

  async enqueue(msg: NewOutboxMessage): Promise<void> {
    insertOutboxMessage(this.db, msg);
  }

  async get(msgId: string): Promise<OutboxRow | undefined> {
    const r = this.db.prepare('SELECT * FROM outbox WHERE msg_id = ?').get(msgId) as OutboxDbRow | undefined;
    return r ? fromDb(r) : undefined;
  }

  async pending(opts: { afterSeq: number; limit: number }): Promise<OutboxRow[]> {
    const rows = this.db
      .prepare(`SELECT * FROM outbox WHERE state = 'pending' AND seq > ? ORDER BY seq LIMIT ?`)
      .all(opts.afterSeq, opts.limit) as OutboxDbRow[];
    return rows.map(fromDb);
  }

  async markSent(msgIds: readonly string[], at: number): Promise<void> {
    if (msgIds.length === 0) return;
    const update = this.db.prepare('UPDATE outbox SET attempts = attempts + 1, last_sent_at = ? WHERE msg_id = ?');
    this.db.transaction(() => {
      for (const id of msgIds) update.run(at, id);
    }).immediate();
  }

  async settle(msgId: string, outcome: { state: 'acked' } | { state: 'refused'; code: string; message: string }, at: number): Promise<boolean> {
    const refused = outcome.state === 'refused';
    const changes = this.db
      .prepare(`UPDATE outbox SET state = ?, refusal_code = ?, refusal_message = ?, settled_at = ? WHERE msg_id = ? AND state = 'pending'`)
      .run(outcome.state, refused ? outcome.code : null, refused ? outcome.message : null, at, msgId).changes;
    return changes === 1;
  }

  async counts(): Promise<OutboxCounts> {
    const rows = this.db.prepare('SELECT state, count(*) AS n FROM outbox GROUP BY state').all() as { state: OutboxState; n: number }[];
    const out: OutboxCounts = { pending: 0, acked: 0, refused: 0 };
    for (const r of rows) out[r.state] = r.n;
    return out;
  }

  async countsByKind(): Promise<{ kind: string; state: OutboxState; count: number }[]> {
    return this.db.prepare('SELECT kind, state, count(*) AS count FROM outbox GROUP BY kind, state ORDER BY kind, state').all() as { kind: string; state: OutboxState; count: number }[];
  }

  async prune(olderThan: number): Promise<number> {
    return this.db.prepare(`DELETE FROM outbox WHERE state = 'acked' AND settled_at < ?`).run(olderThan).changes;
  }
}
