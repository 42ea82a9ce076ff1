import type { OutgoingHttpHeaders } from 'node:http';
import { z } from 'zod';
import {
  EVENT_ID_PATTERN,
  ROBOT_STATUS_EVENT,
  scopeSatisfies,
  STREAM_EVENT_TYPES,
  StreamEventDataSchema,
  WEBHOOK_EVENTS,
  type Feature,
  type Scope,
  type StreamEventType,
} from '@fleet/protocol';
import { isUsable } from '../../api-keys.js';
import type { Principal } from '../../auth.js';
import { hasFeature } from '../../entitlements.js';
import { ApiError, quote, validationError } from '../../errors.js';
import { errorResponses } from '../../http/error-responses.js';
import { principalOf } from '../../http/policy.js';
import { SseConnection } from '../../streams/sse.js';
import { v1Plugin } from './types.js';

/** The reconnection delay the stream asks clients for (`retry:`). */
export const STREAM_RETRY_MS = 2000;
/** Unsent output a stream may hold before its reader is dropped as too slow. */
export const STREAM_MAX_BUFFERED_BYTES = 1024 * 1024;

/** Event families: which scope (any of) and which feature a key's organization needs to read each. */
const FAMILIES: readonly { types: readonly StreamEventType[]; scopes: readonly Scope[]; feature: Feature }[] = [
  { types: WEBHOOK_EVENTS, scopes: ['data:read'], feature: 'data.metadata' },
  { types: [ROBOT_STATUS_EVENT], scopes: ['robots:read', 'fleet:read'], feature: 'api.access' },
];
const READ_SCOPES = [...new Set(FAMILIES.flatMap((f) => f.scopes))];

const EventIdText = z.string().regex(EVENT_ID_PATTERN, 'must be an event id (evt_…)');

// The document states the values `types` takes, not only "a string": one known type, or several
// separated by commas (a repeat is harmless: each is streamed once).
const TYPE_ALTERNATIVES = STREAM_EVENT_TYPES.map((t) => t.replaceAll('.', '\\.')).join('|');
const TYPES_PATTERN = new RegExp(`^(?:${TYPE_ALTERNATIVES})(?:,(?:${TYPE_ALTERNATIVES}))*$`);

const StreamQuery = z.strictObject({
  types: z
    .string()
    .max(512)
    .regex(TYPES_PATTERN, `must be event types separated by commas (${STREAM_EVENT_TYPES.join(', ')})`)
    .optional()
    .describe(`comma-separated event types (${STREAM_EVENT_TYPES.join(', ')}); default: every type the key may read`),
  robot_id: z.string().min(1).max(128).optional().describe("only this robot's events"),
  last_event_id: EventIdText.optional().describe('resume after this event (the Last-Event-ID header wins)'),
});

const StreamHeaders = z.looseObject({
  'last-event-id': EventIdText.optional().describe('resume after this event: every later event is sent, then live ones'),
});

/** The types of `?types=`: known ones only, each once. */
function parseTypes(raw: string): StreamEventType[] {
  const out = new Set<StreamEventType>();
  for (const part of raw.split(',')) {
    const t = part.trim();
    if (!(STREAM_EVENT_TYPES as readonly string[]).includes(t)) {
      throw validationError('querystring', '/types', `unknown event type '${quote(t)}'; one of ${STREAM_EVENT_TYPES.join(', ')}`, 'invalid_value');
    }
    out.add(t as StreamEventType);
  }
  return [...out];
}

/**
 * What the stream carries for this key: the types asked for, each of a family the key may read
 * (403 naming the scope or the feature missing), or every type of every family it may read.
 */
export function streamTypes(principal: Principal, asked: readonly StreamEventType[] | null): Set<StreamEventType> {
  const { key, org } = principal;
  const readable = (f: (typeof FAMILIES)[number]) => f.scopes.some((s) => scopeSatisfies(key.scopes, s));
  const refuseScope = (scopes: readonly Scope[]) =>
    new ApiError('insufficient_scope', `these events need the scope ${scopes.join(' or ')}`, {
      required_scope: scopes.length === 1 ? scopes[0] : scopes,
      key_scopes: key.scopes,
    });
  const refuseFeature = (feature: Feature) =>
    new ApiError('entitlement_required', `the organization's plan does not include ${feature}`, { feature, tier: org.tier });
  if (asked !== null) {
    for (const f of FAMILIES) {
      if (!asked.some((t) => f.types.includes(t))) continue;
      if (!readable(f)) throw refuseScope(f.scopes);
      if (!hasFeature(org, f.feature)) throw refuseFeature(f.feature);
    }
    return new Set(asked);
  }
  const allowed = FAMILIES.filter((f) => readable(f) && hasFeature(org, f.feature));
  if (allowed.length > 0) return new Set(allowed.flatMap((f) => f.types));
  const scoped = FAMILIES.find(readable);
  throw scoped ? refuseFeature(scoped.feature) : refuseScope(READ_SCOPES);
}

/** GET /v1/events/stream: the organization's event log as server-sent events (docs/api.md, Event stream). */
export const eventRoutes = v1Plugin<'streams' | 'store' | 'clock' | 'secrets'>('events', async (app, { streams, store, clock, secrets }) => {
  const ids = secrets.opaqueIds();
  app.route({
    method: 'GET',
    url: '/events/stream',
    config: { policy: { auth: 'key', scope: READ_SCOPES, feature: null, meter: null } },
    schema: {
      operationId: 'streamEvents',
      summary: 'Follow the event log live (server-sent events)',
      description: [
        'A `text/event-stream` answer that stays open. Each event is a frame `id: evt_…`, `event: <type>`, `data: <JSON>`;',
        'the data of an episode event is the body its webhook carries, byte for byte. The stream opens with `retry: 2000`',
        'and sends a `: heartbeat` comment line every 15 s. `Last-Event-ID: evt_…` (or `?last_event_id=`) resumes:',
        'every later event the key may read is sent, then live ones, none lost and none twice; without it the stream',
        'starts at the present. Episode events (`episode.*`) need `data:read` and the `data.metadata` feature;',
        '`robot.status` needs `robots:read` or `fleet:read`. Open streams are bounded per organization (429 `rate_limited`).',
      ].join(' '),
      querystring: StreamQuery,
      headers: StreamHeaders,
      response: {
        200: {
          description: 'Server-sent events: `retry:`, then frames `id: evt_…` / `event: <type>` / `data: <payload JSON>` and `: heartbeat` comments',
          content: { 'text/event-stream': { schema: StreamEventDataSchema } },
        },
        ...errorResponses('entitlement_required'),
      },
    },
    handler: async (request, reply) => {
      const principal = principalOf(request);
      const { types, robot_id: robotId, last_event_id: queryLastId } = request.query;
      const wanted = streamTypes(principal, types === undefined ? null : parseTypes(types));
      const headerLastId = request.headers['last-event-id'];
      const lastId = headerLastId ?? queryLastId;
      const after = lastId === undefined ? null : ids.parseEventId(lastId);
      // An id of the documented shape that this service did not give out (the 26-letter form is
      // sealed, so no pattern can tell a real one from a made-up one): its own issue code.
      if (lastId !== undefined && after === null) {
        throw headerLastId !== undefined
          ? validationError('headers', '/last-event-id', 'is not an event id this service gave out', 'unknown_event_id')
          : validationError('querystring', '/last_event_id', 'is not an event id this service gave out', 'unknown_event_id');
      }
      // HEAD (fastify's twin of every GET) gets the head alone, and holds no stream.
      if (request.method === 'HEAD') {
        reply.hijack();
        reply.raw.writeHead(200, { ...(reply.getHeaders() as OutgoingHttpHeaders), 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache, no-transform' });
        reply.raw.end();
        return;
      }

      const conn = new SseConnection(reply.raw, STREAM_MAX_BUFFERED_BYTES);
      const asked = types === undefined ? null : [...wanted];
      const grant = {
        expiresAt: principal.key.expiresAt,
        recheck: async () => {
          const key = await store.apiKeys.get(principal.org.id, principal.key.id);
          const org = await store.orgs.get(principal.org.id);
          if (!key || !org || !isUsable(key, clock.now())) return false;
          try {
            const now = streamTypes({ key, org }, asked);
            return now.size === wanted.size && [...now].every((t) => wanted.has(t));
          } catch {
            return false;
          }
        },
      };
      const stream = await streams.open(principal.org.id, { types: wanted, robotId: robotId ?? null }, conn, grant);
      // From here the answer is ours: the head goes out now, frames follow as events come.
      reply.hijack();
      conn.start(reply.getHeaders() as OutgoingHttpHeaders, STREAM_RETRY_MS);
      try {
        await stream.follow(after);
      } catch (err) {
        request.log.error({ err }, 'event stream catch-up failed');
        conn.end();
      }
    },
  });
});
