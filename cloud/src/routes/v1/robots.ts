import { z } from 'zod';
import {
  CreateEnrollmentTokenBodySchema,
  CredentialRotationSchema,
  EnrollBodySchema,
  EnrollResponseSchema,
  EnrollmentTokenInfoSchema,
  EnrollmentTokenSchema,
  iso,
  RecordingStateSchema,
  RobotSchema,
  scopeSatisfies,
  type Robot,
} from '@fleet/protocol';
import { ApiError, notFound } from '../../errors.js';
import { errorResponses } from '../../http/error-responses.js';
import { principalOf } from '../../http/policy.js';
import { createEnrollmentToken, enrollRobot, toEnrollmentTokenInfo } from '../../robots/enrollment.js';
import { hasFeature } from '../../entitlements.js';
import { ROBOT_SORTS, robotSortValue, type RobotListPosition, type RobotRow, type RobotSort } from '../../store/index.js';
import { decodeCursor, encodeCursor } from '../cursor.js';
import { queryInt, queryIntText } from '../query.js';
import { v1Plugin } from './types.js';
import { fromBody, linksTo } from '../../http/openapi-links.js';

export function toRobot(r: RobotRow): Robot {
  return {
    id: r.id,
    name: r.name,
    platform: r.platform,
    runtime_version: r.runtimeVersion,
    capabilities: r.capabilities,
    connected: r.connected,
    recording_state: r.recordingState,
    last_seen_at: r.lastSeenAt === null ? null : iso(r.lastSeenAt),
    created_at: iso(r.createdAt),
    deenrolled_at: r.deenrolledAt === null ? null : iso(r.deenrolledAt),
    credentials: {
      rotation: r.rotationRequestedAt === null ? 'none' : 'pending',
      rotation_requested_at: r.rotationRequestedAt === null ? null : iso(r.rotationRequestedAt),
      rotated_at: r.rotatedAt === null ? null : iso(r.rotatedAt),
    },
  };
}

/** 409 `robot_deenrolled`: the robot exists (its episodes stay) but takes nothing any more. */
export function deenrolledError(r: RobotRow): ApiError {
  return new ApiError('robot_deenrolled', `the robot was de-enrolled at ${iso(r.deenrolledAt ?? 0)}; enroll it again for a new identity`, {
    robot_id: r.id,
    deenrolled_at: iso(r.deenrolledAt ?? 0),
  });
}

const ListQuery = z.strictObject({
  cursor: z.string().min(1).max(512).optional(),
  limit: queryInt(1, 100, 50),
});

const RobotListQuerySchema = ListQuery.extend({
  include_deenrolled: z.enum(['true', 'false']).optional().describe('`true`: list de-enrolled robots too (default false)'),
  q: z.string().min(1).max(128).optional().describe('Name contains this text (ASCII letters in any case)'),
  connected: z.enum(['true', 'false']).optional().describe('Only robots connected (`true`) or not (`false`) now'),
  recording_state: RecordingStateSchema.optional().describe('Only robots in this recording state'),
  hours_to_full_below: queryIntText(1, 1_000_000)
    .optional()
    .describe('Only robots whose last disk report projects the disk full in fewer than this many hours (needs data:read)'),
  sort: z.enum(ROBOT_SORTS).optional().describe('`id` (default), `name` (bytewise) or `last_seen_at` (never seen counts as earliest)'),
  order: z.enum(['asc', 'desc']).optional().describe('`asc` (default) or `desc`'),
});

/**
 * A robot page cursor. Paging forward by id is the id itself, as before sorting existed, so
 * cursors handed out earlier still work; any other cursor names its order, sort value and
 * direction, and one of another order is refused rather than read as a position it is not.
 */
function encodeRobotCursor(sort: RobotSort, order: 'asc' | 'desc', r: RobotRow, direction: 'after' | 'before'): string {
  if (sort === 'id' && order === 'asc' && direction === 'after') return encodeCursor(r.id);
  return encodeCursor({ s: sort, o: order, v: robotSortValue(sort, r), id: r.id, d: direction === 'after' ? 'a' : 'b' });
}

function decodeRobotCursor(cursor: string, sort: RobotSort, order: 'asc' | 'desc'): RobotListPosition {
  const position = decodeCursor(cursor, (v): RobotListPosition | null => {
    if (typeof v === 'string') return sort === 'id' && order === 'asc' ? { value: v, id: v, direction: 'after' } : null;
    if (typeof v !== 'object' || v === null) return null;
    const c = v as Record<string, unknown>;
    if (c.s !== sort || c.o !== order || typeof c.id !== 'string' || (c.d !== 'a' && c.d !== 'b')) return null;
    const valueOk = sort === 'last_seen_at' ? typeof c.v === 'number' && Number.isSafeInteger(c.v) : typeof c.v === 'string';
    if (!valueOk) return null;
    return { value: c.v as string | number, id: c.id, direction: c.d === 'a' ? 'after' : 'before' };
  });
  return position;
}

const IdParams = z.strictObject({ id: z.string().min(1).max(128) });
const NoBody = z.strictObject({}).nullish();
const stringCursor = (v: unknown) => (typeof v === 'string' ? v : null);

/** Enrollment, enrollment tokens, the robot records, de-enrollment and credential rotation (decisions.md, Robots). */
export const robotRoutes = v1Plugin<'store' | 'clock' | 'mqttPublicUrls' | 'fleetAdmin'>('robots', async (app, { store, clock, mqttPublicUrls, fleetAdmin: fleet }) => {
  const admin = { auth: 'key', scope: 'admin', feature: 'api.access' } as const;

  app.route({
    method: 'POST',
    url: '/robots/enrollment-tokens',
    config: { policy: { auth: 'key', scope: 'admin', feature: 'api.access', meter: null } },
    links: {
      201: {
        ...linksTo(['revokeEnrollmentToken'], { id: fromBody('/id') }, 'The token just created'),
        ...linksTo(['enrollRobot'], {}, 'Enroll a robot with the token just created', { token: fromBody('/token') }),
      },
    },
    schema: {
      operationId: 'createEnrollmentToken',
      summary: 'Create a robot enrollment token',
      description: 'The `ret_` token is shown once. Defaults: one use, valid 24 h.',
      body: CreateEnrollmentTokenBodySchema,
      response: { 201: EnrollmentTokenSchema },
    },
    handler: async (request, reply) => {
      const { org, key } = principalOf(request);
      const b = request.body;
      const created = await createEnrollmentToken(store, clock, {
        org,
        createdBy: key.id,
        ...(b.name_prefix !== undefined ? { namePrefix: b.name_prefix } : {}),
        ...(b.max_uses !== undefined ? { maxUses: b.max_uses } : {}),
        ...(b.expires_at !== undefined ? { expiresAt: b.expires_at } : {}),
      });
      return reply.code(201).send(created);
    },
  });

  app.route({
    method: 'GET',
    url: '/robots/enrollment-tokens',
    config: { policy: { ...admin, meter: null } },
    links: { 200: linksTo(['revokeEnrollmentToken'], { id: fromBody('/enrollment_tokens/0/id') }, 'The first token listed') },
    schema: {
      operationId: 'listEnrollmentTokens',
      summary: 'List enrollment tokens',
      description:
        'Every token of the organization, used up, expired and revoked ones included; ordered by id and keyset-paginated. ' +
        'Never the token itself: `token_prefix` tells tokens apart.',
      querystring: ListQuery,
      response: { 200: z.object({ enrollment_tokens: z.array(EnrollmentTokenInfoSchema), cursor: z.string().nullable() }) },
    },
    handler: async (request) => {
      const { org } = principalOf(request);
      const { limit, cursor } = request.query;
      const after = cursor === undefined ? null : decodeCursor(cursor, stringCursor);
      const rows = await store.robots.listEnrollmentTokens(org.id, after, limit + 1);
      const page = rows.slice(0, limit);
      return { enrollment_tokens: page.map(toEnrollmentTokenInfo), cursor: rows.length > limit ? encodeCursor(page[page.length - 1]!.id) : null };
    },
  });

  app.route({
    method: 'DELETE',
    url: '/robots/enrollment-tokens/:id',
    config: { policy: { ...admin, meter: 'enrollment_tokens.revoked' } },
    schema: {
      operationId: 'revokeEnrollmentToken',
      summary: 'Revoke an enrollment token',
      description:
        'Immediate and permanent: the token enrolls no robot afterwards (401 `unauthenticated`). Robots it enrolled stay. ' +
        'Revoking a revoked token answers 204 and keeps the first revocation time.',
      params: IdParams,
      response: { 204: z.null().describe('Revoked'), ...errorResponses('not_found') },
    },
    handler: async (request, reply) => {
      const { org } = principalOf(request);
      if (!(await store.robots.revokeEnrollmentToken(org.id, request.params.id, clock.now()))) throw notFound('enrollment token');
      return reply.code(204).send(null);
    },
  });

  app.route({
    method: 'POST',
    url: '/robots/enroll',
    config: { policy: { auth: 'none' } },
    links: { 201: linksTo(['getRobot', 'rotateRobotCredentials', 'sendRobotGoHome', 'sendRobotGoToStart', 'sendRobotStartAutonomous', 'sendRobotStopAutonomous', 'sendRobotStackStart', 'sendRobotStackStop', 'sendRobotStackStatus', 'startRobotEpisode', 'finishRobotEpisode', 'failRobotEpisode', 'discardRobotEpisode', 'deenrollRobot'], { id: fromBody('/robot_id') }, 'The robot just enrolled') },
    schema: {
      operationId: 'enrollRobot',
      summary: 'Enroll a robot with an enrollment token',
      description: 'No API key: the token in the body authenticates. Returns the robot id and its MQTT credentials, shown once.',
      body: EnrollBodySchema,
      response: { 201: EnrollResponseSchema, ...errorResponses('unauthenticated', 'conflict') },
    },
    handler: async (request, reply) => {
      const enrolled = await enrollRobot(store, clock, request.body, mqttPublicUrls);
      try {
        await fleet.enrolled?.(enrolled.robot_id, enrolled.mqtt.password);
      } catch (err) {
        // The secret exists only in this answer: a robot the broker does not know could never
        // connect, so it does not stay enrolled (nor count against the robots limit).
        const robot = await store.robots.getById(enrolled.robot_id);
        if (robot) await store.robots.deenroll(robot.orgId, robot.id, clock.now());
        throw err;
      }
      return reply.code(201).send(enrolled);
    },
  });

  app.route({
    method: 'GET',
    url: '/robots',
    config: { policy: { auth: 'key', scope: ['robots:read', 'fleet:read'], feature: 'api.access', meter: null } },
    links: { 200: linksTo(['getRobot', 'rotateRobotCredentials', 'deenrollRobot'], { id: fromBody('/robots/0/id') }, 'The first robot listed') },
    schema: {
      operationId: 'listRobots',
      summary: 'List robots',
      description:
        'Ordered by id unless `sort` says otherwise; keyset-paginated in every order (`cursor` for the next page, `prev_cursor` for the one before). ' +
        'De-enrolled robots are left out unless `include_deenrolled=true`. Filters: `q` (name contains, ASCII letters in any case), `connected`, ' +
        '`recording_state`, and `hours_to_full_below` (the disk the robot last reported fills within that many hours; sync-health data, so it ' +
        'also needs the scope `data:read` and the feature `data.metadata`). Pass a cursor back with the same filters and order.',
      querystring: RobotListQuerySchema,
      response: { 200: z.object({ robots: z.array(RobotSchema), cursor: z.string().nullable(), prev_cursor: z.string().nullable() }) },
    },
    handler: async (request) => {
      const { org, key } = principalOf(request);
      const q = request.query;
      const sort = q.sort ?? 'id';
      const order = q.order ?? 'asc';
      if (q.hours_to_full_below !== undefined) {
        // Disk pressure is sync health (data:read, data.metadata): a fleet:read key filters by it no more than it reads it.
        if (!scopeSatisfies(key.scopes, 'data:read')) {
          throw new ApiError('insufficient_scope', 'hours_to_full_below needs the scope data:read', { required_scope: 'data:read', key_scopes: key.scopes });
        }
        if (!hasFeature(org, 'data.metadata')) {
          throw new ApiError('entitlement_required', "the organization's plan does not include data.metadata", { feature: 'data.metadata', tier: org.tier });
        }
      }
      const position = q.cursor === undefined ? undefined : decodeRobotCursor(q.cursor, sort, order);
      const rows = await store.robots.find(
        org.id,
        {
          includeDeenrolled: q.include_deenrolled === 'true',
          ...(q.q !== undefined ? { nameContains: q.q } : {}),
          ...(q.connected !== undefined ? { connected: q.connected === 'true' } : {}),
          ...(q.recording_state !== undefined ? { recordingState: q.recording_state } : {}),
          ...(q.hours_to_full_below !== undefined ? { hoursToFullBelow: q.hours_to_full_below } : {}),
          sort,
          order,
          ...(position ? { position } : {}),
        },
        q.limit + 1,
      );
      // A page read backwards comes in page order with its extra row (if any) first.
      const backwards = position?.direction === 'before';
      const more = rows.length > q.limit;
      const page = more ? (backwards ? rows.slice(1) : rows.slice(0, q.limit)) : rows;
      const first = page[0];
      const last = page[page.length - 1];
      const hasNext = backwards ? last !== undefined : more;
      const hasPrev = backwards ? more : position !== undefined && first !== undefined;
      return {
        robots: page.map(toRobot),
        cursor: hasNext ? encodeRobotCursor(sort, order, last!, 'after') : null,
        prev_cursor: hasPrev ? encodeRobotCursor(sort, order, first!, 'before') : null,
      };
    },
  });

  app.route({
    method: 'GET',
    url: '/robots/:id',
    config: { policy: { auth: 'key', scope: ['robots:read', 'fleet:read'], feature: 'api.access', meter: null } },
    schema: {
      operationId: 'getRobot',
      summary: 'Get a robot',
      description: 'De-enrolled robots too (with `deenrolled_at`): their episodes still name them.',
      params: IdParams,
      response: { 200: RobotSchema, ...errorResponses('not_found') },
    },
    handler: async (request) => {
      const { org } = principalOf(request);
      const robot = await store.robots.get(org.id, request.params.id);
      if (!robot) throw notFound('robot');
      return toRobot(robot);
    },
  });

  app.route({
    method: 'DELETE',
    url: '/robots/:id',
    config: { policy: { ...admin, meter: 'robots.deenrolled' } },
    schema: {
      operationId: 'deenrollRobot',
      summary: 'De-enroll a robot',
      description:
        'Immediate and permanent: the broker closes the robot\'s live connection and refuses its credentials from now on, ' +
        'commands to it answer 409 `robot_deenrolled`, and it no longer counts against the `robots` limit. ' +
        'The robot record (with `deenrolled_at`) and its episodes stay queryable. ' +
        'De-enrolling a de-enrolled robot answers 204 and keeps the first time.',
      params: IdParams,
      response: { 204: z.null().describe('De-enrolled'), ...errorResponses('not_found') },
    },
    handler: async (request, reply) => {
      const { org } = principalOf(request);
      const robot = await store.robots.deenroll(org.id, request.params.id, clock.now());
      if (!robot) throw notFound('robot');
      request.log.info({ robot_id: robot.id }, 'robot de-enrolled');
      // Again on a repeated DELETE: a broker that failed to disable the robot's account is told again.
      await fleet.disconnect(robot.id);
      return reply.code(204).send(null);
    },
  });

  app.route({
    method: 'POST',
    url: '/robots/:id/rotate-credentials',
    config: { policy: { ...admin, meter: 'robots.credentials_rotated' } },
    schema: {
      operationId: 'rotateRobotCredentials',
      summary: "Rotate a robot's broker credentials",
      description:
        'The cloud makes a new secret and sends it to the robot over its command channel; the robot stores it and answers. ' +
        'Then the old secret is refused and the robot reconnects with the new one: 200 `completed`. ' +
        'When the robot is offline or does not answer in time the rotation is 202 `pending` and completes at its next connection; ' +
        'its old secret works until then. 409 `robot_deenrolled` for a de-enrolled robot.',
      params: IdParams,
      body: NoBody,
      response: { 200: CredentialRotationSchema, 202: CredentialRotationSchema, ...errorResponses('not_found', 'robot_deenrolled') },
    },
    handler: async (request, reply) => {
      const { org } = principalOf(request);
      const robot = await store.robots.get(org.id, request.params.id);
      if (!robot) throw notFound('robot');
      if (robot.deenrolledAt !== null) throw deenrolledError(robot);
      const requested = await store.robots.requestRotation(org.id, robot.id, clock.now());
      if (!requested || requested.deenrolledAt !== null) throw deenrolledError(requested ?? robot);
      const requestedAt = requested.rotationRequestedAt ?? clock.now();
      const state = await fleet.rotate(robot.id);
      const after = (await store.robots.get(org.id, robot.id)) ?? requested;
      return reply.code(state === 'completed' ? 200 : 202).send({
        robot_id: robot.id,
        state,
        requested_at: iso(requestedAt),
        rotated_at: state === 'completed' && after.rotatedAt !== null ? iso(after.rotatedAt) : null,
      });
    },
  });
});
