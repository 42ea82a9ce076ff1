import type { GaugeStore, ReplicaGaugeState } from '../shared/types.js';
import type { PgDb } from './db.js';

/** Whole-service counts for the metrics scrape (sqlite/gauges.ts on PostgreSQL). */
export class PgGauges implements GaugeStore {
  constructor(private readonly db: PgDb) {}

  async connectedRobots(): Promise<number> {
    return (await this.db.one<{ n: number }>('SELECT count(*) AS n FROM robots WHERE connected'))!.n;
  }

  async pendingDeliveries(): Promise<number> {
    return (await this.db.one<{ n: number }>(`SELECT count(*) AS n FROM webhook_deliveries WHERE state = 'pending'`))!.n;
  }

  async replicasByState(): Promise<Record<ReplicaGaugeState, number>> {
    // A route without a replica row is an assignment the robot has no grant for yet.
    const rows = await this.db.many<{ state: ReplicaGaugeState; n: number }>(
      `SELECT coalesce(r.state, 'assigned') AS state, count(*) AS n
       FROM routes ro LEFT JOIN replicas r ON r.episode_seq = ro.episode_seq AND r.destination_id = ro.destination_id
       GROUP BY 1`,
    );
    const out: Record<ReplicaGaugeState, number> = { assigned: 0, granted: 0, syncing: 0, synced: 0, verified: 0 };
    for (const r of rows) out[r.state] = r.n;
    return out;
  }
}
