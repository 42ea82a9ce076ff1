/**
 * Whether an error means the database could not be reached or is going away (a restart, a
 * failover, a full connection table), as opposed to a failure of the request itself. Such a
 * request is answered 503 `not_ready` with `Retry-After`: the client may simply try again.
 * Looks through `cause` chains and AggregateErrors (node's connect errors carry one per address).
 */

/** Socket-level failures of the connection to the database. */
const NETWORK_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN', 'ENOTFOUND']);

/**
 * SQLSTATEs of an unusable server: class 08 (connection exception), 57P01 admin shutdown,
 * 57P02 crash shutdown, 57P03 cannot connect now (starting up or shutting down), 53300 too many
 * connections.
 */
const SERVER_GONE = new Set(['57P01', '57P02', '57P03', '53300']);

/** node-postgres's own messages for a connection that ended or never came. */
const DRIVER_MESSAGES = [/^Connection terminated/, /^timeout exceeded when trying to connect/, /not queryable/, /^Client was closed/];

export function isStoreUnavailable(err: unknown, depth = 0): boolean {
  if (depth > 5 || typeof err !== 'object' || err === null) return false;
  const e = err as { code?: unknown; message?: unknown; cause?: unknown; errors?: unknown };
  if (typeof e.code === 'string') {
    if (NETWORK_CODES.has(e.code) || SERVER_GONE.has(e.code) || /^08[0-9A-Z]{3}$/.test(e.code)) return true;
  }
  if (typeof e.message === 'string' && DRIVER_MESSAGES.some((re) => re.test(e.message as string))) return true;
  if (Array.isArray(e.errors) && e.errors.some((x) => isStoreUnavailable(x, depth + 1))) return true;
  return isStoreUnavailable(e.cause, depth + 1);
}
