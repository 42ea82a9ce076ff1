import type { EpisodeEvent } from '../../events.js';
import { LOCKS, type Sql } from './db.js';

/**
 * Appends built events to the log inside the caller's transaction, so that a change and its
 * events commit together. The 'events' advisory lock is taken first and held to commit: event ids
 * then commit in id order across every replica, and the webhook fan-out, which moves a cursor
 * past the ids it has read, can never pass an id that commits later.
 */
export async function appendEvents(sql: Sql, rows: readonly { orgId: string; event: EpisodeEvent; at: number }[]): Promise<void> {
  if (rows.length === 0) return;
  await sql.query('SELECT pg_advisory_xact_lock($1)', [LOCKS.events]);
  const params: unknown[] = [];
  const values = rows.map((r, i) => {
    params.push(r.orgId, r.event.type, r.event.episodeId, JSON.stringify(r.event.payload), r.at);
    const b = i * 5;
    return `($${b + 1}, $${b + 2}, $${b + 3}, $${b + 4}, $${b + 5})`;
  });
  await sql.query(`INSERT INTO events (org_id, type, episode_id, payload, created_at) VALUES ${values.join(', ')}`, params);
}
