#!/usr/bin/env node
import { readFileSync } from 'node:fs';
import { Command, CommanderError } from 'commander';
import { FleetApiError, FleetConnectionError, FleetStreamError, MalformedApiKeyError } from './errors.js';
import { registerAdmin } from './cli/commands-admin.js';
import { registerData } from './cli/commands-data.js';
import { registerEvents } from './cli/commands-events.js';
import { checkApiKey, checkUrl, defaultConfigPath, writeConfigFile } from './cli/config.js';
import { CommandFailed, formatErrorDetails, UsageError } from './cli/errors.js';
import { globals, output, type CliContext } from './cli/context.js';
import { FleetClient } from './client.js';

const { version } = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string };

const EXAMPLES = `
Examples:
  $ fleet login --url http://127.0.0.1:8080 --key ak_...    # save the URL and key (mode 0600)
  $ fleet robots list
  $ fleet episodes list --robot-id rbt_123 --outcome success --limit 20
  $ fleet episodes list --metadata site=lab --json
  $ fleet episodes export --task-id pick --out pick.ndjson  # again with --resume after an interruption
  $ fleet datasets create --name picks --filter task_id=pick
  $ fleet datasets manifest ds_123 --out manifest.ndjson
  $ fleet enrollment-tokens list
  $ fleet webhooks deliveries wh_123

The API key comes from FLEET_API_KEY or the config file (~/.config/fleet/config.json or --config);
the URL from --url, FLEET_URL or the config file. Exit codes: 0 ok, 1 the API or the network
refused, 2 a usage or configuration error.
`;

export function buildProgram(ctx: CliContext): Command {
  const program = new Command('fleet')
    .description('Query and manage a robot fleet and its episodes through the /v1 API.')
    .version(ctx.version, '-V, --version', 'print the version')
    .option('--url <url>', 'the API address, with or without /v1 (default: FLEET_URL, then the config file)')
    .option('--config <file>', 'config file (default: ~/.config/fleet/config.json)')
    .option('--json', 'print the API’s JSON instead of a table')
    .exitOverride()
    .configureOutput({ writeOut: (s) => ctx.stdout.write(s), writeErr: (s) => ctx.stderr.write(s), outputError: () => undefined })
    .addHelpText('after', EXAMPLES);

  program
    .command('login')
    .description('check a URL and key against the API and save them to the config file (mode 0600)')
    .requiredOption('--key <key>', 'an API key (ak_…)')
    .action(async (opts: { key: string }, cmd: Command) => {
      const g = globals(cmd);
      if (!g.url) throw new UsageError('login needs --url');
      const url = checkUrl(g.url);
      const key = checkApiKey(opts.key, '--key');
      // Any valid key may read its entitlements: a wrong URL or key fails here, not on first use.
      await new FleetClient({ baseUrl: url, apiKey: key }).entitlements();
      const path = g.config ?? defaultConfigPath(ctx.env);
      writeConfigFile(path, { url, api_key: key });
      output(ctx, cmd).done(`saved ${url} to ${path}`, { url, config: path });
    });

  registerData(program, ctx);
  registerEvents(program, ctx);
  registerAdmin(program, ctx);
  return program;
}

/** Runs the CLI; resolves with the exit code (never throws). */
export async function runCli(argv: readonly string[], ctx: CliContext): Promise<number> {
  const program = buildProgram(ctx);
  try {
    await program.parseAsync(argv, { from: 'user' });
    return typeof process.exitCode === 'number' ? process.exitCode : 0;
  } catch (err) {
    const say = (line: string) => ctx.stderr.write(`fleet: ${line.replace(/\s+/g, ' ').trim()}\n`);
    if (err instanceof CommanderError) {
      if (err.exitCode === 0) return 0; // --help, --version
      // A command group without its subcommand: commander printed the group's help already.
      if (err.code === 'commander.help') return 2;
      say(`${err.message.replace(/^error: /, '').split('\n')[0]} (see fleet --help)`);
      return 2;
    }
    if (err instanceof UsageError || err instanceof MalformedApiKeyError) {
      say(err.message);
      return 2;
    }
    if (err instanceof CommandFailed) {
      say(`${err.code}: ${err.message}`);
      return err.exitCode;
    }
    if (err instanceof FleetApiError) {
      say(`${err.serverCode ?? err.code}: ${err.message}${err.requestId ? ` (${err.requestId})` : ''}`);
      // Which field and why: a validation error's issues, a rate limit's numbers.
      for (const line of formatErrorDetails(err.details)) ctx.stderr.write(`  ${line}\n`);
      return 1;
    }
    if (err instanceof FleetConnectionError) {
      say(`connection_failed: ${err.message}`);
      return 1;
    }
    if (err instanceof FleetStreamError) {
      say(`${err.reason}: ${err.message}`);
      return 1;
    }
    const e = err as NodeJS.ErrnoException;
    if (typeof e?.code === 'string' && typeof e.syscall === 'string') {
      say(`${e.code}: ${e.message}`);
      return 1;
    }
    say(`internal: ${e instanceof Error ? e.message : String(err)}`);
    return 1;
  }
}

const code = await runCli(process.argv.slice(2), { env: process.env, stdout: process.stdout, stderr: process.stderr, version });
process.exitCode = code;
