import { z } from 'zod';
import {
  CreateEnrollmentTokenBodySchema,
  EnrollBodySchema,
  EnrollResponseSchema,
  EnrollmentTokenSchema,
  iso,
  RobotSchema,
  type Robot,
} from '@fleet/protocol';
import { notFound } from '../../errors.js';
import { principalOf } from '../../http/policy.js';
import { createEnrollmentToken, enrollRobot } from '../../robots/enrollment.js';
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
  };
}

const ListQuery = z.strictObject({
  cursor: z.string().min(1).max(512).optional(),
  limit: queryInt(1, 100, 50),
});

/** Enrollment and the robot records (decisions.md, Robots). */
export const robotRoutes: V1Plugin = async (app, { store, clock, mqttPublicUrl }) => {
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
    method: 'POST',
    url: '/robots/enroll',
    config: { policy: { auth: 'none' } },
    schema: {
      summary: 'Enroll a robot with an enrollment token',
      description: 'No API key: the token in the body authenticates. Returns the robot id and its MQTT credentials, shown once.',
      body: EnrollBodySchema,
      response: { 201: EnrollResponseSchema },
    },
    handler: async (request, reply) => reply.code(201).send(await enrollRobot(store, clock, request.body, mqttPublicUrl)),
  });

  app.route({
    method: 'GET',
    url: '/robots',
    config: { policy: { auth: 'key', scope: ['robots:read', 'fleet:read'], feature: 'api.access', meter: null } },
    schema: {
      summary: 'List robots',
      description: 'Ordered by id; keyset-paginated.',
      querystring: ListQuery,
      response: { 200: z.object({ robots: z.array(RobotSchema), cursor: z.string().nullable() }) },
    },
    handler: async (request) => {
      const { org } = principalOf(request);
      const { limit, cursor } = request.query;
      const after = cursor === undefined ? null : decodeCursor(cursor, (v) => (typeof v === 'string' ? v : null));
      const rows = await store.robots.list(org.id, after, limit + 1);
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
      params: z.strictObject({ id: z.string().min(1).max(128) }),
      response: { 200: RobotSchema },
    },
    handler: async (request) => {
      const { org } = principalOf(request);
      const robot = await store.robots.get(org.id, request.params.id);
      if (!robot) throw notFound('robot');
      return toRobot(robot);
    },
  });
};
