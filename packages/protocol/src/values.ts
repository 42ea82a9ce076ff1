import { JSON_LIMITS } from './json.js';

/**
 * The protocol's lists, bounds and constants, without zod: what the browser (the console, and
 * the typed client inside it) needs of the protocol, through `@fleet/protocol/values`. The
 * schemas in the other modules are built from these, so a list is written once; `index.ts`
 * exports them too.
 */

/** API key scopes (spec: Authentication 2). `admin` implies every other scope (decisions.md). */
export const SCOPES = ['robots:read', 'robots:command', 'data:read', 'data:write', 'fleet:read', 'admin'] as const;

/** Feature flags that gate endpoints (spec: Entitlements). */
export const FEATURES = ['api.access', 'api.robot_commands', 'data.metadata'] as const;

/** Recording states of a robot (spec: Robot recording state). */
export const RECORDING_STATES = ['idle', 'recording', 'finalizing'] as const;

export const EPISODE_OUTCOMES = ['success', 'failure', 'discarded'] as const;

/** The `sync_state` values of an episode filter. */
export const EPISODE_SYNC_STATES = ['unverified', 'synced', 'verified'] as const;

/** Replica states, in order: a replica never moves backwards (spec, Replica sync). */
export const REPLICA_STATES = ['granted', 'syncing', 'synced', 'verified'] as const;

/** What a replica is on the robot before its first grant: assigned a destination, not granted yet. */
export const LOCAL_REPLICA_STATES = ['assigned', ...REPLICA_STATES] as const;

/** What each robot is told to do with its local copy once replicas are verified (spec, Retention). */
export const RETENTION_DIRECTIVES = ['keep', 'until_all_verified_plus_72h'] as const;

/** Destination types: only `external` (a grant provider) is offered. */
export const DESTINATION_TYPES = ['external'] as const;

/** What a grant provider answered a grant request (sync health counts both). */
export const GRANT_OUTCOMES = ['granted', 'deferred'] as const;

/** A webhook subscription's status. */
export const WEBHOOK_STATUSES = ['active', 'disabled'] as const;

/** What a webhook delivery attempt led to. */
export const DELIVERY_ATTEMPT_OUTCOMES = ['delivered', 'retry', 'dead'] as const;

/** Events a subscription can ask for (spec, Events). */
export const WEBHOOK_EVENTS = ['episode.finalized', 'episode.synced', 'episode.verified', 'episode.failed', 'episode.pruned'] as const;
export type WebhookEvent = (typeof WEBHOOK_EVENTS)[number];

/** The event log's robot presence and recording-state event (never sent to webhooks). */
export const ROBOT_STATUS_EVENT = 'robot.status';

/** Every event type of the log, in the order the API documents them. */
export const STREAM_EVENT_TYPES = [...WEBHOOK_EVENTS, ROBOT_STATUS_EVENT] as const;

/**
 * The shape of an event id: `evt_` and an opaque handle (26 base32 characters), unique across
 * every organization and telling nothing of other organizations' events; `evt_0` (before the
 * first event); or `evt_<n>`, the form earlier versions sent, still taken to resume. Ids are not
 * ordered by their text: the stream's order is the order events come in.
 */
export const EVENT_ID_PATTERN = /^evt_(0|[1-9][0-9]{0,15}|[a-z2-7]{26})$/;

/**
 * Page sizes of the NDJSON streams (`GET /v1/episodes/export`, a dataset's manifest): the
 * server's cap and default. Clients (the `fleet` CLI's `--page-size`) take them from here, so
 * their help and the server agree.
 */
export const STREAM_PAGE_LIMIT = Object.freeze({ max: 5000, default: 1000 });

/** Files one read-links request may name. */
export const READ_LINKS_MAX_FILES = 64;

/** Headers of a forwarded grant request (besides the signature). */
export const GRANT_EVENT = 'grant.request';
export const DESTINATION_ID_HEADER = 'X-Service-Destination-Id';

/**
 * What an API key looks like: `ak_` and 16 to 128 letters, digits, `_` or `-`. The cloud
 * refuses any other `Authorization: Bearer` value before looking it up; clients check a key
 * with it before sending it, to say that the key (not a header) is malformed.
 */
export const API_KEY_PATTERN = /^ak_[A-Za-z0-9_-]{16,128}$/;

/**
 * Every error code the /v1 API answers with, and its HTTP status (decisions.md, HTTP conventions).
 * Clients branch on `code`, never on the message.
 */
export const API_ERRORS = {
  validation_failed: 400,
  unauthenticated: 401,
  insufficient_scope: 403,
  entitlement_required: 403,
  read_links_refused: 403,
  not_found: 404,
  method_not_allowed: 405,
  request_timeout: 408,
  conflict: 409,
  robot_deenrolled: 409,
  replica_not_verified: 409,
  idempotency_key_in_use: 409,
  payload_too_large: 413,
  unsupported_media_type: 415,
  headers_too_large: 431,
  idempotency_key_reused: 422,
  rate_limited: 429,
  internal: 500,
  read_links_unsupported: 501,
  provider_failed: 502,
  read_origin_not_allowed: 502,
  robot_offline: 503,
  not_ready: 503,
  command_timeout: 504,
  provider_timeout: 504,
} as const;

export type ApiErrorCode = keyof typeof API_ERRORS;
export const API_ERROR_CODES = Object.keys(API_ERRORS) as ApiErrorCode[];

/**
 * The one bound on a command's `args` (the API body of a robot command, episode metadata
 * included), end to end: the API refuses with 400 what breaks it, and the agent drops a command
 * whose args break it. Without one shared bound the API took bodies the robot then dropped, and
 * the caller waited for a 504. `args` is depth 1; the message wrapping it adds one level, so the
 * whole message stays within JSON_LIMITS.
 */
export const COMMAND_ARGS_LIMITS = {
  /** Nested objects and arrays of `args`, `args` itself being depth 1. */
  maxDepth: JSON_LIMITS.maxDepth - 1,
  /** UTF-8 bytes of `args` serialized as JSON. */
  maxBytes: 60 * 1024,
} as const;
