#!/usr/bin/env node
import { applyUsageRules, EXIT_USAGE } from '@fleet/node-support';
import { BrokerUrlListSchema, systemClock } from '@fleet/protocol';
import { Command, Option } from 'commander';
import { pino } from 'pino';
import type { AgentConfig, AgentConfigInput } from './config.js';
import { AGENT_RUNTIME_VERSION, LEGACY_RUNTIME_VERSION } from './version.js';
import type { ConfigOptions, EffectiveConfig } from './cli-config.js';
import { OPERATOR_CONTEXT_KEYS, type OperatorContextPatch } from './rules/operator-context.js';
import { controlCall, controlSocketPath } from './control/client.js';
import { MAX_EPISODES_LISTED, type ControlResponse } from './control/protocol.js';
import { DEFAULT_CONFIG_PATH, formatProblem } from './config-errors.js';
import { ConfigFileError, ControlError, EnrollError, NotEnrolledError } from './errors.js';
import { formatEpisode, formatEpisodeList } from './episodes-format.js';
import type { EpisodeView } from './episodes-view.js';
import { EPISODE_ID_PATTERN } from './ids.js';
import { formatStatus, type StatusForView } from './status-view.js';

/** Exit codes: 1 refused or failed, 2 bad usage or configuration, 3 no agent running. */
const EXIT_REFUSED = 1;
const EXIT_NOT_RUNNING = 3;

const dataDirOption = () => new Option('--data-dir <dir>', 'the robot data directory (credentials, agent.sqlite, episodes, agent.sock); default: data_dir of the config file').env('FLEET_AGENT_DATA_DIR');
const configOption = () => new Option('--config <file>', `the agent's YAML config file (default ${DEFAULT_CONFIG_PATH} when it exists; \`none\`: no file)`).env('FLEET_AGENT_CONFIG');
const socketOption = () => new Option('--socket <path>', 'control socket (default <data-dir>/agent.sock)').env('FLEET_AGENT_SOCKET');

function fail(message: string, code: number): never {
  process.stderr.write(`fleet-agent: ${message}\n`);
  process.exit(code);
}

/**
 * The config file's reading and checking, loaded when a command needs it: its schemas import the
 * recorders and actions, which `fleet-agent status --data-dir DIR` (a button, a script) does not.
 */
const cliConfig = () => import('./cli-config.js');

const program = new Command('fleet-agent')
  .description('On-robot agent: enrolls the robot, records episodes, answers commands from the fleet cloud.')
  .version(AGENT_RUNTIME_VERSION, '-V, --version', 'print the version');

program
  .command('enroll')
  .description('enroll this robot with the cloud and store its credentials (mode 0600) in the data directory')
  .addOption(new Option('--api <url>', 'the fleet API base URL').env('FLEET_AGENT_API').makeOptionMandatory())
  .addOption(new Option('--token <token>', 'enrollment token (ret_…). Prefer FLEET_AGENT_ENROLL_TOKEN: a flag shows in the process list').env('FLEET_AGENT_ENROLL_TOKEN').makeOptionMandatory())
  .addOption(configOption())
  .addOption(dataDirOption())
  .option('--name <name>', 'robot name (the cloud picks one if absent)')
  .option('--platform <platform>', 'robot platform, e.g. the arm model')
  .option('--runtime-version <version>', `runtime version to announce (default ${AGENT_RUNTIME_VERSION})`)
  .option('--legacy-runtime', `enroll as a runtime without episodes.v1 (announces ${LEGACY_RUNTIME_VERSION})`)
  .addOption(new Option('--mqtt-url <url>', 'broker address to store instead of those the cloud answers with (a comma-separated list for a cluster\'s nodes)').env('FLEET_AGENT_MQTT_URL'))
  .option('--force', 'replace existing credentials (the robot becomes a new robot)')
  .action(async (o: { api: string; token: string; dataDir?: string; config?: string; name?: string; platform?: string; runtimeVersion?: string; legacyRuntime?: boolean; mqttUrl?: string; force?: boolean }) => {
    // Loaded when used (as the daemon below): the control commands (status, record, episodes)
    // start without the HTTP and MQTT clients.
    const { enroll } = await import('./enroll.js');
    let dataDir: string;
    try {
      dataDir = o.dataDir ?? (await (await cliConfig()).dataDirFor(o));
    } catch (err) {
      if (err instanceof ConfigFileError) fail(err.problems.map(formatProblem).join('\n'), EXIT_USAGE);
      throw err;
    }
    let mqttUrls: string[] | undefined;
    if (o.mqttUrl !== undefined) {
      const urls = BrokerUrlListSchema.safeParse(o.mqttUrl);
      if (!urls.success) fail(`--mqtt-url: ${urls.error.issues.map((i) => i.message).join('; ')}`, EXIT_USAGE);
      mqttUrls = urls.data;
    }
    try {
      const creds = await enroll({
        api: o.api,
        token: o.token,
        dataDir,
        runtimeVersion: o.runtimeVersion ?? (o.legacyRuntime ? LEGACY_RUNTIME_VERSION : AGENT_RUNTIME_VERSION),
        ...(o.name !== undefined ? { name: o.name } : {}),
        ...(o.platform !== undefined ? { platform: o.platform } : {}),
        ...(mqttUrls !== undefined ? { mqttUrls } : {}),
        ...(o.force ? { force: true } : {}),
      });
      process.stdout.write(`${JSON.stringify({ robot_id: creds.robot_id, name: creds.name, data_dir: dataDir })}\n`);
    } catch (err) {
      if (err instanceof EnrollError) fail(err.message, err.code === 'already_enrolled' ? EXIT_USAGE : EXIT_REFUSED);
      throw err;
    }
  });

/** `start` options whose attribute is the AgentConfig key of the same name (strings, parsed by the schema). */
const START_SETTINGS = [
  'dataDir',
  'bytesPerSecond',
  'chunkIntervalMs',
  'finalizingDelayMs',
  'mqttUrl',
  'platform',
  'runtimeVersion',
  'reconnectMinMs',
  'reconnectMaxMs',
  'outboxAckTimeoutMs',
  'outboxMaxInFlight',
  'syncConcurrency',
  'syncPartParallel',
  'syncGrantTimeoutMs',
  'syncAssignmentsRefreshMs',
  'uploadTimeoutMs',
  'uploadCaFile',
  'uploadLimit',
  'logLevel',
] as const;

const truthy = (v: unknown) => v === true || v === 'true' || v === '1';

/**
 * What the flags and FLEET_AGENT_* variables of `start` set: only the ones given (a value from
 * commander's default would hide the file's), as AgentConfig input.
 */
function startOverrides(o: Record<string, string | boolean | undefined>, cmd: Command): Partial<AgentConfigInput> {
  const given = (k: string) => {
    const source = cmd.getOptionValueSource(k);
    return source === 'cli' || source === 'env';
  };
  const out: Record<string, unknown> = {};
  for (const k of START_SETTINGS) if (given(k) && typeof o[k] === 'string') out[k] = o[k];
  if (given('legacyRuntime')) out.legacyRuntime = truthy(o.legacyRuntime);
  if (given('allowHttpUploads')) out.allowHttpUploads = truthy(o.allowHttpUploads);
  if (given('sync') && o.sync === false) out.sync = false;
  else if (process.env.FLEET_AGENT_SYNC === '0' || process.env.FLEET_AGENT_SYNC === 'false') out.sync = false;
  const schedule = given('syncRetryScheduleMs') ? o.syncRetryScheduleMs : undefined;
  if (typeof schedule === 'string') out.syncRetryScheduleMs = schedule.split(',').map((v) => v.trim());
  if (given('simulate') && truthy(o.simulate)) {
    out.recorder = { kind: 'synthetic', ...(typeof o.recordingFormat === 'string' ? { format: o.recordingFormat } : {}) };
    out.actions = 'simulated';
  } else if (given('recordingFormat')) {
    fail('--recording-format is a setting of the synthetic recorder: give it with --simulate (or recorder.format in the config file)', EXIT_USAGE);
  }
  // Node trusts NODE_EXTRA_CA_CERTS by itself; an --upload-ca-file rebuilds the list and keeps it.
  if (process.env.NODE_EXTRA_CA_CERTS) out.extraCaCertsFile = process.env.NODE_EXTRA_CA_CERTS;
  return out;
}

/** The effective config, or exit 2 with every problem (file, line, key) on stderr. */
async function effectiveConfigOrExit(overrides: Partial<AgentConfigInput>, o: ConfigOptions, opts: { checkPrograms?: boolean } = {}): Promise<EffectiveConfig> {
  try {
    return await (await cliConfig()).effectiveConfig(overrides, o, process.env, opts);
  } catch (err) {
    if (err instanceof ConfigFileError) {
      process.stderr.write(`fleet-agent: invalid configuration:\n${err.problems.map((p) => `  ${formatProblem(p)}`).join('\n')}\n`);
      process.exit(EXIT_USAGE);
    }
    throw err;
  }
}

program
  .command('start')
  .description('run the agent daemon (needs credentials from `fleet-agent enroll`; never enrolls by itself)')
  .addOption(configOption())
  .addOption(dataDirOption())
  .addOption(new Option('--simulate', "a simulated robot: the simulator's synthetic recorder and simulated actions (needs the simulator installed; overrides recorder and actions of the file)").env('FLEET_AGENT_SIMULATE'))
  .addOption(new Option('--recording-format <format>', 'with --simulate: ros2 (a rosbag2 MCAP directory, the default) or json').choices(['ros2', 'json']).env('FLEET_AGENT_RECORDING_FORMAT'))
  .addOption(new Option('--legacy-runtime', 'behave as a runtime without episodes.v1').env('FLEET_AGENT_LEGACY_RUNTIME'))
  .addOption(new Option('--bytes-per-second <n>', 'synthetic recorder byte rate (default 65536)').env('FLEET_AGENT_BYTES_PER_SECOND'))
  .addOption(new Option('--chunk-interval-ms <ms>', 'synthetic recorder write interval (default 100)').env('FLEET_AGENT_CHUNK_INTERVAL_MS'))
  .addOption(new Option('--finalizing-delay-ms <ms>', 'least time held in finalizing, counted from the verb (default 0)').env('FLEET_AGENT_FINALIZING_DELAY_MS'))
  .addOption(new Option('--mqtt-url <url>', 'broker address overriding the stored ones (a comma-separated list for a cluster\'s nodes)').env('FLEET_AGENT_MQTT_URL'))
  .addOption(new Option('--platform <platform>', 'platform to announce (default: the one given at enrollment)').env('FLEET_AGENT_PLATFORM'))
  .addOption(new Option('--runtime-version <version>', 'runtime version to announce').env('FLEET_AGENT_RUNTIME_VERSION'))
  .addOption(new Option('--reconnect-min-ms <ms>', 'first reconnect delay (default 500)').env('FLEET_AGENT_RECONNECT_MIN_MS'))
  .addOption(new Option('--reconnect-max-ms <ms>', 'longest reconnect delay (default 30000)').env('FLEET_AGENT_RECONNECT_MAX_MS'))
  .addOption(new Option('--outbox-ack-timeout-ms <ms>', 'send an unacknowledged outbox message again after this long (default 30000)').env('FLEET_AGENT_OUTBOX_ACK_TIMEOUT_MS'))
  .addOption(new Option('--outbox-max-in-flight <n>', 'most outbox messages awaiting acknowledgment at a time (default 32)').env('FLEET_AGENT_OUTBOX_MAX_IN_FLIGHT'))
  .addOption(new Option('--no-sync', 'do not upload episodes to their destinations (sync is on by default)'))
  .addOption(new Option('--sync-concurrency <n>', 'replicas uploading at once (default 2)').env('FLEET_AGENT_SYNC_CONCURRENCY'))
  .addOption(new Option('--sync-part-parallel <n>', 'multipart parts on the wire at once per file (default 3)').env('FLEET_AGENT_SYNC_PART_PARALLEL'))
  .addOption(new Option('--sync-retry-schedule-ms <list>', 'waits after the 1st, 2nd, … failed upload attempt, comma-separated ms; the last repeats (default 10000,60000,300000,900000,3600000)').env('FLEET_AGENT_SYNC_RETRY_SCHEDULE_MS'))
  .addOption(new Option('--sync-grant-timeout-ms <ms>', 'retry a grant request unanswered this long (default 30000)').env('FLEET_AGENT_SYNC_GRANT_TIMEOUT_MS'))
  .addOption(new Option('--sync-assignments-refresh-ms <ms>', 'while connected, ask for the complete assignment list again this long after each answer (default 300000)').env('FLEET_AGENT_SYNC_ASSIGNMENTS_REFRESH_MS'))
  .addOption(new Option('--upload-timeout-ms <ms>', 'an upload request without answer or progress this long fails (default 120000)').env('FLEET_AGENT_UPLOAD_TIMEOUT_MS'))
  .addOption(new Option('--upload-ca-file <file>', 'PEM of extra CAs trusted for upload URLs (besides the system CAs and NODE_EXTRA_CA_CERTS)').env('FLEET_AGENT_UPLOAD_CA_FILE'))
  .addOption(new Option('--allow-http-uploads', 'allow plain http:// upload URLs (refused by default)').env('FLEET_AGENT_ALLOW_HTTP_UPLOADS'))
  .addOption(new Option('--upload-limit <bytes/s>', 'most bytes per second all uploads together may send (default: unlimited)').env('FLEET_AGENT_UPLOAD_LIMIT'))
  .addOption(new Option('--log-level <level>', 'fatal|error|warn|info|debug|trace|silent (default info)').env('FLEET_AGENT_LOG_LEVEL'))
  .action(async (o: Record<string, string | boolean | undefined>, cmd: Command) => {
    const { config, file } = await effectiveConfigOrExit(startOverrides(o, cmd), { ...(typeof o.config === 'string' ? { config: o.config } : {}) });
    await runDaemon(config, file?.path);
  });

const configCmd = program.command('config').description("the agent's YAML config file");
configCmd
  .command('check')
  .description('check a config file (default: --config, else ' + DEFAULT_CONFIG_PATH + '): print the effective settings as JSON, or every error with file, line and key (exit 2)')
  .argument('[file]', 'the config file')
  .addOption(configOption())
  .addOption(dataDirOption())
  .action(async (fileArg: string | undefined, o: { config?: string; dataDir?: string }) => {
    const path = fileArg ?? o.config ?? DEFAULT_CONFIG_PATH;
    const { config } = await effectiveConfigOrExit(o.dataDir !== undefined ? { dataDir: o.dataDir } : {}, { config: path });
    process.stdout.write(`${JSON.stringify({ file: path, settings: (await cliConfig()).describeConfig(config) }, null, 2)}\n`);
  });

async function runDaemon(config: AgentConfig, configFile: string | undefined): Promise<void> {
  const logger = pino({ level: config.logLevel, base: { pid: process.pid }, redact: ['password', '*.password'] }, pino.destination({ dest: 2, sync: true }));
  const [{ Agent }, { buildRobotParts }, { systemScheduler }] = await Promise.all([import('./daemon.js'), import('./robot-parts.js'), import('./time.js')]);
  const parts = await buildRobotParts(config, { clock: systemClock, scheduler: systemScheduler, logger, env: process.env, ...(configFile ? { configFile } : {}) });
  const agent = new Agent(config, { clock: systemClock, scheduler: systemScheduler, logger, ...parts });
  try {
    await agent.start();
  } catch (err) {
    if (err instanceof NotEnrolledError) fail(err.message, EXIT_USAGE);
    logger.fatal({ err }, 'agent failed to start');
    fail(`could not start: ${(err as Error).message}`, EXIT_REFUSED);
  }
  agent.once('connected', () => process.stdout.write(`${JSON.stringify({ robot_id: agent.robotId, state: 'connected' })}\n`));
  let stopping = false;
  const shutdown = (signal: NodeJS.Signals) => {
    if (stopping) {
      logger.warn({ signal }, 'second signal: exiting now');
      process.exit(1);
    }
    stopping = true;
    logger.info({ signal }, 'shutting down');
    agent.stop().then(
      () => process.exit(0),
      (err: unknown) => {
        logger.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', shutdown);
  process.on('SIGINT', shutdown);
}

/** The control socket: the flag, else the config file's `socket_path`, else `<data dir>/agent.sock`. */
async function socketOf(o: { dataDir?: string; socket?: string; config?: string }): Promise<string> {
  if (o.socket !== undefined) return o.socket;
  try {
    if (o.dataDir !== undefined) return controlSocketPath(o.dataDir);
    const { configFileFor, dataDirFor } = await cliConfig();
    const file = await configFileFor(o);
    if (file?.input.socketPath !== undefined) return file.input.socketPath;
    return controlSocketPath(await dataDirFor(o));
  } catch (err) {
    if (err instanceof ConfigFileError) fail(err.problems.map(formatProblem).join('\n'), EXIT_USAGE);
    throw err;
  }
}

/** One control request; an agent that is not running exits EXIT_NOT_RUNNING with the reason. */
async function controlCallOrExit(o: { dataDir?: string; socket?: string; config?: string }, body: Parameters<typeof controlCall>[1]): Promise<ControlResponse> {
  try {
    return await controlCall(await socketOf(o), body);
  } catch (err) {
    if (err instanceof ControlError) fail(err.message, EXIT_NOT_RUNNING);
    throw err;
  }
}

/** Sends one control request, prints the answer as JSON; refusals exit non-zero with the reason. */
async function control(o: { dataDir?: string; socket?: string; config?: string }, body: Parameters<typeof controlCall>[1]): Promise<void> {
  const response = await controlCallOrExit(o, body);
  process.stdout.write(`${JSON.stringify(response.ok ? response.result : { error: response.error })}\n`);
  if (!response.ok) fail(`${response.error.code}: ${response.error.message}`, EXIT_REFUSED);
}

const episode = program.command('episode').description('episode verbs on the running agent (what the headset and buttons do)');
for (const verb of ['start', 'finish', 'fail', 'discard'] as const) {
  const outcome = { start: 'start recording an episode', finish: 'end it with outcome success', fail: 'end it with outcome failure', discard: 'end it as discarded (files deleted, row kept)' }[verb];
  episode
    .command(verb)
    .description(outcome)
    .addOption(configOption())
    .addOption(dataDirOption())
    .addOption(socketOption())
    .action((o: { dataDir?: string; socket?: string; config?: string }) => control(o, { op: `episode.${verb}` }));
}

const context = program.command('context').description('the operator context episodes are stamped with');
const setCmd = context
  .command('set')
  .description('set context fields; an empty value clears a field, an absent option leaves it as it is, except that an id changed without its name (--task-id without --task-name) clears the name')
  .addOption(configOption())
  .addOption(dataDirOption())
  .addOption(socketOption());
for (const key of OPERATOR_CONTEXT_KEYS) setCmd.option(`--${key.replaceAll('_', '-')} <value>`, key);
setCmd.action((o: Record<string, string | undefined> & { dataDir?: string; socket?: string; config?: string }) => {
  const patch: OperatorContextPatch = {};
  for (const key of OPERATOR_CONTEXT_KEYS) {
    const camel = key.replace(/_([a-z])/g, (_m, c: string) => c.toUpperCase());
    const v = o[camel];
    if (v !== undefined) patch[key] = v === '' ? null : v;
  }
  if (Object.keys(patch).length === 0) fail('nothing to set: give at least one option (see --help)', EXIT_USAGE);
  return control(o, { op: 'context.set', context: patch });
});
context
  .command('get')
  .description('print the current operator context')
  .addOption(configOption())
  .addOption(dataDirOption())
  .addOption(socketOption())
  .action((o: { dataDir?: string; socket?: string; config?: string }) => control(o, { op: 'context.get' }));

program
  .command('status')
  .description(
    "print the running agent's status (recording state, connection, outbox, sync counts) and each pending episode's upload progress per destination: progress bars on a terminal, one line per upload otherwise, the control socket's JSON with --json",
  )
  .addOption(configOption())
  .addOption(dataDirOption())
  .addOption(socketOption())
  .option('--json', 'print the JSON answer of the control socket')
  .action(async (o: { dataDir?: string; socket?: string; config?: string; json?: boolean }) => {
    await controlView(o, { op: 'status' }, (result) => formatStatus(result as unknown as StatusForView, { tty: process.stdout.isTTY === true, columns: process.stdout.columns ?? 100 }));
  });

/** One control request whose result is printed by `format`, or as JSON with --json. */
async function controlView(o: { dataDir?: string; socket?: string; config?: string; json?: boolean }, body: Parameters<typeof controlCall>[1], format: (result: Record<string, unknown>) => string): Promise<void> {
  if (o.json) return control(o, body);
  const response = await controlCallOrExit(o, body);
  if (!response.ok) fail(`${response.error.code}: ${response.error.message}`, EXIT_REFUSED);
  process.stdout.write(format(response.result));
}

const episodes = program.command('episodes').description('the episodes on this robot: where their files are and how far their uploads got (asks the running agent)');
episodes
  .command('list')
  .description('the newest episodes, newest first (the one recording now on top): state, directory, files with sizes, and per destination the replica state, bytes sent, last error; when the local copy is due for pruning')
  .addOption(configOption())
  .addOption(dataDirOption())
  .addOption(socketOption())
  .option('--limit <n>', `how many episodes (1-${MAX_EPISODES_LISTED}, default 50)`)
  .option('--json', "print the control socket's JSON answer")
  .addHelpText('after', '\nExamples:\n  $ fleet-agent episodes list --data-dir ./robot-1\n  $ fleet-agent episodes list --data-dir ./robot-1 --limit 5 --json')
  .action(async (o: { dataDir?: string; socket?: string; config?: string; json?: boolean; limit?: string }) => {
    const limit = o.limit === undefined ? undefined : Number(o.limit);
    if (limit !== undefined && !(Number.isInteger(limit) && limit >= 1 && limit <= MAX_EPISODES_LISTED)) {
      fail(`--limit must be a whole number from 1 to ${MAX_EPISODES_LISTED}, got ${JSON.stringify(o.limit)} (see fleet-agent episodes list --help)`, EXIT_USAGE);
    }
    await controlView(o, { op: 'episodes.list', ...(limit !== undefined ? { limit } : {}) }, (r) => formatEpisodeList(r.episodes as EpisodeView[]));
  });
episodes
  .command('show')
  .description('one episode: state, times, directory, files with sizes and sha256, and its sync state per destination')
  .argument('<id>', 'episode id (ep_…)')
  .addOption(configOption())
  .addOption(dataDirOption())
  .addOption(socketOption())
  .option('--json', "print the control socket's JSON answer")
  .addHelpText('after', '\nExample:\n  $ fleet-agent episodes show ep_2kq4x7a3bcdefghijklmnopqrs --data-dir ./robot-1')
  .action(async (id: string, o: { dataDir?: string; socket?: string; config?: string; json?: boolean }) => {
    if (!EPISODE_ID_PATTERN.test(id)) fail(`not an episode id: ${JSON.stringify(id)}, expected ep_ and 26 characters a-z, 2-7 (see fleet-agent episodes show --help)`, EXIT_USAGE);
    await controlView(o, { op: 'episodes.show', episode_id: id }, (r) => `${formatEpisode(r.episode as EpisodeView, { detail: true })}\n`);
  });

program
  .command('metrics')
  .description("print the running agent's outbox and upload figures in Prometheus text format (outbox messages by kind and state, bytes and attempts uploaded, replicas by state, free disk and backlog)")
  .addOption(configOption())
  .addOption(dataDirOption())
  .addOption(socketOption())
  .action(async (o: { dataDir?: string; socket?: string; config?: string }) => {
    await controlView(o, { op: 'metrics' }, (result) => String(result.text));
  });

program.addHelpText(
  'after',
  `
Examples:
  $ fleet-agent enroll --api http://127.0.0.1:8080 --token ret_… --data-dir ./robot-1 --name arm-1
  $ fleet-agent start --data-dir ./robot-1
  $ fleet-agent episode start --data-dir ./robot-1
  $ fleet-agent episode finish --data-dir ./robot-1
  $ fleet-agent status --data-dir ./robot-1 --json
  $ fleet-agent episodes list --data-dir ./robot-1
  $ fleet-agent metrics --data-dir ./robot-1`,
);
applyUsageRules(program);
await program.parseAsync(process.argv).catch((err: unknown) => fail(err instanceof Error ? err.message : String(err), 1));
