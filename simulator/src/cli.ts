#!/usr/bin/env node
import { Command, Option } from 'commander';
import { pino } from 'pino';
import { ZodError } from 'zod';
import { FleetError, parseFleetOptions, runFleet, type Fleet, type FleetOptions, type FleetOptionsInput } from './fleet.js';

/** Exit codes: 1 the fleet could not start, 2 bad usage or configuration. */
const EXIT_FAILED = 1;
const EXIT_USAGE = 2;

function fail(message: string, code: number): never {
  process.stderr.write(`fleet-sim: ${message}\n`);
  process.exit(code);
}

const program = new Command('fleet-sim')
  .description('Simulated robots: real fleet agents with a synthetic recorder and a scripted operator.')
  .showHelpAfterError()
  // Usage errors (unknown or missing options) exit 2 like invalid values; help exits 0.
  .exitOverride((err) => process.exit(err.exitCode === 0 ? 0 : EXIT_USAGE));

program
  .command('fleet')
  .description('run N real agents in this process; prints {"robots":[…]} on stdout once all are connected, logs JSON to stderr')
  .addOption(new Option('--api <url>', 'the fleet API base URL').env('FLEET_SIM_API').makeOptionMandatory())
  .addOption(new Option('--token <token>', 'enrollment token (ret_…); needed while some robot has no credentials yet').env('FLEET_SIM_TOKEN'))
  .addOption(new Option('--count <n>', 'number of robots').env('FLEET_SIM_COUNT').makeOptionMandatory())
  .addOption(new Option('--data-dir <dir>', 'one directory per robot under it: robot-0, robot-1, …').env('FLEET_SIM_DATA_DIR').makeOptionMandatory())
  .option('--legacy-runtime', 'robots without episodes.v1')
  .option('--bytes-per-second <n>', 'synthetic recorder byte rate per robot (default 65536)')
  .option('--auto-episodes <per-minute>', 'episodes each operator starts per minute, ending each with a seeded random outcome (default 0: never)')
  .option('--subtask-ms <ms>', 'time an operator spends on each subtask while recording (default 2000)')
  .option('--platform <platform>', 'robot platform (default sim-arm)')
  .option('--name-prefix <prefix>', 'robot names are <prefix>-<i> (default sim)')
  .option('--seed <n>', 'seed of the operators\u2019 random choices (default 1)')
  .option('--finalizing-delay-ms <ms>', 'least time each robot stays in finalizing (default 0)')
  .option('--mqtt-url <url>', 'broker address overriding the one given at enrollment')
  .option('--start-concurrency <n>', 'robots enrolling and starting at once (default 16)')
  .option('--connect-timeout-ms <ms>', 'give up when not all robots are connected after this long (default 120000)')
  .option('--no-control-socket', 'do not serve the robots\u2019 local control sockets')
  .option('--no-sync', 'robots do not upload episodes (sync is on by default, as on a real agent)')
  .option('--sync-concurrency <n>', 'replicas each robot uploads at once (default 2)')
  .option('--sync-part-parallel <n>', 'multipart parts on the wire at once per file (default 3)')
  .addOption(new Option('--upload-ca-file <file>', 'PEM of extra CAs trusted for upload URLs').env('FLEET_SIM_UPLOAD_CA_FILE'))
  .option('--allow-http-uploads', 'allow plain http:// upload URLs (refused by default)')
  .addOption(new Option('--log-level <level>', 'fatal|error|warn|info|debug|trace|silent').env('FLEET_SIM_LOG_LEVEL').default('info'))
  .action(async (o: Record<string, string | boolean | undefined>) => {
    const str = (k: string) => (typeof o[k] === 'string' ? o[k] : undefined);
    const input: FleetOptionsInput = {
      api: str('api')!,
      count: str('count')!,
      dataDir: str('dataDir')!,
      legacyRuntime: o.legacyRuntime === true,
      controlSocket: o.controlSocket !== false,
      sync: o.sync !== false,
      allowHttpUploads: o.allowHttpUploads === true,
      ...(process.env.NODE_EXTRA_CA_CERTS ? { extraCaCertsFile: process.env.NODE_EXTRA_CA_CERTS } : {}),
      logLevel: str('logLevel') as FleetOptionsInput['logLevel'],
    };
    const optional: [keyof FleetOptionsInput, string][] = [
      ['token', 'token'],
      ['bytesPerSecond', 'bytesPerSecond'],
      ['autoEpisodesPerMinute', 'autoEpisodes'],
      ['subtaskMs', 'subtaskMs'],
      ['platform', 'platform'],
      ['namePrefix', 'namePrefix'],
      ['seed', 'seed'],
      ['finalizingDelayMs', 'finalizingDelayMs'],
      ['mqttUrl', 'mqttUrl'],
      ['startConcurrency', 'startConcurrency'],
      ['connectTimeoutMs', 'connectTimeoutMs'],
      ['syncConcurrency', 'syncConcurrency'],
      ['syncPartParallel', 'syncPartParallel'],
      ['uploadCaFile', 'uploadCaFile'],
    ];
    for (const [key, flag] of optional) {
      const v = str(flag);
      if (v !== undefined) (input as Record<string, unknown>)[key] = v;
    }
    let opts: FleetOptions;
    try {
      opts = parseFleetOptions(input);
    } catch (err) {
      if (err instanceof ZodError) fail(`invalid configuration: ${err.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`, EXIT_USAGE);
      throw err;
    }
    await serve(opts);
  });

async function serve(opts: FleetOptions): Promise<void> {
  const logger = pino({ level: opts.logLevel, base: { pid: process.pid }, redact: ['password', '*.password'] }, pino.destination({ dest: 2, sync: true }));
  const exit = (code: number): never => {
    logger.flush();
    process.exit(code);
  };
  const abort = new AbortController();
  let fleet: Fleet | undefined;
  let stopping = false;
  const shutdown = (signal: NodeJS.Signals) => {
    if (stopping) {
      logger.warn({ signal }, 'second signal: exiting now');
      exit(1);
    }
    stopping = true;
    logger.info({ signal }, 'shutting down the fleet');
    // Still starting: abort, and the start path below stops what it started.
    if (!fleet) return abort.abort();
    fleet.stop().then(
      () => exit(0),
      (err: unknown) => {
        logger.error({ err }, 'fleet shutdown failed');
        exit(1);
      },
    );
  };
  process.on('SIGTERM', shutdown);
  process.on('SIGINT', shutdown);
  try {
    fleet = await runFleet(opts, { logger, signal: abort.signal });
  } catch (err) {
    if (stopping) exit(0);
    logger.fatal({ err }, 'fleet failed to start');
    fail(err instanceof FleetError || err instanceof Error ? err.message : String(err), EXIT_FAILED);
  }
  if (stopping) {
    await fleet.stop();
    exit(0);
  }
  process.stdout.write(`${JSON.stringify({ robots: fleet.robotIds })}\n`);
}

await program.parseAsync(process.argv);
