#!/usr/bin/env node
// `fleet-cloud`: the cloud's command line. Each command group is registered from cli/ (serve,
// accounts, sync, tools); a group loads what only it needs when its command runs, so the
// administration commands start without the HTTP server and the broker.
import { readFileSync } from 'node:fs';
import { Command } from 'commander';
import { applyUsageRules } from '@fleet/node-support';
import { registerAccounts } from './cli/accounts.js';
import { registerBrokerNode } from './cli/broker-node.js';
import { fail } from './cli/common.js';
import { registerServe } from './cli/serve.js';
import { registerSync } from './cli/sync.js';
import { registerTools } from './cli/tools.js';

const { version } = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string };

const program = new Command('fleet-cloud')
  .description('The fleet cloud: /v1 API, episode index, MQTT link to the robots.')
  .version(version, '-V, --version', 'print the version');

registerServe(program);
registerBrokerNode(program);
registerAccounts(program);
registerSync(program);
registerTools(program);

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
