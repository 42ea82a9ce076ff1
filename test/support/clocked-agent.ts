import { join } from 'node:path';
import { ManualClock } from '@fleet/protocol';
import { SimulatedRobotActions, type RobotActions } from '../../agent/src/actions.js';
import { parseAgentConfig, type AgentConfigInput } from '../../agent/src/config.js';
import { readCredentials } from '../../agent/src/credentials.js';
import { Agent } from '../../agent/src/daemon.js';
import { SyntheticRecorder } from '../../simulator/src/recording/synthetic-recorder.js';
import type { UploadProgressView } from '../../agent/src/sync/progress.js';
import type { FreeBytes } from '../../agent/src/sync/pressure.js';
import { captureLogs, type LogCapture } from '../../agent/src/test-support.js';
import { ManualScheduler } from '../../agent/src/time.js';
import { makeTempDir, type CloudProcess } from './cloud.js';
import { createEnrollmentToken, enrollCli } from './robots.js';
import { waitFor } from './wait.js';

/**
 * The real agent (agent/src `Agent`, the code `fleet-agent start` runs) in the test's process,
 * on a clock the test moves, enrolled with `fleet-agent enroll` and connected to a real
 * `fleet-cloud serve` over MQTT; its uploads go over real HTTP. The processes around it run on
 * wall-clock time, so only the robot's waits (deferrals, retries, retention) are compressed:
 * the test advances the robot's scheduler only while the robot has nothing in flight, so a
 * real answer is never overtaken by a timeout that only fired because time jumped.
 */
export interface ClockedAgent extends AsyncDisposable {
  agent: Agent;
  clock: ManualClock;
  scheduler: ManualScheduler;
  logs: LogCapture;
  dataDir: string;
  robotId: string;
  /** Records one episode of `ms` on the robot's clock, finishes it, waits until it is finalized; its id. */
  record(ms: number): Promise<string>;
  /** The uploader's view of each replica with work ahead. */
  uploads(): Promise<UploadProgressView[]>;
  /** Resolves once no replica is being worked on (no grant request or upload in flight). */
  quiet(): Promise<void>;
  /**
   * Moves the robot's clock to `until`, one replica's next attempt at a time: every timer due
   * on the way fires, and after each step the test waits until the robot is quiet again.
   */
  advanceTo(until: number): Promise<void>;
}

export interface ClockedAgentOptions {
  config?: Partial<AgentConfigInput>;
  /** The free bytes the robot's disk pressure reports (default: the real file system's). */
  freeBytes?: FreeBytes;
  /** Where the robot's clock starts (default: now). */
  startAt?: number;
  /** What the robot does for the non-episode commands (default: a SimulatedRobotActions). */
  actions?: RobotActions;
}

export async function startClockedAgent(cloud: CloudProcess, opts: ClockedAgentOptions = {}): Promise<ClockedAgent> {
  const tmp = await makeTempDir('fa-clk-');
  const dataDir = join(tmp.path, 'robot');
  let agent: Agent | undefined;
  const dispose = async () => {
    try {
      await agent?.stop();
    } finally {
      await tmp[Symbol.asyncDispose]();
    }
  };
  try {
    const token = await createEnrollmentToken(cloud);
    const enrolled = await enrollCli(cloud, { token: token.token, dataDir });
    if (enrolled.code !== 0) throw new Error(`fleet-agent enroll exited ${enrolled.code}: ${enrolled.stderr}`);
    const credentials = (await readCredentials(dataDir))!;
    const clock = new ManualClock(opts.startAt ?? Date.now());
    const scheduler = new ManualScheduler(clock);
    const config = parseAgentConfig({ dataDir, allowHttpUploads: true, reconnectMinMs: 100, reconnectMaxMs: 1000, chunkIntervalMs: 100, ...opts.config });
    const recorder = new SyntheticRecorder({ clock, scheduler, bytesPerSecond: config.bytesPerSecond, chunkIntervalMs: config.chunkIntervalMs });
    const logs = captureLogs();
    agent = new Agent(config, {
      clock,
      scheduler,
      logger: logs.logger,
      recorder,
      actions: opts.actions ?? new SimulatedRobotActions(),
      credentials,
      controlSocket: false,
      ...(opts.freeBytes ? { freeBytes: opts.freeBytes } : {}),
    });
    await agent.start();
    await agent.whenConnected();
    const a = agent;
    const uploader = a.uploader!;
    const quiet = async () => {
      await waitFor(() => (uploader.activeCount === 0 ? true : undefined), { timeoutMs: 30_000, intervalMs: 5, description: 'the uploader to be idle' });
    };
    return {
      agent: a,
      clock,
      scheduler,
      logs,
      dataDir,
      robotId: credentials.robot_id,
      async record(ms) {
        const { episode_id } = await a.episode('start');
        for (let t = 0; t < ms; t += config.chunkIntervalMs) {
          scheduler.advance(config.chunkIntervalMs);
          await recorder.settled();
        }
        await a.episode('finish');
        await a.machine.whenSettled();
        return episode_id;
      },
      uploads: () => uploader.uploads(),
      quiet,
      async advanceTo(until) {
        for (;;) {
          await quiet();
          const next = Math.min(...(await uploader.uploads()).map((u) => (u.next_attempt_at === null ? Infinity : Date.parse(u.next_attempt_at))));
          if (next > until) break;
          scheduler.advance(Math.max(0, next - clock.now()));
          // The replica that fell due is started by the timer's kick; wait for it to be picked up.
          await waitFor(async () => (uploader.activeCount > 0 || (await uploader.uploads()).every((u) => u.next_attempt_at === null || Date.parse(u.next_attempt_at) > clock.now()) ? true : undefined), {
            timeoutMs: 30_000,
            intervalMs: 5,
            description: 'the due replica to start',
          });
        }
        if (until > clock.now()) scheduler.advance(until - clock.now());
        await quiet();
      },
      [Symbol.asyncDispose]: dispose,
    };
  } catch (err) {
    await dispose();
    throw err;
  }
}
