import {
  iso,
  MAX_ROUTING_RULES,
  type Clock,
  type CreateDestinationBody,
  type CreatedDestination,
  type CreateRoutingRuleBody,
  type Destination,
  type RoutingRule,
} from '@fleet/protocol';
import { checkEgressUrl } from '../egress/url-check.js';
import { ApiError, notFound, validationError } from '../errors.js';
import { newId, newSecret } from '../ids.js';
import type { SecretBox } from '../secret-box.js';
import type { DestinationHealth, DestinationRow, RoutingRuleRow, Store } from '../store/index.js';

/**
 * Creating destinations and routing rules, shared by the /v1 routes and `fleet-cloud`, so both
 * check the same things. Errors are `ApiError`s; the caller schedules the routing pass.
 */

export const DESTINATION_SECRET_PREFIX = 'dsec';

/** Registers a grant provider; returns it with its `dsec_` secret, which is stored only sealed. */
export async function createDestination(
  deps: { store: Store; clock: Clock; secrets: SecretBox; allowLoopback: boolean },
  orgId: string,
  body: CreateDestinationBody,
): Promise<CreatedDestination> {
  const url = checkEgressUrl(body.url, deps.allowLoopback);
  const secret = newSecret(DESTINATION_SECRET_PREFIX);
  const row = {
    id: newId('dst'),
    orgId,
    type: body.type,
    url,
    secretSealed: deps.secrets.seal(secret),
    retention: body.retention ?? 'keep',
    createdAt: deps.clock.now(),
  };
  await deps.store.sync.createDestination(row);
  return { ...toDestination({ ...row, revokedAt: null, lastForwardAt: null, forwards24h: 0, deferrals24h: 0, lastDeferral: null }), secret };
}

/** Appends a rule; the destination must be the org's (404) and live (400). */
export async function createRoutingRule(deps: { store: Store; clock: Clock }, orgId: string, body: CreateRoutingRuleBody): Promise<RoutingRule> {
  const { store } = deps;
  const dest = await store.sync.getDestination(orgId, body.destination_id);
  if (!dest) throw notFound('destination');
  if (dest.revokedAt !== null) throw validationError('body', '/destination_id', 'the destination is revoked', 'destination_revoked');
  if ((await store.sync.listRules(orgId)).length >= MAX_ROUTING_RULES) {
    throw new ApiError('conflict', `the organization already has ${MAX_ROUTING_RULES} routing rules`, { limit: 'routing_rules', value: MAX_ROUTING_RULES });
  }
  const rule = await store.sync.createRule({ id: newId('rr'), orgId, destinationId: dest.id, match: normalizeMatch(body.match), createdAt: deps.clock.now() });
  return toRoutingRule(rule);
}

/** A match as stored: every value an array without repeats, so `"a"` and `["a"]` are one rule. */
export function normalizeMatch(match: Record<string, string | string[] | undefined>): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const [field, value] of Object.entries(match)) {
    if (value !== undefined) out[field] = typeof value === 'string' ? [value] : [...new Set(value)];
  }
  return out;
}

export function toDestination(d: DestinationRow & DestinationHealth): Destination {
  return {
    id: d.id,
    type: d.type,
    url: d.url,
    retention: d.retention,
    created_at: iso(d.createdAt),
    revoked_at: d.revokedAt === null ? null : iso(d.revokedAt),
    last_forward_at: d.lastForwardAt === null ? null : iso(d.lastForwardAt),
    forwards_24h: d.forwards24h,
    deferrals_24h: d.deferrals24h,
    last_deferral: d.lastDeferral === null ? null : { at: iso(d.lastDeferral.at), reason: d.lastDeferral.reason },
  };
}

export function toRoutingRule(r: RoutingRuleRow): RoutingRule {
  return { id: r.id, destination_id: r.destinationId, match: r.match, position: r.position, created_at: iso(r.createdAt) };
}
