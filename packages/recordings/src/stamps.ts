/**
 * A message's own time stamp, ns: ROS 2's `header.stamp` (`{sec, nanosec}`, ROS 1's `{sec, nsec}`),
 * or the `timestamp` of Foxglove's schemas (`{sec, nsec}` in JSON, google.protobuf.Timestamp's
 * `{seconds, nanos}` in protobuf). Undefined when the message has none.
 */
export function headerStampNs(msg: unknown): bigint | undefined {
  if (typeof msg !== 'object' || msg === null) return undefined;
  const header = (msg as { header?: unknown }).header;
  if (typeof header !== 'object' || header === null) return undefined;
  return timeNs((header as { stamp?: unknown }).stamp);
}

/** Foxglove's `timestamp` field (see headerStampNs). */
export function timestampNs(msg: unknown): bigint | undefined {
  if (typeof msg !== 'object' || msg === null) return undefined;
  return timeNs((msg as { timestamp?: unknown }).timestamp);
}

/** `{sec, nanosec}`, `{sec, nsec}` or `{seconds, nanos}` to ns; undefined for anything else. */
export function timeNs(t: unknown): bigint | undefined {
  if (typeof t !== 'object' || t === null) return undefined;
  const o = t as Record<string, unknown>;
  const sec = o.sec ?? o.seconds;
  const nsec = o.nanosec ?? o.nsec ?? o.nanos;
  const int = (v: unknown) => (typeof v === 'number' && Number.isInteger(v)) || typeof v === 'bigint';
  if (!int(sec) || !int(nsec)) return undefined;
  return BigInt(sec as number | bigint) * 1_000_000_000n + BigInt(nsec as number | bigint);
}
