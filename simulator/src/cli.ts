#!/usr/bin/env node
import { readFileSync } from 'node:fs';
import { Command, Option } from 'commander';
import { applyUsageRules, EXIT_USAGE } from '@fleet/node-support';
import { pino } from 'pino';
import { ZodError } from 'zod';
import { parseGrantProviderConfig, type GrantProviderConfig, type GrantProviderConfigInput } from './grant-provider/config.js';
import { runGrantProvider, type RunningGrantProvider } from './grant-provider/main.js';
import { FleetError, parseFleetOptions, runFleet, type Fleet, type FleetOptions, type FleetOptionsInput } from './fleet.js';

/** Exit codes: 1 the fleet could not start, 2 (EXIT_USAGE) bad usage or configuration. */
const EXIT_FAILED = 1;
const { version } = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string };

function fail(message: string, code: number): never {
  process.stderr.write(`fleet-sim: ${message}\n`);
  process.exit(code);
}

const program = new Command('fleet-sim')
  .description('Simulated robots: real fleet agents with a synthetic recorder and a scripted operator.')
  .version(version, '-V, --version', 'print the version');

program
  .command('fleet')
  .description('run N real agents in this process; prints {"robots":[…]} on stdout once all are connected, logs JSON to stderr. SIGUSR2 stops the operators (no new episodes; a recording in progress is left as it is) while the agents keep running and syncing, then prints {"operators":"stopped"}')
  .addOption(new Option('--api <url>', 'the fleet API base URL').env('FLEET_SIM_API').makeOptionMandatory())
  .addOption(new Option('--token <token>', 'enrollment token (ret_…); needed while some robot has no credentials yet. Prefer FLEET_SIM_TOKEN: a flag shows in the process list').env('FLEET_SIM_TOKEN'))
  .addOption(new Option('--count <n>', 'number of robots').env('FLEET_SIM_COUNT').makeOptionMandatory())
  .addOption(new Option('--data-dir <dir>', 'one directory per robot under it: robot-0, robot-1, …').env('FLEET_SIM_DATA_DIR').makeOptionMandatory())
  .option('--legacy-runtime', 'robots without episodes.v1')
  .option('--bytes-per-second <n>', 'synthetic recorder byte rate per robot; sizes frames and rates not fixed below (default 65536)')
  .addOption(new Option('--recording-format <format>', 'what the synthetic recorder writes: ros2 (a rosbag2 directory bag/ with an MCAP of CDR messages, as ros2 bag record writes) or json (one recording.mcap of JSON messages, what the LeRobot export reads) (default ros2)').choices(['ros2', 'json']).env('FLEET_SIM_RECORDING_FORMAT'))
  .option('--cameras <n>', 'synthetic cameras per robot: 1 (front) or 2 (front and wrist) (default 1)')
  .option('--camera-width <px>', 'camera frame width, 16..1920 (default: sized by --bytes-per-second)')
  .option('--camera-height <px>', 'camera frame height, 16..1920 (default: 3/4 of the width, or sized by --bytes-per-second)')
  .option('--camera-hz <n>', 'camera frames per second, 1..120 (default 10 with a fixed size, else about 5)')
  .option('--state-hz <n>', 'joint states and commands per second, 1..500 (default: up to 50 by --bytes-per-second)')
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
  .option('--sync-assignments-refresh-ms <ms>', 'while connected, ask for the complete assignment list again this long after each answer (the agent default when absent)')
  .option('--sync-retry-schedule-ms <list>', 'waits after failed upload attempts, comma-separated ms (the agent default when absent)')
  .addOption(new Option('--upload-ca-file <file>', 'PEM of extra CAs trusted for upload URLs').env('FLEET_SIM_UPLOAD_CA_FILE'))
  .option('--allow-http-uploads', 'allow plain http:// upload URLs (refused by default)')
  .option('--upload-limit <bytes/s>', 'most bytes per second each robot\u2019s uploads together may send (the agent\u2019s --upload-limit; default unlimited)')
  .option('--disk-quota-bytes <n>', 'each robot\u2019s disk as its disk pressure sees it: free bytes are this less what its data directory holds (a file written there fills it) (default: the real file system)')
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
      ['recordingFormat', 'recordingFormat'],
      ['cameras', 'cameras'],
      ['cameraWidth', 'cameraWidth'],
      ['cameraHeight', 'cameraHeight'],
      ['cameraHz', 'cameraHz'],
      ['stateHz', 'stateHz'],
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
      ['syncAssignmentsRefreshMs', 'syncAssignmentsRefreshMs'],
      ['uploadCaFile', 'uploadCaFile'],
      ['uploadLimit', 'uploadLimit'],
      ['diskQuotaBytes', 'diskQuotaBytes'],
    ];
    const schedule = str('syncRetryScheduleMs');
    if (schedule !== undefined) (input as Record<string, unknown>).syncRetryScheduleMs = schedule.split(',').map((v) => v.trim());
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

program
  .command('grant-provider')
  .description(
    'reference grant provider for an external destination: verifies the signed grant requests of the cloud and answers presigned S3 upload URLs; prints {"url":…} on stdout once listening, logs JSON to stderr. Secrets are read from the environment only: FLEET_PROVIDER_SECRET (the destination\u2019s dsec_ secret), FLEET_PROVIDER_PREVIOUS_SECRET (during a rotation), FLEET_PROVIDER_S3_ACCESS_KEY_ID and FLEET_PROVIDER_S3_SECRET_ACCESS_KEY (else the AWS SDK\u2019s default credentials)',
  )
  .addOption(new Option('--host <host>', 'listen address (default 127.0.0.1)').env('FLEET_PROVIDER_HOST'))
  .addOption(new Option('--port <port>', 'listen port, 0 picks a free one (default 8443)').env('FLEET_PROVIDER_PORT'))
  .addOption(new Option('--tls-cert <file>', 'PEM certificate (chain) for HTTPS').env('FLEET_PROVIDER_TLS_CERT'))
  .addOption(new Option('--tls-key <file>', 'PEM private key for HTTPS').env('FLEET_PROVIDER_TLS_KEY'))
  // Boolean switches read their variable by hand: commander would take any value, `0` too, as on.
  .option('--insecure-http', 'serve plain HTTP (behind a TLS-terminating proxy, or locally) (env: FLEET_PROVIDER_INSECURE_HTTP=true)')
  .addOption(new Option('--s3-endpoint <url>', 'S3-compatible endpoint (default: AWS for the region)').env('FLEET_PROVIDER_S3_ENDPOINT'))
  .addOption(new Option('--s3-region <region>', 'region (default us-east-1)').env('FLEET_PROVIDER_S3_REGION'))
  .addOption(new Option('--s3-bucket <bucket>', 'bucket the episodes go to').env('FLEET_PROVIDER_S3_BUCKET').makeOptionMandatory())
  .option('--s3-path-style', 'path-style addressing (endpoint/bucket/key), for MinIO and most local stores (env: FLEET_PROVIDER_S3_PATH_STYLE=true)')
  .addOption(new Option('--key-prefix <prefix>', 'prepended to every object key, e.g. fleet/ (default none)').env('FLEET_PROVIDER_KEY_PREFIX'))
  .addOption(new Option('--multipart-threshold-bytes <n>', 'files this large or larger go in parts (default 67108864)').env('FLEET_PROVIDER_MULTIPART_THRESHOLD_BYTES'))
  .addOption(new Option('--part-size-bytes <n>', 'bytes per part, at least 5 MiB (default 16777216)').env('FLEET_PROVIDER_PART_SIZE_BYTES'))
  .addOption(new Option('--url-lifetime-s <s>', 'lifetime of the presigned URLs and of the grant (default 3600)').env('FLEET_PROVIDER_URL_LIFETIME_S'))
  .addOption(new Option('--retry-after-s <s>', 'what a deferral asks the robot to wait (default 30)').env('FLEET_PROVIDER_RETRY_AFTER_S'))
  .addOption(new Option('--store-timeout-ms <ms>', 'time budget for the store calls of one grant (default 5000)').env('FLEET_PROVIDER_STORE_TIMEOUT_MS'))
  .addOption(new Option('--signature-tolerance-s <s>', 'accepted clock difference of a signature (default 300)').env('FLEET_PROVIDER_SIGNATURE_TOLERANCE_S'))
  .option('--no-read-links', 'answer read requests (presigned GET URLs for playback) with 501 not_implemented (env: FLEET_PROVIDER_READ_LINKS=false)')
  .addOption(new Option('--log-level <level>', 'fatal|error|warn|info|debug|trace|silent').env('FLEET_PROVIDER_LOG_LEVEL').default('info'))
  .action(async (o: Record<string, string | boolean | undefined>) => {
    const str = (k: string) => (typeof o[k] === 'string' ? o[k] : undefined);
    // Secrets only from the environment: a flag would show them in the process list.
    const env = process.env;
    const envBoolean = (variable: string, unset: boolean): boolean => {
      const v = (env[variable] ?? '').trim().toLowerCase();
      if (v === '') return unset;
      if (v === '0' || v === 'false' || v === 'no') return false;
      if (v === '1' || v === 'true' || v === 'yes') return true;
      return fail(`${variable} must be true or false`, EXIT_USAGE);
    };
    const flag = (k: string, variable: string): boolean => o[k] === true || envBoolean(variable, false);
    const input: GrantProviderConfigInput = {
      secrets: [env.FLEET_PROVIDER_SECRET, env.FLEET_PROVIDER_PREVIOUS_SECRET].filter((s): s is string => s !== undefined && s !== ''),
      s3Bucket: str('s3Bucket')!,
      insecureHttp: flag('insecureHttp', 'FLEET_PROVIDER_INSECURE_HTTP'),
      s3ForcePathStyle: flag('s3PathStyle', 'FLEET_PROVIDER_S3_PATH_STYLE'),
      // On unless the flag or the variable turns it off.
      reads: o.readLinks !== false && envBoolean('FLEET_PROVIDER_READ_LINKS', true),
      logLevel: str('logLevel') as GrantProviderConfigInput['logLevel'],
    };
    if (env.FLEET_PROVIDER_S3_ACCESS_KEY_ID) input.s3AccessKeyId = env.FLEET_PROVIDER_S3_ACCESS_KEY_ID;
    if (env.FLEET_PROVIDER_S3_SECRET_ACCESS_KEY) input.s3SecretAccessKey = env.FLEET_PROVIDER_S3_SECRET_ACCESS_KEY;
    const optional: [keyof GrantProviderConfigInput, string][] = [
      ['host', 'host'],
      ['port', 'port'],
      ['tlsCertFile', 'tlsCert'],
      ['tlsKeyFile', 'tlsKey'],
      ['s3Endpoint', 's3Endpoint'],
      ['s3Region', 's3Region'],
      ['keyPrefix', 'keyPrefix'],
      ['multipartThresholdBytes', 'multipartThresholdBytes'],
      ['partSizeBytes', 'partSizeBytes'],
      ['urlLifetimeS', 'urlLifetimeS'],
      ['retryAfterS', 'retryAfterS'],
      ['storeTimeoutMs', 'storeTimeoutMs'],
      ['signatureToleranceS', 'signatureToleranceS'],
    ];
    for (const [key, name] of optional) {
      const v = str(name);
      if (v !== undefined) (input as Record<string, unknown>)[key] = v;
    }
    if (input.secrets.length === 0) fail('FLEET_PROVIDER_SECRET is not set (the destination\u2019s dsec_ secret)', EXIT_USAGE);
    let config: GrantProviderConfig;
    try {
      config = parseGrantProviderConfig(input);
    } catch (err) {
      // Issues name the setting, never its value: a secret must not reach a log.
      if (err instanceof ZodError) fail(`invalid configuration: ${err.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`, EXIT_USAGE);
      throw err;
    }
    await serveGrantProvider(config);
  });

async function serveGrantProvider(config: GrantProviderConfig): Promise<void> {
  const logger = pino({ level: config.logLevel, base: { pid: process.pid } }, pino.destination({ dest: 2, sync: true }));
  let provider: RunningGrantProvider;
  try {
    provider = await runGrantProvider(config, { logger });
  } catch (err) {
    logger.fatal({ err }, 'grant provider failed to start');
    fail(err instanceof Error ? err.message : String(err), EXIT_FAILED);
  }
  let stopping = false;
  const shutdown = (signal: NodeJS.Signals) => {
    if (stopping) process.exit(1);
    stopping = true;
    logger.info({ signal }, 'shutting down the grant provider');
    provider.close().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.on('SIGTERM', shutdown);
  process.on('SIGINT', shutdown);
  logger.info({ url: provider.url, bucket: config.s3Bucket }, 'grant provider listening');
  process.stdout.write(`${JSON.stringify({ url: provider.url })}\n`);
}

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
  // A soak or a test that wants the fleet to drain: no new episodes, everything else goes on.
  const running = fleet;
  process.on('SIGUSR2', () => {
    running.stopOperators().then(
      () => process.stdout.write(`${JSON.stringify({ operators: 'stopped' })}\n`),
      (err: unknown) => logger.error({ err }, 'stopping the operators failed'),
    );
  });
  process.stdout.write(`${JSON.stringify({ robots: fleet.robotIds })}\n`);
}

// Usage errors (unknown or missing options) exit 2 like invalid values; help exits 0.
program.addHelpText(
  'after',
  `
Examples:
  $ FLEET_SIM_TOKEN=ret_… fleet-sim fleet --api http://127.0.0.1:8080 --count 10 --data-dir ./sim --auto-episodes 6
  $ FLEET_PROVIDER_SECRET=dsec_… fleet-sim grant-provider --insecure-http --port 8443 --s3-endpoint http://127.0.0.1:9000 --s3-bucket episodes --s3-path-style`,
);
applyUsageRules(program);
await program.parseAsync(process.argv).catch((err: unknown) => fail(err instanceof Error ? err.message : String(err), EXIT_FAILED));
