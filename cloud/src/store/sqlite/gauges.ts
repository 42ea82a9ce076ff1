import type { Db } from './db.js';
import type { GaugeStore, ReplicaGaugeState } from '../shared/types.js';

/** Whole-service counts for the metrics scrape: one small aggregate query each, over every organization. */
export class SqliteGauges implements GaugeStore {
  constructor(private readonly db: Db) {}

  async connectedRobots(): Promise<number> {
    return this.db.prepare('SELECT count(*) FROM robots WHERE connected = 1').pluck().get() as number;
  }

  async pendingDeliveries(): Promise<number> {
    return this.db.prepare(`SELECT count(*) FROM webhook_deliveries WHERE state = 'pending'`).pluck().get() as number;
  }

  async replicasByState(): Promise<Record<ReplicaGaugeState, number>> {
    // A route without a replica row is an assignment the robot has no grant for yet.
    const rows = this.db
      .prepare(
        `SELECT coalesce(r.state, 'assigned') AS state, count(*) AS n
         FROM routes ro LEFT JOIN replicas r ON r.episode_seq = ro.episode_seq AND r.destination_id = ro.destination_id
         GROUP BY 1`,
      )
      .all() as { state: ReplicaGaugeState; n: number }[];
    const out: Record<ReplicaGaugeState, number> = { assigned: 0, granted: 0, syncing: 0, synced: 0, verified: 0 };
    for (const r of rows) out[r.state] = r.n;
    return out;
  }
}
