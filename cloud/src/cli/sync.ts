// `fleet-cloud destinations` and `fleet-cloud routing-rules`: where an organization's episodes
// are uploaded and which go where. A change routes the backlog from this process.
import { Option, type Command } from 'commander';
import { CreateDestinationBodySchema, CreateRoutingRuleBodySchema, RETENTION_DIRECTIVES, systemClock } from '@fleet/protocol';
import { loadSecretBox } from '../secret-box.js';
import type { Store } from '../store/index.js';
import { createDestination, createRoutingRule, toDestination, toRoutingRule } from '../sync/manage.js';
import { SyncRouter } from '../sync/router.js';
import { databaseUrlOption, dataDirOption, fail, orgOption, printJson, withOrg, zodFail } from './common.js';

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

export function registerSync(program: Command): void {
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
}
