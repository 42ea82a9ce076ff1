#!/usr/bin/env node
import { applyUsageRules, EXIT_USAGE, systemClock } from '@fleet/protocol';
import { Command, Option } from 'commander';
import { pino } from 'pino';
import { ZodError } from 'zod';
import { AGENT_RUNTIME_VERSION, LEGACY_RUNTIME_VERSION, parseAgentConfig, type AgentConfig, type AgentConfigInput } from './config.js';
import { OPERATOR_CONTEXT_KEYS, type OperatorContextPatch } from './context.js';
import { controlCall, controlSocketPath, ControlError } from './control/client.js';
import { MAX_EPISODES_LISTED, type ControlResponse } from './control/protocol.js';
import { formatEpisode, formatEpisodeList } from './episodes-format.js';
import type { EpisodeView } from './episodes-view.js';
import { EPISODE_ID_PATTERN } from './ids.js';
import { formatStatus, type StatusForView } from './status-view.js';

/** Exit codes: 1 refused or failed, 2 bad usage or configuration, 3 no agent running. */
const EXIT_REFUSED = 1;
const EXIT_NOT_RUNNING = 3;

const dataDirOption = () => new Option('--data-dir <dir>', 'the robot data directory (credentials, agent.sqlite, episodes, agent.sock)').env('FLEET_AGENT_DATA_DIR').makeOptionMandatory();
const socketOption = () => new Option('--socket <path>', 'control socket (default <data-dir>/agent.sock)').env('FLEET_AGENT_SOCKET');

function fail(message: string, code: number): never {
  process.stderr.write(`fleet-agent: ${message}\n`);
  process.exit(code);
}

function configOrExit(input: AgentConfigInput): AgentConfig {
  try {
    return parseAgentConfig(input);
  } catch (err) {
    if (err instanceof ZodError) fail(`invalid configuration: ${err.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`, EXIT_USAGE);
    throw err;
  }
}

const program = new Command('fleet-agent')
  .description('On-robot agent: enrolls the robot, records episodes, answers commands from the fleet cloud.')
  .version(AGENT_RUNTIME_VERSION, '-V, --version', 'print the version');

program
  .command('enroll')
  .description('enroll this robot with the cloud and store its credentials (mode 0600) in the data directory')
  .addOption(new Option('--api <url>', 'the fleet API base URL').env('FLEET_AGENT_API').makeOptionMandatory())
  .addOption(new Option('--token <token>', 'enrollment token (ret_…). Prefer FLEET_AGENT_ENROLL_TOKEN: a flag shows in the process list').env('FLEET_AGENT_ENROLL_TOKEN').makeOptionMandatory())
  .addOption(dataDirOption())
  .option('--name <name>', 'robot name (the cloud picks one if absent)')
  .option('--platform <platform>', 'robot platform, e.g. the arm model')
  .option('--runtime-version <version>', `runtime version to announce (default ${AGENT_RUNTIME_VERSION})`)
  .option('--legacy-runtime', `enroll as a runtime without episodes.v1 (announces ${LEGACY_RUNTIME_VERSION})`)
  .addOption(new Option('--mqtt-url <url>', 'broker address to store instead of the one the cloud answers with').env('FLEET_AGENT_MQTT_URL'))
  .option('--force', 'replace existing credentials (the robot becomes a new robot)')
  .action(async (o: { api: string; token: string; dataDir: string; name?: string; platform?: string; runtimeVersion?: string; legacyRuntime?: boolean; mqttUrl?: string; force?: boolean }) => {
    // Loaded when used (as the daemon below): the control commands (status, record, episodes)
    // start without the HTTP and MQTT clients.
    const { enroll, EnrollError } = await import('./enroll.js');
    try {
      const creds = await enroll({
        api: o.api,
        token: o.token,
        dataDir: o.dataDir,
        runtimeVersion: o.runtimeVersion ?? (o.legacyRuntime ? LEGACY_RUNTIME_VERSION : AGENT_RUNTIME_VERSION),
        ...(o.name !== undefined ? { name: o.name } : {}),
        ...(o.platform !== undefined ? { platform: o.platform } : {}),
        ...(o.mqttUrl !== undefined ? { mqttUrl: o.mqttUrl } : {}),
        ...(o.force ? { force: true } : {}),
      });
      process.stdout.write(`${JSON.stringify({ robot_id: creds.robot_id, name: creds.name, data_dir: o.dataDir })}\n`);
    } catch (err) {
      if (err instanceof EnrollError) fail(err.message, err.code === 'already_enrolled' ? EXIT_USAGE : EXIT_REFUSED);
      throw err;
    }
  });

program
  .command('start')
  .description('run the agent daemon (needs credentials from `fleet-agent enroll`; never enrolls by itself)')
  .addOption(dataDirOption())
  .addOption(new Option('--legacy-runtime', 'behave as a runtime without episodes.v1').env('FLEET_AGENT_LEGACY_RUNTIME'))
  .addOption(new Option('--bytes-per-second <n>', 'synthetic recorder byte rate (default 65536)').env('FLEET_AGENT_BYTES_PER_SECOND'))
  .addOption(new Option('--chunk-interval-ms <ms>', 'synthetic recorder write interval (default 100)').env('FLEET_AGENT_CHUNK_INTERVAL_MS'))
  .addOption(new Option('--finalizing-delay-ms <ms>', 'least time held in finalizing, counted from the verb (default 0)').env('FLEET_AGENT_FINALIZING_DELAY_MS'))
  .addOption(new Option('--mqtt-url <url>', 'broker address overriding the stored one').env('FLEET_AGENT_MQTT_URL'))
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
  .addOption(new Option('--log-level <level>', 'fatal|error|warn|info|debug|trace|silent').env('FLEET_AGENT_LOG_LEVEL').default('info'))
  .action(async (o: Record<string, string | boolean | undefined>) => {
    const str = (k: string) => (typeof o[k] === 'string' ? o[k] : undefined);
    const input: AgentConfigInput = { dataDir: String(o.dataDir), legacyRuntime: o.legacyRuntime === true || o.legacyRuntime === 'true' || o.legacyRuntime === '1' };
    const set = <K extends keyof AgentConfigInput>(key: K, value: AgentConfigInput[K] | undefined) => {
      if (value !== undefined) input[key] = value;
    };
    set('bytesPerSecond', str('bytesPerSecond'));
    set('chunkIntervalMs', str('chunkIntervalMs'));
    set('finalizingDelayMs', str('finalizingDelayMs'));
    set('mqttUrl', str('mqttUrl'));
    set('platform', str('platform'));
    set('runtimeVersion', str('runtimeVersion'));
    set('reconnectMinMs', str('reconnectMinMs'));
    set('reconnectMaxMs', str('reconnectMaxMs'));
    set('outboxAckTimeoutMs', str('outboxAckTimeoutMs'));
    set('outboxMaxInFlight', str('outboxMaxInFlight'));
    set('logLevel', str('logLevel') as AgentConfig['logLevel']);
    const flag = (v: string | boolean | undefined) => v === true || v === 'true' || v === '1';
    input.sync = o.sync !== false && process.env.FLEET_AGENT_SYNC !== '0' && process.env.FLEET_AGENT_SYNC !== 'false';
    input.allowHttpUploads = flag(o.allowHttpUploads);
    set('syncConcurrency', str('syncConcurrency'));
    set('syncPartParallel', str('syncPartParallel'));
    set('syncGrantTimeoutMs', str('syncGrantTimeoutMs'));
    set('syncAssignmentsRefreshMs', str('syncAssignmentsRefreshMs'));
    const schedule = str('syncRetryScheduleMs');
    if (schedule !== undefined) input.syncRetryScheduleMs = schedule.split(',').map((v) => v.trim());
    set('uploadTimeoutMs', str('uploadTimeoutMs'));
    set('uploadCaFile', str('uploadCaFile'));
    set('uploadLimit', str('uploadLimit'));
    // Node trusts NODE_EXTRA_CA_CERTS by itself; an --upload-ca-file rebuilds the list and keeps it.
    set('extraCaCertsFile', process.env.NODE_EXTRA_CA_CERTS || undefined);
    await runDaemon(configOrExit(input));
  });

async function runDaemon(config: AgentConfig): Promise<void> {
  const logger = pino({ level: config.logLevel, base: { pid: process.pid }, redact: ['password', '*.password'] }, pino.destination({ dest: 2, sync: true }));
  const [{ SimulatedRobotActions }, { Agent, NotEnrolledError }, { SyntheticRecorder }, { systemScheduler }] = await Promise.all([
    import('./actions.js'),
    import('./daemon.js'),
    import('./recording/synthetic-recorder.js'),
    import('./time.js'),
  ]);
  const recorder = new SyntheticRecorder({ clock: systemClock, scheduler: systemScheduler, bytesPerSecond: config.bytesPerSecond, chunkIntervalMs: config.chunkIntervalMs });
  const agent = new Agent(config, { clock: systemClock, scheduler: systemScheduler, logger, recorder, actions: new SimulatedRobotActions() });
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

/** One control request; an agent that is not running exits EXIT_NOT_RUNNING with the reason. */
async function controlCallOrExit(o: { dataDir: string; socket?: string }, body: Parameters<typeof controlCall>[1]): Promise<ControlResponse> {
  try {
    return await controlCall(o.socket ?? controlSocketPath(o.dataDir), body);
  } catch (err) {
    if (err instanceof ControlError) fail(err.message, EXIT_NOT_RUNNING);
    throw err;
  }
}

/** Sends one control request, prints the answer as JSON; refusals exit non-zero with the reason. */
async function control(o: { dataDir: string; socket?: string }, body: Parameters<typeof controlCall>[1]): Promise<void> {
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
    .addOption(dataDirOption())
    .addOption(socketOption())
    .action((o: { dataDir: string; socket?: string }) => control(o, { op: `episode.${verb}` }));
}

const context = program.command('context').description('the operator context episodes are stamped with');
const setCmd = context
  .command('set')
  .description('set context fields; an empty value clears a field, an absent option leaves it as it is, except that an id changed without its name (--task-id without --task-name) clears the name')
  .addOption(dataDirOption())
  .addOption(socketOption());
for (const key of OPERATOR_CONTEXT_KEYS) setCmd.option(`--${key.replaceAll('_', '-')} <value>`, key);
setCmd.action((o: Record<string, string | undefined> & { dataDir: string; socket?: string }) => {
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
  .addOption(dataDirOption())
  .addOption(socketOption())
  .action((o: { dataDir: string; socket?: string }) => control(o, { op: 'context.get' }));

program
  .command('status')
  .description(
    "print the running agent's status (recording state, connection, outbox, sync counts) and each pending episode's upload progress per destination: progress bars on a terminal, one line per upload otherwise, the control socket's JSON with --json",
  )
  .addOption(dataDirOption())
  .addOption(socketOption())
  .option('--json', 'print the JSON answer of the control socket')
  .action(async (o: { dataDir: string; socket?: string; json?: boolean }) => {
    await controlView(o, { op: 'status' }, (result) => formatStatus(result as unknown as StatusForView, { tty: process.stdout.isTTY === true, columns: process.stdout.columns ?? 100 }));
  });

/** One control request whose result is printed by `format`, or as JSON with --json. */
async function controlView(o: { dataDir: string; socket?: string; json?: boolean }, body: Parameters<typeof controlCall>[1], format: (result: Record<string, unknown>) => string): Promise<void> {
  if (o.json) return control(o, body);
  const response = await controlCallOrExit(o, body);
  if (!response.ok) fail(`${response.error.code}: ${response.error.message}`, EXIT_REFUSED);
  process.stdout.write(format(response.result));
}

const episodes = program.command('episodes').description('the episodes on this robot: where their files are and how far their uploads got (asks the running agent)');
episodes
  .command('list')
  .description('the newest episodes, newest first (the one recording now on top): state, directory, files with sizes, and per destination the replica state, bytes sent, last error; when the local copy is due for pruning')
  .addOption(dataDirOption())
  .addOption(socketOption())
  .option('--limit <n>', `how many episodes (1-${MAX_EPISODES_LISTED}, default 50)`)
  .option('--json', "print the control socket's JSON answer")
  .addHelpText('after', '\nExamples:\n  $ fleet-agent episodes list --data-dir ./robot-1\n  $ fleet-agent episodes list --data-dir ./robot-1 --limit 5 --json')
  .action(async (o: { dataDir: string; socket?: string; json?: boolean; limit?: string }) => {
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
  .addOption(dataDirOption())
  .addOption(socketOption())
  .option('--json', "print the control socket's JSON answer")
  .addHelpText('after', '\nExample:\n  $ fleet-agent episodes show ep_2kq4x7a3bcdefghijklmnopqrs --data-dir ./robot-1')
  .action(async (id: string, o: { dataDir: string; socket?: string; json?: boolean }) => {
    if (!EPISODE_ID_PATTERN.test(id)) fail(`not an episode id: ${JSON.stringify(id)}, expected ep_ and 26 characters a-z, 2-7 (see fleet-agent episodes show --help)`, EXIT_USAGE);
    await controlView(o, { op: 'episodes.show', episode_id: id }, (r) => `${formatEpisode(r.episode as EpisodeView, { detail: true })}\n`);
  });

program
  .command('metrics')
  .description("print the running agent's outbox and upload figures in Prometheus text format (outbox messages by kind and state, bytes and attempts uploaded, replicas by state, free disk and backlog)")
  .addOption(dataDirOption())
  .addOption(socketOption())
  .action(async (o: { dataDir: string; socket?: string }) => {
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
