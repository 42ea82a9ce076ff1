import { z } from 'zod';
import {
  CAPABILITY_EPISODES_V1,
  COMMAND_ARGS_LIMITS,
  CommandResultSchema,
  EpisodeEndBodySchema,
  type ApiErrorCode,
  type CommandDeclined,
  type CommandRefusal,
  EpisodeStartBodySchema,
  findCommandArgsViolation,
  type Feature,
  type RobotCommandName,
} from '@fleet/protocol';
import { ApiError, notFound, validationError } from '../../errors.js';
import { errorResponses } from '../../http/error-responses.js';
import { principalOf } from '../../http/policy.js';
import { newId } from '../../ids.js';
import { deenrolledError } from './robots.js';
import { v1Plugin } from './types.js';

interface CommandRoute {
  path: string;
  command: RobotCommandName;
  feature: Feature;
  meter: string;
  body: z.ZodType;
  /** Only runtimes announcing episodes.v1 take it (spec, Robot commands rule 1). */
  needsEpisodesV1: boolean;
}

// Nullish: fastify hands an absent body to the validator as null.
const NoBody = z.strictObject({}).nullish();

/** The spec's table of robot commands, one row per route. */
export const COMMAND_ROUTES: readonly CommandRoute[] = [
  { path: 'go-home', command: 'go_home', feature: 'api.robot_commands', meter: 'commands.go_home', body: NoBody, needsEpisodesV1: false },
  { path: 'go-to-start', command: 'go_to_start', feature: 'api.robot_commands', meter: 'commands.go_to_start', body: NoBody, needsEpisodesV1: false },
  { path: 'start-autonomous', command: 'start_autonomous', feature: 'api.robot_commands', meter: 'commands.start_autonomous', body: NoBody, needsEpisodesV1: false },
  { path: 'stop-autonomous', command: 'stop_autonomous', feature: 'api.robot_commands', meter: 'commands.stop_autonomous', body: NoBody, needsEpisodesV1: false },
  { path: 'stack/start', command: 'stack.start', feature: 'api.robot_commands', meter: 'commands.stack_start', body: NoBody, needsEpisodesV1: false },
  { path: 'stack/stop', command: 'stack.stop', feature: 'api.robot_commands', meter: 'commands.stack_stop', body: NoBody, needsEpisodesV1: false },
  { path: 'stack/status', command: 'stack.status', feature: 'api.robot_commands', meter: 'commands.stack_status', body: NoBody, needsEpisodesV1: false },
  { path: 'episodes/start', command: 'episodes.start', feature: 'data.metadata', meter: 'episodes.started', body: EpisodeStartBodySchema, needsEpisodesV1: true },
  { path: 'episodes/finish', command: 'episodes.finish', feature: 'data.metadata', meter: 'episodes.finished', body: EpisodeEndBodySchema, needsEpisodesV1: true },
  { path: 'episodes/fail', command: 'episodes.fail', feature: 'data.metadata', meter: 'episodes.failed', body: EpisodeEndBodySchema, needsEpisodesV1: false },
  { path: 'episodes/discard', command: 'episodes.discard', feature: 'data.metadata', meter: 'episodes.discarded', body: EpisodeEndBodySchema, needsEpisodesV1: true },
];

/** Each command's operationId in the OpenAPI document (what generated clients name the call). */
const OPERATION_IDS: Record<string, string> = {
  'go-home': 'sendRobotGoHome',
  'go-to-start': 'sendRobotGoToStart',
  'start-autonomous': 'sendRobotStartAutonomous',
  'stop-autonomous': 'sendRobotStopAutonomous',
  'stack/start': 'sendRobotStackStart',
  'stack/stop': 'sendRobotStackStop',
  'stack/status': 'sendRobotStackStatus',
  'episodes/start': 'startRobotEpisode',
  'episodes/finish': 'finishRobotEpisode',
  'episodes/fail': 'failRobotEpisode',
  'episodes/discard': 'discardRobotEpisode',
};

/** The four episode verbs; every other command is a non-episode action (go_home, stack.start, ...). */
function isEpisodeVerb(command: RobotCommandName): boolean {
  return command.startsWith('episodes.');
}

/**
 * 422 `validation_failed`: the robot's runtime predates native episode commands. The spec keeps
 * 422 for this one case; every other `validation_failed` is 400 (decisions.md, HTTP conventions).
 */
class RuntimeUnsupportedError extends ApiError {
  override readonly status = 422;
}

/**
 * How an episode verb's refusal reads through the API (spec: Robot commands rules and Errors):
 * the wrong recording state is 500 `internal` as the spec names it, and so is `failed` (the
 * robot's side of the service broke; nothing changed, so a retry is safe). `unsupported` is
 * handled before this table for every command. Non-episode commands never reach it: their
 * refusals are answered as a 200 decline (decisions.md, Robot commands).
 */
const EPISODE_REFUSAL_TO_ERROR = {
  invalid_state: 'internal',
  failed: 'internal',
  interrupted: 'internal',
  // Only actions answer these two; an episode verb that did would be the robot's side breaking.
  not_configured: 'internal',
  action_timeout: 'internal',
  invalid_args: 'validation_failed',
} as const satisfies Record<Exclude<CommandRefusal, 'unsupported'>, ApiErrorCode>;

/** POST /v1/robots/{id}/…: send the command over MQTT and answer with the robot's reply. */
export const robotCommandRoutes = v1Plugin<'store' | 'robotCommands'>('robot-commands', async (app, { store, robotCommands: robots }) => {
  for (const def of COMMAND_ROUTES) {
    app.route({
      method: 'POST',
      url: `/robots/:id/${def.path}`,
      config: { policy: { auth: 'key', scope: 'robots:command', feature: def.feature, meter: def.meter } },
      schema: {
        operationId: OPERATION_IDS[def.path],
        summary: `Send ${def.command} to a robot and wait for its answer`,
        description:
          (isEpisodeVerb(def.command)
            ? '500 `internal` when the robot refuses the verb in its current recording state or fails to run it (`details.robot_error` names its code); ' +
              '400 `validation_failed` when it refuses the arguments. '
            : 'When the robot declines the command (its state does not allow it, the action failed, was interrupted by a restart, timed out, or is not configured on the robot) ' +
              'the answer is 200 with `result.ok` false and `result.error` `{code, message}` (RobotCommandDeclined). ') +
          `422 \`validation_failed\` when the robot's runtime ${def.needsEpisodesV1 ? `does not announce ${CAPABILITY_EPISODES_V1} or ` : ''}says it does not support the command. ` +
          '409 `robot_deenrolled` when the robot was de-enrolled; 503 `robot_offline` when the robot is not connected; 504 `command_timeout` when it does not answer in time ' +
          '(retry with the same Idempotency-Key: it is the command id, so the robot does not act twice).' +
          (isEpisodeVerb(def.command) ? ' The body is validated and not attached: the robot stamps its own context.' : ''),
        params: z.strictObject({ id: z.string().min(1).max(128) }),
        body: def.body,
        response: { 200: CommandResultSchema, ...errorResponses('not_found', 'robot_deenrolled', { status: 422, code: 'validation_failed' }, 'robot_offline', 'command_timeout') },
      },
      handler: async (request) => {
        // The body travels to the robot as the command's args: what the robot would drop (and
        // leave the caller waiting for a 504) is refused here.
        const beyond = findCommandArgsViolation(request.body);
        if (beyond) {
          throw validationError('body', beyond.path, `${beyond.message} (at most ${beyond.max})`, `json_${beyond.limit}`, {
            limits: { max_depth: COMMAND_ARGS_LIMITS.maxDepth, max_bytes: COMMAND_ARGS_LIMITS.maxBytes },
          });
        }
        const { org } = principalOf(request);
        const robot = await store.robots.get(org.id, request.params.id);
        if (!robot) throw notFound('robot');
        if (robot.deenrolledAt !== null) throw deenrolledError(robot);
        // A robot that never connected has announced nothing: it is offline, not legacy. (Its
        // runtime version may be known from enrollment, but its capabilities are not.)
        if (robot.lastSeenAt !== null && def.needsEpisodesV1 && !robot.capabilities.includes(CAPABILITY_EPISODES_V1)) {
          throw new RuntimeUnsupportedError('validation_failed', `the robot's runtime ${robot.runtimeVersion} does not support ${def.command}`, {
            required_capability: CAPABILITY_EPISODES_V1,
          });
        }
        if (!robot.connected) throw new ApiError('robot_offline', 'robot is not connected');
        const idem = request.headers['idempotency-key'];
        const cmdId = typeof idem === 'string' ? idem : newId('cmd');
        const reply = await robots.send(robot.id, def.command, cmdId, (request.body ?? undefined) as Record<string, unknown> | undefined);
        if (reply.ok) return { status: 'ok' as const, result: reply.result };
        const details = { robot_error: reply.error.code, cmd_id: cmdId };
        const message = `robot refused ${def.command}: ${reply.error.message}`;
        // The robot itself says its runtime lacks the command (the cloud's record was stale).
        if (reply.error.code === 'unsupported') throw new RuntimeUnsupportedError('validation_failed', message, details);
        // The command reached the robot and it answered no: that is an answer, not a failure of
        // the service (a 5xx would tell clients to retry). Stored under an Idempotency-Key like any 200.
        if (!isEpisodeVerb(def.command)) {
          const declined: CommandDeclined = {
            ok: false,
            error: { code: reply.error.code, message: reply.error.message },
            cmd_id: cmdId,
            command: def.command,
            robot_id: robot.id,
          };
          return { status: 'ok' as const, result: declined };
        }
        throw new ApiError(EPISODE_REFUSAL_TO_ERROR[reply.error.code], message, details);
      },
    });
  }
});
