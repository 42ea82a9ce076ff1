/**
 * The robot-specific parts of an agent, built from its config: the recorder (a program per
 * episode, an import folder, or the simulator's synthetic recorder) and the robot actions
 * (programs, shell commands, endpoints, or the simulated robot). `check` finds what the config
 * names that is not there (a program, a folder) before the agent connects.
 */
import type { Clock } from '@fleet/protocol';
import type { Logger } from 'pino';
import type { RobotActions } from './actions.js';
import { recorderKindOf, type AgentConfig } from './config.js';
import { checkActionsConfig, configuredRobotActions, type ActionsSection } from './configured-actions.js';
import { RefusalError } from './errors.js';
import { checkCommandRecorderConfig, CommandRecorder } from './recording/command-recorder.js';
import { checkImportRecorderConfig, ImportRecorder } from './recording/import-recorder.js';
import { ImportWatcher } from './recording/import-watcher.js';
import type { Recorder, RecordingHandle } from './recording/recorder.js';
import type { RecorderKind } from './recording/recorder-config.js';
import type { Scheduler } from './time.js';

type Env = Readonly<Record<string, string | undefined>>;

/** Where the simulator's recorder lives; not a dependency of the agent (its package ships without it). */
const SYNTHETIC_RECORDER_MODULE = '@fleet/simulator/synthetic-recorder';

/** A problem with what the config names, at a key path of the config file. */
export interface RobotConfigProblem {
  path: (string | number)[];
  message: string;
}

function actionsSection(config: AgentConfig): ActionsSection {
  return { actions: config.actions, action_timeout_ms: config.actionTimeoutMs, action_output_max_bytes: config.actionOutputMaxBytes };
}

/** Every program, folder or module the config names that is missing or unusable. */
export async function checkRobotConfig(config: AgentConfig, env: Env): Promise<RobotConfigProblem[]> {
  const problems: RobotConfigProblem[] = checkActionsConfig(actionsSection(config), env).map((p) => ({ path: p.path, message: p.message }));
  const rec = config.recorder;
  if (rec?.kind === 'command') {
    for (const p of checkCommandRecorderConfig(rec, env)) problems.push(typeof p === 'string' ? { path: ['recorder'], message: p } : p);
  } else if (rec?.kind === 'import') {
    for (const p of await checkImportRecorderConfig(rec, { dataDir: config.dataDir, env })) problems.push(typeof p === 'string' ? { path: ['recorder'], message: p } : p);
  } else if (rec?.kind === 'synthetic') {
    try {
      await import(SYNTHETIC_RECORDER_MODULE);
    } catch (err) {
      problems.push({ path: ['recorder', 'kind'], message: `the synthetic recorder is not installed (it comes with the simulator, ${SYNTHETIC_RECORDER_MODULE}): ${(err as Error).message.split('\n')[0]}` });
    }
  }
  return problems;
}

/** A robot with no recorder configured: it records nothing, and says so when asked to. */
export class NoRecorder implements Recorder {
  start(): Promise<RecordingHandle> {
    return Promise.reject(new RefusalError('unsupported', 'no recorder is configured on this robot (agent.yaml: recorder)'));
  }
}

export interface RobotParts {
  recorder: Recorder;
  recorderKind: RecorderKind;
  actions: RobotActions;
  /** With `recorder.kind: import`: the watcher of the folder, started after the state machine. */
  importWatcher?: (deps: ImportWatcherDeps) => ImportWatcher;
}

type ImportWatcherDeps = Omit<ConstructorParameters<typeof ImportWatcher>[0], 'config' | 'recorder'>;

export async function buildRobotParts(config: AgentConfig, deps: { clock: Clock; scheduler: Scheduler; logger: Logger; env: Env; configFile?: string }): Promise<RobotParts> {
  const actions = configuredRobotActions(actionsSection(config), { logger: deps.logger.child({ component: 'actions' }), env: deps.env, scheduler: deps.scheduler, ...(deps.configFile ? { configFile: deps.configFile } : {}) });
  const rec = config.recorder;
  switch (recorderKindOf(config)) {
    case 'none':
      return { recorder: new NoRecorder(), actions, recorderKind: 'none' };
    case 'command': {
      if (rec?.kind !== 'command') throw new Error('unreachable');
      return { recorder: new CommandRecorder(rec, { scheduler: deps.scheduler, logger: deps.logger.child({ component: 'recorder' }), env: deps.env }), actions, recorderKind: 'command' };
    }
    case 'import': {
      if (rec?.kind !== 'import') throw new Error('unreachable');
      const recorder = new ImportRecorder(rec, { clock: deps.clock, logger: deps.logger.child({ component: 'import' }), env: deps.env, scheduler: deps.scheduler });
      return { recorder, actions, recorderKind: 'import', importWatcher: (w) => new ImportWatcher({ ...w, config: rec, recorder }) };
    }
    case 'synthetic': {
      if (rec?.kind !== 'synthetic') throw new Error('unreachable');
      // A variable specifier: the agent does not depend on the simulator, it loads it if present.
      const specifier: string = SYNTHETIC_RECORDER_MODULE;
      const mod = (await import(specifier)) as { createSyntheticRecorder(opts: Record<string, unknown>): Recorder };
      const recorder = mod.createSyntheticRecorder({ clock: deps.clock, scheduler: deps.scheduler, bytesPerSecond: config.bytesPerSecond, chunkIntervalMs: config.chunkIntervalMs, format: rec.format });
      return { recorder, actions, recorderKind: 'synthetic' };
    }
  }
}
