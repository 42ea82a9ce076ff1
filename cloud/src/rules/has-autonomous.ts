/**
 * `has_autonomous`, the one routing fact that is not a column: an episode has autonomous control
 * when its recorded control mode names autonomy (`autonomous`, `shared_autonomy`, any case), or
 * when the robot stamped `has_autonomous: true` (or `"true"`) in its recorded metadata. Recorded
 * facts are immutable, so the answer never changes after ingest.
 */
export function hasAutonomous(controlMode: string | null, metadata: Record<string, unknown>): boolean {
  if (controlMode !== null && /autonom/i.test(controlMode)) return true;
  const flag = metadata.has_autonomous;
  return flag === true || flag === 'true';
}
