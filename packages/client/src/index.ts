export { apiBaseUrl, FleetClient, ROBOT_COMMAND_ACTIONS, type FleetClientOptions, type PageOptions, type RequestOptions, type RobotCommandAction, type RobotListOptions, type StreamPage } from './client.js';
export { API_KEY_FORMAT, apiErrorOf, apiKeyProblem, FleetApiError, FleetConnectionError, FleetStreamError, FLEET_ERROR_CODES, isFleetApiError, MalformedApiKeyError, type FleetErrorCode } from './errors.js';
export {
  streamEvents,
  type EpisodeEventData,
  type EpisodeEventType,
  type EventStreamOptions,
  type FleetEvent,
  type FleetEventType,
  type RobotStatusEventData,
} from './events.js';
export { readSse, type SseMessage, type SseReadOptions } from './sse.js';
export { DEFAULT_MAX_LINE_LENGTH, readNdjson } from './ndjson.js';
export { OPERATIONS, methodOf } from './operations.js';
export { DEFAULT_COMMAND_RETRY_POLICY, DEFAULT_COMMAND_RETRY_WINDOW_MS, DEFAULT_MAX_RETRY_AFTER_MS, DEFAULT_RETRY_POLICY, isRetryable, retryingFetch, type TransportOptions } from './transport.js';
export {
  verifyGrantRequestSignature,
  verifyWebhookSignature,
  type GrantRequestVerification,
  type HeaderSource,
  type SignatureFailure,
  type VerifyOptions,
  type WebhookVerification,
} from './signatures.js';
export type * from './types.js';
export type { components, paths } from './schema.js';
