import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import {
  Agent,
  AGENT_RUNTIME_VERSION,
  LEGACY_RUNTIME_VERSION,
  SimulatedRobotActions,
  enroll,
  parseAgentConfig,
  readCredentials,
  uploadDispatcher,
  systemScheduler,
  type Credentials,
  type Scheduler,
} from '@fleet/agent';
import { BrokerUrlListSchema, systemClock, type Clock } from '@fleet/protocol';
import { pino, type Logger } from 'pino';
import { z } from 'zod';
import { SYNTHETIC_RECORDING_FORMATS, SyntheticRecorder } from './recording/synthetic-recorder.js';
import { ScriptedOperator, type OperatorRobot, type OperatorScript, type OperatorTask } from './operator.js';
import { quotaFreeBytes } from './disk-quota.js';
import { seededRandom } from './random.js';

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

/**
 * Everything `fleet-sim fleet` can be told, with its default; parsed once by the CLI (or by a
 * test or benchmark calling {@link runFleet}).
 */
export const FleetOptionsSchema = z.strictObject({
  /** The fleet API the robots enroll with (base URL, with or without /v1). */
  api: z.url({ protocol: /^https?$/ }),
  /** Enrollment token; needed only while some robot of the fleet has no credentials yet. */
  token: z.string().min(1).max(256).optional(),
  /** Robots to run, `<dataDir>/robot-0` … `robot-<count-1>`. */
  count: z.coerce.number().int().min(1).max(10_000),
  dataDir: z.string().min(1),
  /** Robots without `episodes.v1` (the cloud answers 422 to start, finish and discard). */
  legacyRuntime: z.boolean().default(false),
  /** Synthetic recorder byte rate per robot. */
  bytesPerSecond: z.coerce.number().int().min(1).max(1024 * 1024 * 1024).default(64 * 1024),
  /**
   * What the synthetic recorder writes: `ros2`, a rosbag2 directory (`bag/bag_0.mcap` of CDR
   * messages and `bag/metadata.yaml`, what `ros2 bag record --storage mcap` writes), or `json`, one
   * `recording.mcap` of JSON messages (what the LeRobot exporter reads today).
   */
  recordingFormat: z.enum(SYNTHETIC_RECORDING_FORMATS).default('ros2'),
  /** Synthetic recorder cameras: 1 (the front camera) or 2 (also the wrist camera). */
  cameras: z.coerce.number().int().min(1).max(2).default(1),
  /** Synthetic camera frame width (px); with no width or height the frames are sized by `bytesPerSecond`. */
  cameraWidth: z.coerce.number().int().min(16).max(1920).optional(),
  /** Synthetic camera frame height (px); the other side follows at 4:3 when only one is given. */
  cameraHeight: z.coerce.number().int().min(16).max(1920).optional(),
  /** Synthetic camera frames per second; 10 when the size is fixed, else planned from `bytesPerSecond`. */
  cameraHz: z.coerce.number().int().min(1).max(120).optional(),
  /** Synthetic joint states (and commands) per second; planned from `bytesPerSecond` (at most 50) when absent. */
  stateHz: z.coerce.number().int().min(1).max(500).optional(),
  /** Synthetic recorder write interval. */
  chunkIntervalMs: z.coerce.number().int().min(1).max(60_000).default(100),
  /** Episodes each operator starts on its own per minute; 0: only the API and the control socket start them. */
  autoEpisodesPerMinute: z.coerce.number().min(0).max(600).default(0),
  /** Time each operator spends on one subtask while recording. */
  subtaskMs: z.coerce.number().int().min(10).max(3_600_000).default(2_000),
  platform: z.string().min(1).max(128).default('sim-arm'),
  /** Robot names are `<namePrefix>-<i>`. */
  namePrefix: z.string().min(1).max(64).default('sim'),
  /** Seeds the operators' choices; robot i uses seed + i. */
  seed: z.coerce.number().int().default(1),
  /** Least time in `finalizing` (the agent's --finalizing-delay-ms). */
  finalizingDelayMs: z.coerce.number().int().min(0).max(600_000).default(0),
  /** Broker address overriding the one given at enrollment. */
  mqttUrl: BrokerUrlListSchema.optional(),
  /** Robots enrolling and opening their stores at the same time. */
  startConcurrency: z.coerce.number().int().min(1).max(1000).default(16),
  /** Give up when not every robot is connected after this long. */
  connectTimeoutMs: z.coerce.number().int().min(100).max(3_600_000).default(120_000),
  /** Serve each robot's local control socket (`fleet-agent episode … --data-dir <dataDir>/robot-<i>`). */
  controlSocket: z.boolean().default(true),
  /** Upload assigned episodes to their destinations, as a real agent does (on by default). */
  sync: z.boolean().default(true),
  /** Replicas each robot uploads at once (the agent's --sync-concurrency). */
  syncConcurrency: z.coerce.number().int().min(1).max(64).default(2),
  /** Multipart parts on the wire at once per file (the agent's --sync-part-parallel). */
  syncPartParallel: z.coerce.number().int().min(1).max(32).default(3),
  /** Waits after failed upload attempts (the agent's --sync-retry-schedule-ms); the agent's default when absent. */
  syncRetryScheduleMs: z.array(z.coerce.number().int().min(1)).min(1).max(32).optional(),
  /** The agent's --sync-assignments-refresh-ms; the agent's default when absent. */
  syncAssignmentsRefreshMs: z.coerce.number().int().min(1000).max(24 * 60 * 60_000).optional(),
  /** Extra CAs trusted for upload URLs (the agent's --upload-ca-file). */
  uploadCaFile: z.string().min(1).optional(),
  /** The file NODE_EXTRA_CA_CERTS names (handed over by the CLI). */
  extraCaCertsFile: z.string().min(1).optional(),
  /** Allow plain http:// upload URLs (the agent's --allow-http-uploads). */
  allowHttpUploads: z.boolean().default(false),
  /** Bytes per second each robot's uploads together may send (the agent's --upload-limit); unlimited when absent. */
  uploadLimit: z.coerce.number().int().min(1024).optional(),
  /**
   * A disk of this many bytes per robot as its disk pressure sees it: free bytes are this less what
   * the robot's data directory holds (a file written there fills it). Absent: the real file system.
   */
  diskQuotaBytes: z.coerce.number().int().min(1).optional(),
  logLevel: z.enum(LOG_LEVELS).default('info'),
});
export type FleetOptions = Readonly<z.output<typeof FleetOptionsSchema>>;
export type FleetOptionsInput = z.input<typeof FleetOptionsSchema>;

export function parseFleetOptions(input: FleetOptionsInput): FleetOptions {
  return Object.freeze(FleetOptionsSchema.parse(input));
}

/** What the caller supplies besides options: time and logging (tests pass their own). */
export interface FleetDeps {
  clock?: Clock;
  scheduler?: Scheduler;
  /** Default: JSON to stderr at the options' log level. */
  logger?: Logger;
  /** Aborting while starting stops the robots started so far and rejects. */
  signal?: AbortSignal;
}

/** One simulated robot: a real agent, its simulated actions and its operator. */
export interface SimulatedRobot {
  index: number;
  robotId: string;
  name: string;
  dataDir: string;
  agent: Agent;
  actions: SimulatedRobotActions;
  operator: ScriptedOperator;
}

export interface Fleet {
  readonly robots: readonly SimulatedRobot[];
  /** The robot ids, in index order. */
  readonly robotIds: readonly string[];
  /** Stops every operator (no new episodes; a recording in progress is left as it is); the agents keep running and syncing. */
  stopOperators(): Promise<void>;
  /** Stops every operator, then every agent (each publishes its offline status). */
  stop(): Promise<void>;
}

/** Starting the fleet failed; the robots started so far are stopped. */
export class FleetError extends Error {
  override readonly name = 'FleetError';
}

/** The operator's view of a real agent. */
export function agentAsOperatorRobot(agent: Agent): OperatorRobot {
  return {
    get recordingState() {
      return agent.machine.state;
    },
    setContext: (patch) => agent.setContext(patch),
    episode: (verb) => agent.episode(verb, 'simulator'),
    onState: (listener) => {
      agent.on('state', listener);
      return () => agent.off('state', listener);
    },
  };
}

const TASKS: readonly OperatorTask[] = [
  {
    id: 'task_pick_place',
    name: 'Pick and place',
    subtasks: [
      { id: 'reach', name: 'Reach the part' },
      { id: 'grasp', name: 'Grasp' },
      { id: 'place', name: 'Place in the bin' },
    ],
  },
  {
    id: 'task_fold_towel',
    name: 'Fold a towel',
    subtasks: [
      { id: 'flatten', name: 'Flatten' },
      { id: 'fold_half', name: 'Fold in half' },
      { id: 'fold_quarter', name: 'Fold in quarters' },
      { id: 'stack', name: 'Stack' },
    ],
  },
  {
    id: 'task_stack_cubes',
    name: 'Stack cubes',
    subtasks: [
      { id: 'pick_red', name: 'Pick the red cube' },
      { id: 'stack_red', name: 'Stack it' },
    ],
  },
];

/** The script of robot `index`: tasks rotate so neighbouring robots work on different ones. */
export function operatorScript(index: number, name: string, opts: Pick<FleetOptions, 'subtaskMs'>): OperatorScript {
  const tasks = TASKS.map((_, i) => TASKS[(index + i) % TASKS.length]!);
  return {
    tasks,
    operatorId: `op_${index % 7}`,
    operatorName: `Operator ${index % 7}`,
    controlMode: index % 4 === 3 ? 'shared_autonomy' : 'teleop',
    policyVersionId: 'pv_sim_1',
    sessionName: `${name}-session`,
    subtaskMs: opts.subtaskMs,
  };
}

/** Runs `fn` over `items` with at most `limit` at a time; stops taking new items after a failure. */
async function eachLimited<T>(items: readonly T[], limit: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  let failed: Error | undefined;
  const worker = async () => {
    while (failed === undefined && next < items.length) {
      const item = items[next++]!;
      try {
        await fn(item);
      } catch (err) {
        failed ??= err instanceof Error ? err : new Error(String(err));
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  if (failed !== undefined) throw failed;
}

function robotDir(dataDir: string, index: number): string {
  return join(dataDir, `robot-${index}`);
}

/**
 * Runs `count` real agents in this process, each in `<dataDir>/robot-<i>` with the synthetic
 * recorder, simulated robot actions and a scripted operator. A robot without credentials enrolls
 * with the token; one with credentials reuses them. Resolves once every robot is connected.
 */
export async function runFleet(input: FleetOptionsInput | FleetOptions, deps: FleetDeps = {}): Promise<Fleet> {
  const opts = parseFleetOptions(input);
  const clock = deps.clock ?? systemClock;
  const scheduler = deps.scheduler ?? systemScheduler;
  const logger = deps.logger ?? pino({ level: opts.logLevel, base: { pid: process.pid }, redact: ['password', '*.password'] }, pino.destination({ dest: 2, sync: true }));
  await mkdir(opts.dataDir, { recursive: true, mode: 0o700 });

  // One HTTP agent for every robot's uploads: a fleet in one process shares its connections.
  const dispatcher = opts.sync
    ? uploadDispatcher({ caFile: opts.uploadCaFile, extraCaCertsFile: opts.extraCaCertsFile, connections: Math.min(256, opts.count * opts.syncConcurrency * opts.syncPartParallel) })
    : undefined;
  const slots: (SimulatedRobot | undefined)[] = new Array<SimulatedRobot | undefined>(opts.count);
  const started = (): SimulatedRobot[] => slots.filter((r): r is SimulatedRobot => r !== undefined);
  const stopAll = async (robots: readonly SimulatedRobot[]): Promise<void> => {
    await Promise.all(robots.map((r) => r.operator.stop()));
    await eachLimited(robots, 64, async (r) => {
      await r.agent.stop().catch((err: unknown) => logger.error({ err, robot_id: r.robotId }, 'agent did not stop cleanly'));
    });
    await dispatcher?.close().catch(() => undefined);
  };
  const aborted = () => {
    if (deps.signal?.aborted) throw new FleetError('fleet start aborted');
  };

  const startOne = async (index: number): Promise<void> => {
    aborted();
    const dir = robotDir(opts.dataDir, index);
    const name = `${opts.namePrefix}-${index}`;
    const log = logger.child({ robot: name });
    let creds: Credentials | undefined = await readCredentials(dir);
    if (!creds) {
      if (opts.token === undefined) throw new FleetError(`${dir} has no credentials and no enrollment token was given (--token)`);
      creds = await enroll({
        api: opts.api,
        token: opts.token,
        dataDir: dir,
        name,
        platform: opts.platform,
        runtimeVersion: opts.legacyRuntime ? LEGACY_RUNTIME_VERSION : AGENT_RUNTIME_VERSION,
        ...(opts.mqttUrl ? { mqttUrls: opts.mqttUrl } : {}),
      });
      log.info({ robot_id: creds.robot_id }, 'enrolled');
    }
    const config = parseAgentConfig({
      dataDir: dir,
      legacyRuntime: opts.legacyRuntime,
      platform: opts.platform,
      bytesPerSecond: opts.bytesPerSecond,
      chunkIntervalMs: opts.chunkIntervalMs,
      finalizingDelayMs: opts.finalizingDelayMs,
      logLevel: opts.logLevel,
      ...(opts.mqttUrl ? { mqttUrl: opts.mqttUrl } : {}),
      sync: opts.sync,
      syncConcurrency: opts.syncConcurrency,
      syncPartParallel: opts.syncPartParallel,
      ...(opts.syncRetryScheduleMs ? { syncRetryScheduleMs: opts.syncRetryScheduleMs } : {}),
      ...(opts.syncAssignmentsRefreshMs !== undefined ? { syncAssignmentsRefreshMs: opts.syncAssignmentsRefreshMs } : {}),
      allowHttpUploads: opts.allowHttpUploads,
      ...(opts.uploadLimit !== undefined ? { uploadLimit: opts.uploadLimit } : {}),
      ...(opts.uploadCaFile ? { uploadCaFile: opts.uploadCaFile } : {}),
      ...(opts.extraCaCertsFile ? { extraCaCertsFile: opts.extraCaCertsFile } : {}),
    });
    const actions = new SimulatedRobotActions();
    const agentLog = log.child({ robot_id: creds.robot_id });
    const agent = new Agent(config, {
      clock,
      scheduler,
      logger: agentLog,
      recorder: new SyntheticRecorder({
        clock,
        scheduler,
        format: opts.recordingFormat,
        bytesPerSecond: config.bytesPerSecond,
        chunkIntervalMs: config.chunkIntervalMs,
        cameras: opts.cameras === 2 ? 2 : 1,
        ...(opts.cameraWidth !== undefined ? { cameraWidth: opts.cameraWidth } : {}),
        ...(opts.cameraHeight !== undefined ? { cameraHeight: opts.cameraHeight } : {}),
        ...(opts.cameraHz !== undefined ? { cameraHz: opts.cameraHz } : {}),
        ...(opts.stateHz !== undefined ? { stateHz: opts.stateHz } : {}),
      }),
      actions,
      credentials: creds,
      controlSocket: opts.controlSocket,
      ...(dispatcher ? { uploadDispatcher: dispatcher } : {}),
      ...(opts.diskQuotaBytes !== undefined ? { freeBytes: quotaFreeBytes(opts.diskQuotaBytes) } : {}),
    });
    await agent.start();
    const operator = new ScriptedOperator({
      robot: agentAsOperatorRobot(agent),
      script: operatorScript(index, creds.name, opts),
      clock,
      scheduler,
      random: seededRandom(opts.seed + index),
      logger: agentLog,
      autoEpisodesPerMinute: opts.autoEpisodesPerMinute,
    });
    slots[index] = { index, robotId: creds.robot_id, name: creds.name, dataDir: dir, agent, actions, operator };
    operator.start();
  };

  try {
    await eachLimited(
      Array.from({ length: opts.count }, (_, i) => i),
      opts.startConcurrency,
      startOne,
    );
    aborted();
    await waitConnected(started(), opts.connectTimeoutMs, deps.signal);
  } catch (err) {
    await stopAll(started());
    throw err;
  }

  const robots = started();
  logger.info({ robots: robots.length, legacy_runtime: opts.legacyRuntime, auto_episodes_per_minute: opts.autoEpisodesPerMinute }, 'fleet connected');
  let stopping: Promise<void> | undefined;
  return {
    robots,
    robotIds: robots.map((r) => r.robotId),
    async stopOperators() {
      await Promise.all(robots.map((r) => r.operator.stop()));
      logger.info({ robots: robots.length }, 'operators stopped');
    },
    stop() {
      stopping ??= stopAll(robots).then(() => logger.info({ robots: robots.length }, 'fleet stopped'));
      return stopping;
    },
  };
}

/** Resolves once every agent is connected; a FleetError naming how many are not after `timeoutMs`. */
async function waitConnected(robots: readonly SimulatedRobot[], timeoutMs: number, signal?: AbortSignal): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  let onAbort: (() => void) | undefined;
  const bounded = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      const missing = robots.filter((r) => !r.agent.link?.connected).length;
      reject(new FleetError(`${missing} of ${robots.length} robots not connected after ${timeoutMs} ms`));
    }, timeoutMs);
    onAbort = () => reject(new FleetError('fleet start aborted'));
    signal?.addEventListener('abort', onAbort, { once: true });
  });
  try {
    await Promise.race([Promise.all(robots.map((r) => r.agent.whenConnected())), bounded]);
  } finally {
    clearTimeout(timer);
    if (onAbort) signal?.removeEventListener('abort', onAbort);
  }
}
