import { join } from 'node:path';
import { systemClock } from '@fleet/protocol';
import { pino } from 'pino';
import type { RobotActions } from '../../actions.js';
import { parseAgentConfig } from '../../config.js';
import { Agent } from '../../daemon.js';
import { systemScheduler } from '../../time.js';
import { ProcessRecorder } from './process-recorder.js';

/**
 * An example (docs/recording.md): a robot's own entry point that runs the agent with `ros2 bag
 * record` as its recorder instead of the synthetic one `fleet-agent start` uses. Everything else
 * (enrollment, the state machine, finalize, the outbox, uploads, the control socket) is the
 * agent's as usual; `fleet-agent episode|status|episodes` work against it unchanged.
 */
export async function startRos2BagAgent(opts: { dataDir: string; topics: readonly string[]; actions: RobotActions }): Promise<Agent> {
  const recorder = new ProcessRecorder({
    command: 'ros2',
    // rosbag2 creates `bag/` itself: the files land in <dataDir>/episodes/<episode_id>/bag/.
    args: (dir) => ['bag', 'record', '--storage', 'mcap', '--output', join(dir, 'bag'), ...opts.topics],
    scheduler: systemScheduler,
  });
  const agent = new Agent(parseAgentConfig({ dataDir: opts.dataDir }), {
    clock: systemClock,
    scheduler: systemScheduler,
    logger: pino({ level: 'info' }),
    recorder,
    actions: opts.actions,
  });
  await agent.start();
  return agent;
}
