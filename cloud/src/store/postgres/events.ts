import type { LoggedEvent } from '../../rules/events.js';
import type { EventReadOptions, EventRow, EventStore } from '../shared/types.js';
import { LOCKS, lockOrgs, type PgDb, type Sql } from './db.js';

/**
 * Appends built events to the log inside the caller's transaction, so that a change and its
 * events commit together. The 'events' lock of each organization is taken first and held to
 * commit: an organization's event ids then commit in id order across every replica, and the
 * webhook fan-out and the event stream, which move a per-organization cursor past the ids they
 * have read, can never pass an id of that organization that commits later. Another
 * organization's events are neither waited for nor read.
 */
export async function appendEvents(sql: Sql, rows: readonly { orgId: string; event: LoggedEvent; at: number }[]): Promise<void> {
  if (rows.length === 0) return;
  await lockOrgs(sql, LOCKS.events, rows.map((r) => r.orgId));
  const params: unknown[] = [];
  const values = rows.map((r, i) => {
    params.push(r.orgId, r.event.type, r.event.episodeId, JSON.stringify(r.event.payload), r.at);
    const b = i * 5;
    return `($${b + 1}, $${b + 2}, $${b + 3}, $${b + 4}, $${b + 5})`;
  });
  await sql.query(`INSERT INTO events (org_id, type, episode_id, payload, created_at) VALUES ${values.join(', ')}`, params);
}

/** Largest page one read returns, whatever the caller asks. */
const MAX_PAGE = 1000;

/**
 * Reads of the log on the `(org_id, id)` index; the type list and the payload's robot are
 * conditions on the rows the index walk finds. Every id at or below the newest visible one has
 * committed (appendEvents), so paging on the last id returned never skips a row.
 */
export class PgEvents implements EventStore {
  constructor(private readonly db: PgDb) {}

  async listAfter(orgId: string, afterId: number, opts: EventReadOptions): Promise<EventRow[]> {
    const limit = Math.max(0, Math.min(MAX_PAGE, Math.floor(opts.limit)));
    if (limit === 0 || opts.types?.length === 0) return [];
    const params: unknown[] = [orgId, afterId, opts.upTo ?? Number.MAX_SAFE_INTEGER, limit];
    let where = 'org_id = $1 AND id > $2 AND id <= $3';
    if (opts.types) {
      params.push(opts.types);
      where += ` AND type = ANY($${params.length})`;
    }
    if (opts.robotId !== undefined) {
      params.push(opts.robotId);
      where += ` AND payload::jsonb ->> 'robot_id' = $${params.length}`;
    }
    return this.db.many<EventRow>(`SELECT id, type, payload FROM events WHERE ${where} ORDER BY id LIMIT $4`, params);
  }

  async latestId(orgId: string): Promise<number> {
    return (await this.db.one<{ m: number | null }>('SELECT MAX(id) AS m FROM events WHERE org_id = $1', [orgId]))?.m ?? 0;
  }
}
