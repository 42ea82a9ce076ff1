import { apiKeyRoutes } from './api-keys.js';
import { datasetRoutes } from './datasets.js';
import { destinationCheckRoutes } from './destination-check.js';
import { destinationRoutes } from './destinations.js';
import { entitlementRoutes } from './entitlements.js';
import { episodeRoutes } from './episodes.js';
import { eventRoutes } from './events.js';
import { readLinkRoutes } from './read-links.js';
import { robotCommandRoutes } from './robot-commands.js';
import { robotRoutes } from './robots.js';
import { routingRuleRoutes } from './routing-rules.js';
import { syncHealthRoutes } from './sync-health.js';
import { usageRoutes } from './usage.js';
import { webhookRoutes } from './webhooks.js';
import type { V1Parts, V1Plugin, ZodApp } from './types.js';

/** Every /v1 resource module, in the order app.ts registers them under the /v1 prefix. */
export const V1_PLUGINS: readonly V1Plugin[] = [apiKeyRoutes, entitlementRoutes, usageRoutes, robotRoutes, robotCommandRoutes, episodeRoutes, readLinkRoutes, datasetRoutes, webhookRoutes, destinationRoutes, destinationCheckRoutes, routingRuleRoutes, syncHealthRoutes, eventRoutes];
export type { CommandSender, V1Parts, V1Plugin, ZodApp } from './types.js';

/**
 * Registers every /v1 module on `app` (the /v1 prefix's instance), each given the parts as its
 * options; awaited one by one, so the routes are added in this order, before anything `app`
 * registers after this call.
 */
export async function registerV1(app: ZodApp, parts: V1Parts): Promise<void> {
  for (const plugin of V1_PLUGINS) await app.register(plugin, parts);
}
