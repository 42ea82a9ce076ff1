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
import { V1_DECORATORS, type V1Plugin, type ZodApp } from './types.js';

/** Every /v1 resource module; app.ts registers each under the /v1 prefix. */
export const V1_PLUGINS: readonly V1Plugin[] = [apiKeyRoutes, entitlementRoutes, usageRoutes, robotRoutes, robotCommandRoutes, episodeRoutes, readLinkRoutes, datasetRoutes, webhookRoutes, destinationRoutes, destinationCheckRoutes, routingRuleRoutes, syncHealthRoutes, eventRoutes];
export type { CommandSender, V1Plugin, ZodApp } from './types.js';

/** Registers every /v1 module on `app` (the /v1 prefix's instance), once each decorator they read is there. */
export async function registerV1(app: ZodApp): Promise<void> {
  const missing = V1_DECORATORS.filter((d) => !app.hasDecorator(d));
  if (missing.length > 0) throw new Error(`the /v1 routes need the decorators ${missing.join(', ')}`);
  for (const plugin of V1_PLUGINS) await plugin(app);
}
