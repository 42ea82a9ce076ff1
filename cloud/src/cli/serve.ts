// `fleet-cloud serve`: the HTTP API, the embedded (or an external) MQTT broker and the background
// workers, configured from flags and the environment.
import { Option, type Command } from 'commander';
import { systemClock, systemScheduler } from '@fleet/protocol';
import { CloudConfigSchema, parseCloudConfig, type CloudConfigInput } from '../config.js';
import { createLogger } from '../logger.js';
import { databaseUrlOption, dataDirOption, fail } from './common.js';

export function registerServe(program: Command): void {
  program
    .command('serve')
    .description('Run the HTTP API and the embedded MQTT broker. Port 0 picks a free port; the ports are printed as one JSON line.')
    .addOption(dataDirOption())
    .addOption(databaseUrlOption())
    .addOption(new Option('--database-wait-s <s>', 'with --database-url: how long to wait for PostgreSQL to accept connections at start (0: not at all)').env('FLEET_DATABASE_WAIT_S').default('60'))
    .addOption(new Option('--host <host>', 'listen address').env('FLEET_HOST').default('127.0.0.1'))
    .addOption(new Option('--http-port <port>', 'HTTP port (0: any free port)').env('FLEET_HTTP_PORT').default('8080'))
    .addOption(new Option('--mqtt-port <port>', 'embedded MQTT broker port (0: any free port)').env('FLEET_MQTT_PORT').default('1883'))
    .addOption(new Option('--mqtt-url <url>', 'use this external MQTT broker instead of the embedded one: a URL, or a comma-separated list (the nodes of a cluster, tried in order)').env('FLEET_MQTT_URL'))
    .addOption(new Option('--mqtt-account-file <file>', 'with --mqtt-url: the cloud\'s account on the broker (written by broker-config for mosquitto, or the account file of the broker-node nodes)').env('FLEET_MQTT_ACCOUNT_FILE'))
    .addOption(new Option('--mqtt-broker <kind>', 'with --mqtt-url: mosquitto (robot accounts in its dynamic security plugin) or fleet-cluster (fleet-cloud broker-node nodes, which read robot accounts from the database)').env('FLEET_MQTT_BROKER'))
    .addOption(new Option('--mqtt-public-url <url>', 'broker address handed to enrolling robots (default: the one the cloud uses)').env('FLEET_MQTT_PUBLIC_URL'))
    .addOption(new Option('--command-timeout-ms <ms>', 'how long a robot command waits for its answer').env('FLEET_COMMAND_TIMEOUT_MS'))
    .addOption(new Option('--body-limit-bytes <n>', 'largest accepted request body').env('FLEET_BODY_LIMIT_BYTES'))
    .addOption(new Option('--request-timeout-ms <ms>', 'time a client has to send a whole request before 408 and close').env('FLEET_REQUEST_TIMEOUT_MS'))
    .addOption(new Option('--ip-requests-per-minute <n>', 'per client address, on /v1 routes without an API key (enrollment)').env('FLEET_IP_REQUESTS_PER_MINUTE'))
    .addOption(new Option('--failed-logins-per-window <n>', 'refused API keys (and embedded-broker passwords) one client address may send per window before its attempts are refused').env('FLEET_FAILED_LOGINS_PER_WINDOW'))
    .addOption(new Option('--failed-login-window-s <s>', 'the window of --failed-logins-per-window, in seconds').env('FLEET_FAILED_LOGIN_WINDOW_S'))
    .addOption(new Option('--mqtt-messages-per-second <n>', 'embedded broker: PUBLISH packets per second one robot may send').env('FLEET_MQTT_MESSAGES_PER_SECOND'))
    .addOption(new Option('--mqtt-bytes-per-second <n>', 'embedded broker: payload bytes per second one robot may send').env('FLEET_MQTT_BYTES_PER_SECOND'))
    .addOption(new Option('--grant-retry-after-s <s>', 'after a failed grant request (provider down, invalid answer) the robot asks again this much later').env('FLEET_GRANT_RETRY_AFTER_S'))
    .addOption(new Option('--event-stream-poll-ms <ms>', 'how often each organization with open event streams reads the event log (events of another replica arrive this late)').env('FLEET_EVENT_STREAM_POLL_MS'))
    .addOption(new Option('--event-stream-heartbeat-ms <ms>', 'a heartbeat comment on every open event stream this often').env('FLEET_EVENT_STREAM_HEARTBEAT_MS'))
    .addOption(new Option('--event-streams-per-org <n>', 'open event streams per organization on this process; one more is 429').env('FLEET_EVENT_STREAMS_PER_ORG'))
    .addOption(new Option('--console-dir <dir>', 'the built web console served at /console/ (default: console/dist of this checkout)').env('FLEET_CONSOLE_DIR'))
    .addOption(new Option('--log-level <level>', 'fatal|error|warn|info|debug|trace|silent').env('FLEET_LOG_LEVEL').default('info'))
    .addOption(new Option('--egress-allow-loopback', 'tests and local development: webhook URLs may be on 127.0.0.1/::1').env('FLEET_EGRESS_ALLOW_LOOPBACK'))
    .addOption(new Option('--egress-ca-file <file>', 'extra CA (PEM) trusted for outbound HTTPS').env('FLEET_EGRESS_CA_FILE'))
    .addOption(
      new Option('--read-origin <origin>', 'an origin read links may point at, scheme://host[:port] (https; http for loopback only); repeat for each, or FLEET_READ_ORIGINS comma-separated')
        .env('FLEET_READ_ORIGINS')
        .argParser(collectOrigins),
    )
    .addOption(new Option('--read-links-per-minute-per-org <n>', 'read-links calls per minute one organization may make (each asks its grant provider)').env('FLEET_READ_LINKS_PER_MINUTE_PER_ORG'))
    .addOption(new Option('--metrics-listen <host:port>', 'serve Prometheus /metrics on this separate address, e.g. 127.0.0.1:9464 (default: metrics off)').env('FLEET_METRICS_LISTEN'))
    .addOption(new Option('--metrics-token-file <file>', '/metrics requires this bearer token (file contents; or FLEET_METRICS_TOKEN); without --metrics-listen it is served on the HTTP port').env('FLEET_METRICS_TOKEN_FILE'))
    .action(async (opts: Record<string, string | undefined>) => {
      const input: CloudConfigInput = {
        dataDir: opts.dataDir,
        databaseUrl: opts.databaseUrl,
        databaseWaitS: opts.databaseWaitS,
        host: opts.host,
        httpPort: opts.httpPort,
        mqttPort: opts.mqttPort,
        mqttUrl: opts.mqttUrl,
        mqttPublicUrl: opts.mqttPublicUrl,
        mqttAccountFile: opts.mqttAccountFile,
        mqttBroker: opts.mqttBroker as CloudConfigInput['mqttBroker'],
        egressAllowLoopback: opts.egressAllowLoopback !== undefined && String(opts.egressAllowLoopback) !== 'false',
        egressCaFile: opts.egressCaFile,
        commandTimeoutMs: opts.commandTimeoutMs,
        bodyLimitBytes: opts.bodyLimitBytes,
        requestTimeoutMs: opts.requestTimeoutMs,
        ipRequestsPerMinute: opts.ipRequestsPerMinute,
        failedLoginsPerWindow: opts.failedLoginsPerWindow,
        failedLoginWindowS: opts.failedLoginWindowS,
        mqttMessagesPerSecond: opts.mqttMessagesPerSecond,
        mqttBytesPerSecond: opts.mqttBytesPerSecond,
        grantRetryAfterS: opts.grantRetryAfterS,
        eventStreamPollMs: opts.eventStreamPollMs,
        eventStreamHeartbeatMs: opts.eventStreamHeartbeatMs,
        eventStreamsPerOrg: opts.eventStreamsPerOrg,
        // The one repeatable option: a list (collectOrigins), not a string.
        readOrigins: (opts as { readOrigin?: string[] }).readOrigin,
        readLinksPerMinutePerOrg: opts.readLinksPerMinutePerOrg,
        metricsListen: opts.metricsListen,
        metricsTokenFile: opts.metricsTokenFile,
        consoleDir: opts.consoleDir,
        // Only from the environment, like the secret key.
        metricsToken: process.env.FLEET_METRICS_TOKEN || undefined,
        logLevel: opts.logLevel as CloudConfigInput['logLevel'],
        // Only from the environment: a flag would show the key in the process list.
        secretKey: process.env.FLEET_SECRET_KEY,
      };
      const parsed = CloudConfigSchema.safeParse(Object.fromEntries(Object.entries(input).filter(([, v]) => v !== undefined)));
      if (!parsed.success) fail(`invalid configuration: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
      const config = parseCloudConfig(parsed.data);
      // Logs go to stderr so stdout carries only what a caller parses.
      const logger = createLogger(config.logLevel);
      // Loaded here, not at the top: the server pulls in fastify, the embedded broker, the MQTT
      // client and undici, which the administration commands never use (each starts faster).
      const { ListenError, SecretKeyMismatchError, startCloud } = await import('../server.js');
      let cloud: Awaited<ReturnType<typeof startCloud>>;
      try {
        cloud = await startCloud(config, { clock: systemClock, scheduler: systemScheduler, logger });
      } catch (err) {
        // A taken port is an operator's mistake, not a crash: one line, no stack.
        if (err instanceof ListenError || err instanceof SecretKeyMismatchError) fail(err.message);
        throw err;
      }
      if (cloud.bootstrapped) {
        process.stdout.write(
          `First start: created organization ${cloud.bootstrapped.orgId} and an admin API key (shown once; also saved to ${cloud.bootstrapped.keyFile}, mode 0600):\n` +
            `${cloud.bootstrapped.adminKey}\n`,
        );
      }
      process.stdout.write(`${JSON.stringify({ http: cloud.http, mqtt: cloud.mqtt, ...(cloud.metrics ? { metrics: cloud.metrics } : {}) })}\n`);
      let closing = false;
      const shutdown = (signal: string) => {
        if (closing) {
          logger.warn({ signal }, 'second signal: exiting now');
          process.exit(1);
        }
        closing = true;
        logger.info({ signal }, 'shutting down: finishing in-flight requests');
        cloud.close().then(
          () => {
            logger.flush();
            process.exit(0);
          },
          (err: unknown) => {
            logger.error({ err }, 'shutdown failed');
            process.exit(1);
          },
        );
      };
      process.on('SIGTERM', () => shutdown('SIGTERM'));
      process.on('SIGINT', () => shutdown('SIGINT'));
    });
}

/** `--read-origin` repeated, and FLEET_READ_ORIGINS (one value, comma-separated): one list. */
function collectOrigins(value: string, previous: string[] | undefined): string[] {
  return [...(previous ?? []), ...value.split(',').map((v) => v.trim()).filter((v) => v.length > 0)];
}
