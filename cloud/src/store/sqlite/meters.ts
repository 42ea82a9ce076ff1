import type { Db } from './db.js';
import type { MeterStore, UsageRow } from '../shared/types.js';

export class SqliteMeters implements MeterStore {
  private readonly inc;
  private readonly range;

  constructor(db: Db) {
    this.inc = db.prepare(
      'INSERT INTO meters (org_id, meter, day, count) VALUES (?, ?, ?, ?) ON CONFLICT (org_id, day, meter) DO UPDATE SET count = count + excluded.count',
    );
    this.range = db.prepare<[string, string, string], UsageRow>(
      'SELECT meter, day, count FROM meters WHERE org_id = ? AND day >= ? AND day <= ? ORDER BY day, meter',
    );
  }

  async increment(orgId: string, meter: string, day: string, by = 1): Promise<void> {
    this.inc.run(orgId, meter, day, by);
  }

  async list(orgId: string, fromDay: string, toDay: string): Promise<UsageRow[]> {
    return this.range.all(orgId, fromDay, toDay);
  }
}
