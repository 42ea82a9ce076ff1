import type { LoggedEvent, RobotPresence } from '../../rules/events.js';
import { robotListSql, type RobotListQuery } from '../shared/robot-list-query.js';
import { robotFromDb, tokenFromDb, type RobotDbRow, type TokenDbRow } from '../shared/rows.js';
import { statusApplies, statusAtAfter } from '../../rules/status-order.js';
import type { EnrollmentTokenRow, EnrollOutcome, RobotRow, RobotStatusUpdate, RobotStore } from '../shared/types.js';
import type { PgDb, Sql } from './db.js';
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
   * Statuses are written in group commits: a call joins the queue, and one transaction at a time
   * writes every queued status (at most one per robot, `STATUS_BATCH` in all), with the events
   * of their changes appended under one acquisition of each organization's events lock. A call
   * on an idle store is written at once; under load (a fleet connecting) the queue grows and each
   * transaction carries more, so presence costs one pooled connection per replica, not one per
   * status: 100,000 robots connecting through two replicas used to queue a status per pool
   * connection on their one organization's events lock until the pool's wait timed out and the
   * status was lost. A transaction that fails is tried again with the next batch
   * (`STATUS_ATTEMPTS` in all; writing a status twice changes nothing the second time).
   */
  updateStatus(id: string, u: RobotStatusUpdate, logChange?: (robot: RobotPresence) => LoggedEvent): Promise<boolean> {
    return new Promise<boolean>((resolve, reject) => {
      this.statusQueue.push({ id, u, logChange, attempts: 0, resolve, reject });
      if (!this.statusFlushing) void this.flushStatuses();
    });
  }

  private readonly statusQueue: QueuedStatus[] = [];
  private statusFlushing = false;

  private async flushStatuses(): Promise<void> {
    this.statusFlushing = true;
    try {
      while (this.statusQueue.length > 0) {
        const batch = takeBatch(this.statusQueue, STATUS_BATCH);
        let changed: boolean[];
        try {
          changed = await this.db.tx((sql) => writeStatuses(sql, batch));
        } catch (err) {
          const again = batch.filter((e) => ++e.attempts < STATUS_ATTEMPTS);
          for (const e of batch) if (e.attempts >= STATUS_ATTEMPTS) e.reject(err);
          // Back at the front, in their order: a robot's later status stays behind its earlier one.
          this.statusQueue.unshift(...again);
          continue;
        }
        batch.forEach((e, i) => e.resolve(changed[i]!));
      }
    } finally {
      this.statusFlushing = false;
    }
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

interface QueuedStatus {
  id: string;
  u: RobotStatusUpdate;
  logChange: ((robot: RobotPresence) => LoggedEvent) | undefined;
  attempts: number;
  resolve: (changed: boolean) => void;
  reject: (err: unknown) => void;
}

/** Most statuses one transaction writes (each adds one row to its statements and five parameters to its events' insert). */
const STATUS_BATCH = 500;
/** Transactions a status is tried in before its caller hears the failure. */
const STATUS_ATTEMPTS = 3;

/**
 * Takes up to `max` statuses off the front of the queue, the first queued of each robot only:
 * a robot's later statuses stay queued, in order, for the next batch.
 */
function takeBatch(queue: QueuedStatus[], max: number): QueuedStatus[] {
  const batch: QueuedStatus[] = [];
  const ids = new Set<string>();
  const rest: QueuedStatus[] = [];
  // Looks no further than a few batches ahead: a queue of one robot's statuses costs no scan of it all.
  const end = Math.min(queue.length, max * 4);
  let i = 0;
  for (; i < end && batch.length < max; i++) {
    const e = queue[i]!;
    if (ids.has(e.id)) rest.push(e);
    else {
      ids.add(e.id);
      batch.push(e);
    }
  }
  // The skipped ones back in front, in order (in place: no spread of a long array).
  queue.splice(0, batch.length);
  for (let k = 0; k < rest.length; k++) queue[k] = rest[k]!;
  return batch;
}

/**
 * Writes one status per robot (distinct ids) in the caller's transaction and returns, per
 * status, whether it changed presence or the recording state. The rows are locked in id order
 * (another replica writing an overlapping batch waits, and never deadlocks with this one), then
 * read: a replica writing the same status after another one reads the state the first one
 * committed, so it sees no change and logs nothing; a status the robot has since replaced (the
 * replica is behind) only moves last seen (`statusApplies`).
 */
async function writeStatuses(sql: Sql, batch: readonly QueuedStatus[]): Promise<boolean[]> {
  const rows = (
    await sql.query<PresenceDbRow & { status_at: number | null }>(
      'SELECT id, org_id, connected, recording_state, last_seen_at, status_at FROM robots WHERE id = ANY($1::text[]) AND deenrolled_at IS NULL ORDER BY id FOR UPDATE',
      [batch.map((e) => e.id)],
    )
  ).rows;
  const before = new Map(rows.map((r) => [r.id, r]));
  const cols = { id: [] as string[], apply: [] as boolean[], connected: [] as boolean[], runtime: [] as (string | null)[], platform: [] as (string | null)[],
    capabilities: [] as (string | null)[], setRecording: [] as boolean[], recording: [] as (string | null)[], seenAt: [] as number[], statusAt: [] as (number | null)[] };
  for (const { id, u } of batch) {
    const b = before.get(id);
    if (!b) continue;
    const apply = !u.status || statusApplies(u.status, b.status_at);
    cols.id.push(id);
    cols.apply.push(apply);
    cols.connected.push(u.connected);
    cols.runtime.push(u.runtimeVersion ?? null);
    cols.platform.push(u.platform ?? null);
    cols.capabilities.push(u.capabilities ? JSON.stringify(u.capabilities) : null);
    cols.setRecording.push(u.recordingState !== undefined);
    cols.recording.push(u.recordingState ?? null);
    cols.seenAt.push(u.seenAt);
    cols.statusAt.push(u.status ? statusAtAfter(u.status, b.status_at) : b.status_at);
  }
  if (cols.id.length === 0) return batch.map(() => false);
  const after = (
    await sql.query<PresenceDbRow>(
      `UPDATE robots r SET
         connected = CASE WHEN v.apply THEN v.connected ELSE r.connected END,
         runtime_version = CASE WHEN v.apply THEN COALESCE(v.runtime_version, r.runtime_version) ELSE r.runtime_version END,
         platform = CASE WHEN v.apply THEN COALESCE(v.platform, r.platform) ELSE r.platform END,
         capabilities = CASE WHEN v.apply THEN COALESCE(v.capabilities, r.capabilities) ELSE r.capabilities END,
         recording_state = CASE WHEN v.apply AND v.set_recording THEN v.recording_state ELSE r.recording_state END,
         last_seen_at = GREATEST(COALESCE(r.last_seen_at, 0), v.seen_at),
         status_at = CASE WHEN v.apply THEN v.status_at ELSE r.status_at END
       FROM unnest($1::text[], $2::bool[], $3::bool[], $4::text[], $5::text[], $6::text[], $7::bool[], $8::text[], $9::bigint[], $10::bigint[])
         AS v(id, apply, connected, runtime_version, platform, capabilities, set_recording, recording_state, seen_at, status_at)
       WHERE r.id = v.id
       RETURNING r.id, r.org_id, r.connected, r.recording_state, r.last_seen_at`,
      [cols.id, cols.apply, cols.connected, cols.runtime, cols.platform, cols.capabilities, cols.setRecording, cols.recording, cols.seenAt, cols.statusAt],
    )
  ).rows;
  const written = new Map(after.map((r) => [r.id, r]));
  const events: { orgId: string; event: LoggedEvent; at: number }[] = [];
  const changed = batch.map(({ id, u, logChange }) => {
    const b = before.get(id);
    const r = written.get(id);
    if (!b || !r) return false;
    const c = r.connected !== b.connected || r.recording_state !== b.recording_state;
    if (c && logChange) events.push({ orgId: r.org_id, event: logChange(presenceFromDb(r)), at: u.seenAt });
    return c;
  });
  await appendEvents(sql, events);
  return changed;
}

const PG_DIALECT = { param: (n: number) => `$${n}`, bool: (b: boolean) => b, nameCollate: ' COLLATE "C"' };
