import type { OperationKey } from './types.js';

/**
 * Which FleetClient method calls each operation of the OpenAPI document. Adding a route is:
 * regenerate `schema.ts` (`npm run client:generate`), add its method, add its line here. The
 * type makes a missing line a compile error; the drift test checks the same against the
 * document a running cloud serves, and that every method named here exists.
 */
export const OPERATIONS = {
  'POST /v1/api-keys': 'apiKeys.create',
  'GET /v1/api-keys': 'apiKeys.list',
  'DELETE /v1/api-keys/{id}': 'apiKeys.revoke',
  'GET /v1/entitlements': 'entitlements',
  'GET /v1/usage': 'usage',
  'POST /v1/robots/enrollment-tokens': 'enrollmentTokens.create',
  'GET /v1/robots/enrollment-tokens': 'enrollmentTokens.list',
  'DELETE /v1/robots/enrollment-tokens/{id}': 'enrollmentTokens.revoke',
  'POST /v1/robots/enroll': 'robots.enroll',
  'GET /v1/robots': 'robots.list',
  'GET /v1/robots/{id}': 'robots.get',
  'DELETE /v1/robots/{id}': 'robots.deenroll',
  'POST /v1/robots/{id}/rotate-credentials': 'robots.rotateCredentials',
  'POST /v1/robots/{id}/go-home': 'robots.goHome',
  'POST /v1/robots/{id}/go-to-start': 'robots.goToStart',
  'POST /v1/robots/{id}/start-autonomous': 'robots.startAutonomous',
  'POST /v1/robots/{id}/stop-autonomous': 'robots.stopAutonomous',
  'POST /v1/robots/{id}/stack/start': 'robots.stackStart',
  'POST /v1/robots/{id}/stack/stop': 'robots.stackStop',
  'POST /v1/robots/{id}/stack/status': 'robots.stackStatus',
  'POST /v1/robots/{id}/episodes/start': 'robots.startEpisode',
  'POST /v1/robots/{id}/episodes/finish': 'robots.finishEpisode',
  'POST /v1/robots/{id}/episodes/fail': 'robots.failEpisode',
  'POST /v1/robots/{id}/episodes/discard': 'robots.discardEpisode',
  'GET /v1/episodes': 'episodes.list',
  'GET /v1/episodes/export': 'episodes.exportPage',
  'GET /v1/episodes/{id}': 'episodes.get',
  'PATCH /v1/episodes/{id}': 'episodes.annotate',
  'GET /v1/episodes/{id}/segments': 'episodes.segments',
  'GET /v1/episodes/{id}/files': 'episodes.files',
  'GET /v1/episodes/{id}/outcome-history': 'episodes.outcomeHistory',
  'PATCH /v1/episodes/{id}/outcome': 'episodes.setOutcome',
  'POST /v1/episodes/{id}/read-links': 'episodes.readLinks',
  'POST /v1/datasets': 'datasets.create',
  'GET /v1/datasets': 'datasets.list',
  'GET /v1/datasets/{id}': 'datasets.get',
  'GET /v1/datasets/{id}/count': 'datasets.count',
  'POST /v1/datasets/{id}/snapshot': 'datasets.snapshot',
  'GET /v1/datasets/{id}/manifest': 'datasets.manifestPage',
  'POST /v1/webhooks': 'webhooks.create',
  'GET /v1/webhooks': 'webhooks.list',
  'DELETE /v1/webhooks/{id}': 'webhooks.delete',
  'POST /v1/webhooks/{id}/enable': 'webhooks.enable',
  'GET /v1/webhooks/{id}/dead-letters': 'webhooks.deadLetters',
  'GET /v1/webhooks/{id}/deliveries': 'webhooks.deliveries',
  'POST /v1/webhooks/{id}/dead-letters/{delivery_id}/redeliver': 'webhooks.redeliver',
  'POST /v1/webhooks/{id}/rotate-secret': 'webhooks.rotateSecret',
  'POST /v1/webhooks/{id}/test': 'webhooks.test',
  'POST /v1/destinations': 'destinations.create',
  'GET /v1/destinations': 'destinations.list',
  'DELETE /v1/destinations/{id}': 'destinations.revoke',
  'POST /v1/destinations/{id}/check': 'destinations.check',
  'POST /v1/routing-rules': 'routingRules.create',
  'GET /v1/routing-rules': 'routingRules.list',
  'DELETE /v1/routing-rules/{id}': 'routingRules.delete',
  'PUT /v1/routing-rules/order': 'routingRules.setOrder',
  'GET /v1/sync-health/robots': 'syncHealth',
  'GET /v1/events/stream': 'events.stream',
} as const satisfies Record<OperationKey, string>;

/** The client method of an operation key such as `GET /v1/episodes` (undefined when the table has none). */
export function methodOf(operation: string): string | undefined {
  return (OPERATIONS as Record<string, string>)[operation];
}
