import createClient, { type Client } from 'openapi-fetch';
import { apiErrorOf, apiKeyProblem, MalformedApiKeyError } from './errors.js';
import { streamEvents, type EventStreamOptions, type FleetEvent } from './events.js';
import { DEFAULT_MAX_LINE_LENGTH, readNdjson } from './ndjson.js';
import { serializeQuery } from './query.js';
import type { paths } from './schema.js';
import { ROBOT_COMMAND_ACTIONS, type RobotCommandAction } from './robot-commands.js';
import { retryingFetch, type TransportOptions } from './transport.js';
import type {
  CreateApiKeyRequest,
  CreateDatasetRequest,
  CreateDestinationRequest,
  CreateEnrollmentTokenRequest,
  CreateRoutingRuleRequest,
  CreateWebhookRequest,
  EnrollRequest,
  EpisodeFilters,
  EpisodeWithLocations,
  ManifestHeader,
  ManifestLine,
  PatchAnnotationsRequest,
  PatchOutcomeRequest,
  ReadLinksRequest,
} from './types.js';

export { ROBOT_COMMAND_ACTIONS, type RobotCommandAction };

export interface FleetClientOptions extends TransportOptions {
  /** Where the API is, e.g. https://fleet.example.com; a trailing `/v1` (and slashes) is accepted and dropped. */
  baseUrl: string;
  /**
   * `ak_…`; only robot enrollment works without one. Surrounding whitespace is dropped; a key of
   * another format throws {@link MalformedApiKeyError} here, before anything is sent.
   */
  apiKey?: string;
  /** Longest export or manifest line accepted, in characters (default 16 Mi). */
  maxLineLength?: number;
  /** Sent with every request (e.g. a trace id as X-Request-Id). */
  headers?: Record<string, string>;
}

export interface RequestOptions {
  /** Sent as Idempotency-Key (POST): a retry with the same key replays the stored response. Default: a random UUID per call. */
  idempotencyKey?: string;
  signal?: AbortSignal;
}

export interface PageOptions extends RequestOptions {
  cursor?: string;
  /** Page size: 1 to 100 for lists (default 50); for export and manifest up to `STREAM_PAGE_LIMIT.max` (5,000; default 1,000). */
  limit?: number;
}

/** One page of an NDJSON stream: its lines as they arrive, and the cursor of the next page (null on the last). */
export interface StreamPage<T> {
  nextCursor: string | null;
  requestId: string | null;
  lines: AsyncGenerator<T>;
}

type Outcome<R> = R extends { data: infer D } ? Exclude<D, undefined> : never;

const apiError = apiErrorOf;

/** Resolves with the body of a 2xx answer, throws FleetApiError for any other. */
async function ok<R extends { response: Response; data?: unknown; error?: unknown }>(call: Promise<R>): Promise<Outcome<R>> {
  const r = await call;
  if (!r.response.ok) throw apiError(r.response, r.error);
  return r.data as Outcome<R>;
}

async function none(call: Promise<{ response: Response; error?: unknown }>): Promise<void> {
  const r = await call;
  if (!r.response.ok) throw apiError(r.response, r.error);
}

/** Filters and order of `robots.list`. */
export interface RobotListOptions {
  includeDeenrolled?: boolean;
  /** Name contains this text (ASCII letters in any case). */
  q?: string;
  connected?: boolean;
  recordingState?: 'idle' | 'recording' | 'finalizing';
  /** Robots whose disk fills within this many hours by their last report (needs data:read). */
  hoursToFullBelow?: number;
  sort?: 'id' | 'name' | 'last_seen_at';
  order?: 'asc' | 'desc';
}

function robotListQuery(o: RobotListOptions = {}) {
  return {
    ...(o.includeDeenrolled ? { include_deenrolled: 'true' as const } : {}),
    ...(o.q !== undefined && o.q !== '' ? { q: o.q } : {}),
    ...(o.connected !== undefined ? { connected: o.connected ? ('true' as const) : ('false' as const) } : {}),
    ...(o.recordingState !== undefined ? { recording_state: o.recordingState } : {}),
    ...(o.hoursToFullBelow !== undefined ? { hours_to_full_below: String(o.hoursToFullBelow) } : {}),
    ...(o.sort !== undefined ? { sort: o.sort } : {}),
    ...(o.order !== undefined ? { order: o.order } : {}),
  };
}

/**
 * The base URL the client prefixes to `/v1/…`: without trailing slashes, and without a trailing
 * `/v1` (people copy the API's address as printed, `http://host:8080/v1`).
 */
export function apiBaseUrl(url: string): string {
  return url.trim().replace(/\/+$/, '').replace(/\/v1$/i, '').replace(/\/+$/, '');
}

/** Every item of a keyset-paginated list, page after page, following `cursor` until it is null. */
async function* follow<T>(fetchPage: (cursor: string | undefined) => Promise<{ items: readonly T[]; cursor: string | null | undefined }>, start?: string): AsyncGenerator<T> {
  let cursor = start;
  for (;;) {
    const page = await fetchPage(cursor);
    yield* page.items;
    if (!page.cursor) return;
    cursor = page.cursor;
  }
}

/**
 * Typed client for the /v1 API: one method per route, grouped by resource; the types come from
 * the OpenAPI document (`schema.ts`, generated). POSTs carry an Idempotency-Key (a random UUID
 * unless given) and failures are retried as {@link isRetryable} says. `api` is the underlying
 * openapi-fetch client for anything else.
 */
export class FleetClient {
  /** The typed openapi-fetch client every method goes through. */
  readonly api: Client<paths>;
  private readonly maxLineLength: number;
  /** Where the event stream connects: it reconnects by itself, so it bypasses the retrying transport. */
  private readonly streamTarget: { baseUrl: string; headers: Record<string, string>; fetch: TransportOptions['fetch'] };

  constructor(options: FleetClientOptions) {
    const headers: Record<string, string> = { ...options.headers };
    if (options.apiKey !== undefined && options.apiKey !== '') {
      const problem = apiKeyProblem(options.apiKey);
      if (problem !== null) throw new MalformedApiKeyError(problem);
      headers.authorization = `Bearer ${options.apiKey.trim()}`;
    }
    const baseUrl = apiBaseUrl(options.baseUrl);
    this.api = createClient<paths>({ baseUrl, headers, fetch: retryingFetch(options), querySerializer: serializeQuery });
    this.maxLineLength = options.maxLineLength ?? DEFAULT_MAX_LINE_LENGTH;
    this.streamTarget = { baseUrl, headers, fetch: options.fetch };
  }

  private init(opts: RequestOptions = {}) {
    return {
      ...(opts.idempotencyKey !== undefined ? { headers: { 'idempotency-key': opts.idempotencyKey } } : {}),
      ...(opts.signal ? { signal: opts.signal } : {}),
    };
  }

  private page(opts: PageOptions = {}): { cursor?: string; limit?: string } {
    return { ...(opts.cursor !== undefined ? { cursor: opts.cursor } : {}), ...(opts.limit !== undefined ? { limit: String(opts.limit) } : {}) };
  }

  private async ndjson<T>(call: Promise<{ response: Response; data?: unknown; error?: unknown }>): Promise<StreamPage<T>> {
    const r = await call;
    if (!r.response.ok) throw apiError(r.response, r.error);
    return {
      nextCursor: r.response.headers.get('x-next-cursor'),
      requestId: r.response.headers.get('x-request-id'),
      lines: readNdjson<T>((r.data as ReadableStream<Uint8Array> | undefined) ?? null, this.maxLineLength),
    };
  }

  readonly apiKeys = {
    create: (body: CreateApiKeyRequest, o?: RequestOptions) => ok(this.api.POST('/v1/api-keys', { body, ...this.init(o) })),
    list: (o?: RequestOptions) => ok(this.api.GET('/v1/api-keys', this.init(o))),
    revoke: (id: string, o?: RequestOptions) => none(this.api.DELETE('/v1/api-keys/{id}', { params: { path: { id } }, ...this.init(o) })),
  };

  /** What the organization's plan allows; any valid key may ask. */
  entitlements = (o?: RequestOptions) => ok(this.api.GET('/v1/entitlements', this.init(o)));

  /** Metered counts per day (`from`/`to` as YYYY-MM-DD; the last 30 days by default). */
  usage = (range: { from?: string; to?: string } = {}, o?: RequestOptions) => ok(this.api.GET('/v1/usage', { params: { query: range }, ...this.init(o) }));

  /** Single-use tokens a robot exchanges for its credentials (`ret_…`, shown once). */
  readonly enrollmentTokens = {
    create: (body: CreateEnrollmentTokenRequest = {}, o?: RequestOptions) => ok(this.api.POST('/v1/robots/enrollment-tokens', { body, ...this.init(o) })),
    /** Tokens with their prefix, uses and state; never the token itself. */
    list: (o?: PageOptions) => ok(this.api.GET('/v1/robots/enrollment-tokens', { params: { query: this.page(o) }, ...this.init(o) })),
    /** Every token, following the cursor. */
    iterate: (o: PageOptions = {}) =>
      follow((cursor) => this.enrollmentTokens.list({ ...o, ...(cursor !== undefined ? { cursor } : {}) }).then((p) => ({ items: p.enrollment_tokens, cursor: p.cursor })), o.cursor),
    /** A revoked token enrolls no robot afterwards. */
    revoke: (id: string, o?: RequestOptions) => none(this.api.DELETE('/v1/robots/enrollment-tokens/{id}', { params: { path: { id } }, ...this.init(o) })),
  };

  readonly robots = {
    /** Exchanges an enrollment token (no API key needed); not retried after a 5xx or network error (the server does not deduplicate it). */
    enroll: (body: EnrollRequest, o?: RequestOptions) => ok(this.api.POST('/v1/robots/enroll', { body, ...this.init(o) })),
    /**
     * One page. `includeDeenrolled`: de-enrolled robots too; `q` (name contains), `connected`,
     * `recordingState`, `hoursToFullBelow` (needs data:read) filter; `sort`/`order` choose the order.
     * The answer's `cursor` is the next page, `prev_cursor` the one before (pass either as `cursor`, with the same filters).
     */
    list: (o?: PageOptions & RobotListOptions) => ok(this.api.GET('/v1/robots', { params: { query: { ...this.page(o), ...robotListQuery(o) } }, ...this.init(o) })),
    /** Every robot, following the cursor. */
    iterate: (o: PageOptions & RobotListOptions = {}) =>
      follow((cursor) => this.robots.list({ ...o, ...(cursor !== undefined ? { cursor } : {}) }).then((p) => ({ items: p.robots, cursor: p.cursor })), o.cursor),
    get: (id: string, o?: RequestOptions) => ok(this.api.GET('/v1/robots/{id}', { params: { path: { id } }, ...this.init(o) })),
    /** De-enrolls: the robot's broker credentials stop at once; its episodes stay. */
    deenroll: (id: string, o?: RequestOptions) => none(this.api.DELETE('/v1/robots/{id}', { params: { path: { id } }, ...this.init(o) })),
    /** A new broker secret sent to the robot over its command channel: `completed` (200) or `pending` until it is online (202). */
    rotateCredentials: (id: string, o?: RequestOptions) => ok(this.api.POST('/v1/robots/{id}/rotate-credentials', { params: { path: { id } }, body: {}, ...this.init(o) })),
    goHome: (id: string, o?: RequestOptions) => ok(this.api.POST('/v1/robots/{id}/go-home', { params: { path: { id } }, body: {}, ...this.init(o) })),
    goToStart: (id: string, o?: RequestOptions) => ok(this.api.POST('/v1/robots/{id}/go-to-start', { params: { path: { id } }, body: {}, ...this.init(o) })),
    startAutonomous: (id: string, o?: RequestOptions) => ok(this.api.POST('/v1/robots/{id}/start-autonomous', { params: { path: { id } }, body: {}, ...this.init(o) })),
    stopAutonomous: (id: string, o?: RequestOptions) => ok(this.api.POST('/v1/robots/{id}/stop-autonomous', { params: { path: { id } }, body: {}, ...this.init(o) })),
    stackStart: (id: string, o?: RequestOptions) => ok(this.api.POST('/v1/robots/{id}/stack/start', { params: { path: { id } }, body: {}, ...this.init(o) })),
    stackStop: (id: string, o?: RequestOptions) => ok(this.api.POST('/v1/robots/{id}/stack/stop', { params: { path: { id } }, body: {}, ...this.init(o) })),
    stackStatus: (id: string, o?: RequestOptions) => ok(this.api.POST('/v1/robots/{id}/stack/status', { params: { path: { id } }, body: {}, ...this.init(o) })),
    startEpisode: (id: string, body: { task_id?: string; subtask_id?: string; metadata?: Record<string, unknown> } = {}, o?: RequestOptions) =>
      ok(this.api.POST('/v1/robots/{id}/episodes/start', { params: { path: { id } }, body, ...this.init(o) })),
    finishEpisode: (id: string, o?: RequestOptions) => ok(this.api.POST('/v1/robots/{id}/episodes/finish', { params: { path: { id } }, body: {}, ...this.init(o) })),
    failEpisode: (id: string, o?: RequestOptions) => ok(this.api.POST('/v1/robots/{id}/episodes/fail', { params: { path: { id } }, body: {}, ...this.init(o) })),
    discardEpisode: (id: string, o?: RequestOptions) => ok(this.api.POST('/v1/robots/{id}/episodes/discard', { params: { path: { id } }, body: {}, ...this.init(o) })),
    /** Any command by its path (`go-home`, `episodes/start`, …); `body` only for `episodes/start`. */
    command: (id: string, action: RobotCommandAction, body?: { task_id?: string; subtask_id?: string; metadata?: Record<string, unknown> }, o?: RequestOptions) => {
      const r = this.robots;
      const byAction = {
        'go-home': r.goHome,
        'go-to-start': r.goToStart,
        'start-autonomous': r.startAutonomous,
        'stop-autonomous': r.stopAutonomous,
        'stack/start': r.stackStart,
        'stack/stop': r.stackStop,
        'stack/status': r.stackStatus,
        'episodes/finish': r.finishEpisode,
        'episodes/fail': r.failEpisode,
        'episodes/discard': r.discardEpisode,
      } satisfies Record<Exclude<RobotCommandAction, 'episodes/start'>, unknown>;
      return action === 'episodes/start' ? r.startEpisode(id, body, o) : byAction[action](id, o);
    },
  };

  readonly episodes = {
    /** One page; `cursor` in the answer is the next page's (null on the last). */
    list: (filters: EpisodeFilters = {}, o?: PageOptions) => ok(this.api.GET('/v1/episodes', { params: { query: { ...filters, ...this.page(o) } }, ...this.init(o) })),
    /** Every matching episode, following the cursor: `for await (const e of client.episodes.iterate({robot_id}))`. */
    iterate: (filters: EpisodeFilters = {}, o: PageOptions = {}) =>
      follow((cursor) => this.episodes.list(filters, { ...o, ...(cursor !== undefined ? { cursor } : {}) }).then((p) => ({ items: p.episodes, cursor: p.cursor })), o.cursor),
    /** One export page as NDJSON lines (episode + files + locations) with the next page's cursor. */
    exportPage: (filters: EpisodeFilters = {}, o?: PageOptions) =>
      this.ndjson<EpisodeWithLocations>(this.api.GET('/v1/episodes/export', { params: { query: { ...filters, ...this.page(o) } }, parseAs: 'stream', ...this.init(o) })),
    /** Every matching episode with its files and locations, streamed page after page. */
    export: (filters: EpisodeFilters = {}, o: PageOptions = {}): AsyncGenerator<EpisodeWithLocations> => streamPages((cursor) => this.episodes.exportPage(filters, { ...o, ...(cursor !== undefined ? { cursor } : {}) }), o.cursor),
    get: (id: string, o?: RequestOptions) => ok(this.api.GET('/v1/episodes/{id}', { params: { path: { id } }, ...this.init(o) })),
    /** Merges `annotations` (null deletes a key). */
    annotate: (id: string, body: PatchAnnotationsRequest, o?: RequestOptions) => ok(this.api.PATCH('/v1/episodes/{id}', { params: { path: { id } }, body, ...this.init(o) })),
    segments: (id: string, o?: RequestOptions) => ok(this.api.GET('/v1/episodes/{id}/segments', { params: { path: { id } }, ...this.init(o) })),
    /** The files the robot's manifest lists (path, size, SHA-256) and their total; never the bytes. */
    files: (id: string, o?: RequestOptions) => ok(this.api.GET('/v1/episodes/{id}/files', { params: { path: { id } }, ...this.init(o) })),
    outcomeHistory: (id: string, o?: RequestOptions) => ok(this.api.GET('/v1/episodes/{id}/outcome-history', { params: { path: { id } }, ...this.init(o) })),
    /** Overrides the outcome (audited; `reason` required). */
    setOutcome: (id: string, body: PatchOutcomeRequest, o?: RequestOptions) => ok(this.api.PATCH('/v1/episodes/{id}/outcome', { params: { path: { id } }, body, ...this.init(o) })),
    /**
     * Short-lived GET URLs for the episode's files in your bucket (every manifest file, or
     * `files`), from a verified replica (or `destination_id`'s), issued by your grant provider.
     * The URLs are bearer secrets: never log them. Each call gets fresh links (nothing is replayed).
     */
    readLinks: (id: string, body: ReadLinksRequest = {}, o?: RequestOptions) =>
      ok(this.api.POST('/v1/episodes/{id}/read-links', { params: { path: { id } }, body, ...this.init(o) })),
  };

  readonly datasets = {
    create: (body: CreateDatasetRequest, o?: RequestOptions) => ok(this.api.POST('/v1/datasets', { body, ...this.init(o) })),
    list: (o?: PageOptions) => ok(this.api.GET('/v1/datasets', { params: { query: this.page(o) }, ...this.init(o) })),
    iterate: (o: PageOptions = {}) => follow((cursor) => this.datasets.list({ ...o, ...(cursor !== undefined ? { cursor } : {}) }).then((p) => ({ items: p.datasets, cursor: p.cursor })), o.cursor),
    get: (id: string, o?: RequestOptions) => ok(this.api.GET('/v1/datasets/{id}', { params: { path: { id } }, ...this.init(o) })),
    /** How many episodes it holds: pinned by its snapshot, or for a live dataset what a snapshot would pin now (`capped` past 100,000). */
    count: (id: string, o?: RequestOptions) => ok(this.api.GET('/v1/datasets/{id}/count', { params: { path: { id } }, ...this.init(o) })),
    /** Freezes the membership (live datasets have no manifest). */
    snapshot: (id: string, o?: RequestOptions) => ok(this.api.POST('/v1/datasets/{id}/snapshot', { params: { path: { id } }, body: {}, ...this.init(o) })),
    /** One manifest page: the header line (first page only), then members. */
    manifestPage: (id: string, o?: PageOptions) =>
      this.ndjson<ManifestHeader | EpisodeWithLocations>(this.api.GET('/v1/datasets/{id}/manifest', { params: { path: { id }, query: this.page(o) }, parseAs: 'stream', ...this.init(o) })),
    /** The whole manifest, page after page: `{kind: 'header'}` once, then `{kind: 'member'}` per episode. */
    manifest: (id: string, o: PageOptions = {}): AsyncGenerator<ManifestLine> => manifestLines(streamPages((cursor) => this.datasets.manifestPage(id, { ...o, ...(cursor !== undefined ? { cursor } : {}) }), o.cursor)),
  };

  /** The organization's event log, live. */
  readonly events = {
    /**
     * `GET /v1/events/stream`: every event the key may read as `{id, type, data}` (`data` is the
     * webhook payload of an episode event, or a robot status), from the present or after
     * `lastEventId`; reconnects after a drop with the last id yielded, never yields one twice.
     * `for await (const e of client.events.stream({ types: ['robot.status'], signal }))`.
     */
    stream: (o: EventStreamOptions = {}): AsyncGenerator<FleetEvent> => streamEvents(this.streamTarget, o),
  };

  readonly webhooks = {
    /** The `whsec_…` secret is in this answer only. */
    create: (body: CreateWebhookRequest, o?: RequestOptions) => ok(this.api.POST('/v1/webhooks', { body, ...this.init(o) })),
    list: (o?: RequestOptions) => ok(this.api.GET('/v1/webhooks', this.init(o))),
    delete: (id: string, o?: RequestOptions) => none(this.api.DELETE('/v1/webhooks/{id}', { params: { path: { id } }, ...this.init(o) })),
    enable: (id: string, o?: RequestOptions) => ok(this.api.POST('/v1/webhooks/{id}/enable', { params: { path: { id } }, body: {}, ...this.init(o) })),
    deadLetters: (id: string, o?: RequestOptions) => ok(this.api.GET('/v1/webhooks/{id}/dead-letters', { params: { path: { id } }, ...this.init(o) })),
    /** Recent delivery attempts (status or error, latency), newest first. */
    deliveries: (id: string, o?: PageOptions) => ok(this.api.GET('/v1/webhooks/{id}/deliveries', { params: { path: { id }, query: this.page(o) }, ...this.init(o) })),
    redeliver: (id: string, deliveryId: string, o?: RequestOptions) =>
      ok(this.api.POST('/v1/webhooks/{id}/dead-letters/{delivery_id}/redeliver', { params: { path: { id, delivery_id: deliveryId } }, body: {}, ...this.init(o) })),
    /** The old secret keeps signing as a second `v1=` entry for 24 h. */
    rotateSecret: (id: string, o?: RequestOptions) => ok(this.api.POST('/v1/webhooks/{id}/rotate-secret', { params: { path: { id } }, body: {}, ...this.init(o) })),
    /** Queues a synthetic `episode.finalized` with `test: true`. */
    test: (id: string, o?: RequestOptions) => ok(this.api.POST('/v1/webhooks/{id}/test', { params: { path: { id } }, body: {}, ...this.init(o) })),
  };

  /** Grant providers; the `dsec_` secret is only in the creation answer. */
  readonly destinations = {
    create: (body: CreateDestinationRequest, o?: RequestOptions) => ok(this.api.POST('/v1/destinations', { body, ...this.init(o) })),
    list: (o?: RequestOptions) => ok(this.api.GET('/v1/destinations', this.init(o))),
    revoke: (id: string, o?: RequestOptions) => none(this.api.DELETE('/v1/destinations/{id}', { params: { path: { id } }, ...this.init(o) })),
    /** A synthetic signed grant request to the provider; `pass` for a grant or a deferral. */
    check: (id: string, o?: RequestOptions) => ok(this.api.POST('/v1/destinations/{id}/check', { params: { path: { id } }, body: {}, ...this.init(o) })),
  };

  /** Which episodes sync where; the first matching rule wins. */
  readonly routingRules = {
    create: (body: CreateRoutingRuleRequest, o?: RequestOptions) => ok(this.api.POST('/v1/routing-rules', { body, ...this.init(o) })),
    list: (o?: RequestOptions) => ok(this.api.GET('/v1/routing-rules', this.init(o))),
    delete: (id: string, o?: RequestOptions) => none(this.api.DELETE('/v1/routing-rules/{id}', { params: { path: { id } }, ...this.init(o) })),
    /** `ruleIds`: every rule, each once, in the new order. */
    setOrder: (ruleIds: string[], o?: RequestOptions) => ok(this.api.PUT('/v1/routing-rules/order', { body: { rule_ids: ruleIds }, ...this.init(o) })),
  };

  /** Per robot: what has not been verified at a destination yet; `robotIds` (at most 100): only those robots. */
  syncHealth = (o?: RequestOptions & { robotIds?: readonly string[] }) =>
    ok(this.api.GET('/v1/sync-health/robots', { params: { query: o?.robotIds !== undefined ? { robot_id: o.robotIds.join(',') } : {} }, ...this.init(o) }));
}

async function* streamPages<T>(fetchPage: (cursor: string | undefined) => Promise<StreamPage<T>>, start?: string): AsyncGenerator<T> {
  let cursor = start;
  for (;;) {
    const page = await fetchPage(cursor);
    yield* page.lines;
    if (!page.nextCursor) return;
    cursor = page.nextCursor;
  }
}

async function* manifestLines(lines: AsyncGenerator<ManifestHeader | EpisodeWithLocations>): AsyncGenerator<ManifestLine> {
  for await (const line of lines) {
    // The header names the dataset; a member line is an episode (it has an `id`).
    if ('dataset_id' in line && !('id' in line)) yield { kind: 'header', header: line };
    else yield { kind: 'member', episode: line as EpisodeWithLocations };
  }
}
