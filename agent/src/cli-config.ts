/**
 * From the config file, the flags and the FLEET_AGENT_* variables to one checked AgentConfig:
 * defaults < file < environment < flags (commander merges the last two). Every problem, in the
 * file or in a flag, is reported at once with the file, line and key it comes from.
 */
import { existsSync } from 'node:fs';
import { ZodError } from 'zod';
import { parseAgentConfig, type AgentConfig, type AgentConfigInput } from './config.js';
import { ConfigFileError } from './errors.js';
import { DEFAULT_CONFIG_PATH, loadConfigFile, snake, type ConfigProblem, type LoadedConfigFile } from './config-file.js';

type Env = Readonly<Record<string, string | undefined>>;

export interface ConfigOptions {
  /** `--config`: a path, or `none` for no file even when the default one exists. */
  config?: string;
}

/** The config file to read: the one named, else the package's default path when it exists. */
export function configPathFor(o: ConfigOptions): string | undefined {
  if (o.config === 'none' || o.config === '') return undefined;
  if (o.config !== undefined) return o.config;
  return existsSync(DEFAULT_CONFIG_PATH) ? DEFAULT_CONFIG_PATH : undefined;
}

/** Reads the config file `o` names (or the default one); undefined when there is none. */
export async function configFileFor(o: ConfigOptions): Promise<LoadedConfigFile | undefined> {
  const path = configPathFor(o);
  return path === undefined ? undefined : loadConfigFile(path);
}

const flagOf = (camel: string): string => `--${camel.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;

export interface EffectiveConfig {
  config: AgentConfig;
  file: LoadedConfigFile | undefined;
}

/**
 * The file's settings under `overrides` (flags and environment), checked as one config, then
 * every program and folder it names looked for. Throws ConfigFileError with every problem.
 */
type KeyPath = readonly PropertyKey[];

export async function effectiveConfig(overrides: Partial<AgentConfigInput>, o: ConfigOptions, env: Env, opts: { checkPrograms?: boolean } = {}): Promise<EffectiveConfig> {
  const file = await configFileFor(o);
  const input = { ...file?.input, ...overrides } as AgentConfigInput;
  const where = (path: KeyPath): Pick<ConfigProblem, 'file' | 'line' | 'key'> => {
    const top = String(path[0] ?? '');
    const fromFlag = top in overrides;
    if (fromFlag || !file) return { file: fromFlag ? `${flagOf(top)} (flag or FLEET_AGENT_ variable)` : '(settings)', key: path.map(String).map((p, i) => (i === 0 ? snake(p) : p)).join('.') };
    const at = path.map(String).map((p, i) => (i === 0 ? snake(p) : p));
    const key = at.join('.');
    const line = file.lineOf(at);
    return { file: file.path, ...(line !== undefined ? { line } : {}), key };
  };
  if (input.dataDir === undefined) {
    throw new ConfigFileError([{ file: file?.path ?? '(settings)', key: 'data_dir', message: 'the robot data directory is not set: give --data-dir (FLEET_AGENT_DATA_DIR) or data_dir in the config file' }]);
  }
  let config: AgentConfig;
  try {
    config = parseAgentConfig(input);
  } catch (err) {
    if (!(err instanceof ZodError)) throw err;
    throw new ConfigFileError(
      err.issues.flatMap((i): ConfigProblem[] =>
        i.code === 'unrecognized_keys' ? i.keys.map((k) => ({ ...where([...i.path, k]), message: 'unknown key' })) : [{ ...where(i.path), message: i.message }],
      ),
    );
  }
  if (opts.checkPrograms ?? true) {
    // Loaded when used: the control commands read the file for its data_dir only.
    const { checkRobotConfig } = await import('./robot-parts.js');
    const problems = await checkRobotConfig(config, env);
    if (problems.length > 0) throw new ConfigFileError(problems.map((p) => ({ ...where(p.path), message: p.message })));
  }
  return { config, file };
}

/**
 * The data directory for a command that talks to a running agent (status, episode, …): the
 * flag, else the config file's `data_dir`. Reads the file only when the flag is absent.
 */
export async function dataDirFor(o: ConfigOptions & { dataDir?: string }): Promise<string> {
  if (o.dataDir !== undefined) return o.dataDir;
  const file = await configFileFor(o);
  const dir = file?.input.dataDir;
  if (dir === undefined) {
    throw new ConfigFileError([{ file: file?.path ?? DEFAULT_CONFIG_PATH, key: 'data_dir', message: `no data directory: give --data-dir (FLEET_AGENT_DATA_DIR)${file ? ' or set data_dir in the config file' : `, or --config FILE with data_dir (${DEFAULT_CONFIG_PATH} does not exist)`}` }]);
  }
  return dir;
}

/** The settings as `config check` prints them: snake_case keys as in the file, nothing secret (the config holds none). */
export function describeConfig(config: AgentConfig): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(config)) if (v !== undefined && k !== 'extraCaCertsFile') out[snake(k)] = v;
  return out;
}
