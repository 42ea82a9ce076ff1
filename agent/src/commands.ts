import {
  CommandReplySchema,
  EpisodeEndBodySchema,
  EpisodeStartBodySchema,
  findCommandArgsViolation,
  MAX_COMMAND_MESSAGE_BYTES,
  parseBoundedJson,
  RobotCommandSchema,
  RotateCredentialsArgsSchema,
  type RotateCredentialsArgs,
  type Clock,
  type CommandRefusal,
  type CommandReply,
  type RobotCommand,
} from '@fleet/protocol';
import type { Logger } from 'pino';
import { isActionCommand, isReadOnlyAction, type ActionCommand, type RobotActions } from './actions.js';
import { RefusalError } from './errors.js';
import type { EpisodeTransitionResult, RecordingStateMachine } from './recording/state-machine.js';
import type { AgentStore, RememberedCommand, StoredCommandResult } from './store/types.js';

/**
 * Largest command payload the agent parses. The cloud refuses (400) a command whose args break
 * COMMAND_ARGS_LIMITS, so it never sends one beyond this.
 */
export const MAX_COMMAND_BYTES = MAX_COMMAND_MESSAGE_BYTES;

export interface CommandHandlerOptions {
  robotId: string;
  machine: RecordingStateMachine;
  actions: RobotActions;
  store: AgentStore;
  clock: Clock;
  logger: Logger;
  /** A runtime without `episodes.v1`: episodes start, finish and discard answer `unsupported`. */
  legacyRuntime: boolean;
  /** How long a `cmd_id` is remembered (24 h). */
  windowMs: number;
  /** Sends a reply to the cloud. */
  publish: (reply: CommandReply) => Promise<void>;
  /**
   * Stores a rotated broker password durably and uses it for the next connect
   * (`credentials.rotate`); without it the command answers `unsupported`.
   */
  rotateCredentials?: (args: RotateCredentialsArgs) => Promise<void>;
}

type EpisodeCommand = 'episodes.start' | 'episodes.finish' | 'episodes.fail' | 'episodes.discard';
const EPISODE_VERB = {
  'episodes.start': 'start',
  'episodes.finish': 'finish',
  'episodes.fail': 'fail',
  'episodes.discard': 'discard',
} as const satisfies Record<EpisodeCommand, string>;

/**
 * Runs the commands the cloud sends over MQTT. A `cmd_id` seen within the window is answered with
 * the stored reply and nothing runs again (that is what makes an API retry after a 504 safe); an
 * episode verb's reply is stored in the same transaction as the state change it caused, and a
 * non-episode action is noted as running before it acts, so a retry after a crash answers
 * `interrupted` instead of acting twice. A read-only action (`stack.status`) is neither noted nor
 * stored: running it twice changes nothing, so a retry simply reads again.
 */
export class CommandHandler {
  private readonly inFlight = new Map<string, Promise<CommandReply>>();

  constructor(private readonly opts: CommandHandlerOptions) {}

  /** Parses, runs and answers one MQTT payload. Never throws; malformed payloads are logged and dropped. */
  async handlePayload(payload: Buffer | string): Promise<CommandReply | undefined> {
    const { logger } = this.opts;
    const bytes = typeof payload === 'string' ? Buffer.byteLength(payload) : payload.length;
    if (bytes > MAX_COMMAND_BYTES) {
      logger.warn({ bytes }, 'dropped oversized command');
      return undefined;
    }
    const bounded = parseBoundedJson(typeof payload === 'string' ? payload : payload.toString('utf8'));
    if (!bounded.ok) {
      if (bounded.reason === 'invalid_json') logger.warn({ bytes }, 'dropped malformed command (not JSON)');
      else logger.warn({ bytes, reason: bounded.message }, 'dropped malformed command (beyond the JSON bounds)');
      return undefined;
    }
    const parsed = RobotCommandSchema.safeParse(bounded.value);
    if (!parsed.success) {
      logger.warn({ issues: parsed.error.issues.slice(0, 5) }, 'dropped malformed command');
      return undefined;
    }
    const beyond = findCommandArgsViolation(parsed.data.args);
    if (beyond) {
      logger.warn({ bytes, cmd_id: parsed.data.cmd_id, reason: beyond.message }, 'dropped malformed command (arguments beyond the command bounds)');
      return undefined;
    }
    try {
      const reply = await this.handle(parsed.data);
      if (reply) await this.opts.publish(reply);
      return reply;
    } catch (err) {
      logger.error({ err, cmd_id: parsed.data.cmd_id }, 'command handling failed');
      return undefined;
    }
  }

  /** Runs (or answers from storage) one valid command; undefined when it is too old to answer. */
  async handle(cmd: RobotCommand): Promise<CommandReply | undefined> {
    const now = this.opts.clock.now();
    if (now - cmd.sent_at > this.opts.windowMs) {
      this.opts.logger.warn({ cmd_id: cmd.cmd_id, command: cmd.command, sent_at: cmd.sent_at }, 'ignored a command older than the dedupe window');
      return undefined;
    }
    // The same id arriving twice at once (a QoS 1 redelivery) waits for the first run.
    const running = this.inFlight.get(cmd.cmd_id);
    if (running) return running;
    const run = this.execute(cmd, now).finally(() => this.inFlight.delete(cmd.cmd_id));
    this.inFlight.set(cmd.cmd_id, run);
    return run;
  }

  /** Forgets results older than the window. */
  async prune(): Promise<number> {
    return this.opts.store.commandResults.prune(this.opts.clock.now() - this.opts.windowMs);
  }

  private async execute(cmd: RobotCommand, now: number): Promise<CommandReply> {
    const notBefore = now - this.opts.windowMs;
    const remembered = await this.opts.store.commandResults.get(cmd.cmd_id, notBefore);
    if (remembered) return this.answerRemembered(cmd, remembered);
    const reply = isActionCommand(cmd.command)
      ? await this.runAction(cmd, cmd.command, now, notBefore)
      : cmd.command === 'credentials.rotate'
        ? await this.runRotation(cmd, now)
        : await this.runEpisodeCommand(cmd, cmd.command, now);
    this.opts.logger.info({ cmd_id: cmd.cmd_id, command: cmd.command, ok: reply.ok, ...(reply.ok ? {} : { code: reply.error.code }) }, 'command answered');
    return reply;
  }

  /**
   * A `cmd_id` seen before. Answered: its stored reply. Running: no run of this handler owns it
   * (the in-flight map would have caught it), so the agent stopped while the action ran, or could
   * not store its answer. Whether the robot acted is unknown, and acting again could do it twice,
   * so the answer is a final `interrupted`, stored in place of the intent.
   */
  private async answerRemembered(cmd: RobotCommand, r: RememberedCommand): Promise<CommandReply> {
    const { logger } = this.opts;
    if (r.command !== cmd.command) logger.warn({ cmd_id: cmd.cmd_id, stored: r.command, got: cmd.command }, 'command id reused for another command; answering the stored result');
    if (r.state === 'answered') {
      logger.info({ cmd_id: cmd.cmd_id, command: r.command }, 'repeated command answered from storage');
      return r.reply;
    }
    const reply = this.refuse(
      cmd,
      'interrupted',
      `${r.command} started for this command id but its outcome was never recorded (the robot stopped or failed while running it), so whether it acted is unknown; ` +
        `it will not run again. Check the robot's state before sending a new command`,
    );
    await this.opts.store.commandResults.put({ cmdId: r.cmdId, command: r.command, reply, receivedAt: r.receivedAt });
    logger.warn({ cmd_id: cmd.cmd_id, command: r.command }, 'repeated command never recorded an outcome; answered interrupted');
    return reply;
  }

  /**
   * A non-episode action: the intent is durable before the robot moves and the answer replaces
   * it afterwards, so a crash in between leaves a `running` row and a retry never acts again.
   * Every answer is final and stored, `failed` included: an action that threw may have moved the
   * robot first, so the same id must not run it again (a new command id does).
   */
  private async runAction(cmd: RobotCommand, command: ActionCommand, now: number, notBefore: number): Promise<CommandReply> {
    // A status read moves nothing: it needs no intent and its answer is not stored. A retry of
    // the same id reads again, which is as true as the first answer (fresher, even), and a
    // stored answer would cost a synchronous fsync on the robot for every status read.
    const readOnly = isReadOnlyAction(command);
    if (!readOnly) {
      const existing = await this.opts.store.commandResults.begin({ cmdId: cmd.cmd_id, command, receivedAt: now }, notBefore);
      if (existing) return this.answerRemembered(cmd, existing);
    }
    let reply: CommandReply;
    try {
      reply = this.ok(cmd, await this.opts.actions.run({ command, args: cmd.args ?? {}, robot_id: this.opts.robotId, cmd_id: cmd.cmd_id }));
    } catch (err) {
      reply = this.refusalOf(cmd, err);
    }
    if (readOnly) return reply;
    try {
      await this.remember(cmd, reply, now);
    } catch (err) {
      // The robot acted; say so. The intent stays `running`, so a retry answers `interrupted`.
      this.opts.logger.error({ err, cmd_id: cmd.cmd_id, command }, 'could not store the answer of an action; a retry of this id will answer interrupted');
    }
    return reply;
  }

  /**
   * An episode verb: a success is stored by the state machine in the transaction of the
   * transition. A `failed` verb committed nothing, so it is not remembered and a retry may run
   * it again; every other refusal is final and stored so that the same id keeps its answer.
   */
  private async runEpisodeCommand(cmd: RobotCommand, command: EpisodeCommand, now: number): Promise<CommandReply> {
    let reply: CommandReply;
    try {
      reply = await this.runEpisodeVerb(cmd, command, now);
    } catch (err) {
      reply = this.refusalOf(cmd, err);
    }
    if (!reply.ok && reply.error.code !== 'failed') await this.remember(cmd, reply, now);
    return reply;
  }

  /**
   * A new broker password: stored durably before the answer, because the cloud refuses the old
   * one as soon as it reads `ok`. A failed write answers `failed` and is not remembered (the cloud
   * sends the same secret again); the password is never logged nor part of the reply.
   */
  private async runRotation(cmd: RobotCommand, now: number): Promise<CommandReply> {
    if (!this.opts.rotateCredentials) return this.refuse(cmd, 'unsupported', 'this agent cannot rotate its credentials');
    const args = RotateCredentialsArgsSchema.safeParse(cmd.args);
    if (!args.success) return this.refuse(cmd, 'invalid_args', 'credentials.rotate needs {password}');
    try {
      await this.opts.rotateCredentials(args.data);
    } catch (err) {
      this.opts.logger.error({ err: { message: (err as Error).message }, cmd_id: cmd.cmd_id }, 'could not store the rotated credentials');
      return this.refuse(cmd, 'failed', `the robot could not store its new credentials: ${(err as Error).message}`);
    }
    const reply = this.ok(cmd, { rotated: true });
    await this.remember(cmd, reply, now);
    return reply;
  }

  private refusalOf(cmd: RobotCommand, err: unknown): CommandReply {
    if (err instanceof RefusalError) return this.refuse(cmd, err.code, err.message);
    this.opts.logger.error({ err, cmd_id: cmd.cmd_id, command: cmd.command }, 'command failed');
    return this.refuse(cmd, 'failed', `the robot could not run ${cmd.command}: ${(err as Error).message ?? String(err)}`);
  }

  private async runEpisodeVerb(cmd: RobotCommand, command: EpisodeCommand, now: number): Promise<CommandReply> {
    const verb = EPISODE_VERB[command];
    if (this.opts.legacyRuntime && verb !== 'fail') {
      return this.refuse(cmd, 'unsupported', `this robot's runtime does not support ${command} (no episodes.v1); episodes.fail works on every runtime`);
    }
    // Validated and never attached: the robot stamps its own context (spec, Robot commands).
    const body = (verb === 'start' ? EpisodeStartBodySchema : EpisodeEndBodySchema).safeParse(cmd.args);
    if (!body.success) return this.refuse(cmd, 'invalid_args', `invalid arguments: ${body.error.issues.map((i) => i.path.join('.') || i.message).join(', ')}`);
    let reply: CommandReply | undefined;
    const result = await this.opts.machine.apply(verb, {
      source: 'mqtt',
      commandResult: (r: EpisodeTransitionResult): StoredCommandResult => {
        reply = this.ok(cmd, { ...r });
        return { cmdId: cmd.cmd_id, command: cmd.command, reply, receivedAt: now };
      },
    });
    return reply ?? this.ok(cmd, { ...result });
  }

  private ok(cmd: RobotCommand, fields: Record<string, unknown>): CommandReply {
    return CommandReplySchema.parse({
      cmd_id: cmd.cmd_id,
      ok: true,
      result: { ...fields, cmd_id: cmd.cmd_id, command: cmd.command, robot_id: this.opts.robotId, ok: true },
    });
  }

  private refuse(cmd: RobotCommand, code: CommandRefusal, message: string): CommandReply {
    return { cmd_id: cmd.cmd_id, ok: false, error: { code, message: message.slice(0, 1024) } };
  }

  private async remember(cmd: RobotCommand, reply: CommandReply, now: number): Promise<void> {
    await this.opts.store.commandResults.put({ cmdId: cmd.cmd_id, command: cmd.command, reply, receivedAt: now });
  }
}
