import { DAY, type Pressure, type ReplicaReport } from '@fleet/protocol';
import { decidePruned, decideReplicaReport, refuseReport } from '../../rules/episode-reports.js';
import { sameRuleSet } from '../../rules/routing.js';
import type { Db } from './db.js';
import * as syncRows from '../shared/sync-rows.js';
import { newClaimToken } from '../shared/webhook-rows.js';
import { eventAppender } from './events.js';
import type {
  DestinationHealth,
  DestinationRow,
  ForwardClaim,
  ForwardOutcome,
  ReplicaIngestResult,
  RouteRow,
  RoutingFacts,
  RoutingRuleRow,
  SyncHealthRow,
  SyncStore,
} from '../shared/sync-types.js';

export class SqliteSync implements SyncStore {
  private readonly appendEvent;

  constructor(private readonly db: Db) {
    this.appendEvent = eventAppender(db);
  }

  // ---- destinations ------------------------------------------------------------------------

  async createDestination(row: Omit<DestinationRow, 'revokedAt'>): Promise<void> {
    this.db
      .prepare('INSERT INTO destinations (id, org_id, type, url, secret_sealed, retention, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)')
      .run(row.id, row.orgId, row.type, row.url, row.secretSealed, row.retention, row.createdAt);
  }

  async getDestination(orgId: string, id: string): Promise<DestinationRow | undefined> {
    const r = this.db.prepare<[string, string], syncRows.DestinationDbRow>('SELECT * FROM destinations WHERE org_id = ? AND id = ?').get(orgId, id);
    return r && syncRows.destinationFromDb(r);
  }

  async listDestinations(orgId: string, now: number): Promise<(DestinationRow & DestinationHealth)[]> {
    const since = now - DAY;
    return this.db
      .prepare<[number, number, number, string], syncRows.DestinationDbRow & { forwards: number; deferrals: number; last_deferral: string | null }>(
        `SELECT d.*,
           (SELECT COUNT(*) FROM grant_forwards f WHERE f.destination_id = d.id AND f.at > ?) AS forwards,
           (SELECT COUNT(*) FROM grant_forwards f WHERE f.destination_id = d.id AND f.at > ? AND f.outcome = 'deferred') AS deferrals,
           (SELECT json_object('at', f.at, 'reason', f.reason) FROM grant_forwards f
             WHERE f.destination_id = d.id AND f.at > ? AND f.outcome = 'deferred' ORDER BY f.at DESC, f.id DESC LIMIT 1) AS last_deferral
         FROM destinations d WHERE d.org_id = ? ORDER BY d.created_at, d.id`,
      )
      .all(since, since, since, orgId)
      .map((r) => ({
        ...syncRows.destinationFromDb(r),
        lastForwardAt: r.last_forward_at,
        forwards24h: r.forwards,
        deferrals24h: r.deferrals,
        lastDeferral: r.last_deferral === null ? null : (JSON.parse(r.last_deferral) as { at: number; reason: string }),
      }));
  }

  async revokeDestination(orgId: string, id: string, at: number): Promise<boolean> {
    return this.db.prepare('UPDATE destinations SET revoked_at = ? WHERE org_id = ? AND id = ? AND revoked_at IS NULL').run(at, orgId, id).changes > 0;
  }

  // ---- routing rules -----------------------------------------------------------------------

  async createRule(row: Omit<RoutingRuleRow, 'position'>): Promise<RoutingRuleRow> {
    return this.db
      .transaction((): RoutingRuleRow => {
        const last = this.db.prepare<[string], { m: number | null }>('SELECT MAX(position) AS m FROM routing_rules WHERE org_id = ?').get(row.orgId)!.m ?? 0;
        const position = last + 1;
        this.db
          .prepare('INSERT INTO routing_rules (id, org_id, destination_id, match, position, created_at) VALUES (?, ?, ?, ?, ?, ?)')
          .run(row.id, row.orgId, row.destinationId, JSON.stringify(row.match), position, row.createdAt);
        return { ...row, position };
      })
      .immediate();
  }

  async listRules(orgId: string): Promise<RoutingRuleRow[]> {
    return this.db.prepare<[string], syncRows.RuleDbRow>('SELECT * FROM routing_rules WHERE org_id = ? ORDER BY position, id').all(orgId).map(syncRows.ruleFromDb);
  }

  async deleteRule(orgId: string, id: string): Promise<boolean> {
    return this.db
      .transaction((): boolean => {
        const gone = this.db.prepare<[string, string], { position: number }>('DELETE FROM routing_rules WHERE org_id = ? AND id = ? RETURNING position').get(orgId, id);
        if (!gone) return false;
        // Positions stay 1..n.
        this.db.prepare('UPDATE routing_rules SET position = position - 1 WHERE org_id = ? AND position > ?').run(orgId, gone.position);
        return true;
      })
      .immediate();
  }

  async reorderRules(orgId: string, ruleIds: readonly string[]): Promise<boolean> {
    return this.db
      .transaction((): boolean => {
        const current = this.db.prepare<[string], { id: string }>('SELECT id FROM routing_rules WHERE org_id = ?').all(orgId).map((r) => r.id);
        if (!sameRuleSet(current, ruleIds)) return false;
        const set = this.db.prepare('UPDATE routing_rules SET position = ? WHERE org_id = ? AND id = ?');
        ruleIds.forEach((id, i) => set.run(i + 1, orgId, id));
        return true;
      })
      .immediate();
  }

  // ---- routes ------------------------------------------------------------------------------

  async unroutedEpisodes(orgId: string, afterSeq: number, limit: number): Promise<{ seq: number; robotId: string; facts: RoutingFacts }[]> {
    const rows = this.db
      .prepare<
        [string, number, number],
        syncRows.UnroutedDbRow
      >(
        `SELECT ${syncRows.UNROUTED_COLUMNS}
         FROM episodes e
         WHERE e.org_id = ? AND e.seq > ? AND e.outcome != 'discarded' AND NOT EXISTS (SELECT 1 FROM routes r WHERE r.episode_seq = e.seq)
         ORDER BY e.seq LIMIT ?`,
      )
      .all(orgId, afterSeq, limit);
    return rows.map(syncRows.unroutedFromDb);
  }

  async addRoutes(routes: readonly RouteRow[]): Promise<RouteRow[]> {
    // Written only for a live destination of the episode's own organization, to an episode that
    // is not discarded and has no route yet: a routing pass that read the rules before a
    // revocation (here or in another process) cannot assign anything to the revoked destination.
    const insert = this.db.prepare(
      `INSERT INTO routes (episode_seq, destination_id, org_id, robot_id, decided_at)
       SELECT e.seq, d.id, e.org_id, e.robot_id, ?
       FROM episodes e JOIN destinations d ON d.id = ? AND d.org_id = e.org_id AND d.revoked_at IS NULL
       WHERE e.seq = ? AND e.org_id = ? AND e.robot_id = ? AND e.outcome != 'discarded'
       ON CONFLICT (episode_seq) DO NOTHING`,
    );
    return this.db
      .transaction(() => routes.filter((r) => insert.run(r.decidedAt, r.destinationId, r.episodeSeq, r.orgId, r.robotId).changes > 0))
      .immediate();
  }

  async dropRoutesTo(orgId: string, destinationId: string): Promise<number> {
    return this.db
      .prepare(
        `DELETE FROM routes WHERE org_id = ? AND destination_id = ?
           AND EXISTS (SELECT 1 FROM destinations d WHERE d.id = routes.destination_id AND d.revoked_at IS NOT NULL)
           AND NOT EXISTS (SELECT 1 FROM replicas p WHERE p.episode_seq = routes.episode_seq AND p.destination_id = routes.destination_id
                           AND p.state IN ('synced', 'verified'))`,
      )
      .run(orgId, destinationId).changes;
  }

  async pendingAssignments(robotId: string): Promise<RouteRow[]> {
    return this.db
      .prepare<[string], syncRows.RouteDbRow>(
        `SELECT ${syncRows.ROUTE_COLUMNS} FROM routes r
         JOIN episodes e ON e.seq = r.episode_seq
         JOIN destinations d ON d.id = r.destination_id AND d.revoked_at IS NULL
         WHERE r.robot_id = ?
           AND NOT EXISTS (SELECT 1 FROM replicas p WHERE p.episode_seq = r.episode_seq AND p.destination_id = r.destination_id AND p.state = 'verified')
         ORDER BY r.episode_seq`,
      )
      .all(robotId)
      .map(syncRows.routeFromDb);
  }

  async assignment(robotId: string, episodeId: string, destinationId: string): Promise<RouteRow | undefined> {
    const r = this.db
      .prepare<[string, string, string], syncRows.RouteDbRow>(
        `SELECT ${syncRows.ROUTE_COLUMNS} FROM episodes e
         JOIN routes r ON r.episode_seq = e.seq AND r.destination_id = ?
         JOIN destinations d ON d.id = r.destination_id AND d.revoked_at IS NULL
         WHERE e.id = ? AND e.robot_id = ?`,
      )
      .get(destinationId, episodeId, robotId);
    return r && syncRows.routeFromDb(r);
  }

  // ---- grant forwards ----------------------------------------------------------------------

  async recordForward(orgId: string, destinationId: string, at: number, outcome: ForwardOutcome): Promise<void> {
    this.db.transaction(() => {
      this.db
        .prepare('INSERT INTO grant_forwards (org_id, destination_id, at, outcome, grant_id, reason) VALUES (?, ?, ?, ?, ?, ?)')
        .run(orgId, destinationId, at, ...syncRows.forwardColumns(outcome));
      this.db
        .prepare('UPDATE destinations SET last_forward_at = MAX(COALESCE(last_forward_at, 0), ?) WHERE org_id = ? AND id = ?')
        .run(at, orgId, destinationId);
      this.db.prepare('DELETE FROM grant_forwards WHERE destination_id = ? AND at < ?').run(destinationId, at - syncRows.FORWARD_KEEP_MS);
    }).immediate();
  }

  async claimForward(orgId: string, episodeSeq: number, destinationId: string, now: number, leaseMs: number): Promise<ForwardClaim> {
    // IMMEDIATE: the read and the write of the claim hold the write lock, so two processes on
    // one data directory cannot both find it free.
    return this.db
      .transaction((): ForwardClaim => {
        const held = this.db
          .prepare<[number, string], { claimed_until: number }>('SELECT claimed_until FROM grant_forward_claims WHERE episode_seq = ? AND destination_id = ?')
          .get(episodeSeq, destinationId);
        if (held && held.claimed_until > now) return { kind: 'held', until: held.claimed_until };
        const token = newClaimToken();
        this.db
          .prepare(
            `INSERT INTO grant_forward_claims (episode_seq, destination_id, org_id, claim_token, claimed_until) VALUES (?, ?, ?, ?, ?)
             ON CONFLICT (episode_seq, destination_id) DO UPDATE SET org_id = excluded.org_id, claim_token = excluded.claim_token, claimed_until = excluded.claimed_until`,
          )
          .run(episodeSeq, destinationId, orgId, token, now + leaseMs);
        return { kind: 'claimed', token, until: now + leaseMs };
      })
      .immediate();
  }

  async releaseForward(orgId: string, episodeSeq: number, destinationId: string, token: string): Promise<boolean> {
    return (
      this.db
        .prepare('DELETE FROM grant_forward_claims WHERE episode_seq = ? AND destination_id = ? AND org_id = ? AND claim_token = ?')
        .run(episodeSeq, destinationId, orgId, token).changes > 0
    );
  }

  async claimGrantId(destinationId: string, grantId: string, at: number): Promise<boolean> {
    return this.db.prepare('INSERT OR IGNORE INTO grant_ids (destination_id, grant_id, claimed_at) VALUES (?, ?, ?)').run(destinationId, grantId, at).changes > 0;
  }

  async grantIdUsed(destinationId: string, grantId: string): Promise<boolean> {
    return this.db.prepare('SELECT 1 FROM grant_ids WHERE destination_id = ? AND grant_id = ?').get(destinationId, grantId) !== undefined;
  }

  async notePressure(robotId: string, p: Pressure, at: number): Promise<void> {
    this.db
      .prepare(
        `INSERT INTO robot_pressure (robot_id, free_bytes, backlog_bytes, hours_to_full, reported_at) VALUES (?, ?, ?, ?, ?)
         ON CONFLICT (robot_id) DO UPDATE SET free_bytes = excluded.free_bytes, backlog_bytes = excluded.backlog_bytes,
           hours_to_full = excluded.hours_to_full, reported_at = excluded.reported_at
         WHERE excluded.reported_at >= robot_pressure.reported_at`,
      )
      .run(robotId, p.free_bytes, p.backlog_bytes, p.hours_to_full, at);
  }

  // ---- replicas ----------------------------------------------------------------------------

  async applyReplicaReport(robotId: string, report: ReplicaReport, receivedAt: number): Promise<ReplicaIngestResult> {
    return this.db.transaction((): ReplicaIngestResult => this.applyReport(robotId, report, receivedAt)).immediate();
  }

  private applyReport(robotId: string, report: ReplicaReport, receivedAt: number): ReplicaIngestResult {
    const facts = this.db
      .prepare<[{ dest: string; ep: string }], syncRows.ReplicaFactsDbRow>(
        `SELECT ${syncRows.replicaFactColumns('@dest')} FROM episodes e LEFT JOIN replicas p ON p.episode_seq = e.seq AND p.destination_id = @dest WHERE e.id = @ep`,
      )
      .get({ dest: report.destination_id, ep: report.episode_id });
    const decision = decideReplicaReport(robotId, report, syncRows.replicaFactsFromDb(facts));
    if (decision.result !== 'applied') return decision.result;
    const { episode, write } = decision;
    this.db
      .prepare(
        `INSERT INTO replicas (episode_seq, destination_id, state, grant_id, error, object_key, updated_at, reported_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (episode_seq, destination_id) DO UPDATE SET state = excluded.state, grant_id = excluded.grant_id, error = excluded.error,
           object_key = excluded.object_key, updated_at = excluded.updated_at, reported_at = excluded.reported_at`,
      )
      .run(episode.seq, report.destination_id, write.state, write.grantId, write.error, write.objectKey, receivedAt, write.reportedAt);
    for (const event of write.events) this.appendEvent(episode.orgId, event, receivedAt);
    return 'applied';
  }

  private reportedEpisode(episodeId: string): syncRows.ReportedEpisodeDbRow | undefined {
    return this.db.prepare<[string], syncRows.ReportedEpisodeDbRow>(`SELECT ${syncRows.REPORTED_EPISODE_COLUMNS} FROM episodes e WHERE e.id = ?`).get(episodeId);
  }

  async markLocalMissing(robotId: string, episodeId: string): Promise<'applied' | 'unchanged' | 'unknown_episode' | 'conflict'> {
    const episode = syncRows.reportedEpisodeFromDb(this.reportedEpisode(episodeId));
    const refused = refuseReport(episode, robotId);
    if (refused) return refused;
    return this.db.prepare('UPDATE episodes SET local_missing = 1 WHERE seq = ? AND local_missing = 0').run(episode!.seq).changes > 0 ? 'applied' : 'unchanged';
  }

  async markPruned(robotId: string, episodeId: string, prunedAt: number, receivedAt: number): Promise<'applied' | 'unchanged' | 'unknown_episode' | 'conflict'> {
    return this.db
      .transaction(() => {
        const row = this.reportedEpisode(episodeId);
        const decision = decidePruned(robotId, episodeId, syncRows.reportedEpisodeFromDb(row), row?.pruned_at ?? null);
        if (decision.result !== 'applied') return decision.result;
        this.db.prepare('UPDATE episodes SET pruned_at = ? WHERE seq = ?').run(prunedAt, decision.episode.seq);
        this.appendEvent(decision.episode.orgId, decision.event, receivedAt);
        return 'applied' as const;
      })
      .immediate();
  }

  async markGranted(orgId: string, episodeSeq: number, destinationId: string, grantId: string, objectKey: string | null, at: number): Promise<void> {
    // A new grant for a replica still uploading (URLs expired, resumed) takes the new grant id;
    // a replica already synced or verified is left as it is. The grant is recorded as issued
    // either way: the robot may report under it.
    this.db.transaction(() => {
      this.db
        .prepare(
          `INSERT OR IGNORE INTO issued_grants (episode_seq, destination_id, grant_id, issued_at)
           SELECT seq, ?, ?, ? FROM episodes WHERE seq = ? AND org_id = ?`,
        )
        .run(destinationId, grantId, at, episodeSeq, orgId);
      this.db
        .prepare(
          `INSERT INTO replicas (episode_seq, destination_id, state, grant_id, error, object_key, updated_at, reported_at)
           SELECT seq, ?, 'granted', ?, NULL, ?, ?, NULL FROM episodes WHERE seq = ? AND org_id = ?
           ON CONFLICT (episode_seq, destination_id) DO UPDATE SET grant_id = excluded.grant_id,
             object_key = COALESCE(excluded.object_key, replicas.object_key), updated_at = excluded.updated_at
           WHERE replicas.state IN ('granted', 'syncing')`,
        )
        .run(destinationId, grantId, objectKey, at, episodeSeq, orgId);
    }).immediate();
  }

  async grantIssued(robotId: string, episodeId: string, destinationId: string, grantId: string): Promise<boolean> {
    const hit = this.db
      .prepare(
        `SELECT 1 FROM episodes e JOIN issued_grants g ON g.episode_seq = e.seq AND g.destination_id = ? AND g.grant_id = ?
         WHERE e.id = ? AND e.robot_id = ?`,
      )
      .get(destinationId, grantId, episodeId, robotId);
    return hit !== undefined;
  }

  // ---- sync health -------------------------------------------------------------------------

  async syncHealth(orgId: string, now: number, opts: { robotIds?: readonly string[] } = {}): Promise<SyncHealthRow[]> {
    // A list of ids is one JSON parameter (json_each), so the statement is the same for any count;
    // with it, the robots' episodes are read through episodes_robot instead of all of the org's.
    const only = opts.robotIds === undefined ? [] : [JSON.stringify(opts.robotIds)];
    const onlyEpisodes = opts.robotIds === undefined ? '' : ' AND e.robot_id IN (SELECT value FROM json_each(?))';
    const onlyRobots = opts.robotIds === undefined ? '' : ' AND id IN (SELECT value FROM json_each(?))';
    const counts = this.db
      .prepare<[number, string, ...string[]], syncRows.SyncCountsDbRow>(
        `SELECT robot_id, COUNT(*) AS reported, SUM(u) AS unverified, SUM(u * (reported_at < ?)) AS over, SUM(u * bytes) AS bytes, SUM(local_missing) AS missing
         FROM (SELECT e.robot_id, e.reported_at, e.local_missing, COALESCE(json_extract(e.manifest, '$.total_bytes'), 0) AS bytes,
                 (e.outcome != 'discarded' AND NOT EXISTS (SELECT 1 FROM replicas p WHERE p.episode_seq = e.seq AND p.state = 'verified')) AS u
               FROM episodes e WHERE e.org_id = ?${onlyEpisodes})
         GROUP BY robot_id`,
      )
      .all(now - syncRows.UNVERIFIED_ALERT_MS, orgId, ...only);
    const robotIds = this.db.prepare<[string, ...string[]], string>(`SELECT id FROM robots WHERE org_id = ?${onlyRobots}`).pluck().all(orgId, ...only);
    const rows = syncRows.syncHealthRows(robotIds, counts);
    const pressure = this.db.prepare<[string], syncRows.PressureDbRow>(
      'SELECT robot_id, free_bytes, backlog_bytes, hours_to_full, reported_at FROM robot_pressure WHERE robot_id IN (SELECT value FROM json_each(?))',
    );
    return syncRows.withPressure(rows, pressure.all(JSON.stringify(rows.map((r) => r.robotId))));
  }
}
