import { DAY, type Pressure, type ReplicaReport } from '@fleet/protocol';
import { decidePruned, decideReplicaReport, refuseReport } from '../../rules/episode-reports.js';
import { sameRuleSet } from '../../rules/routing.js';
import * as syncRows from '../shared/sync-rows.js';
import { newClaimToken } from '../shared/webhook-rows.js';
import type { DestinationHealth, DestinationRow, ForwardClaim, ForwardOutcome, ReplicaIngestResult, RouteRow, RoutingFacts, RoutingRuleRow, SyncHealthRow, SyncStore } from '../shared/sync-types.js';
import type { PgDb, Sql } from './db.js';
import { appendEvents } from './events.js';

/** Key space (first key of the two-key advisory lock) of an organization's rule positions. */
const ORG_RULES_LOCK = 7_315_102;

type MarkResult = 'applied' | 'unchanged' | 'unknown_episode' | 'conflict';

/**
 * Cloud sync on PostgreSQL, the SQLite store's behaviour (sqlite/sync.ts) with the races of
 * several replicas closed in the database: reports on one episode are serialized by its row lock,
 * route and grant-id writes are first-writer-wins on their keys, rule positions are renumbered
 * under a per-organization lock, and a route is only written while its destination's row is
 * share-locked live (a revocation waits, then drops it).
 */
export class PgSync implements SyncStore {
  constructor(private readonly db: PgDb) {}

  // ---- destinations ------------------------------------------------------------------------

  async createDestination(row: Omit<DestinationRow, 'revokedAt'>): Promise<void> {
    await this.db.query('INSERT INTO destinations (id, org_id, type, url, secret_sealed, retention, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)', [
      row.id,
      row.orgId,
      row.type,
      row.url,
      row.secretSealed,
      row.retention,
      row.createdAt,
    ]);
  }

  async getDestination(orgId: string, id: string): Promise<DestinationRow | undefined> {
    const r = await this.db.one<syncRows.DestinationDbRow>('SELECT * FROM destinations WHERE org_id = $1 AND id = $2', [orgId, id]);
    return r && syncRows.destinationFromDb(r);
  }

  async listDestinations(orgId: string, now: number): Promise<(DestinationRow & DestinationHealth)[]> {
    const rows = await this.db.many<syncRows.DestinationDbRow & { forwards: number; deferrals: number; deferral_at: number | null; deferral_reason: string | null }>(
      `SELECT d.*,
         (SELECT COUNT(*) FROM grant_forwards f WHERE f.destination_id = d.id AND f.at > $1) AS forwards,
         (SELECT COUNT(*) FROM grant_forwards f WHERE f.destination_id = d.id AND f.at > $1 AND f.outcome = 'deferred') AS deferrals,
         l.at AS deferral_at, l.reason AS deferral_reason
       FROM destinations d
       LEFT JOIN LATERAL (SELECT f.at, f.reason FROM grant_forwards f
                          WHERE f.destination_id = d.id AND f.at > $1 AND f.outcome = 'deferred' ORDER BY f.at DESC, f.id DESC LIMIT 1) l ON true
       WHERE d.org_id = $2 ORDER BY d.created_at, d.id`,
      [now - DAY, orgId],
    );
    return rows.map((r) => ({
      ...syncRows.destinationFromDb(r),
      lastForwardAt: r.last_forward_at,
      forwards24h: r.forwards,
      deferrals24h: r.deferrals,
      lastDeferral: r.deferral_at === null ? null : { at: r.deferral_at, reason: r.deferral_reason! },
    }));
  }

  async revokeDestination(orgId: string, id: string, at: number): Promise<boolean> {
    const r = await this.db.query('UPDATE destinations SET revoked_at = $1 WHERE org_id = $2 AND id = $3 AND revoked_at IS NULL', [at, orgId, id]);
    return (r.rowCount ?? 0) > 0;
  }

  // ---- routing rules -----------------------------------------------------------------------

  private async lockRules(sql: Sql, orgId: string): Promise<void> {
    await sql.query('SELECT pg_advisory_xact_lock($1, hashtext($2))', [ORG_RULES_LOCK, orgId]);
  }

  async createRule(row: Omit<RoutingRuleRow, 'position'>): Promise<RoutingRuleRow> {
    return this.db.tx(async (sql) => {
      await this.lockRules(sql, row.orgId);
      const last = (await sql.query<{ m: number | null }>('SELECT MAX(position) AS m FROM routing_rules WHERE org_id = $1', [row.orgId])).rows[0]?.m ?? 0;
      const position = last + 1;
      await sql.query('INSERT INTO routing_rules (id, org_id, destination_id, match, position, created_at) VALUES ($1, $2, $3, $4, $5, $6)', [
        row.id,
        row.orgId,
        row.destinationId,
        JSON.stringify(row.match),
        position,
        row.createdAt,
      ]);
      return { ...row, position };
    });
  }

  async listRules(orgId: string): Promise<RoutingRuleRow[]> {
    return (await this.db.many<syncRows.RuleDbRow>('SELECT * FROM routing_rules WHERE org_id = $1 ORDER BY position, id', [orgId])).map(syncRows.ruleFromDb);
  }

  async deleteRule(orgId: string, id: string): Promise<boolean> {
    return this.db.tx(async (sql) => {
      await this.lockRules(sql, orgId);
      const gone = (await sql.query<{ position: number }>('DELETE FROM routing_rules WHERE org_id = $1 AND id = $2 RETURNING position', [orgId, id])).rows[0];
      if (!gone) return false;
      // Positions stay 1..n.
      await sql.query('UPDATE routing_rules SET position = position - 1 WHERE org_id = $1 AND position > $2', [orgId, gone.position]);
      return true;
    });
  }

  async reorderRules(orgId: string, ruleIds: readonly string[]): Promise<boolean> {
    return this.db.tx(async (sql) => {
      await this.lockRules(sql, orgId);
      const current = (await sql.query<{ id: string }>('SELECT id FROM routing_rules WHERE org_id = $1', [orgId])).rows.map((r) => r.id);
      if (!sameRuleSet(current, ruleIds)) return false;
      await sql.query(
        `UPDATE routing_rules r SET position = o.position FROM unnest($2::text[]) WITH ORDINALITY AS o(id, position)
         WHERE r.org_id = $1 AND r.id = o.id`,
        [orgId, ruleIds],
      );
      return true;
    });
  }

  // ---- routes ------------------------------------------------------------------------------

  async unroutedEpisodes(orgId: string, afterSeq: number, limit: number): Promise<{ seq: number; robotId: string; facts: RoutingFacts }[]> {
    const rows = await this.db.many<syncRows.UnroutedDbRow>(
      `SELECT ${syncRows.UNROUTED_COLUMNS}
       FROM episodes e
       WHERE e.org_id = $1 AND e.seq > $2 AND e.outcome != 'discarded' AND NOT EXISTS (SELECT 1 FROM routes r WHERE r.episode_seq = e.seq)
       ORDER BY e.seq LIMIT $3`,
      [orgId, afterSeq, limit],
    );
    return rows.map(syncRows.unroutedFromDb);
  }

  async addRoutes(routes: readonly RouteRow[]): Promise<RouteRow[]> {
    if (routes.length === 0) return [];
    return this.db.tx(async (sql) => {
      // Live destinations, share-locked to commit: a revocation (here or in another replica)
      // either committed first (the row is re-read revoked and nothing is written) or waits for
      // this commit, and the dropRoutesTo after it sees these routes.
      const live = (
        await sql.query<{ id: string }>('SELECT id FROM destinations WHERE id = ANY($1) AND revoked_at IS NULL FOR SHARE', [[...new Set(routes.map((r) => r.destinationId))]])
      ).rows.map((r) => r.id);
      if (live.length === 0) return [];
      // First writer wins on the episode (its primary key): replicas routing at once agree.
      const written = await sql.query<{ episode_seq: number }>(
        `INSERT INTO routes (episode_seq, destination_id, org_id, robot_id, decided_at)
         SELECT e.seq, d.id, e.org_id, e.robot_id, r.decided_at
         FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::bigint[]) AS r(seq, dest, org, robot, decided_at)
         JOIN episodes e ON e.seq = r.seq AND e.org_id = r.org AND e.robot_id = r.robot AND e.outcome != 'discarded'
         JOIN destinations d ON d.id = r.dest AND d.org_id = e.org_id AND d.id = ANY($6)
         ON CONFLICT (episode_seq) DO NOTHING
         RETURNING episode_seq, destination_id`,
        [routes.map((r) => r.episodeSeq), routes.map((r) => r.destinationId), routes.map((r) => r.orgId), routes.map((r) => r.robotId), routes.map((r) => r.decidedAt), live],
      );
      const added = new Set(written.rows.map((r) => r.episode_seq));
      // The first of several routes asked for one episode is the one written (as on SQLite).
      return routes.filter((r) => added.delete(r.episodeSeq));
    });
  }

  async dropRoutesTo(orgId: string, destinationId: string): Promise<number> {
    const r = await this.db.query(
      `DELETE FROM routes WHERE org_id = $1 AND destination_id = $2
         AND EXISTS (SELECT 1 FROM destinations d WHERE d.id = routes.destination_id AND d.revoked_at IS NOT NULL)
         AND NOT EXISTS (SELECT 1 FROM replicas p WHERE p.episode_seq = routes.episode_seq AND p.destination_id = routes.destination_id
                         AND p.state IN ('synced', 'verified'))`,
      [orgId, destinationId],
    );
    return r.rowCount ?? 0;
  }

  async pendingAssignments(robotId: string): Promise<RouteRow[]> {
    const rows = await this.db.many<syncRows.RouteDbRow>(
      `SELECT ${syncRows.ROUTE_COLUMNS} FROM routes r
       JOIN episodes e ON e.seq = r.episode_seq
       JOIN destinations d ON d.id = r.destination_id AND d.revoked_at IS NULL
       WHERE r.robot_id = $1
         AND NOT EXISTS (SELECT 1 FROM replicas p WHERE p.episode_seq = r.episode_seq AND p.destination_id = r.destination_id AND p.state = 'verified')
       ORDER BY r.episode_seq`,
      [robotId],
    );
    return rows.map(syncRows.routeFromDb);
  }

  async assignment(robotId: string, episodeId: string, destinationId: string): Promise<RouteRow | undefined> {
    const r = await this.db.one<syncRows.RouteDbRow>(
      `SELECT ${syncRows.ROUTE_COLUMNS} FROM episodes e
       JOIN routes r ON r.episode_seq = e.seq AND r.destination_id = $1
       JOIN destinations d ON d.id = r.destination_id AND d.revoked_at IS NULL
       WHERE e.id = $2 AND e.robot_id = $3`,
      [destinationId, episodeId, robotId],
    );
    return r && syncRows.routeFromDb(r);
  }

  // ---- grant forwards ----------------------------------------------------------------------

  async recordForward(orgId: string, destinationId: string, at: number, outcome: ForwardOutcome): Promise<void> {
    await this.db.tx(async (sql) => {
      await sql.query('INSERT INTO grant_forwards (org_id, destination_id, at, outcome, grant_id, reason) VALUES ($1, $2, $3, $4, $5, $6)', [
        orgId,
        destinationId,
        at,
        ...syncRows.forwardColumns(outcome),
      ]);
      await sql.query('UPDATE destinations SET last_forward_at = GREATEST(COALESCE(last_forward_at, 0), $1) WHERE org_id = $2 AND id = $3', [at, orgId, destinationId]);
      await sql.query('DELETE FROM grant_forwards WHERE destination_id = $1 AND at < $2', [destinationId, at - syncRows.FORWARD_KEEP_MS]);
    });
  }

  async claimForward(orgId: string, episodeSeq: number, destinationId: string, now: number, leaseMs: number): Promise<ForwardClaim> {
    const token = newClaimToken();
    // One statement: a claim racing another waits on the other's row, then sees its lease
    // live and takes nothing (the WHERE of DO UPDATE is checked against the newest row).
    for (let attempt = 0; attempt < 3; attempt++) {
      const won = await this.db.one<{ claimed_until: number }>(
        `INSERT INTO grant_forward_claims (episode_seq, destination_id, org_id, claim_token, claimed_until) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (episode_seq, destination_id) DO UPDATE SET org_id = EXCLUDED.org_id, claim_token = EXCLUDED.claim_token, claimed_until = EXCLUDED.claimed_until
           WHERE grant_forward_claims.claimed_until <= $6
         RETURNING claimed_until`,
        [episodeSeq, destinationId, orgId, token, now + leaseMs, now],
      );
      if (won) return { kind: 'claimed', token, until: now + leaseMs };
      const held = await this.db.one<{ claimed_until: number }>('SELECT claimed_until FROM grant_forward_claims WHERE episode_seq = $1 AND destination_id = $2', [
        episodeSeq,
        destinationId,
      ]);
      if (held && held.claimed_until > now) return { kind: 'held', until: held.claimed_until };
      // Released (or run out) between the two statements: claim again.
    }
    // Claimed and released by others three times over within this call: some forward is busy
    // with it, so the caller waits a second rather than spin.
    return { kind: 'held', until: now + 1000 };
  }

  async releaseForward(orgId: string, episodeSeq: number, destinationId: string, token: string): Promise<boolean> {
    const r = await this.db.query('DELETE FROM grant_forward_claims WHERE episode_seq = $1 AND destination_id = $2 AND org_id = $3 AND claim_token = $4', [
      episodeSeq,
      destinationId,
      orgId,
      token,
    ]);
    return (r.rowCount ?? 0) > 0;
  }

  async claimGrantId(destinationId: string, grantId: string, at: number): Promise<boolean> {
    // First writer wins: of two replicas handed the same id at once, exactly one claims it.
    const r = await this.db.query('INSERT INTO grant_ids (destination_id, grant_id, claimed_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING RETURNING 1', [destinationId, grantId, at]);
    return (r.rowCount ?? 0) > 0;
  }

  async grantIdUsed(destinationId: string, grantId: string): Promise<boolean> {
    return (await this.db.one('SELECT 1 FROM grant_ids WHERE destination_id = $1 AND grant_id = $2', [destinationId, grantId])) !== undefined;
  }

  async notePressure(robotId: string, p: Pressure, at: number): Promise<void> {
    await this.db.query(
      `INSERT INTO robot_pressure (robot_id, free_bytes, backlog_bytes, hours_to_full, reported_at) VALUES ($1, $2, $3, $4, $5)
       ON CONFLICT (robot_id) DO UPDATE SET free_bytes = excluded.free_bytes, backlog_bytes = excluded.backlog_bytes,
         hours_to_full = excluded.hours_to_full, reported_at = excluded.reported_at
       WHERE excluded.reported_at >= robot_pressure.reported_at`,
      [robotId, p.free_bytes, p.backlog_bytes, p.hours_to_full, at],
    );
  }

  // ---- replicas ----------------------------------------------------------------------------

  async applyReplicaReport(robotId: string, report: ReplicaReport, receivedAt: number): Promise<ReplicaIngestResult> {
    return this.db.tx(async (sql): Promise<ReplicaIngestResult> => {
      // The episode row is locked to commit: reports, prunes and marks on one episode go one at a
      // time. The facts are read by the next statement, which sees what a report that held the
      // lock before committed (a locking read that waited sees its joined rows as they were when
      // it started).
      await sql.query('SELECT 1 FROM episodes WHERE id = $1 FOR NO KEY UPDATE', [report.episode_id]);
      const facts = (
        await sql.query<syncRows.ReplicaFactsDbRow>(
          `SELECT ${syncRows.replicaFactColumns('$1')} FROM episodes e LEFT JOIN replicas p ON p.episode_seq = e.seq AND p.destination_id = $1 WHERE e.id = $2`,
          [report.destination_id, report.episode_id],
        )
      ).rows[0];
      const decision = decideReplicaReport(robotId, report, syncRows.replicaFactsFromDb(facts));
      if (decision.result !== 'applied') return decision.result;
      const { episode, write } = decision;
      await sql.query(
        `INSERT INTO replicas (episode_seq, destination_id, state, grant_id, error, object_key, updated_at, reported_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         ON CONFLICT (episode_seq, destination_id) DO UPDATE SET state = excluded.state, grant_id = excluded.grant_id, error = excluded.error,
           object_key = excluded.object_key, updated_at = excluded.updated_at, reported_at = excluded.reported_at`,
        [episode.seq, report.destination_id, write.state, write.grantId, write.error, write.objectKey, receivedAt, write.reportedAt],
      );
      await appendEvents(sql, write.events.map((event) => ({ orgId: episode.orgId, event, at: receivedAt })));
      return 'applied';
    });
  }

  async markLocalMissing(robotId: string, episodeId: string): Promise<MarkResult> {
    const episode = syncRows.reportedEpisodeFromDb(await this.db.one<syncRows.ReportedEpisodeDbRow>(`SELECT ${syncRows.REPORTED_EPISODE_COLUMNS} FROM episodes e WHERE e.id = $1`, [episodeId]));
    const refused = refuseReport(episode, robotId);
    if (refused) return refused;
    const r = await this.db.query('UPDATE episodes SET local_missing = 1 WHERE seq = $1 AND local_missing = 0', [episode!.seq]);
    return (r.rowCount ?? 0) > 0 ? 'applied' : 'unchanged';
  }

  async markPruned(robotId: string, episodeId: string, prunedAt: number, receivedAt: number): Promise<MarkResult> {
    return this.db.tx(async (sql): Promise<MarkResult> => {
      const row = (await sql.query<syncRows.ReportedEpisodeDbRow>(`SELECT ${syncRows.REPORTED_EPISODE_COLUMNS} FROM episodes e WHERE e.id = $1 FOR NO KEY UPDATE`, [episodeId])).rows[0];
      const decision = decidePruned(robotId, episodeId, syncRows.reportedEpisodeFromDb(row), row?.pruned_at ?? null);
      if (decision.result !== 'applied') return decision.result;
      await sql.query('UPDATE episodes SET pruned_at = $1 WHERE seq = $2', [prunedAt, decision.episode.seq]);
      await appendEvents(sql, [{ orgId: decision.episode.orgId, event: decision.event, at: receivedAt }]);
      return 'applied';
    });
  }

  async markGranted(orgId: string, episodeSeq: number, destinationId: string, grantId: string, objectKey: string | null, at: number): Promise<void> {
    // A new grant for a replica still uploading takes the new grant id; synced or verified stays.
    // The grant is recorded as issued either way (see sqlite/sync.ts).
    await this.db.tx(async (sql) => {
      await sql.query(
        `INSERT INTO issued_grants (episode_seq, destination_id, grant_id, issued_at)
         SELECT seq, $1, $2, $3 FROM episodes WHERE seq = $4 AND org_id = $5
         ON CONFLICT DO NOTHING`,
        [destinationId, grantId, at, episodeSeq, orgId],
      );
      await sql.query(
        `INSERT INTO replicas (episode_seq, destination_id, state, grant_id, error, object_key, updated_at, reported_at)
         SELECT seq, $1, 'granted', $2, NULL, $3, $4, NULL FROM episodes WHERE seq = $5 AND org_id = $6
         ON CONFLICT (episode_seq, destination_id) DO UPDATE SET grant_id = excluded.grant_id,
           object_key = COALESCE(excluded.object_key, replicas.object_key), updated_at = excluded.updated_at
         WHERE replicas.state IN ('granted', 'syncing')`,
        [destinationId, grantId, objectKey, at, episodeSeq, orgId],
      );
    });
  }

  async grantIssued(robotId: string, episodeId: string, destinationId: string, grantId: string): Promise<boolean> {
    const hit = await this.db.one(
      `SELECT 1 FROM episodes e JOIN issued_grants g ON g.episode_seq = e.seq AND g.destination_id = $1 AND g.grant_id = $2
       WHERE e.id = $3 AND e.robot_id = $4`,
      [destinationId, grantId, episodeId, robotId],
    );
    return hit !== undefined;
  }

  // ---- sync health -------------------------------------------------------------------------

  async syncHealth(orgId: string, now: number, opts: { robotIds?: readonly string[] } = {}): Promise<SyncHealthRow[]> {
    const only = opts.robotIds === undefined ? [] : [[...opts.robotIds]];
    const onlyEpisodes = opts.robotIds === undefined ? '' : ' AND e.robot_id = ANY($3::text[])';
    const counts = await this.db.many<syncRows.SyncCountsDbRow>(
      `SELECT robot_id, COUNT(*) AS reported, SUM(u)::bigint AS unverified, SUM(CASE WHEN reported_at < $1 THEN u ELSE 0 END)::bigint AS over,
         SUM(u * bytes)::bigint AS bytes, SUM(local_missing)::bigint AS missing
       FROM (SELECT e.robot_id, e.reported_at, e.local_missing, COALESCE((e.manifest::jsonb ->> 'total_bytes')::numeric, 0) AS bytes,
               CASE WHEN e.outcome != 'discarded' AND NOT EXISTS (SELECT 1 FROM replicas p WHERE p.episode_seq = e.seq AND p.state = 'verified') THEN 1 ELSE 0 END AS u
             FROM episodes e WHERE e.org_id = $2${onlyEpisodes}) x
       GROUP BY robot_id`,
      [now - syncRows.UNVERIFIED_ALERT_MS, orgId, ...only],
    );
    const onlyRobots = opts.robotIds === undefined ? '' : ' AND id = ANY($2::text[])';
    const robotIds = (await this.db.many<{ id: string }>(`SELECT id FROM robots WHERE org_id = $1${onlyRobots}`, [orgId, ...only])).map((r) => r.id);
    const rows = syncRows.syncHealthRows(robotIds, counts);
    if (rows.length === 0) return rows;
    const pressure = await this.db.many<syncRows.PressureDbRow>('SELECT robot_id, free_bytes, backlog_bytes, hours_to_full, reported_at FROM robot_pressure WHERE robot_id = ANY($1)', [
      rows.map((r) => r.robotId),
    ]);
    return syncRows.withPressure(rows, pressure);
  }
}
