import type { EpisodeEvent } from '../events.js';
import type { Db } from './sqlite-db.js';

/**
 * Appends a built event to the log; call it inside the transaction of the change it records, so
 * that the change and its event commit together. The webhook engine fans the log out.
 */
export function eventAppender(db: Db): (orgId: string, event: EpisodeEvent, at: number) => void {
  const insert = db.prepare('INSERT INTO events (org_id, type, episode_id, payload, created_at) VALUES (?, ?, ?, ?, ?)');
  return (orgId, event, at) => {
    insert.run(orgId, event.type, event.episodeId, JSON.stringify(event.payload), at);
  };
}
