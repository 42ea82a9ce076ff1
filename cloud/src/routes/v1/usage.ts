import { z } from 'zod';
import { DAY, iso, UsageSchema } from '@fleet/protocol';
import { validationError } from '../../errors.js';
import { principalOf } from '../../http/policy.js';
import { v1Plugin } from './types.js';

// A calendar day as the document states it (`format: date` and a pattern that admits only real
// days, leap years included), so that a client or a fuzzer knows 2026-02-30 is refused. The
// round trip is a second guard: Date.parse rolls 2026-02-30 over to March 2 instead of failing.
const Day = z.iso
  .date('expected a calendar day, YYYY-MM-DD')
  .refine((d) => {
    const ms = Date.parse(`${d}T00:00:00Z`);
    return !Number.isNaN(ms) && iso(ms).slice(0, 10) === d;
  }, 'not a date');
const MAX_DAYS = 366;

/** GET /v1/usage: per-meter, per-day counters of the caller's organization (admin). */
export const usageRoutes = v1Plugin<'store' | 'clock'>('usage', async (app, { store, clock }) => {
  app.route({
    method: 'GET',
    url: '/usage',
    config: { policy: { auth: 'key', scope: 'admin', feature: 'api.access', meter: null } },
    schema: {
      operationId: 'getUsage',
      summary: 'Metered usage per meter and UTC day',
      description: `Inclusive day range; by default the last 30 days. At most ${MAX_DAYS} days per request.`,
      querystring: z.strictObject({ from: Day.optional(), to: Day.optional() }),
      response: { 200: UsageSchema },
    },
    handler: async (request) => {
      const { org } = principalOf(request);
      const to = request.query.to ?? iso(clock.now()).slice(0, 10);
      const from = request.query.from ?? iso(Date.parse(`${to}T00:00:00Z`) - 29 * DAY).slice(0, 10);
      const span = (Date.parse(`${to}T00:00:00Z`) - Date.parse(`${from}T00:00:00Z`)) / DAY;
      if (span < 0 || span >= MAX_DAYS) {
        throw validationError('querystring', '/from', `from must not be after to, and the range at most ${MAX_DAYS} days`, 'range');
      }
      return { usage: await store.meters.list(org.id, from, to) };
    },
  });
});
