#!/usr/bin/env node
import { readFileSync, writeFileSync } from 'node:fs';
import { Command, InvalidArgumentError, Option } from 'commander';
import {
  applyUsageRules,
  CreateDestinationBodySchema,
  CreateRoutingRuleBodySchema,
  FEATURES,
  RETENTION_DIRECTIVES,
  ScopeSchema,
  systemClock,
  type Feature,
  type Scope,
} from '@fleet/protocol';
import { createApiKey } from './api-keys.js';
import { buildApp } from './app.js';
import { CloudConfigSchema, parseCloudConfig, type CloudConfigInput } from './config.js';
import { isTier, LIMIT_NAMES, TIER_NAMES } from './entitlements.js';
import { newId } from './ids.js';
import { ApiError } from './errors.js';
import { createLogger } from './logger.js';
import { loadSecretBox } from './secret-box.js';
import { MissingDatabaseError, MissingPgSchemaError, openStore, type Store } from './store/index.js';
import { ListenError, SecretKeyMismatchError, startCloud } from './server.js';
import { DEBIAN_DYNSEC_PLUGIN, writeBrokerConfig } from './mqtt/dynsec-config.js';
import { createDestination, createRoutingRule, toDestination, toRoutingRule } from './sync/manage.js';
import { SyncRouter } from './sync/router.js';

const { version } = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string };

const program = new Command('fleet-cloud')
  .description('The fleet cloud: /v1 API, episode index, MQTT link to the robots.')
  .version(version, '-V, --version', 'print the version');

const dataDirOption = () => new Option('--data-dir <dir>', 'data directory (SQLite index, first-start admin key)').env('FLEET_DATA_DIR').default('./data');
const databaseUrlOption = () =>
  new Option('--database-url <url>', 'keep the index in PostgreSQL (postgres://user:password@host/db) instead of SQLite in the data directory').env('FLEET_DATABASE_URL');

/** Where a command finds the store: the data directory, or a PostgreSQL URL. */
interface StoreOpts {
  dataDir: string;
  databaseUrl?: string;
}

function fail(message: string): never {
  process.stderr.write(`fleet-cloud: ${message}\n`);
  process.exit(1);
}

/** Administration commands work on an existing database only; `serve` is what creates one. */
async function withStore<T>(where: StoreOpts, fn: (store: Store) => Promise<T>): Promise<T> {
  let store: Store;
  try {
    store = await openStore({ dataDir: where.dataDir, databaseUrl: where.databaseUrl, create: false });
  } catch (err) {
    if (err instanceof MissingDatabaseError || err instanceof MissingPgSchemaError) fail(err.message);
    throw err;
  }
  try {
    return await fn(store);
  } finally {
    await store.close();
  }
}

program
  .command('serve')
  .description('Run the HTTP API and the embedded MQTT broker. Port 0 picks a free port; the ports are printed as one JSON line.')
  .addOption(dataDirOption())
  .addOption(databaseUrlOption())
  .addOption(new Option('--database-wait-s <s>', 'with --database-url: how long to wait for PostgreSQL to accept connections at start (0: not at all)').env('FLEET_DATABASE_WAIT_S').default('60'))
  .addOption(new Option('--host <host>', 'listen address').env('FLEET_HOST').default('127.0.0.1'))
  .addOption(new Option('--http-port <port>', 'HTTP port (0: any free port)').env('FLEET_HTTP_PORT').default('8080'))
  .addOption(new Option('--mqtt-port <port>', 'embedded MQTT broker port (0: any free port)').env('FLEET_MQTT_PORT').default('1883'))
  .addOption(new Option('--mqtt-url <url>', 'use this external MQTT broker instead of the embedded one').env('FLEET_MQTT_URL'))
  .addOption(new Option('--mqtt-account-file <file>', 'with --mqtt-url: the cloud\'s mosquitto account (written by broker-config); robot accounts and ACLs are kept on the broker').env('FLEET_MQTT_ACCOUNT_FILE'))
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
    let cloud: Awaited<ReturnType<typeof startCloud>>;
    try {
      cloud = await startCloud(config, { logger });
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

const orgs = program.command('orgs').description('Manage organizations (works while serve runs on the same data directory).');

const tierArg = (value: string): string => {
  if (!isTier(value)) throw new InvalidArgumentError(`unknown tier; one of ${TIER_NAMES.join(', ')}`);
  return value;
};

orgs
  .command('create')
  .description('Create an organization and print its id.')
  .addOption(dataDirOption())
  .addOption(databaseUrlOption())
  .requiredOption('--name <name>', 'organization name')
  .option('--tier <tier>', `one of ${TIER_NAMES.join(', ')}`, tierArg, 'free')
  .action(async (opts: { dataDir: string; name: string; tier: string }) => {
    if (opts.name.length < 1 || opts.name.length > 128) fail('--name must be 1 to 128 characters');
    const id = newId('org');
    await withStore(opts, (store) => store.orgs.create({ id, name: opts.name, tier: opts.tier, createdAt: systemClock.now() }));
    process.stdout.write(`${id}\n`);
  });

orgs
  .command('list')
  .description('List organizations as JSON lines.')
  .addOption(dataDirOption())
  .addOption(databaseUrlOption())
  .action(async (opts: { dataDir: string }) => {
    const rows = await withStore(opts, (store) => store.orgs.list());
    for (const o of rows) process.stdout.write(`${JSON.stringify({ id: o.id, name: o.name, tier: o.tier, features: o.featureOverrides, limits: o.limitOverrides })}\n`);
  });

orgs
  .command('set-tier')
  .description("Change an organization's tier.")
  .addOption(dataDirOption())
  .addOption(databaseUrlOption())
  .argument('<org>', 'organization id')
  .argument('<tier>', `one of ${TIER_NAMES.join(', ')}`, tierArg)
  .action(async (org: string, tier: string, opts: { dataDir: string }) => {
    const ok = await withStore(opts, (store) => store.orgs.setTier(org, tier));
    if (!ok) fail(`no organization ${org}`);
  });

orgs
  .command('set-feature')
  .description('Override one feature flag for an organization (FEATURE=default removes the override).')
  .addOption(dataDirOption())
  .addOption(databaseUrlOption())
  .argument('<org>', 'organization id')
  .argument('<assignment>', `FEATURE=true|false|default, FEATURE one of ${FEATURES.join(', ')}`)
  .action(async (org: string, assignment: string, opts: { dataDir: string }) => {
    const m = /^([a-z_.]+)=(true|false|default)$/.exec(assignment);
    if (!m || !(FEATURES as readonly string[]).includes(m[1]!)) fail(`expected FEATURE=true|false|default with FEATURE one of ${FEATURES.join(', ')}`);
    const value = m[2] === 'default' ? null : m[2] === 'true';
    const ok = await withStore(opts, (store) => store.orgs.setFeature(org, m[1] as Feature, value));
    if (!ok) fail(`no organization ${org}`);
  });

orgs
  .command('set-limit')
  .description('Override one named limit for an organization (NAME=default removes the override).')
  .addOption(dataDirOption())
  .addOption(databaseUrlOption())
  .argument('<org>', 'organization id')
  .argument('<assignment>', `NAME=NUMBER|default, NAME one of ${LIMIT_NAMES.join(', ')}, NUMBER a whole number`)
  .action(async (org: string, assignment: string, opts: { dataDir: string }) => {
    const m = /^([^=]+)=(.*)$/.exec(assignment);
    if (!m) fail('expected NAME=NUMBER|default');
    if (!LIMIT_NAMES.includes(m[1]!)) fail(`unknown limit ${m[1]}; expected NAME=NUMBER|default with NAME one of ${LIMIT_NAMES.join(', ')}`);
    // Limits count things (robots, keys, requests): whole numbers only.
    if (m[2] !== 'default' && !(/^\d+$/.test(m[2]!) && Number.isSafeInteger(Number(m[2])))) {
      fail(`expected NAME=NUMBER|default with NUMBER a whole number, got ${JSON.stringify(m[2])}`);
    }
    const value = m[2] === 'default' ? null : Number(m[2]);
    const ok = await withStore(opts, (store) => store.orgs.setLimit(org, m[1]!, value));
    if (!ok) fail(`no organization ${org}`);
  });

const keys = program.command('keys').description('Manage API keys.');

keys
  .command('create')
  .description('Create an API key and print it once.')
  .addOption(dataDirOption())
  .addOption(databaseUrlOption())
  .requiredOption('--org <org>', 'organization id')
  .requiredOption('--name <name>', 'key name, 1 to 128 characters')
  .requiredOption('--scopes <list>', `comma-separated: ${ScopeSchema.options.join(', ')}`)
  .option('--expires-at <time>', 'ISO 8601 date-time')
  .action(async (opts: { dataDir: string; org: string; name: string; scopes: string; expiresAt?: string }) => {
    if (opts.name.length < 1 || opts.name.length > 128) fail('--name must be 1 to 128 characters');
    const scopes = opts.scopes.split(',').map((s) => s.trim());
    for (const s of scopes) if (!ScopeSchema.safeParse(s).success) fail(`unknown scope ${s}`);
    if (new Set(scopes).size !== scopes.length) fail('scopes must be unique');
    const expiresAt = opts.expiresAt === undefined ? null : Date.parse(opts.expiresAt);
    if (Number.isNaN(expiresAt)) fail('--expires-at must be an ISO 8601 date-time');
    const created = await withStore(opts, async (store) => {
      const org = await store.orgs.get(opts.org);
      if (!org) fail(`no organization ${opts.org}`);
      return createApiKey(store, systemClock, { org, name: opts.name, scopes: scopes as Scope[], expiresAt, createdBy: 'cli' });
    });
    process.stdout.write(`${created.key}\n`);
  });

const printJson = (value: unknown): void => {
  process.stdout.write(`${JSON.stringify(value)}\n`);
};

/** Runs an administration change on an existing organization; an `ApiError` is one line on stderr. */
async function withOrg<T>(where: StoreOpts, orgId: string, fn: (store: Store) => Promise<T>): Promise<T> {
  return withStore(where, async (store) => {
    if (!(await store.orgs.get(orgId))) fail(`no organization ${orgId}`);
    try {
      return await fn(store);
    } catch (err) {
      if (err instanceof ApiError) fail(`${err.code}: ${err.message}`);
      throw err;
    }
  });
}

/**
 * Routes the organization's backlog from this process, so a change made here takes effect even
 * while `serve` runs elsewhere: the routes are rows, and robots receive them when they next ask
 * for their assignments (after each connect).
 */
async function routeBacklog(store: Store, orgId: string, revoked?: string): Promise<void> {
  const router = new SyncRouter({ store, clock: systemClock });
  if (revoked) await router.destinationRevoked(orgId, revoked);
  else await router.reroute(orgId);
}

function zodFail(what: string, issues: readonly { path: PropertyKey[]; message: string }[]): never {
  fail(`invalid ${what}: ${issues.map((i) => `${i.path.map(String).join('.') || '(root)'}: ${i.message}`).join('; ')}`);
}

const orgOption = () => new Option('--org <org>', 'organization id').makeOptionMandatory();

const destinations = program.command('destinations').description("Manage an organization's sync destinations (grant providers).");

destinations
  .command('create')
  .description('Register a grant provider; prints the destination as one JSON line, with its dsec_ secret (shown once).')
  .addOption(dataDirOption())
  .addOption(databaseUrlOption())
  .addOption(orgOption())
  .requiredOption('--url <url>', 'HTTPS URL of the grant provider')
  .addOption(new Option('--retention <directive>', 'local copy after verification').choices(RETENTION_DIRECTIVES).default('keep'))
  .addOption(new Option('--egress-allow-loopback', 'tests and local development: the URL may be on 127.0.0.1/::1').env('FLEET_EGRESS_ALLOW_LOOPBACK'))
  .action(async (opts: { dataDir: string; org: string; url: string; retention: string; egressAllowLoopback?: boolean | string }) => {
    const body = CreateDestinationBodySchema.safeParse({ type: 'external', url: opts.url, retention: opts.retention });
    if (!body.success) zodFail('destination', body.error.issues);
    const allowLoopback = opts.egressAllowLoopback !== undefined && String(opts.egressAllowLoopback) !== 'false';
    const created = await withOrg(opts, opts.org, async (store) => {
      const secrets = loadSecretBox(opts.dataDir, process.env.FLEET_SECRET_KEY);
      const d = await createDestination({ store, clock: systemClock, secrets, allowLoopback }, opts.org, body.data);
      await routeBacklog(store, opts.org);
      return d;
    });
    printJson(created);
  });

destinations
  .command('list')
  .description("List the organization's destinations as JSON lines (never the secret).")
  .addOption(dataDirOption())
  .addOption(databaseUrlOption())
  .addOption(orgOption())
  .action(async (opts: { dataDir: string; org: string }) => {
    const rows = await withOrg(opts, opts.org, (store) => store.sync.listDestinations(opts.org, systemClock.now()));
    for (const d of rows) printJson(toDestination(d));
  });

destinations
  .command('revoke')
  .description('Revoke a destination: no new grants; synced data untouched; its pending episodes route again.')
  .addOption(dataDirOption())
  .addOption(databaseUrlOption())
  .addOption(orgOption())
  .argument('<id>', 'destination id')
  .action(async (id: string, opts: { dataDir: string; org: string }) => {
    await withOrg(opts, opts.org, async (store) => {
      if (!(await store.sync.getDestination(opts.org, id))) fail(`no destination ${id} in organization ${opts.org}`);
      await store.sync.revokeDestination(opts.org, id, systemClock.now());
      await routeBacklog(store, opts.org, id);
    });
  });

const rules = program.command('routing-rules').description("Manage an organization's routing rules (the first matching rule wins).");

rules
  .command('create')
  .description('Append a routing rule; prints it as one JSON line.')
  .addOption(dataDirOption())
  .addOption(databaseUrlOption())
  .addOption(orgOption())
  .requiredOption('--destination <id>', 'destination id')
  .option('--match <json>', 'JSON object: field -> string or array of strings ({} matches every episode)', '{}')
  .action(async (opts: { dataDir: string; org: string; destination: string; match: string }) => {
    let match: unknown;
    try {
      match = JSON.parse(opts.match);
    } catch {
      fail('--match must be a JSON object');
    }
    const body = CreateRoutingRuleBodySchema.safeParse({ destination_id: opts.destination, match });
    if (!body.success) zodFail('routing rule', body.error.issues);
    const rule = await withOrg(opts, opts.org, async (store) => {
      const r = await createRoutingRule({ store, clock: systemClock }, opts.org, body.data);
      await routeBacklog(store, opts.org);
      return r;
    });
    printJson(rule);
  });

rules
  .command('list')
  .description('List routing rules in order as JSON lines.')
  .addOption(dataDirOption())
  .addOption(databaseUrlOption())
  .addOption(orgOption())
  .action(async (opts: { dataDir: string; org: string }) => {
    const rows = await withOrg(opts, opts.org, (store) => store.sync.listRules(opts.org));
    for (const r of rows) printJson(toRoutingRule(r));
  });

rules
  .command('delete')
  .description('Delete a routing rule.')
  .addOption(dataDirOption())
  .addOption(databaseUrlOption())
  .addOption(orgOption())
  .argument('<id>', 'routing rule id')
  .action(async (id: string, opts: { dataDir: string; org: string }) => {
    await withOrg(opts, opts.org, async (store) => {
      if (!(await store.sync.deleteRule(opts.org, id))) fail(`no routing rule ${id} in organization ${opts.org}`);
      await routeBacklog(store, opts.org);
    });
  });

rules
  .command('order')
  .description('Set the order of the routing rules: every rule id, each once; prints the rules in the new order.')
  .addOption(dataDirOption())
  .addOption(databaseUrlOption())
  .addOption(orgOption())
  .argument('<ids...>', 'routing rule ids in the new order')
  .action(async (ids: string[], opts: { dataDir: string; org: string }) => {
    const rows = await withOrg(opts, opts.org, async (store) => {
      if (!(await store.sync.reorderRules(opts.org, ids))) fail('the ids must list every routing rule of the organization exactly once');
      await routeBacklog(store, opts.org);
      return store.sync.listRules(opts.org);
    });
    for (const r of rows) printJson(toRoutingRule(r));
  });

program
  .command('openapi')
  .description('Print (or write) the OpenAPI 3.1 document the code generates.')
  .option('--out <file>', 'write to this file instead of stdout')
  .action(async (opts: { out?: string }) => {
    const store = await openStore({ dataDir: ':memory:' });
    const app = await buildApp(parseCloudConfig({}), { store });
    const text = `${JSON.stringify(app.app.swagger(), null, 2)}\n`;
    await app.close();
    await store.close();
    if (opts.out) writeFileSync(opts.out, text);
    else process.stdout.write(text);
  });

program
  .command('broker-config')
  .description(
    'Write what mosquitto 2 needs to serve several cloud replicas: a mosquitto.conf fragment, the dynamic security plugin file (robot accounts are added to it by the cloud) and the cloud\'s broker account (0600, for serve --mqtt-account-file). Refuses to overwrite.',
  )
  .requiredOption('--out <dir>', 'directory for fleet-cloud.conf, dynamic-security.json and cloud-mqtt-account.json')
  .option('--username <name>', 'the cloud replicas\' broker account', 'fleet-cloud')
  .option('--plugin <path>', 'mosquitto_dynamic_security.so', DEBIAN_DYNSEC_PLUGIN)
  .option('--dynsec-file <path>', 'where mosquitto keeps the plugin file (default: in --out)')
  .action((opts: { out: string; username: string; plugin: string; dynsecFile?: string }) => {
    try {
      const files = writeBrokerConfig({ outDir: opts.out, username: opts.username, pluginPath: opts.plugin, ...(opts.dynsecFile ? { dynsecPath: opts.dynsecFile } : {}) });
      printJson({ conf: files.conf, dynsec: files.dynsec, account: files.account });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EEXIST') fail(`${(err as NodeJS.ErrnoException).path ?? 'a file'} exists: the broker's robot accounts live there; choose another --out`);
      throw err;
    }
  });

program.addHelpText(
  'after',
  `
Examples:
  $ fleet-cloud serve                                   # embedded defaults: ./data, HTTP 127.0.0.1:8080, MQTT 1883
  $ fleet-cloud serve --http-port 0 --mqtt-port 0       # any free ports, printed as one JSON line
  $ fleet-cloud orgs create --name acme --tier pro
  $ fleet-cloud keys create --org org_… --name ci --scopes data:read,fleet:read
  $ fleet-cloud openapi --out openapi.json`,
);
applyUsageRules(program);
program.parseAsync(process.argv).catch((err: unknown) => {
  fail(err instanceof Error ? err.message : String(err));
});
