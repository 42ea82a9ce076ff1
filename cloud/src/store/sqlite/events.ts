import type { LoggedEvent } from '../../rules/events.js';
import type { Db } from './db.js';
import type { EventReadOptions, EventRow, EventStore } from '../shared/types.js';

/**
 * Appends a built event to the log; call it inside the transaction of the change it records, so
 * that the change and its event commit together. The webhook engine fans the log out; the event
 * stream reads it.
 */
export function eventAppender(db: Db): (orgId: string, event: LoggedEvent, at: number) => void {
  const insert = db.prepare('INSERT INTO events (org_id, type, episode_id, payload, created_at) VALUES (?, ?, ?, ?, ?)');
  return (orgId, event, at) => {
    insert.run(orgId, event.type, event.episodeId, JSON.stringify(event.payload), at);
  };
}

/** Largest page one read returns, whatever the caller asks. */
const MAX_PAGE = 1000;

/**
 * Reads of the log on the `(org_id, id)` index. The optional filters are conditions on the rows
 * the index walk finds (a type list, the payload's robot), never another access path.
 */
export class SqliteEvents implements EventStore {
  private readonly newest;
  private readonly plain;

  constructor(private readonly db: Db) {
    this.newest = db.prepare<[string], { m: number | null }>('SELECT MAX(id) AS m FROM events WHERE org_id = ?');
    this.plain = db.prepare<[string, number, number, number], EventRow>('SELECT id, type, payload FROM events WHERE org_id = ? AND id > ? AND id <= ? ORDER BY id LIMIT ?');
  }

  async listAfter(orgId: string, afterId: number, opts: EventReadOptions): Promise<EventRow[]> {
    const limit = Math.max(0, Math.min(MAX_PAGE, Math.floor(opts.limit)));
    if (limit === 0) return [];
    const upTo = opts.upTo ?? Number.MAX_SAFE_INTEGER;
    if (!opts.types && opts.robotId === undefined) return this.plain.all(orgId, afterId, upTo, limit);
    const where = ['org_id = ?', 'id > ?', 'id <= ?'];
    const params: unknown[] = [orgId, afterId, upTo];
    if (opts.types) {
      if (opts.types.length === 0) return [];
      where.push(`type IN (${opts.types.map(() => '?').join(', ')})`);
      params.push(...opts.types);
    }
    if (opts.robotId !== undefined) {
      where.push("json_extract(payload, '$.robot_id') = ?");
      params.push(opts.robotId);
    }
    params.push(limit);
    return this.db.prepare<unknown[], EventRow>(`SELECT id, type, payload FROM events WHERE ${where.join(' AND ')} ORDER BY id LIMIT ?`).all(...params);
  }

  async latestId(orgId: string): Promise<number> {
    return this.newest.get(orgId)?.m ?? 0;
  }
}
