import { createHash } from 'node:crypto';
import type { EpisodeReport } from '@fleet/protocol';

const HOUR_MS = 3_600_000;
const BASE = Date.parse('2026-01-01T00:00:00Z');

/**
 * A synthetic but valid episode report, varied like a real fleet: 20 tasks, 50 operators, a
 * mix of outcomes, a `site` metadata key with ten values and a `common` key every episode has.
 */
export function syntheticReport(i: number, tag = 'b'): EpisodeReport {
  const started = BASE + i * 7_000;
  const sha = createHash('sha256').update(`${tag}${i}`).digest('hex');
  return {
    id: `ep_${tag}${i.toString(36).padStart(12, '0')}`,
    recording_session_id: `rs_${tag}${Math.floor(i / 50)}`,
    episode_seq: (i % 50) + 1,
    session_name: 'bench',
    task_id: `task-${i % 20}`,
    task_name: `Task ${i % 20}`,
    subtask_id: null,
    operator_id: `op-${i % 50}`,
    operator_name: `Operator ${i % 50}`,
    control_mode: i % 3 === 0 ? 'autonomous' : 'teleop',
    policy_version_id: i % 3 === 0 ? `pol-${i % 4}` : null,
    eval_id: i % 97 === 0 ? `eval-${i % 5}` : null,
    outcome: i % 10 === 0 ? 'failure' : i % 31 === 0 ? 'discarded' : 'success',
    started_at: new Date(started).toISOString(),
    ended_at: new Date(started + 60_000).toISOString(),
    duration_s: 60,
    message_count: 6000,
    bag_size_bytes: 3_932_160,
    metadata: { site: `site-${i % 10}`, common: 'yes', shift: (i % (24 * 7)) % 3, gripper: i % 2 === 0 ? 'parallel' : 'suction' },
    segments: [
      { segment_index: 0, subtask_id: 'reach', subtask_name: 'Reach', start_offset_s: 0, end_offset_s: 20 },
      { segment_index: 1, subtask_id: 'grasp', subtask_name: 'Grasp', start_offset_s: 20, end_offset_s: 60 },
    ],
    manifest: { files: [{ path: 'recording.mcap', size_bytes: 3_932_160, sha256: sha }], total_bytes: 3_932_160 },
  };
}

export const BENCH_ROBOTS = 100;
export const robotOf = (i: number): string => `rbt_bench${(i % BENCH_ROBOTS).toString().padStart(4, '0')}`;
export { HOUR_MS };
