import { z } from 'zod';
import { EPISODE_OUTCOMES } from './episodes.js';
import { RetentionDirectiveSchema } from './sync.js';
import { GRANT_OUTCOMES } from './values.js';

/**
 * Cloud sync in the API: destinations (a customer's grant provider), routing rules (which
 * episodes sync where) and the per-robot sync health (spec, Destinations, Routing rules, Sync
 * health; decisions: list shapes).
 */

const Id = z.string().min(1).max(128);

export const CreateDestinationBodySchema = z
  .strictObject({
    type: z.literal('external').describe('Only `external` (a grant provider) is offered'),
    url: z
      .url({ protocol: /^https$/ })
      .max(2048)
      .describe('The grant provider: HTTPS, must resolve to public addresses; redirects are not followed'),
    retention: RetentionDirectiveSchema.optional().describe('What the robot does with its local copy once verified; default `keep`'),
  })
  .meta({ id: 'CreateDestinationRequest' });
export type CreateDestinationBody = z.infer<typeof CreateDestinationBodySchema>;

export const DestinationSchema = z
  .object({
    id: z.string(),
    type: z.literal('external'),
    url: z.string(),
    retention: RetentionDirectiveSchema,
    created_at: z.string(),
    revoked_at: z.string().nullable(),
    last_forward_at: z.string().nullable().describe('The newest grant request forwarded to the provider'),
    forwards_24h: z.number().int().describe('Grant requests forwarded in the last 24 hours (granted or deferred)'),
    deferrals_24h: z.number().int().describe('Of those, the ones that did not produce a grant'),
    last_deferral: z
      .object({ at: z.string(), reason: z.string().describe('`reason: message`, e.g. `schema_invalid: the grant omits 1 manifest file(s)`') })
      .nullable()
      .describe('The newest deferral of the last 24 hours, with why'),
  })
  .meta({ id: 'Destination' });
export type Destination = z.infer<typeof DestinationSchema>;

export const CreatedDestinationSchema = DestinationSchema.extend({
  secret: z.string().describe('`dsec_…`: signs the grant requests sent to the provider; shown once'),
}).meta({ id: 'CreatedDestination' });
export type CreatedDestination = z.infer<typeof CreatedDestinationSchema>;

/** The episode facts a routing rule can match on (spec, Routing rules). */
export const ROUTING_MATCH_FIELDS = [
  'robot_id',
  'task_id',
  'recording_session_id',
  'episode_seq',
  'episode_id',
  'outcome',
  'robot_platform',
  'has_autonomous',
] as const;
export type RoutingMatchField = (typeof ROUTING_MATCH_FIELDS)[number];

/** Most values one match field may list, and most rules an organization may have. */
export const MAX_MATCH_VALUES = 100;
export const MAX_ROUTING_RULES = 100;

const MatchText = z.string().min(1).max(256);
const matchValue = (value: z.ZodType<string>) => z.union([value, z.array(value).min(1).max(MAX_MATCH_VALUES)]);

/**
 * A rule's match: each field a string or a non-empty array of strings, any of which matches;
 * every named field must match; `{}` matches every episode. Numbers and booleans are given as
 * strings, and the fields with a closed set of values are checked here, so a typo is a 400
 * instead of a rule that silently never matches.
 */
export const RoutingMatchSchema = z
  .strictObject({
    robot_id: matchValue(MatchText).optional(),
    task_id: matchValue(MatchText).optional(),
    recording_session_id: matchValue(MatchText).optional(),
    episode_seq: matchValue(z.string().regex(/^[1-9][0-9]{0,14}$/, 'must be a positive whole number, given as a string')).optional(),
    episode_id: matchValue(MatchText).optional(),
    outcome: matchValue(z.enum(EPISODE_OUTCOMES)).optional(),
    robot_platform: matchValue(MatchText).optional(),
    has_autonomous: matchValue(z.enum(['true', 'false'])).optional(),
  })
  .meta({ id: 'RoutingMatch' });
export type RoutingMatch = z.infer<typeof RoutingMatchSchema>;

export const CreateRoutingRuleBodySchema = z
  .strictObject({
    destination_id: Id,
    match: RoutingMatchSchema,
  })
  .meta({ id: 'CreateRoutingRuleRequest' });
export type CreateRoutingRuleBody = z.infer<typeof CreateRoutingRuleBodySchema>;

export const RoutingRuleSchema = z
  .object({
    id: z.string(),
    destination_id: z.string(),
    match: z.record(z.string(), z.array(z.string())).describe('Each field with the values it accepts (a single string is shown as a one-element array)'),
    position: z.number().int().describe('1-based; the first matching rule wins'),
    created_at: z.string(),
  })
  .meta({ id: 'RoutingRule' });
export type RoutingRule = z.infer<typeof RoutingRuleSchema>;

export const SetRoutingRuleOrderBodySchema = z
  .strictObject({
    rule_ids: z.array(Id).max(MAX_ROUTING_RULES).describe('Every rule of the organization, each once, in the new order'),
  })
  .meta({ id: 'SetRoutingRuleOrderRequest' });
export type SetRoutingRuleOrderBody = z.infer<typeof SetRoutingRuleOrderBodySchema>;

export const SyncHealthRowSchema = z
  .object({
    robot_id: z.string(),
    episodes_reported: z.number().int().describe('Episodes the robot reported, discarded ones included'),
    unverified: z.number().int().describe('Reported, not discarded, and verified at no destination'),
    unverified_over_72h: z.number().int().describe('Of those, reported more than 72 hours ago'),
    bytes_unverified: z.number().int().describe('Manifest bytes of the unverified episodes'),
    local_missing: z.number().int().describe('Episodes whose local files disappeared before a verified sync'),
    pressure: z
      .object({
        free_bytes: z.number().int(),
        backlog_bytes: z.number().int(),
        hours_to_full: z.number().nullable(),
        reported_at: z.string(),
      })
      .optional()
      .describe('The disk pressure the robot last reported; absent until it reports one'),
  })
  .meta({ id: 'SyncHealthRow' });
export type SyncHealthRowBody = z.infer<typeof SyncHealthRowSchema>;

/** API: POST /v1/destinations/{id}/check. */
export const CHECK_FAILURES = ['unreachable', 'timeout', 'http_error', 'invalid_json', 'schema_invalid', 'destination_mismatch'] as const;
export const DestinationCheckSchema = z
  .object({
    result: z.enum(['pass', 'fail']).describe('`pass` for a valid grant or a deferral'),
    mode: z.enum(GRANT_OUTCOMES).describe('what the provider answered; every failure counts as a deferral'),
    http_status: z.number().int().nullable(),
    latency_ms: z.number().int(),
    failure: z.enum(CHECK_FAILURES).optional().describe('on `fail` only'),
    message: z.string().optional().describe('on `fail` and on a deferral: what was wrong, in words'),
  })
  .meta({ id: 'DestinationCheck' });
export type DestinationCheck = z.infer<typeof DestinationCheckSchema>;
