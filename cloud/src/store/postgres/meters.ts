import type { PgDb } from './db.js';
import type { MeterStore, SharedCounterStore, UsageRow } from '../shared/types.js';

export class PgMeters implements MeterStore {
  constructor(private readonly db: PgDb) {}

  async increment(orgId: string, meter: string, day: string, by = 1): Promise<void> {
    await this.db.query(
      'INSERT INTO meters (org_id, meter, day, count) VALUES ($1, $2, $3, $4) ON CONFLICT (org_id, day, meter) DO UPDATE SET count = meters.count + excluded.count',
      [orgId, meter, day, by],
    );
  }

  async list(orgId: string, fromDay: string, toDay: string): Promise<UsageRow[]> {
    return this.db.many<UsageRow>('SELECT meter, day, count FROM meters WHERE org_id = $1 AND day >= $2 AND day <= $3 ORDER BY day, meter', [orgId, fromDay, toDay]);
  }
}

export class PgCounters implements SharedCounterStore {
  constructor(private readonly db: PgDb) {}

  async hit(key: string, now: number, windowMs: number): Promise<{ count: number; windowStart: number }> {
    // One statement: concurrent hits from any replica serialize on the row and each sees its own count.
    const r = await this.db.one<{ count: number; window_start: number }>(
      `INSERT INTO rate_counters (key, window_start, count) VALUES ($1, $2, 1)
       ON CONFLICT (key) DO UPDATE SET
         count = CASE WHEN rate_counters.window_start + $3 <= $2 THEN 1 ELSE rate_counters.count + 1 END,
         window_start = CASE WHEN rate_counters.window_start + $3 <= $2 THEN $2 ELSE rate_counters.window_start END
       RETURNING count, window_start`,
      [key, now, windowMs],
    );
    return { count: r!.count, windowStart: r!.window_start };
  }

  async purge(before: number): Promise<number> {
    return (await this.db.query('DELETE FROM rate_counters WHERE window_start < $1', [before])).rowCount ?? 0;
  }
}
