import type { FleetClient } from '../client.js';
import { FleetApiError } from '../errors.js';

/** Robots read at most to find names (10 pages of 100); a robot beyond is shown by its id. */
export const ROBOT_NAME_LOOKUP_MAX = 1_000;

/**
 * How a table names robots: by name, with the id where the name is not enough (another robot
 * has the same name), and by id when the name is not known. The episode list and sync health
 * carry robot ids only, so the names come from the robot list (de-enrolled robots included),
 * read page by page only until every id asked for is found: one request for most fleets, never
 * one per row, and never more than {@link ROBOT_NAME_LOOKUP_MAX} robots. A key that may not
 * list robots (403) gets the ids.
 */
export async function robotLabels(client: FleetClient, ids: Iterable<string>): Promise<(id: string) => string> {
  const wanted = new Set(ids);
  const names = new Map<string, string>();
  const owners = new Map<string, Set<string>>();
  if (wanted.size > 0) {
    try {
      let read = 0;
      let missing = wanted.size;
      for await (const r of client.robots.iterate({ limit: 100, includeDeenrolled: true })) {
        names.set(r.id, r.name);
        let ids = owners.get(r.name);
        if (!ids) owners.set(r.name, (ids = new Set()));
        ids.add(r.id);
        if (wanted.has(r.id)) missing--;
        if (missing === 0 || ++read >= ROBOT_NAME_LOOKUP_MAX) break;
      }
    } catch (err) {
      if (!(err instanceof FleetApiError)) throw err;
    }
  }
  return (id) => {
    const name = names.get(id);
    if (name === undefined) return id;
    return (owners.get(name)?.size ?? 0) > 1 ? `${name} (${id})` : name;
  };
}
