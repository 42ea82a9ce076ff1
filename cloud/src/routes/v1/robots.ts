import { z } from 'zod';
import {
  CreateEnrollmentTokenBodySchema,
  CredentialRotationSchema,
  EnrollBodySchema,
  EnrollResponseSchema,
  EnrollmentTokenInfoSchema,
  EnrollmentTokenSchema,
  iso,
  RobotSchema,
  type Robot,
} from '@fleet/protocol';
import { ApiError, notFound } from '../../errors.js';
import { principalOf } from '../../http/policy.js';
import { createEnrollmentToken, enrollRobot, toEnrollmentTokenInfo } from '../../robots/enrollment.js';
import type { RobotRow } from '../../store/index.js';
import { decodeCursor, encodeCursor } from '../cursor.js';
import { queryInt } from '../query.js';
import type { V1Plugin } from './types.js';

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

const IdParams = z.strictObject({ id: z.string().min(1).max(128) });
const NoBody = z.strictObject({}).nullish();
const stringCursor = (v: unknown) => (typeof v === 'string' ? v : null);

/** Enrollment, enrollment tokens, the robot records, de-enrollment and credential rotation (decisions.md, Robots). */
export const robotRoutes: V1Plugin = async (app, { store, clock, mqttPublicUrl, fleet }) => {
  const admin = { auth: 'key', scope: 'admin', feature: 'api.access' } as const;

  app.route({
    method: 'POST',
    url: '/robots/enrollment-tokens',
    config: { policy: { auth: 'key', scope: 'admin', feature: 'api.access', meter: null } },
    schema: {
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
    schema: {
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
      summary: 'Revoke an enrollment token',
      description:
        'Immediate and permanent: the token enrolls no robot afterwards (401 `unauthenticated`). Robots it enrolled stay. ' +
        'Revoking a revoked token answers 204 and keeps the first revocation time.',
      params: IdParams,
      response: { 204: z.null().describe('Revoked') },
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
    schema: {
      summary: 'Enroll a robot with an enrollment token',
      description: 'No API key: the token in the body authenticates. Returns the robot id and its MQTT credentials, shown once.',
      body: EnrollBodySchema,
      response: { 201: EnrollResponseSchema },
    },
    handler: async (request, reply) => {
      const enrolled = await enrollRobot(store, clock, request.body, mqttPublicUrl);
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
    schema: {
      summary: 'List robots',
      description: 'Ordered by id; keyset-paginated. De-enrolled robots are left out unless `include_deenrolled=true`.',
      querystring: ListQuery.extend({
        include_deenrolled: z.enum(['true', 'false']).optional().describe('`true`: list de-enrolled robots too (default false)'),
      }),
      response: { 200: z.object({ robots: z.array(RobotSchema), cursor: z.string().nullable() }) },
    },
    handler: async (request) => {
      const { org } = principalOf(request);
      const { limit, cursor } = request.query;
      const after = cursor === undefined ? null : decodeCursor(cursor, stringCursor);
      const rows = await store.robots.list(org.id, after, limit + 1, { includeDeenrolled: request.query.include_deenrolled === 'true' });
      const page = rows.slice(0, limit);
      return { robots: page.map(toRobot), cursor: rows.length > limit ? encodeCursor(page[page.length - 1]!.id) : null };
    },
  });

  app.route({
    method: 'GET',
    url: '/robots/:id',
    config: { policy: { auth: 'key', scope: ['robots:read', 'fleet:read'], feature: 'api.access', meter: null } },
    schema: {
      summary: 'Get a robot',
      description: 'De-enrolled robots too (with `deenrolled_at`): their episodes still name them.',
      params: IdParams,
      response: { 200: RobotSchema },
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
      summary: 'De-enroll a robot',
      description:
        'Immediate and permanent: the broker closes the robot\'s live connection and refuses its credentials from now on, ' +
        'commands to it answer 409 `robot_deenrolled`, and it no longer counts against the `robots` limit. ' +
        'The robot record (with `deenrolled_at`) and its episodes stay queryable. ' +
        'De-enrolling a de-enrolled robot answers 204 and keeps the first time.',
      params: IdParams,
      response: { 204: z.null().describe('De-enrolled') },
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
      summary: "Rotate a robot's broker credentials",
      description:
        'The cloud makes a new secret and sends it to the robot over its command channel; the robot stores it and answers. ' +
        'Then the old secret is refused and the robot reconnects with the new one: 200 `completed`. ' +
        'When the robot is offline or does not answer in time the rotation is 202 `pending` and completes at its next connection; ' +
        'its old secret works until then. 409 `robot_deenrolled` for a de-enrolled robot.',
      params: IdParams,
      body: NoBody,
      response: { 200: CredentialRotationSchema, 202: CredentialRotationSchema },
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
};
