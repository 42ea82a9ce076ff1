import { z } from 'zod';
import { CommandRecorderConfigSchema } from './command-recorder.js';
import { ImportRecorderConfigSchema } from './import-recorder.js';

/**
 * `recorder: {kind: synthetic}`: the simulator's recorder (rendered camera frames, synthetic
 * motion). It ships with the simulator, not with the agent's package, and is loaded only when
 * configured. Its rate is the top-level `bytes_per_second` / `chunk_interval_ms`.
 */
export const SyntheticRecorderConfigSchema = z.strictObject({
  kind: z.literal('synthetic'),
  /** What it writes: a rosbag2 MCAP directory as `ros2 bag record` writes it, or JSON MCAP. */
  format: z.enum(['ros2', 'json']).default('ros2'),
});

/**
 * Which recorder the agent runs, chosen in the config file (`recorder.kind`). Absent: the robot
 * records nothing (it still connects, reports and answers commands), and announces no
 * `episodes.v1`.
 */
export const RecorderConfigSchema = z.discriminatedUnion('kind', [CommandRecorderConfigSchema, ImportRecorderConfigSchema, SyntheticRecorderConfigSchema]);
export type RecorderConfig = z.output<typeof RecorderConfigSchema>;
export type RecorderKind = RecorderConfig['kind'] | 'none';

/** Whether the cloud may start, finish and discard episodes: only when the agent drives the recorder. */
export function recorderTakesEpisodeVerbs(kind: RecorderKind): boolean {
  return kind === 'command' || kind === 'synthetic';
}
