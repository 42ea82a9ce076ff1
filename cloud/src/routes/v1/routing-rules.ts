import { z } from 'zod';
import { CreateRoutingRuleBodySchema, RoutingRuleSchema, SetRoutingRuleOrderBodySchema } from '@fleet/protocol';
import { notFound, validationError } from '../../errors.js';
import { errorResponses } from '../../http/error-responses.js';
import { principalOf } from '../../http/policy.js';
import { createRoutingRule, toRoutingRule } from '../../sync/manage.js';
import { v1Plugin } from './types.js';
import { fromBody, linksTo } from '../../http/openapi-links.js';

const IdParams = z.strictObject({ id: z.string().min(1).max(128) });
const RulesList = z.object({ routing_rules: z.array(RoutingRuleSchema) });

/** /v1/routing-rules: which episodes sync where; the first matching rule wins (admin). */
export const routingRuleRoutes = v1Plugin<'store' | 'clock' | 'sync'>('routing-rules', async (app, { store, clock, sync }) => {
  const admin = { auth: 'key', scope: 'admin', feature: 'data.metadata', meter: null } as const;

  app.route({
    method: 'POST',
    url: '/routing-rules',
    config: { policy: admin },
    links: { 201: linksTo(['deleteRoutingRule'], { id: fromBody('/id') }, 'The rule just created') },
    schema: {
      operationId: 'createRoutingRule',
      summary: 'Add a routing rule at the end of the order',
      description:
        'Match fields: robot_id, task_id, recording_session_id, episode_seq, episode_id, outcome, robot_platform, has_autonomous; each a string or a non-empty array of strings; `{}` matches every episode. Episodes without a route (the backlog) are routed again at once. An unknown destination is 404; a revoked one is 400.',
      body: CreateRoutingRuleBodySchema,
      response: { 201: RoutingRuleSchema, ...errorResponses('not_found', 'conflict') },
    },
    handler: async (request, reply) => {
      const { org } = principalOf(request);
      const rule = await createRoutingRule({ store, clock }, org.id, request.body);
      sync.schedule(org.id, 'all');
      return reply.code(201).send(rule);
    },
  });

  app.route({
    method: 'GET',
    url: '/routing-rules',
    config: { policy: admin },
    links: { 200: linksTo(['deleteRoutingRule'], { id: fromBody('/routing_rules/0/id') }, 'The first rule listed') },
    schema: { operationId: 'listRoutingRules', summary: 'List routing rules in order', response: { 200: RulesList } },
    handler: async (request) => ({ routing_rules: (await store.sync.listRules(principalOf(request).org.id)).map(toRoutingRule) }),
  });

  app.route({
    method: 'DELETE',
    url: '/routing-rules/:id',
    config: { policy: admin },
    schema: {
      operationId: 'deleteRoutingRule',
      summary: 'Delete a routing rule',
      description: 'Routes already decided stay; episodes without a route are routed again under the remaining rules.',
      params: IdParams,
      response: { 204: z.null().describe('Deleted'), ...errorResponses('not_found') },
    },
    handler: async (request, reply) => {
      const { org } = principalOf(request);
      if (!(await store.sync.deleteRule(org.id, request.params.id))) throw notFound('routing rule');
      sync.schedule(org.id, 'all');
      return reply.code(204).send(null);
    },
  });

  app.route({
    method: 'PUT',
    url: '/routing-rules/order',
    config: { policy: admin },
    schema: {
      operationId: 'setRoutingRuleOrder',
      summary: 'Set the order of the routing rules',
      description: '`rule_ids` must name every rule of the organization exactly once (400 otherwise). Answers the rules in their new order.',
      body: SetRoutingRuleOrderBodySchema,
      response: { 200: RulesList },
    },
    handler: async (request) => {
      const { org } = principalOf(request);
      if (!(await store.sync.reorderRules(org.id, request.body.rule_ids))) {
        throw validationError('body', '/rule_ids', 'must list every routing rule of the organization exactly once', 'not_a_permutation');
      }
      sync.schedule(org.id, 'all');
      return { routing_rules: (await store.sync.listRules(org.id)).map(toRoutingRule) };
    },
  });
});
