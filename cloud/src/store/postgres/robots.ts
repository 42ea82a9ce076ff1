import type { LoggedEvent, RobotPresence } from '../../rules/events.js';
import { robotListSql, type RobotListQuery } from '../shared/robot-list-query.js';
import { robotFromDb, tokenFromDb, type RobotDbRow, type TokenDbRow } from '../shared/rows.js';
import { statusApplies, statusAtAfter } from '../../rules/status-order.js';
import type { EnrollmentTokenRow, EnrollOutcome, RobotRow, RobotStatusUpdate, RobotStore } from '../shared/types.js';
import type { PgDb } from './db.js';
import { appendEvents } from './events.js';

export class PgRobots implements RobotStore {
  constructor(private readonly db: PgDb) {}

  async createEnrollmentToken(row: Omit<EnrollmentTokenRow, 'uses' | 'revokedAt'>): Promise<void> {
    await this.db.query(
      'INSERT INTO enrollment_tokens (id, org_id, token_hash, token_prefix, name_prefix, max_uses, expires_at, created_by, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)',
      [row.id, row.orgId, row.tokenHash, row.tokenPrefix, row.namePrefix, row.maxUses, row.expiresAt, row.createdBy, row.createdAt],
    );
  }

  async listEnrollmentTokens(orgId: string, after: string | null, limit: number): Promise<EnrollmentTokenRow[]> {
    const rows = await this.db.many<TokenDbRow>('SELECT * FROM enrollment_tokens WHERE org_id = $1 AND id > $2 ORDER BY id LIMIT $3', [orgId, after ?? '', limit]);
    return rows.map(tokenFromDb);
  }

  async revokeEnrollmentToken(orgId: string, id: string, at: number): Promise<EnrollmentTokenRow | undefined> {
    const t = await this.db.one<TokenDbRow>('UPDATE enrollment_tokens SET revoked_at = COALESCE(revoked_at, $1) WHERE org_id = $2 AND id = $3 RETURNING *', [at, orgId, id]);
    return t && tokenFromDb(t);
  }

  async enroll(args: Parameters<RobotStore['enroll']>[0]): Promise<EnrollOutcome> {
    // The limit may need an async lookup; read it before the transaction, check it inside.
    const pre = await this.db.one<{ org_id: string }>('SELECT org_id FROM enrollment_tokens WHERE token_hash = $1', [args.tokenHash]);
    const limit = pre ? await args.robotLimit(pre.org_id) : undefined;
    return this.db.tx(async (sql): Promise<EnrollOutcome> => {
      // The token's row lock serializes enrollments with one token (its uses). The org's robot
      // limit is counted under a per-organization advisory lock, so two replicas enrolling with
      // two different tokens of one organization cannot both take the last place.
      const t = (await sql.query<TokenDbRow>('SELECT * FROM enrollment_tokens WHERE token_hash = $1 FOR UPDATE', [args.tokenHash])).rows[0];
      if (!t) return { kind: 'token_invalid' };
      if (t.revoked_at !== null) return { kind: 'token_revoked' };
      if (t.expires_at <= args.now) return { kind: 'token_expired' };
      if (t.uses >= t.max_uses) return { kind: 'token_used_up' };
      await sql.query("SELECT pg_advisory_xact_lock(hashtextextended('enroll:' || $1, 0))", [t.org_id]);
      // Kept by a trigger on robots (migration 8): no count of the fleet per enrollment.
      const count = Number((await sql.query<{ n: string | number }>('SELECT COALESCE((SELECT enrolled FROM robot_counts WHERE org_id = $1), 0) AS n', [t.org_id])).rows[0]!.n);
      if (limit !== undefined && count >= limit) return { kind: 'robot_limit', limit };
      await sql.query('UPDATE enrollment_tokens SET uses = uses + 1 WHERE id = $1', [t.id]);
      const token = tokenFromDb(t);
      const r = args.build(token, t.uses + 1);
      await sql.query(
        `INSERT INTO robots (id, org_id, name, platform, runtime_version, capabilities, mqtt_password_hash, enrollment_token_id, connected, recording_state, last_seen_at, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
        [r.id, t.org_id, r.name, r.platform, r.runtimeVersion, JSON.stringify(r.capabilities), r.mqttPasswordHash, t.id, r.connected, r.recordingState, r.lastSeenAt, r.createdAt],
      );
      return {
        kind: 'enrolled',
        robot: { ...r, orgId: t.org_id, enrollmentTokenId: t.id, deenrolledAt: null, rotationRequestedAt: null, pendingPasswordHash: null, pendingSecretSealed: null, rotatedAt: null },
      };
    });
  }

  async get(orgId: string, id: string): Promise<RobotRow | undefined> {
    const r = await this.db.one<RobotDbRow>('SELECT * FROM robots WHERE org_id = $1 AND id = $2', [orgId, id]);
    return r && robotFromDb(r);
  }

  async getById(id: string): Promise<RobotRow | undefined> {
    const r = await this.db.one<RobotDbRow>('SELECT * FROM robots WHERE id = $1', [id]);
    return r && robotFromDb(r);
  }

  async list(orgId: string, after: string | null, limit: number, opts: { includeDeenrolled?: boolean } = {}): Promise<RobotRow[]> {
    const rows = await this.db.many<RobotDbRow>(
      `SELECT * FROM robots WHERE org_id = $1 AND id > $2 ${opts.includeDeenrolled ? '' : 'AND deenrolled_at IS NULL'} ORDER BY id LIMIT $3`,
      [orgId, after ?? '', limit],
    );
    return rows.map(robotFromDb);
  }

  async find(orgId: string, query: RobotListQuery, limit: number): Promise<RobotRow[]> {
    const { sql, params, reverse } = robotListSql(orgId, query, limit, PG_DIALECT);
    const rows = (await this.db.many<RobotDbRow>(sql, params)).map(robotFromDb);
    return reverse ? rows.reverse() : rows;
  }

  async deenroll(orgId: string, id: string, at: number): Promise<RobotRow | undefined> {
    const r = await this.db.one<RobotDbRow>(
      `UPDATE robots SET deenrolled_at = COALESCE(deenrolled_at, $1), connected = false, rotation_requested_at = NULL, pending_password_hash = NULL, pending_secret_sealed = NULL
       WHERE org_id = $2 AND id = $3 RETURNING *`,
      [at, orgId, id],
    );
    return r && robotFromDb(r);
  }

  async requestRotation(orgId: string, id: string, at: number): Promise<RobotRow | undefined> {
    await this.db.query('UPDATE robots SET rotation_requested_at = COALESCE(rotation_requested_at, $1) WHERE org_id = $2 AND id = $3 AND deenrolled_at IS NULL', [at, orgId, id]);
    return this.get(orgId, id);
  }

  async setPendingPassword(id: string, hash: string, sealed: string): Promise<boolean> {
    const r = await this.db.query(
      `UPDATE robots SET pending_password_hash = $1, pending_secret_sealed = $2
       WHERE id = $3 AND rotation_requested_at IS NOT NULL AND pending_password_hash IS NULL AND deenrolled_at IS NULL`,
      [hash, sealed, id],
    );
    return (r.rowCount ?? 0) > 0;
  }

  async completeRotation(id: string, pendingHash: string, at: number): Promise<boolean> {
    const r = await this.db.query(
      `UPDATE robots SET mqtt_password_hash = pending_password_hash, pending_password_hash = NULL, pending_secret_sealed = NULL, rotation_requested_at = NULL, rotated_at = $1
       WHERE id = $2 AND pending_password_hash = $3 AND deenrolled_at IS NULL`,
      [at, id, pendingHash],
    );
    return (r.rowCount ?? 0) > 0;
  }

  /**
   * Reads the robot's presence under its row lock, then writes the status: a replica writing the
   * same status after another one waits for that lock and then reads the state the first one
   * committed, so it sees no change and logs nothing; one writing a status the robot has since
   * replaced (it is behind) changes nothing (`statusApplies`).
   */
  async updateStatus(id: string, u: RobotStatusUpdate, logChange?: (robot: RobotPresence) => LoggedEvent): Promise<boolean> {
    return this.db.tx(async (sql) => {
      const before = (
        await sql.query<PresenceDbRow & { status_at: number | null }>(
          'SELECT id, org_id, connected, recording_state, last_seen_at, status_at FROM robots WHERE id = $1 AND deenrolled_at IS NULL FOR UPDATE',
          [id],
        )
      ).rows[0];
      if (!before) return false;
      const lastAt = before.status_at;
      if (u.status && !statusApplies(u.status, lastAt)) {
        await sql.query('UPDATE robots SET last_seen_at = GREATEST(COALESCE(last_seen_at, 0), $1) WHERE id = $2', [u.seenAt, id]);
        return false;
      }
      const r = (
        await sql.query<PresenceDbRow>(
          `UPDATE robots r SET connected = $1, runtime_version = COALESCE($2, r.runtime_version), platform = COALESCE($3, r.platform),
             capabilities = COALESCE($4, r.capabilities), recording_state = CASE WHEN $5 THEN $6 ELSE r.recording_state END,
             last_seen_at = GREATEST(COALESCE(r.last_seen_at, 0), $7), status_at = $8
           WHERE r.id = $9
           RETURNING r.id, r.org_id, r.connected, r.recording_state, r.last_seen_at`,
          [
            u.connected,
            u.runtimeVersion ?? null,
            u.platform ?? null,
            u.capabilities ? JSON.stringify(u.capabilities) : null,
            u.recordingState !== undefined,
            u.recordingState ?? null,
            u.seenAt,
            u.status ? statusAtAfter(u.status, lastAt) : lastAt,
            id,
          ],
        )
      ).rows[0]!;
      const changed = r.connected !== before.connected || r.recording_state !== before.recording_state;
      if (changed && logChange) await appendEvents(sql, [{ orgId: r.org_id, event: logChange(presenceFromDb(r)), at: u.seenAt }]);
      return changed;
    });
  }

  async markAllDisconnected(log?: { at: number; logChange: (robot: RobotPresence) => LoggedEvent }): Promise<void> {
    if (!log) {
      await this.db.query('UPDATE robots SET connected = false WHERE connected');
      return;
    }
    await this.db.tx(async (sql) => {
      // A de-enrolled robot is never connected (de-enrollment disconnects it): no filter needed.
      const was = (await sql.query<PresenceDbRow>('UPDATE robots SET connected = false WHERE connected RETURNING id, org_id, connected, recording_state, last_seen_at')).rows;
      await appendEvents(sql, was.map((r) => ({ orgId: r.org_id, event: log.logChange(presenceFromDb(r)), at: log.at })));
    });
  }
}

interface PresenceDbRow {
  id: string;
  org_id: string;
  connected: boolean;
  recording_state: RobotRow['recordingState'];
  last_seen_at: number | null;
}

function presenceFromDb(r: PresenceDbRow): RobotPresence {
  return { id: r.id, connected: r.connected, recordingState: r.recording_state, lastSeenAt: r.last_seen_at };
}

const PG_DIALECT = { param: (n: number) => `$${n}`, bool: (b: boolean) => b, nameCollate: ' COLLATE "C"' };
