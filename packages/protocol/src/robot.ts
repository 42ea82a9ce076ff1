import { z } from 'zod';
import { COMMAND_ARGS_LIMITS, RECORDING_STATES } from './values.js';
import { findJsonBoundsViolation, JSON_LIMITS, type JsonBoundsViolation } from './json.js';
import { humanText } from './text.js';

/**
 * The MQTT link between a robot's agent and the cloud (MQTT 3.1.1: correlation ids travel in
 * the payload). Every topic of a robot sits under its own prefix; the broker lets a robot
 * publish and subscribe only there.
 */
export const TOPIC_ROOT = 'fleet/v1/robots';

export const topics = {
  prefix: (robotId: string) => `${TOPIC_ROOT}/${robotId}/`,
  /** robot -> cloud, retained, QoS 1; the connection's last will sets `online: false`. */
  status: (robotId: string) => `${TOPIC_ROOT}/${robotId}/status`,
  /** cloud -> robot, QoS 1: a command to run. */
  command: (robotId: string) => `${TOPIC_ROOT}/${robotId}/cmd`,
  /** robot -> cloud, QoS 1: the answer to a command, same `cmd_id`. */
  commandReply: (robotId: string) => `${TOPIC_ROOT}/${robotId}/cmd/reply`,
  /** robot -> cloud, QoS 1: durable outbox messages (episode reports, replica states, ...). */
  outbox: (robotId: string) => `${TOPIC_ROOT}/${robotId}/outbox`,
  /** cloud -> robot, QoS 1: application-level acknowledgment of an outbox message. */
  outboxAck: (robotId: string) => `${TOPIC_ROOT}/${robotId}/outbox/ack`,
  /** robot -> cloud, QoS 1: grant and assignment requests (`SyncRequestSchema`). */
  syncRequest: (robotId: string) => `${TOPIC_ROOT}/${robotId}/sync/request`,
  /** cloud -> robot, QoS 1: assignments, grants and deferrals (`SyncMessageSchema`). */
  sync: (robotId: string) => `${TOPIC_ROOT}/${robotId}/sync`,
  /** Wildcards the cloud subscribes to. */
  allStatus: `${TOPIC_ROOT}/+/status`,
  allCommandReplies: `${TOPIC_ROOT}/+/cmd/reply`,
  allOutbox: `${TOPIC_ROOT}/+/outbox`,
  allSyncRequests: `${TOPIC_ROOT}/+/sync/request`,
} as const;

/** Parses `fleet/v1/robots/{id}/{rest}`; null for anything else. */
export function parseRobotTopic(topic: string): { robotId: string; rest: string } | null {
  const m = /^fleet\/v1\/robots\/([A-Za-z0-9_-]{1,64})\/(.+)$/.exec(topic);
  return m ? { robotId: m[1]!, rest: m[2]! } : null;
}

export const RobotIdSchema = z.string().regex(/^rbt_[a-z2-7]{26}$/, 'not a robot id');

export { COMMAND_ARGS_LIMITS, RECORDING_STATES } from './values.js';
export type RecordingState = (typeof RECORDING_STATES)[number];
export const RecordingStateSchema = z.enum(RECORDING_STATES);

/** A robot runtime that announces this handles start, finish and discard natively. */
export const CAPABILITY_EPISODES_V1 = 'episodes.v1';

export const RobotStatusSchema = z.object({
  online: z.boolean(),
  runtime_version: z.string().max(64).optional(),
  platform: z.string().max(128).optional(),
  capabilities: z.array(z.string().max(64)).max(64).optional(),
  recording_state: RecordingStateSchema.optional(),
  /** Robot clock, ms since epoch, when the status was published. */
  at: z.number().int().nonnegative(),
});
export type RobotStatus = z.infer<typeof RobotStatusSchema>;

/** Every command the API can send (spec: Robot commands). */
export const ROBOT_COMMANDS = [
  'go_home',
  'go_to_start',
  'start_autonomous',
  'stop_autonomous',
  'stack.start',
  'stack.stop',
  'stack.status',
  'episodes.start',
  'episodes.finish',
  'episodes.fail',
  'episodes.discard',
  'credentials.rotate',
] as const;
export type RobotCommandName = (typeof ROBOT_COMMANDS)[number];
export const RobotCommandNameSchema = z.enum(ROBOT_COMMANDS);

/**
 * `args` of `credentials.rotate`: the robot's next broker password. The cloud sends it only on
 * the robot's own command topic; the robot stores it durably before it answers, and the cloud
 * keeps the old password valid until that answer (decisions.md, Robots).
 */
export const RotateCredentialsArgsSchema = z.strictObject({ password: z.string().min(16).max(256) });
export type RotateCredentialsArgs = z.infer<typeof RotateCredentialsArgsSchema>;

export const EPISODE_VERBS = ['start', 'finish', 'fail', 'discard'] as const;
export type EpisodeVerb = (typeof EPISODE_VERBS)[number];

export const CommandIdSchema = z.string().min(1).max(255);

export const RobotCommandSchema = z.object({
  cmd_id: CommandIdSchema,
  command: RobotCommandNameSchema,
  /** The API body, validated by the cloud; episode verbs do not attach it (spec). */
  args: z.record(z.string(), z.unknown()).optional(),
  /** Cloud clock when sent; a robot ignores commands older than its dedupe window. */
  sent_at: z.number().int().nonnegative(),
});
export type RobotCommand = z.infer<typeof RobotCommandSchema>;


/**
 * Largest command message the agent parses: `args` at its bound plus the envelope. The 4 KiB of
 * envelope hold a 255-character `cmd_id` even if every character is JSON-escaped to six bytes.
 */
export const MAX_COMMAND_MESSAGE_BYTES = COMMAND_ARGS_LIMITS.maxBytes + 4 * 1024;

export interface CommandArgsViolation {
  /** Which bound: one of the JSON bounds (depth, keys, array length) or the serialized size. */
  limit: JsonBoundsViolation['limit'] | 'bytes';
  max: number;
  /** JSON Pointer into `args` (empty for the size). */
  path: string;
  message: string;
}

/** The first bound of COMMAND_ARGS_LIMITS (or JSON_LIMITS) that `args` breaks, or null. */
export function findCommandArgsViolation(args: unknown): CommandArgsViolation | null {
  if (args === undefined || args === null) return null;
  const json = findJsonBoundsViolation(args, { ...JSON_LIMITS, maxDepth: COMMAND_ARGS_LIMITS.maxDepth });
  if (json) return json;
  const bytes = new TextEncoder().encode(JSON.stringify(args)).length;
  if (bytes > COMMAND_ARGS_LIMITS.maxBytes) {
    return { limit: 'bytes', max: COMMAND_ARGS_LIMITS.maxBytes, path: '', message: `command arguments larger than ${COMMAND_ARGS_LIMITS.maxBytes} bytes as JSON` };
  }
  return null;
}

/**
 * Why a robot declined a command. `invalid_state`: not possible in the robot's current state;
 * `unsupported`: its runtime lacks the command; `invalid_args`: the arguments are wrong; `failed`:
 * it tried and could not; `interrupted`: the robot stopped (crashed or restarted) while running
 * this `cmd_id`, so whether it acted is unknown, and it will not run it again;
 * `not_configured`: the robot's agent maps no program or endpoint to this command (its config's
 * `actions`); `action_timeout`: the action did not answer within its timeout and was stopped
 * (whether it moved the robot first is unknown). How the API answers each:
 * `cloud/src/routes/v1/robot-commands.ts`.
 */
export const COMMAND_REFUSALS = ['invalid_state', 'unsupported', 'invalid_args', 'failed', 'interrupted', 'not_configured', 'action_timeout'] as const;
export const CommandRefusalSchema = z.enum(COMMAND_REFUSALS);
export type CommandRefusal = z.infer<typeof CommandRefusalSchema>;

export const CommandReplySchema = z.discriminatedUnion('ok', [
  z.object({
    cmd_id: CommandIdSchema,
    ok: z.literal(true),
    result: z.record(z.string(), z.unknown()),
  }),
  z.object({
    cmd_id: CommandIdSchema,
    ok: z.literal(false),
    error: z.object({ code: CommandRefusalSchema, message: z.string().max(1024) }),
  }),
]);
export type CommandReply = z.infer<typeof CommandReplySchema>;

/** API: POST /v1/robots/enrollment-tokens */
export const CreateEnrollmentTokenBodySchema = z
  .strictObject({
    name_prefix: z.string().min(1).max(64).regex(/^[A-Za-z0-9 ._-]+$/).optional(),
    max_uses: z.number().int().min(1).max(100_000).optional(),
    expires_at: z.iso.datetime({ offset: true }).optional(),
  })
  .meta({ id: 'CreateEnrollmentTokenRequest' });

export const EnrollmentTokenSchema = z
  .object({
    id: z.string(),
    token: z.string().describe('`ret_…`; shown once'),
    name_prefix: z.string().nullable(),
    max_uses: z.number().int(),
    uses: z.number().int(),
    expires_at: z.string(),
    created_at: z.string(),
  })
  .meta({ id: 'EnrollmentToken' });

/** API: GET /v1/robots/enrollment-tokens: a token as listed, never its secret. */
export const EnrollmentTokenInfoSchema = z
  .object({
    id: z.string(),
    token_prefix: z.string().describe('the first characters of the `ret_…` token, to tell tokens apart; never the whole token'),
    name_prefix: z.string().nullable(),
    max_uses: z.number().int(),
    uses: z.number().int(),
    expires_at: z.string(),
    created_at: z.string(),
    revoked_at: z.string().nullable(),
  })
  .meta({ id: 'EnrollmentTokenInfo' });
export type EnrollmentTokenInfo = z.infer<typeof EnrollmentTokenInfoSchema>;

/** API: POST /v1/robots/enroll (no API key; the token authenticates). */
export const EnrollBodySchema = z
  .strictObject({
    token: z.string().min(1).max(256),
    name: humanText(1, 128).optional(),
    platform: z.string().min(1).max(128).optional(),
    runtime_version: z.string().min(1).max(64).optional(),
  })
  .meta({ id: 'EnrollRequest' });
export type EnrollBody = z.infer<typeof EnrollBodySchema>;

export const EnrollResponseSchema = z
  .object({
    robot_id: z.string(),
    name: z.string(),
    mqtt: z.object({
      url: z.string().describe('broker address as the cloud knows it; a robot may be told another (the first of `urls`)'),
      urls: z
        .array(z.string())
        .min(1)
        .describe('every broker address the robot may use, in the order to try them: the nodes of a clustered broker, starting at one picked for this robot; one address otherwise'),
      client_id: z.string(),
      username: z.string(),
      password: z.string().describe('shown once'),
      topic_prefix: z.string(),
    }),
  })
  .meta({ id: 'EnrollResponse' });
export type EnrollResponse = z.infer<typeof EnrollResponseSchema>;

export const RobotSchema = z
  .object({
    id: z.string(),
    name: z.string(),
    platform: z.string().nullable(),
    runtime_version: z.string().nullable(),
    capabilities: z.array(z.string()),
    connected: z.boolean(),
    recording_state: RecordingStateSchema.nullable(),
    last_seen_at: z.string().nullable(),
    created_at: z.string(),
    deenrolled_at: z.string().nullable().describe('set by DELETE /v1/robots/{id}: the robot can no longer connect or take commands; its episodes stay'),
    credentials: z
      .object({
        rotation: z
          .enum(['none', 'pending'])
          .describe('`pending`: a rotation was asked for and the robot has not yet acknowledged its new secret (its old one still works)'),
        rotation_requested_at: z.string().nullable(),
        rotated_at: z.string().nullable().describe('when the robot last acknowledged a new secret'),
      })
      .describe('the state of the robot\'s broker credentials; never the secret'),
  })
  .meta({ id: 'Robot' });
export type Robot = z.infer<typeof RobotSchema>;

/**
 * Optional bodies of the episode verbs: validated, never attached to the recording (spec).
 * Nullish because fastify hands an absent body to the validator as null.
 */
export const EpisodeStartBodySchema = z
  .strictObject({
    task_id: z.string().max(256).optional(),
    subtask_id: z.string().max(256).optional(),
    metadata: z.record(z.string(), z.unknown()).optional(),
  })
  .nullish();
export const EpisodeEndBodySchema = z.strictObject({ metadata: z.record(z.string(), z.unknown()).optional() }).nullish();

/**
 * `result` of a non-episode command the robot declined: it got the command and answered no.
 * `unsupported` is not a decline: the API answers it 422 (the runtime lacks the command).
 */
export const CommandDeclinedSchema = z
  .object({
    ok: z.literal(false),
    error: z.object({ code: CommandRefusalSchema.exclude(['unsupported']), message: z.string() }),
    cmd_id: z.string(),
    command: RobotCommandNameSchema,
    robot_id: z.string(),
  })
  .meta({ id: 'RobotCommandDeclined' });
export type CommandDeclined = z.infer<typeof CommandDeclinedSchema>;

/** API: POST /v1/robots/{id}/rotate-credentials. */
export const CredentialRotationSchema = z
  .object({
    robot_id: z.string(),
    state: z
      .enum(['completed', 'pending'])
      .describe('`completed`: the robot stored its new secret and the old one is refused; `pending`: it happens when the robot next connects (or acknowledges)'),
    requested_at: z.string(),
    rotated_at: z.string().nullable(),
  })
  .meta({ id: 'CredentialRotation' });
export type CredentialRotation = z.infer<typeof CredentialRotationSchema>;

export const CommandResultSchema = z
  .object({
    status: z.literal('ok'),
    result: z.union([
      CommandDeclinedSchema,
      z
        .record(z.string(), z.unknown())
        .describe('what the robot answered: cmd_id, command, robot_id, ok (true) and the command-specific fields'),
    ]),
  })
  .meta({ id: 'RobotCommandResult' });
