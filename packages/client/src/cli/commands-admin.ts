import { Option, type Command } from 'commander';
import type { CreateApiKeyRequest, CreateWebhookRequest } from '../types.js';
import { UsageError } from './errors.js';
import { clientFor, intIn, list, oneOf, output, pair, type CliContext } from './context.js';
import { formatHoursToFull } from './output.js';
import { robotLabels } from './robot-names.js';

const SCOPES = ['robots:read', 'robots:command', 'data:read', 'data:write', 'fleet:read', 'admin'] as const;
const EVENTS = ['episode.finalized', 'episode.synced', 'episode.verified', 'episode.failed', 'episode.pruned'] as const;

export function registerAdmin(program: Command, ctx: CliContext): void {
  const keys = program.command('keys').description('API keys of the organization (admin)');
  keys
    .command('create')
    .description('a new key; the plaintext is printed once')
    .requiredOption('--name <name>', 'what the key is for')
    .requiredOption('--scopes <list>', `comma-separated: ${SCOPES.join(', ')}`, list)
    .option('--expires-at <date-time>', 'expiry (ISO 8601)')
    .action(async (opts: { name: string; scopes: string[]; expiresAt?: string }, cmd: Command) => {
      const bad = opts.scopes.find((s) => !(SCOPES as readonly string[]).includes(s));
      if (bad !== undefined) throw new UsageError(`unknown scope '${bad.slice(0, 64)}': one of ${SCOPES.join(', ')}`);
      const body: CreateApiKeyRequest = { name: opts.name, scopes: opts.scopes as CreateApiKeyRequest['scopes'], ...(opts.expiresAt ? { expires_at: opts.expiresAt } : {}) };
      output(ctx, cmd).record(await clientFor(ctx, cmd).apiKeys.create(body));
    });
  keys
    .command('list')
    .description('every key, revoked and expired ones included')
    .action(async (_o, cmd: Command) => {
      const res = await clientFor(ctx, cmd).apiKeys.list();
      output(ctx, cmd).list(res, res.api_keys, [
        { header: 'id', value: (k) => k.id },
        { header: 'name', value: (k) => k.name },
        { header: 'scopes', value: (k) => k.scopes },
        { header: 'last used', value: (k) => k.last_used_at },
        { header: 'expires', value: (k) => k.expires_at },
        { header: 'revoked', value: (k) => k.revoked_at },
      ]);
    });
  keys
    .command('revoke <key-id>')
    .description('revoke a key at once')
    .action(async (id: string, _o, cmd: Command) => {
      await clientFor(ctx, cmd).apiKeys.revoke(id);
      output(ctx, cmd).done(`revoked ${id}`, { id });
    });

  const tokens = program.command('enrollment-tokens').description('tokens robots exchange for their credentials (admin)');
  tokens
    .command('create')
    .description('a new token; the ret_… value is printed once')
    .option('--name-prefix <prefix>', 'robots enrolled with it are named <prefix>-N')
    .addOption(new Option('--max-uses <n>', 'how many robots may use it').argParser(intIn(1, 1_000_000)))
    .option('--expires-at <date-time>', 'expiry (ISO 8601)')
    .action(async (opts: { namePrefix?: string; maxUses?: number; expiresAt?: string }, cmd: Command) => {
      const body = { ...(opts.namePrefix ? { name_prefix: opts.namePrefix } : {}), ...(opts.maxUses ? { max_uses: opts.maxUses } : {}), ...(opts.expiresAt ? { expires_at: opts.expiresAt } : {}) };
      output(ctx, cmd).record(await clientFor(ctx, cmd).enrollmentTokens.create(body));
    });
  tokens
    .command('list')
    .description('every token (all pages): prefix, uses, expiry, revocation; never the token itself')
    .action(async (_o, cmd: Command) => {
      const all = [];
      for await (const t of clientFor(ctx, cmd).enrollmentTokens.iterate({ limit: 100 })) all.push(t);
      output(ctx, cmd).list({ enrollment_tokens: all }, all, [
        { header: 'id', value: (t) => t.id },
        { header: 'prefix', value: (t) => t.token_prefix },
        { header: 'uses', value: (t) => t.uses },
        { header: 'max uses', value: (t) => t.max_uses },
        { header: 'expires', value: (t) => t.expires_at },
        { header: 'revoked', value: (t) => t.revoked_at },
      ]);
    });
  tokens
    .command('revoke <token-id>')
    .description('revoke a token: it enrolls no robot afterwards')
    .action(async (id: string, _o, cmd: Command) => {
      await clientFor(ctx, cmd).enrollmentTokens.revoke(id);
      output(ctx, cmd).done(`revoked ${id}`, { id });
    });

  const hooks = program.command('webhooks').description('webhook subscriptions (admin)');
  hooks
    .command('create <endpoint-url>')
    .description('subscribe an HTTPS endpoint; the whsec_… secret is printed once')
    .requiredOption('--events <list>', `comma-separated: ${EVENTS.join(', ')}`, list)
    .action(async (url: string, o: { events: string[] }, cmd: Command) => {
      const opts = { url, events: o.events };
      const bad = opts.events.find((e) => !(EVENTS as readonly string[]).includes(e));
      if (bad !== undefined) throw new UsageError(`unknown event '${bad.slice(0, 64)}': one of ${EVENTS.join(', ')}`);
      output(ctx, cmd).record(await clientFor(ctx, cmd).webhooks.create({ url: opts.url, events: opts.events as CreateWebhookRequest['events'] }));
    });
  hooks
    .command('list')
    .description('subscriptions with their queue state')
    .action(async (_o, cmd: Command) => {
      const res = await clientFor(ctx, cmd).webhooks.list();
      output(ctx, cmd).list(res, res.webhooks, [
        { header: 'id', value: (w) => w.id },
        { header: 'url', value: (w) => w.url },
        { header: 'events', value: (w) => w.events },
        { header: 'status', value: (w) => w.status },
        { header: 'pending', value: (w) => w.pending_deliveries },
        { header: 'last delivered', value: (w) => w.last_delivered_at },
        { header: 'last error', value: (w) => w.last_delivery_error },
      ]);
    });
  hooks
    .command('delete <webhook-id>')
    .description('delete a subscription')
    .action(async (id: string, _o, cmd: Command) => {
      await clientFor(ctx, cmd).webhooks.delete(id);
      output(ctx, cmd).done(`deleted ${id}`, { id });
    });
  hooks
    .command('enable <webhook-id>')
    .description('re-enable a disabled subscription')
    .action(async (id: string, _o, cmd: Command) => output(ctx, cmd).record(await clientFor(ctx, cmd).webhooks.enable(id)));
  hooks
    .command('dead-letters <webhook-id>')
    .description('deliveries that failed for good')
    .action(async (id: string, _o, cmd: Command) => {
      const res = await clientFor(ctx, cmd).webhooks.deadLetters(id);
      output(ctx, cmd).list(res, res.dead_letters, [
        { header: 'delivery', value: (d) => d.id },
        { header: 'event', value: (d) => d.event_id },
        { header: 'type', value: (d) => d.event },
        { header: 'attempts', value: (d) => d.attempts },
        { header: 'last status', value: (d) => d.last_status },
        { header: 'last error', value: (d) => d.last_error },
      ]);
    });
  hooks
    .command('deliveries <webhook-id>')
    .description('recent delivery attempts, newest first: status or error, latency')
    .addOption(new Option('--limit <n>', 'how many (1-100, default 50)').argParser(intIn(1, 100)))
    .action(async (id: string, o: { limit?: number }, cmd: Command) => {
      const res = await clientFor(ctx, cmd).webhooks.deliveries(id, o.limit ? { limit: o.limit } : {});
      output(ctx, cmd).list(res, res.deliveries, [
        { header: 'at', value: (d) => d.at },
        { header: 'event', value: (d) => d.event_id },
        { header: 'type', value: (d) => d.event },
        { header: 'attempt', value: (d) => d.attempt },
        { header: 'outcome', value: (d) => d.outcome },
        { header: 'status', value: (d) => d.status_code },
        { header: 'error', value: (d) => d.error },
        { header: 'ms', value: (d) => d.latency_ms },
      ]);
    });
  hooks
    .command('redeliver <webhook-id> <delivery-id>')
    .description('queue a dead letter again')
    .action(async (id: string, deliveryId: string, _o, cmd: Command) => output(ctx, cmd).record(await clientFor(ctx, cmd).webhooks.redeliver(id, deliveryId)));
  hooks
    .command('rotate-secret <webhook-id>')
    .description('a new secret; the old one also signs for 24 h')
    .action(async (id: string, _o, cmd: Command) => output(ctx, cmd).record(await clientFor(ctx, cmd).webhooks.rotateSecret(id)));
  hooks
    .command('test <webhook-id>')
    .description('queue a synthetic episode.finalized with test: true')
    .action(async (id: string, _o, cmd: Command) => output(ctx, cmd).record(await clientFor(ctx, cmd).webhooks.test(id)));

  const destinations = program.command('destinations').description('grant providers that episodes sync to (admin)');
  destinations
    .command('create <provider-url>')
    .description('register a grant provider (its HTTPS URL); the dsec_… secret is printed once')
    .addOption(new Option('--retention <directive>', 'keep (default) or until_all_verified_plus_72h').argParser(oneOf(['keep', 'until_all_verified_plus_72h'] as const)))
    .action(async (url: string, opts: { retention?: 'keep' | 'until_all_verified_plus_72h' }, cmd: Command) =>
      output(ctx, cmd).record(await clientFor(ctx, cmd).destinations.create({ type: 'external', url, ...(opts.retention ? { retention: opts.retention } : {}) })),
    );
  destinations
    .command('list')
    .description('destinations with their 24 h forward counts')
    .action(async (_o, cmd: Command) => {
      const res = await clientFor(ctx, cmd).destinations.list();
      output(ctx, cmd).list(res, res.destinations, [
        { header: 'id', value: (d) => d.id },
        { header: 'url', value: (d) => d.url },
        { header: 'retention', value: (d) => d.retention },
        { header: 'forwards 24h', value: (d) => d.forwards_24h },
        { header: 'deferrals 24h', value: (d) => d.deferrals_24h },
        { header: 'revoked', value: (d) => d.revoked_at },
      ]);
    });
  destinations
    .command('revoke <destination-id>')
    .description('stop new grants and routes to it')
    .action(async (id: string, _o, cmd: Command) => {
      await clientFor(ctx, cmd).destinations.revoke(id);
      output(ctx, cmd).done(`revoked ${id}`, { id });
    });
  destinations
    .command('check <destination-id>')
    .description('send a synthetic signed grant request and show the verdict')
    .action(async (id: string, _o, cmd: Command) => output(ctx, cmd).record(await clientFor(ctx, cmd).destinations.check(id)));

  const rules = program.command('routing-rules').description('which episodes sync where; the first match wins (admin)');
  rules
    .command('create')
    .description('a rule at the end of the list')
    .requiredOption('--destination <destination-id>', 'where matching episodes go')
    .option('--match <field=value>', 'robot_id, task_id, recording_session_id, episode_seq, episode_id, outcome, robot_platform or has_autonomous (repeatable; a field given twice matches either value)', pair)
    .action(async (opts: { destination: string; match?: [string, string][] }, cmd: Command) => {
      const match: Record<string, string[]> = {};
      for (const [k, v] of opts.match ?? []) (match[k] ??= []).push(v);
      output(ctx, cmd).record(await clientFor(ctx, cmd).routingRules.create({ destination_id: opts.destination, match: match }));
    });
  rules
    .command('list')
    .description('the rules in order')
    .action(async (_o, cmd: Command) => {
      const res = await clientFor(ctx, cmd).routingRules.list();
      output(ctx, cmd).list(res, res.routing_rules, [
        { header: 'position', value: (r) => r.position },
        { header: 'id', value: (r) => r.id },
        { header: 'destination', value: (r) => r.destination_id },
        { header: 'match', value: (r) => r.match },
      ]);
    });
  rules
    .command('delete <rule-id>')
    .description('delete a rule')
    .action(async (id: string, _o, cmd: Command) => {
      await clientFor(ctx, cmd).routingRules.delete(id);
      output(ctx, cmd).done(`deleted ${id}`, { id });
    });
  rules
    .command('order <rule-ids...>')
    .description('set the order: every rule id, each once')
    .action(async (ids: string[], _o, cmd: Command) => {
      const res = await clientFor(ctx, cmd).routingRules.setOrder(ids);
      output(ctx, cmd).list(res, res.routing_rules, [
        { header: 'position', value: (r) => r.position },
        { header: 'id', value: (r) => r.id },
      ]);
    });

  program
    .command('sync-health')
    .description('per robot: episodes not yet verified at a destination')
    .action(async (_o, cmd: Command) => {
      const client = clientFor(ctx, cmd);
      const res = await client.syncHealth();
      const out = output(ctx, cmd);
      const robot = out.json ? (id: string) => id : await robotLabels(client, res.robots.map((r) => r.robot_id));
      out.list(res, res.robots, [
        { header: 'robot', value: (r) => robot(r.robot_id) },
        { header: 'reported', value: (r) => r.episodes_reported },
        { header: 'unverified', value: (r) => r.unverified },
        { header: 'over 72h', value: (r) => r.unverified_over_72h },
        { header: 'bytes unverified', value: (r) => r.bytes_unverified },
        { header: 'local missing', value: (r) => r.local_missing },
        { header: 'disk full in', value: (r) => (r.pressure ? formatHoursToFull(r.pressure.hours_to_full) : null) },
      ]);
    });
  program
    .command('entitlements')
    .description('what the organization’s plan allows')
    .action(async (_o, cmd: Command) => output(ctx, cmd).record(await clientFor(ctx, cmd).entitlements()));
  program
    .command('usage')
    .description('metered counts per day (admin)')
    .option('--from <YYYY-MM-DD>', 'first day (default: 30 days ago)')
    .option('--to <YYYY-MM-DD>', 'last day (default: today)')
    .action(async (opts: { from?: string; to?: string }, cmd: Command) => {
      const res = await clientFor(ctx, cmd).usage(opts);
      output(ctx, cmd).list(res, res.usage, [
        { header: 'day', value: (u) => u.day },
        { header: 'meter', value: (u) => u.meter },
        { header: 'count', value: (u) => u.count },
      ]);
    });
}
