// The order of a robot's statuses, one rule for every store engine: every replica writes every
// status, and the robot's clock (`at`) decides which one stands.

/**
 * An online status more than this much older than the last one written is not a late copy from
 * a replica behind the others (that lag is the time of a few writes) but the robot's clock set
 * back (an NTP step, a reboot on a drifted clock): it is written, and the robot's clock is
 * followed from there. A smaller step back hides the robot's statuses for at most this long.
 */
export const STATUS_CLOCK_STEP_MS = 60_000;

/**
 * Whether a robot status (`at`, robot clock) is written over the last one written (`lastAt`):
 * not older (the same instant twice is two statuses published in one millisecond, or the same
 * status from two replicas), or far older (the robot's clock was set back). An offline status is
 * always written: a last will carries the time of the connection attempt, older than the
 * statuses published on that connection.
 */
export function statusApplies(status: { at: number; online: boolean }, lastAt: number | null): boolean {
  if (!status.online || lastAt === null) return true;
  return status.at >= lastAt || status.at < lastAt - STATUS_CLOCK_STEP_MS;
}

/**
 * The robot clock of the last status written once `status` is written over `lastAt`. An offline
 * status counts as one millisecond after every status before it, so a late copy of the
 * connection's last status cannot bring the robot back online.
 */
export function statusAtAfter(status: { at: number; online: boolean }, lastAt: number | null): number {
  return status.online ? status.at : Math.max(lastAt ?? 0, status.at) + 1;
}
