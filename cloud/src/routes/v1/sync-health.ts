import { z } from 'zod';
import { iso, SyncHealthRowSchema, type SyncHealthRowBody } from '@fleet/protocol';
import { principalOf } from '../../http/policy.js';
import type { SyncHealthRow } from '../../store/index.js';
import { v1Plugin } from './types.js';

function toRow(r: SyncHealthRow): SyncHealthRowBody {
  return {
    robot_id: r.robotId,
    episodes_reported: r.episodesReported,
    unverified: r.unverified,
    unverified_over_72h: r.unverifiedOver72h,
    bytes_unverified: r.bytesUnverified,
    local_missing: r.localMissing,
    ...(r.pressure
      ? { pressure: { free_bytes: r.pressure.free_bytes, backlog_bytes: r.pressure.backlog_bytes, hours_to_full: r.pressure.hours_to_full, reported_at: iso(r.pressure.reportedAt) } }
      : {}),
  };
}

/** /v1/sync-health: per robot, what has not reached a destination yet. */
export const syncHealthRoutes = v1Plugin<'store' | 'clock'>('sync-health', async (app, { store, clock }) => {
  app.route({
    method: 'GET',
    url: '/sync-health/robots',
    config: { policy: { auth: 'key', scope: 'data:read', feature: 'data.metadata', meter: null } },
    schema: {
      operationId: 'listRobotSyncHealth',
      summary: 'Sync health per robot',
      description:
        'One row per robot of the organization (and per robot id that reported episodes), ordered by robot id; with `robot_id`, only the rows of those ids. ' +
        '`unverified`: reported, not discarded, and verified at no destination; `unverified_over_72h`: of those, reported more than 72 hours ago.',
      querystring: z.strictObject({
        robot_id: z
          .string()
          .min(1)
          .max(100 * 129)
          // The list's shape in the document: 1 to 100 ids of 1 to 128 characters, no empty one.
          .regex(/^[^,]{1,128}(?:,[^,]{1,128}){0,99}$/, 'must be 1 to 100 robot ids of 1 to 128 characters, separated by commas')
          .transform((v) => [...new Set(v.split(','))])
          .pipe(z.array(z.string().min(1, 'an empty robot id').max(128)).max(100, 'at most 100 robot ids'))
          .optional()
          .describe('Only these robots: ids separated by commas, at most 100 (the robots a page of the list shows)'),
      }),
      response: { 200: z.object({ robots: z.array(SyncHealthRowSchema) }) },
    },
    handler: async (request) => {
      const robotIds = request.query.robot_id;
      const rows = await store.sync.syncHealth(principalOf(request).org.id, clock.now(), robotIds ? { robotIds } : {});
      return { robots: rows.map(toRow) };
    },
  });
});
