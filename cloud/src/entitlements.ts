import { FEATURES, type Entitlements as EntitlementsAnswer, type Feature } from '@fleet/protocol';

/** What an organization may do: the entitlements answer without the calling key. */
export type Entitlements = Omit<EntitlementsAnswer, 'key'>;
import type { OrgRow } from './store/index.js';

interface Tier {
  features: Record<Feature, boolean>;
  limits: Record<string, number>;
}

/**
 * Tiers and what they include. Each count limit is enforced where its resource is created
 * (robots at enrollment, webhook subscriptions at creation, api keys at creation); the request
 * rates on every authenticated request (http/rate-limit.ts).
 */
export const TIERS: Readonly<Record<string, Tier>> = {
  free: {
    features: { 'api.access': true, 'api.robot_commands': false, 'data.metadata': true },
    limits: { api_keys: 10, robots: 5, webhook_subscriptions: 5, requests_per_minute_per_key: 600, requests_per_minute_per_org: 1200 },
  },
  pro: {
    features: { 'api.access': true, 'api.robot_commands': true, 'data.metadata': true },
    limits: { api_keys: 100, robots: 500, webhook_subscriptions: 5, requests_per_minute_per_key: 6000, requests_per_minute_per_org: 12_000 },
  },
  enterprise: {
    features: { 'api.access': true, 'api.robot_commands': true, 'data.metadata': true },
    limits: { api_keys: 1000, robots: 100_000, webhook_subscriptions: 5, requests_per_minute_per_key: 60_000, requests_per_minute_per_org: 120_000 },
  },
};

export const TIER_NAMES = Object.keys(TIERS);

/** Every limit a tier names: what `fleet-cloud orgs set-limit` accepts. */
export const LIMIT_NAMES: readonly string[] = [...new Set(Object.values(TIERS).flatMap((t) => Object.keys(t.limits)))];

export function isTier(name: string): boolean {
  return Object.hasOwn(TIERS, name);
}

/** The tier's features and limits with the organization's overrides applied. */
export function entitlementsOf(org: OrgRow): Entitlements {
  const tier = TIERS[org.tier] ?? TIERS.free!;
  const features: Record<string, boolean> = {};
  for (const f of FEATURES) features[f] = org.featureOverrides[f] ?? tier.features[f];
  return { tier: org.tier, features, limits: { ...tier.limits, ...org.limitOverrides } };
}

const computed = new WeakMap<OrgRow, Entitlements>();

/**
 * entitlementsOf, computed once per organization row when the row is frozen (the
 * authenticator's cached rows, which every request of the organization shares and which a
 * change replaces rather than edits); the result is frozen too. Other rows are computed afresh.
 */
export function entitlementsOfRow(org: OrgRow): Readonly<Entitlements> {
  if (!Object.isFrozen(org)) return entitlementsOf(org);
  let e = computed.get(org);
  if (!e) {
    e = entitlementsOf(org);
    Object.freeze(e.features);
    Object.freeze(e.limits);
    computed.set(org, Object.freeze(e));
  }
  return e;
}

export function hasFeature(org: OrgRow, feature: Feature): boolean {
  return entitlementsOfRow(org).features[feature] === true;
}
