/**
 * The robot's actions as its config file maps them (`actions`, `action_timeout_ms`,
 * `action_output_max_bytes`): the schema `fleet-agent config check` and `start` parse, the
 * check that what it names is there, and the RobotActions that runs each command by its
 * program, shell command or endpoint (action-runners.ts) or declines it `not_configured`.
 */
import { BlockList, isIP } from 'node:net';
import { isAbsolute } from 'node:path';
import type { Logger } from 'pino';
import { z } from 'zod';
import { callEndpoint, runProgram, type ActionRun } from './action-runners.js';
import { ACTION_COMMANDS, SimulatedRobotActions, type ActionCommand, type ActionRequest, type RobotActions } from './actions.js';
import { RefusalError } from './errors.js';
import { executableProblem, resolveProgram } from './programs.js';
import type { Scheduler } from './time.js';

export { DECLINE_CODES, DECLINE_EXIT_CODE, DECLINE_STATUSES } from './action-runners.js';

// Where an endpoint may be: on the robot. Literal addresses only (besides `localhost`), because a
// name resolves through DNS, which may point anywhere, and the agent must not become a way out
// to the internet for whoever edits a URL.
const ROBOT_LOCAL = new BlockList();
ROBOT_LOCAL.addSubnet('127.0.0.0', 8, 'ipv4');
ROBOT_LOCAL.addSubnet('10.0.0.0', 8, 'ipv4');
ROBOT_LOCAL.addSubnet('172.16.0.0', 12, 'ipv4');
ROBOT_LOCAL.addSubnet('192.168.0.0', 16, 'ipv4');
ROBOT_LOCAL.addSubnet('169.254.0.0', 16, 'ipv4');
ROBOT_LOCAL.addAddress('::1', 'ipv6');
ROBOT_LOCAL.addSubnet('fe80::', 10, 'ipv6');
ROBOT_LOCAL.addSubnet('fc00::', 7, 'ipv6');

/** Whether `url`'s host is `localhost` or a loopback, private or link-local address. */
export function isRobotLocalUrl(url: URL): boolean {
  const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
  if (host === 'localhost') return true;
  const family = isIP(host);
  return family !== 0 && ROBOT_LOCAL.check(host, family === 4 ? 'ipv4' : 'ipv6');
}

const EndpointUrlSchema = z.string().superRefine((value, ctx) => {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    ctx.addIssue({ code: 'custom', message: 'not a URL' });
    return;
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') ctx.addIssue({ code: 'custom', message: `an endpoint is http or https, not ${url.protocol.slice(0, -1)}` });
  else if (url.username || url.password) ctx.addIssue({ code: 'custom', message: 'an endpoint URL carries no credentials' });
  else if (!isRobotLocalUrl(url)) {
    ctx.addIssue({
      code: 'custom',
      message: `an endpoint is on the robot: localhost or a loopback, private or link-local address, not ${url.hostname}`,
    });
  }
});

const EnvNameSchema = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'not an environment variable name');

/**
 * What answers one command: a program (argv, no shell), a shell command (run by `bash -c`, so a
 * ROS 2 `setup.bash` can be sourced), or a robot-local HTTP endpoint. Exactly one of the three.
 */
export const ActionSpecSchema = z
  .strictObject({
    /** argv: the program (found on PATH when it has no slash) and its arguments. */
    program: z.array(z.string().min(1)).min(1).max(256).optional(),
    /** One shell command line, run by `bash -c`. */
    shell: z.string().min(1).max(64 * 1024).optional(),
    /** POSTed the request as JSON; answers JSON. */
    http: EndpointUrlSchema.optional(),
    /** Added to the agent's environment for a program or shell command (numbers become strings). */
    env: z.record(EnvNameSchema, z.union([z.string(), z.number().transform(String)])).optional(),
    /** This action's timeout, instead of `action_timeout_ms`. */
    timeout_ms: z.number().int().min(1).max(600_000).optional(),
  })
  .superRefine((spec, ctx) => {
    const kinds = (['program', 'shell', 'http'] as const).filter((k) => spec[k] !== undefined);
    if (kinds.length !== 1) {
      ctx.addIssue({ code: 'custom', message: kinds.length === 0 ? 'an action needs one of program, shell or http' : `an action has one of program, shell or http, not ${kinds.join(' and ')}` });
    }
    if (spec.http !== undefined && spec.env !== undefined) ctx.addIssue({ code: 'custom', path: ['env'], message: 'env is for program and shell actions' });
  });
export type ActionSpec = z.output<typeof ActionSpecSchema>;

/** `actions` as a map: each key one of ACTION_COMMANDS, an unknown key an error. */
export const ActionsMapSchema = z.strictObject(
  Object.fromEntries(ACTION_COMMANDS.map((c) => [c, ActionSpecSchema.optional()])) as Record<ActionCommand, z.ZodOptional<typeof ActionSpecSchema>>,
);
export type ActionsMap = z.output<typeof ActionsMapSchema>;

/** `simulated`: the in-agent simulated robot (SimulatedRobotActions), for simulators and demos. */
export const SIMULATED_ACTIONS = 'simulated';

/**
 * `actions`: the word `simulated`, or a map. Not a z.union: a union reports a mistake inside the
 * map as "invalid input" at `actions`, and config check must name the key that is wrong.
 */
export const ActionsChoiceSchema = z.unknown().transform((value, ctx): typeof SIMULATED_ACTIONS | ActionsMap => {
  if (value === SIMULATED_ACTIONS) return SIMULATED_ACTIONS;
  if (typeof value === 'string') {
    ctx.addIssue({ code: 'custom', message: `actions is a map of commands or the word ${SIMULATED_ACTIONS}, not ${JSON.stringify(value).slice(0, 64)}` });
    return z.NEVER;
  }
  const parsed = ActionsMapSchema.safeParse(value);
  if (parsed.success) return parsed.data;
  // Paths are relative to `actions`, so each problem names its own key, and an unknown command
  // is reported at that key (its line in the file), with the commands there are.
  for (const issue of parsed.error.issues) {
    const path = issue.path.map((k) => (typeof k === 'symbol' ? String(k) : k));
    if (issue.code === 'unrecognized_keys' && path.length === 0) {
      for (const key of issue.keys) ctx.addIssue({ code: 'custom', message: `unknown command ${JSON.stringify(key)} (one of ${ACTION_COMMANDS.join(', ')})`, path: [key] });
    } else ctx.addIssue({ code: 'custom', message: issue.message, path });
  }
  return z.NEVER;
});

/** The agent config's group of settings for robot commands (YAML keys as written in agent.yaml). */
export const ActionsSectionSchema = z.strictObject({
  /** Timeout of an action without its own `timeout_ms`; keep it under the cloud's command wait (10 s by default). */
  action_timeout_ms: z.coerce.number().int().min(1).max(600_000).default(8_000),
  /** Most bytes read from a program's stdout or an endpoint's body; beyond it the action failed. */
  action_output_max_bytes: z.coerce.number().int().min(1024).max(1024 * 1024).default(64 * 1024),
  /** Absent: nothing is configured, and every action command is declined `not_configured`. */
  actions: ActionsChoiceSchema.default({}),
});
export type ActionsSection = z.output<typeof ActionsSectionSchema>;
export type ActionsSectionInput = z.input<typeof ActionsSectionSchema>;

/** A problem `fleet-agent config check` reports; `path` is a key path into the config file, as in a zod issue. */
export interface ActionsConfigProblem {
  path: (string | number)[];
  message: string;
}

type Env = Readonly<Record<string, string | undefined>>;

/**
 * What the config names that is not there: a program (argv[0]) not found on PATH or not
 * executable, or no `bash` for a shell action. Run before the agent connects, so that a typo
 * fails `config check` and `start` instead of the first command. `env` is the agent's
 * environment (PATH is looked up in it, with the action's own env on top, as the program will be).
 */
export function checkActionsConfig(cfg: ActionsSection, env: Env): ActionsConfigProblem[] {
  if (cfg.actions === SIMULATED_ACTIONS) return [];
  const problems: ActionsConfigProblem[] = [];
  for (const command of ACTION_COMMANDS) {
    const spec = cfg.actions[command];
    if (!spec) continue;
    const path = spec.env?.PATH ?? env.PATH ?? '';
    if (spec.program) {
      const problem = findExecutable(spec.program[0]!, path).problem;
      if (problem) problems.push({ path: ['actions', command, 'program', 0], message: problem });
    } else if (spec.shell !== undefined) {
      const problem = findExecutable('bash', path).problem;
      if (problem) problems.push({ path: ['actions', command, 'shell'], message: `a shell action runs under bash: ${problem}` });
    }
  }
  return problems;
}

function findExecutable(file: string, path: string): { problem?: string } {
  if (file.includes('/')) {
    if (!isAbsolute(file)) return { problem: `${file} is a relative path; give the program's absolute path or a name on PATH` };
    const problem = executableProblem(file);
    return problem ? { problem } : {};
  }
  if (resolveProgram(file, path) !== undefined) return {};
  return { problem: `${file} is not on PATH (${path || 'empty'})` };
}

export interface ConfiguredActionsDeps {
  logger: Logger;
  /** The agent's environment, which programs inherit (nothing below the entry point reads process.env). */
  env: Env;
  /** Runs the action timeouts. */
  scheduler: Scheduler;
  /** How error messages name the config file (default `agent.yaml`). */
  configFile?: string;
}

/**
 * The robot actions the config describes: `simulated` is the in-agent simulated robot; a map
 * answers each command by its program, shell command or endpoint, and a command it does not
 * map with `not_configured`.
 */
export function configuredRobotActions(cfg: ActionsSection, deps: ConfiguredActionsDeps): RobotActions {
  if (cfg.actions === SIMULATED_ACTIONS) return new SimulatedRobotActions();
  return new ConfiguredRobotActions(cfg, cfg.actions, deps);
}

class ConfiguredRobotActions implements RobotActions {
  private readonly configFile: string;

  constructor(
    private readonly cfg: ActionsSection,
    private readonly map: ActionsMap,
    private readonly deps: ConfiguredActionsDeps,
  ) {
    this.configFile = deps.configFile ?? 'agent.yaml';
  }

  async run(request: ActionRequest): Promise<Record<string, unknown>> {
    const spec = this.map[request.command];
    if (!spec) throw new RefusalError('not_configured', `${request.command} is not configured on this robot (${this.configFile}: actions.${request.command})`);
    const run: ActionRun = {
      request,
      timeoutMs: spec.timeout_ms ?? this.cfg.action_timeout_ms,
      maxBytes: this.cfg.action_output_max_bytes,
      timeoutKey: `${this.configFile}: actions.${request.command}.timeout_ms`,
      logger: this.deps.logger.child({ command: request.command, cmd_id: request.cmd_id }),
      scheduler: this.deps.scheduler,
    };
    if (spec.http !== undefined) return callEndpoint(run, spec.http);
    const env = { ...this.deps.env, ...spec.env };
    if (spec.program) return runProgram(run, spec.program[0]!, spec.program.slice(1), env, spec.program[0]!);
    return runProgram(run, 'bash', ['-c', spec.shell!], env, 'the shell command');
  }
}

