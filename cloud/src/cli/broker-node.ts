// `fleet-cloud broker-node`: one node of a broker cluster for several cloud replicas (nodes on one
// Redis; robot accounts read from the cloud's database), configured from flags and the environment.
import { Option, type Command } from 'commander';
import { systemClock, systemScheduler } from '@fleet/protocol';
import { BrokerNodeConfigSchema } from '../config.js';
import { createLogger } from '../logger.js';
import { databaseUrlOption, dataDirOption, fail } from './common.js';

export function registerBrokerNode(program: Command): void {
  program
    .command('broker-node')
    .description('Run one MQTT broker node of a cluster (nodes share one Redis; each answers robot logins and ACLs from the cloud\'s database). Prints {"mqtt":…,"node":…} as one JSON line.')
    .addOption(dataDirOption())
    .addOption(databaseUrlOption())
    .addOption(new Option('--database-wait-s <s>', 'with --database-url: how long to wait for PostgreSQL at start').env('FLEET_DATABASE_WAIT_S').default('60'))
    .addOption(new Option('--host <host>', 'listen address').env('FLEET_BROKER_HOST').default('127.0.0.1'))
    .addOption(new Option('--port <port>', 'MQTT port (0: any free port)').env('FLEET_BROKER_PORT').default('1883'))
    .addOption(new Option('--redis-url <url>', 'the Redis every node of the cluster shares (redis:// or rediss://)').env('FLEET_REDIS_URL'))
    .addOption(new Option('--node-id <id>', 'this node\'s id, unique in the cluster (default: a new one each start)').env('FLEET_BROKER_NODE_ID'))
    .addOption(new Option('--heartbeat-ms <ms>', 'how often the node tells the others it is alive; silent for three is dead').env('FLEET_BROKER_HEARTBEAT_MS').default('5000'))
    .addOption(new Option('--account-file <file>', 'the cloud replicas\' account ({username, password}; fleet-cloud broker-config writes one)').env('FLEET_MQTT_ACCOUNT_FILE'))
    .addOption(new Option('--mqtt-messages-per-second <n>', 'PUBLISH packets per second one robot may send on this node').env('FLEET_MQTT_MESSAGES_PER_SECOND').default('100'))
    .addOption(new Option('--mqtt-bytes-per-second <n>', 'payload bytes per second one robot may send on this node').env('FLEET_MQTT_BYTES_PER_SECOND').default('1048576'))
    .addOption(new Option('--failed-logins-per-window <n>', 'refused robot passwords one address may send per window').env('FLEET_FAILED_LOGINS_PER_WINDOW').default('20'))
    .addOption(new Option('--failed-login-window-s <s>', 'the window of --failed-logins-per-window, in seconds').env('FLEET_FAILED_LOGIN_WINDOW_S').default('60'))
    .addOption(new Option('--log-level <level>', 'fatal|error|warn|info|debug|trace|silent').env('FLEET_LOG_LEVEL').default('info'))
    .action(async (opts: Record<string, string | undefined>) => {
      const input = {
        dataDir: opts.dataDir,
        databaseUrl: opts.databaseUrl,
        databaseWaitS: opts.databaseWaitS,
        host: opts.host,
        port: opts.port,
        redisUrl: opts.redisUrl,
        nodeId: opts.nodeId,
        heartbeatMs: opts.heartbeatMs,
        accountFile: opts.accountFile,
        mqttMessagesPerSecond: opts.mqttMessagesPerSecond,
        mqttBytesPerSecond: opts.mqttBytesPerSecond,
        failedLoginsPerWindow: opts.failedLoginsPerWindow,
        failedLoginWindowS: opts.failedLoginWindowS,
        logLevel: opts.logLevel,
      };
      const parsed = BrokerNodeConfigSchema.safeParse(Object.fromEntries(Object.entries(input).filter(([, v]) => v !== undefined)));
      if (!parsed.success) fail(`invalid configuration: ${parsed.error.issues.map((i) => `${i.path.join('.') || 'options'}: ${i.message}`).join('; ')}`);
      const config = Object.freeze(parsed.data);
      const logger = createLogger(config.logLevel);
      const { ListenError, startBrokerNode } = await import('../server.js');
      let node: Awaited<ReturnType<typeof startBrokerNode>>;
      try {
        node = await startBrokerNode(config, { clock: systemClock, scheduler: systemScheduler, logger });
      } catch (err) {
        if (err instanceof ListenError) fail(err.message);
        throw err;
      }
      process.stdout.write(`${JSON.stringify({ mqtt: node.mqtt, node: node.id })}\n`);
      let closing = false;
      const shutdown = (signal: string) => {
        if (closing) process.exit(1);
        closing = true;
        logger.info({ signal }, 'broker node shutting down');
        node.close().then(
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
