import type { Statement } from 'better-sqlite3';
import type { LoggedEvent, RobotPresence } from '../../rules/events.js';
import { robotFromDb, tokenFromDb, type RobotDbRow, type TokenDbRow } from '../shared/rows.js';
import { robotListSql, type RobotListQuery } from '../shared/robot-list-query.js';
import type { Db } from './db.js';
import { eventAppender } from './events.js';
import { statusApplies, statusAtAfter } from '../../rules/status-order.js';
import type { EnrollmentTokenRow, EnrollOutcome, RobotRow, RobotStatusUpdate, RobotStore } from '../shared/types.js';

export class SqliteRobots implements RobotStore {
  private readonly insertToken;
  private readonly tokenByHash;
  private readonly useToken;
  private readonly countByOrg;
  private readonly insertRobot;
  private readonly byOrgAndId;
  private readonly byId;
  private readonly page;
  private readonly status;
  private readonly seen;
  private readonly disconnectAll;
  private readonly presence;
  private readonly connectedPresence;
  private readonly appendEvent;
  private readonly tokenPage;
  private readonly tokenByOrgAndId;
  private readonly revokeToken;
  private readonly pageAll;
  private readonly markDeenrolled;
  private readonly markRotation;
  private readonly pending;
  private readonly promote;
  private readonly findStatements = new Map<string, Statement<unknown[], RobotDbRow>>();

  constructor(private readonly db: Db) {
    this.insertToken = db.prepare(
      'INSERT INTO enrollment_tokens (id, org_id, token_hash, token_prefix, name_prefix, max_uses, expires_at, created_by, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)',
    );
    this.tokenPage = db.prepare<[string, string, number], TokenDbRow>('SELECT * FROM enrollment_tokens WHERE org_id = ? AND id > ? ORDER BY id LIMIT ?');
    this.tokenByOrgAndId = db.prepare<[string, string], TokenDbRow>('SELECT * FROM enrollment_tokens WHERE org_id = ? AND id = ?');
    this.revokeToken = db.prepare('UPDATE enrollment_tokens SET revoked_at = COALESCE(revoked_at, ?) WHERE org_id = ? AND id = ?');
    this.tokenByHash = db.prepare<[string], TokenDbRow>('SELECT * FROM enrollment_tokens WHERE token_hash = ?');
    this.useToken = db.prepare('UPDATE enrollment_tokens SET uses = uses + 1 WHERE id = ?');
    // Kept by triggers on robots (migration 19): no count of the fleet per enrollment.
    this.countByOrg = db.prepare<[string], { n: number }>('SELECT COALESCE((SELECT enrolled FROM robot_counts WHERE org_id = ?), 0) AS n');
    this.insertRobot = db.prepare(
      `INSERT INTO robots (id, org_id, name, platform, runtime_version, capabilities, mqtt_password_hash, enrollment_token_id, connected, recording_state, last_seen_at, created_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    );
    this.byOrgAndId = db.prepare<[string, string], RobotDbRow>('SELECT * FROM robots WHERE org_id = ? AND id = ?');
    this.byId = db.prepare<[string], RobotDbRow>('SELECT * FROM robots WHERE id = ?');
    this.page = db.prepare<[string, string, number], RobotDbRow>('SELECT * FROM robots WHERE org_id = ? AND id > ? AND deenrolled_at IS NULL ORDER BY id LIMIT ?');
    this.pageAll = db.prepare<[string, string, number], RobotDbRow>('SELECT * FROM robots WHERE org_id = ? AND id > ? ORDER BY id LIMIT ?');
    this.markDeenrolled = db.prepare(
      `UPDATE robots SET deenrolled_at = COALESCE(deenrolled_at, ?), connected = 0, rotation_requested_at = NULL, pending_password_hash = NULL, pending_secret_sealed = NULL
       WHERE org_id = ? AND id = ?`,
    );
    this.markRotation = db.prepare(
      'UPDATE robots SET rotation_requested_at = COALESCE(rotation_requested_at, ?) WHERE org_id = ? AND id = ? AND deenrolled_at IS NULL',
    );
    this.pending = db.prepare(
      `UPDATE robots SET pending_password_hash = ?, pending_secret_sealed = ?
       WHERE id = ? AND rotation_requested_at IS NOT NULL AND pending_password_hash IS NULL AND deenrolled_at IS NULL`,
    );
    this.promote = db.prepare(
      `UPDATE robots SET mqtt_password_hash = pending_password_hash, pending_password_hash = NULL, pending_secret_sealed = NULL, rotation_requested_at = NULL, rotated_at = ?
       WHERE id = ? AND pending_password_hash = ? AND deenrolled_at IS NULL`,
    );

    this.status = db.prepare(
      `UPDATE robots SET connected = ?, runtime_version = COALESCE(?, runtime_version), platform = COALESCE(?, platform),
         capabilities = COALESCE(?, capabilities), recording_state = CASE WHEN ? THEN ? ELSE recording_state END,
         last_seen_at = MAX(COALESCE(last_seen_at, 0), ?), status_at = ? WHERE id = ? AND deenrolled_at IS NULL`,
    );
    this.seen = db.prepare('UPDATE robots SET last_seen_at = MAX(COALESCE(last_seen_at, 0), ?) WHERE id = ?');
    this.disconnectAll = db.prepare('UPDATE robots SET connected = 0 WHERE connected = 1');
    this.presence = db.prepare<[string], PresenceDbRow & { status_at: number | null }>(
      'SELECT id, org_id, connected, recording_state, last_seen_at, status_at FROM robots WHERE id = ? AND deenrolled_at IS NULL',
    );
    this.connectedPresence = db.prepare<[], PresenceDbRow>('SELECT id, org_id, connected, recording_state, last_seen_at FROM robots WHERE connected = 1 AND deenrolled_at IS NULL');
    this.appendEvent = eventAppender(db);
  }

  async createEnrollmentToken(row: Omit<EnrollmentTokenRow, 'uses' | 'revokedAt'>): Promise<void> {
    this.insertToken.run(row.id, row.orgId, row.tokenHash, row.tokenPrefix, row.namePrefix, row.maxUses, row.expiresAt, row.createdBy, row.createdAt);
  }

  async listEnrollmentTokens(orgId: string, after: string | null, limit: number): Promise<EnrollmentTokenRow[]> {
    return this.tokenPage.all(orgId, after ?? '', limit).map(tokenFromDb);
  }

  async revokeEnrollmentToken(orgId: string, id: string, at: number): Promise<EnrollmentTokenRow | undefined> {
    this.revokeToken.run(at, orgId, id);
    const t = this.tokenByOrgAndId.get(orgId, id);
    return t && tokenFromDb(t);
  }

  async enroll(args: Parameters<RobotStore['enroll']>[0]): Promise<EnrollOutcome> {
    // The limit may need an async lookup; read it before taking the write lock, check under it.
    const pre = this.tokenByHash.get(args.tokenHash);
    const limit = pre ? await args.robotLimit(pre.org_id) : undefined;
    return this.db
      .transaction((): EnrollOutcome => {
        const t = this.tokenByHash.get(args.tokenHash);
        if (!t) return { kind: 'token_invalid' };
        if (t.revoked_at !== null) return { kind: 'token_revoked' };
        if (t.expires_at <= args.now) return { kind: 'token_expired' };
        if (t.uses >= t.max_uses) return { kind: 'token_used_up' };
        const count = this.countByOrg.get(t.org_id)!.n;
        if (limit !== undefined && count >= limit) return { kind: 'robot_limit', limit };
        this.useToken.run(t.id);
        const token = tokenFromDb(t);
        const r = args.build(token, t.uses + 1);
        this.insertRobot.run(
          r.id,
          t.org_id,
          r.name,
          r.platform,
          r.runtimeVersion,
          JSON.stringify(r.capabilities),
          r.mqttPasswordHash,
          t.id,
          r.connected ? 1 : 0,
          r.recordingState,
          r.lastSeenAt,
          r.createdAt,
        );
        return {
          kind: 'enrolled',
          robot: { ...r, orgId: t.org_id, enrollmentTokenId: t.id, deenrolledAt: null, rotationRequestedAt: null, pendingPasswordHash: null, pendingSecretSealed: null, rotatedAt: null },
        };
      })
      .immediate();
  }

  async get(orgId: string, id: string): Promise<RobotRow | undefined> {
    const r = this.byOrgAndId.get(orgId, id);
    return r && robotFromDb(r);
  }

  async getById(id: string): Promise<RobotRow | undefined> {
    const r = this.byId.get(id);
    return r && robotFromDb(r);
  }

  async list(orgId: string, after: string | null, limit: number, opts: { includeDeenrolled?: boolean } = {}): Promise<RobotRow[]> {
    return (opts.includeDeenrolled ? this.pageAll : this.page).all(orgId, after ?? '', limit).map(robotFromDb);
  }

  async find(orgId: string, query: RobotListQuery, limit: number): Promise<RobotRow[]> {
    const { sql, params, reverse } = robotListSql(orgId, query, limit, SQLITE_DIALECT);
    // One prepared statement per shape of query (which filters, sort, direction): a few hundred at most.
    let stmt = this.findStatements.get(sql);
    if (!stmt) {
      stmt = this.db.prepare<unknown[], RobotDbRow>(sql);
      this.findStatements.set(sql, stmt);
    }
    const rows = stmt.all(...params).map(robotFromDb);
    return reverse ? rows.reverse() : rows;
  }

  async deenroll(orgId: string, id: string, at: number): Promise<RobotRow | undefined> {
    this.markDeenrolled.run(at, orgId, id);
    return this.get(orgId, id);
  }

  async requestRotation(orgId: string, id: string, at: number): Promise<RobotRow | undefined> {
    this.markRotation.run(at, orgId, id);
    return this.get(orgId, id);
  }

  async setPendingPassword(id: string, hash: string, sealed: string): Promise<boolean> {
    return this.pending.run(hash, sealed, id).changes > 0;
  }

  async completeRotation(id: string, pendingHash: string, at: number): Promise<boolean> {
    return this.promote.run(at, id, pendingHash).changes > 0;
  }


  async updateStatus(id: string, u: RobotStatusUpdate, logChange?: (robot: RobotPresence) => LoggedEvent): Promise<boolean> {
    return this.db
      .transaction((): boolean => {
        const before = this.presence.get(id);
        if (!before) return false;
        // A status this replica is late with (another one wrote a newer one) changes nothing.
        if (u.status && !statusApplies(u.status, before.status_at)) {
          this.seen.run(u.seenAt, id);
          return false;
        }
        this.status.run(
          u.connected ? 1 : 0,
          u.runtimeVersion ?? null,
          u.platform ?? null,
          u.capabilities ? JSON.stringify(u.capabilities) : null,
          u.recordingState !== undefined ? 1 : 0,
          u.recordingState ?? null,
          u.seenAt,
          u.status ? statusAtAfter(u.status, before.status_at) : before.status_at,
          id,
        );
        const after = this.presence.get(id)!;
        const changed = after.connected !== before.connected || after.recording_state !== before.recording_state;
        if (changed && logChange) this.appendEvent(after.org_id, logChange(presenceFromDb(after)), u.seenAt);
        return changed;
      })
      .immediate();
  }

  async markAllDisconnected(log?: { at: number; logChange: (robot: RobotPresence) => LoggedEvent }): Promise<void> {
    this.db
      .transaction(() => {
        const was = log ? this.connectedPresence.all() : [];
        this.disconnectAll.run();
        for (const r of was) this.appendEvent(r.org_id, log!.logChange({ ...presenceFromDb(r), connected: false }), log!.at);
      })
      .immediate();
  }
}

interface PresenceDbRow {
  id: string;
  org_id: string;
  connected: number;
  recording_state: RobotRow['recordingState'];
  last_seen_at: number | null;
}

function presenceFromDb(r: PresenceDbRow): RobotPresence {
  return { id: r.id, connected: r.connected === 1, recordingState: r.recording_state, lastSeenAt: r.last_seen_at };
}

const SQLITE_DIALECT = { param: () => '?', bool: (b: boolean) => (b ? 1 : 0), nameCollate: '' };
