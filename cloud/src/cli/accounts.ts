// `fleet-cloud orgs` and `fleet-cloud keys`: organizations, their tier, feature and limit
// overrides, and API keys, written straight to the store (serve may run meanwhile).
import { InvalidArgumentError, type Command } from 'commander';
import { FEATURES, ScopeSchema, systemClock, type Feature, type Scope } from '@fleet/protocol';
import { createApiKey } from '../api-keys.js';
import { isTier, LIMIT_NAMES, TIER_NAMES } from '../entitlements.js';
import { newId } from '../ids.js';
import { databaseUrlOption, dataDirOption, fail, withStore } from './common.js';

const tierArg = (value: string): string => {
  if (!isTier(value)) throw new InvalidArgumentError(`unknown tier; one of ${TIER_NAMES.join(', ')}`);
  return value;
};

export function registerAccounts(program: Command): void {
  const orgs = program.command('orgs').description('Manage organizations (works while serve runs on the same data directory).');

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
}
