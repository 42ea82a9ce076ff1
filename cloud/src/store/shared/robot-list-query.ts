import type { RecordingState } from '@fleet/protocol';

/** The orders a robot list can come in; every one ends with the id, so each row has one place. */
export const ROBOT_SORTS = ['id', 'name', 'last_seen_at'] as const;
export type RobotSort = (typeof ROBOT_SORTS)[number];

/** Where a keyset page continues: after (or before) the row with this sort value and id. */
export interface RobotListPosition {
  /** The row's value of the sort column: the id for `id`, the name, or `last_seen_at` with null as 0. */
  value: string | number;
  id: string;
  direction: 'after' | 'before';
}

/** A filtered, sorted keyset page of an organization's robots (GET /v1/robots). */
export interface RobotListQuery {
  includeDeenrolled?: boolean;
  /** Name contains this text; ASCII letters match regardless of case. */
  nameContains?: string;
  connected?: boolean;
  recordingState?: RecordingState;
  /** Robots whose last disk report projects the disk full in fewer than this many hours. */
  hoursToFullBelow?: number;
  sort?: RobotSort;
  order?: 'asc' | 'desc';
  position?: RobotListPosition;
}

/** The value of the sort column for a row, as a position stores it (never-seen robots sort as 0). */
export function robotSortValue(sort: RobotSort, r: { id: string; name: string; lastSeenAt: number | null }): string | number {
  return sort === 'id' ? r.id : sort === 'name' ? r.name : (r.lastSeenAt ?? 0);
}

/**
 * The one statement of a robot page, for either engine (`param(n)` writes the n-th placeholder,
 * from 1). A page before a position is read in the reverse order and `reverse` says to turn it
 * back. The sort expressions match the indexes robots_by_name and robots_by_last_seen; names
 * compare bytewise on both engines (PostgreSQL's "C" collation), so a page is the same on both.
 */
export function robotListSql(
  orgId: string,
  q: RobotListQuery,
  limit: number,
  dialect: { param(n: number): string; bool(b: boolean): unknown; nameCollate: string },
): { sql: string; params: unknown[]; reverse: boolean } {
  const params: unknown[] = [];
  const p = (v: unknown) => (params.push(v), dialect.param(params.length));
  const where = [`org_id = ${p(orgId)}`];
  if (!q.includeDeenrolled) where.push('deenrolled_at IS NULL');
  if (q.nameContains !== undefined && q.nameContains !== '') {
    // LIKE with its wildcards escaped; lower() of both sides folds ASCII letters the same way on both engines.
    const pattern = `%${q.nameContains.toLowerCase().replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
    where.push(`lower(name) LIKE ${p(pattern)} ESCAPE '\\'`);
  }
  if (q.connected !== undefined) where.push(`connected = ${p(dialect.bool(q.connected))}`);
  if (q.recordingState !== undefined) where.push(`recording_state = ${p(q.recordingState)}`);
  if (q.hoursToFullBelow !== undefined) {
    where.push(`id IN (SELECT robot_id FROM robot_pressure WHERE hours_to_full IS NOT NULL AND hours_to_full < ${p(q.hoursToFullBelow)})`);
  }
  const sort = q.sort ?? 'id';
  const col = sort === 'id' ? null : sort === 'name' ? `name${dialect.nameCollate}` : 'COALESCE(last_seen_at, 0)';
  const before = q.position?.direction === 'before';
  const descending = (q.order === 'desc') !== before;
  const dir = descending ? 'DESC' : 'ASC';
  if (q.position) {
    const op = descending ? '<' : '>';
    if (col === null) where.push(`id ${op} ${p(q.position.id)}`);
    else where.push(`(${col}, id) ${op} (${p(q.position.value)}, ${p(q.position.id)})`);
  }
  const order = col === null ? `id ${dir}` : `${col} ${dir}, id ${dir}`;
  const sql = `SELECT * FROM robots WHERE ${where.join(' AND ')} ORDER BY ${order} LIMIT ${p(limit)}`;
  return { sql, params, reverse: before };
}
