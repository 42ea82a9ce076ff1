import type { FastifyBaseLogger } from 'fastify';
import type { CloudMetrics } from '../metrics.js';
import { findJsonBoundsViolation, isOutboxKind, MAX_OUTBOX_MESSAGE_BYTES, OUTBOX_BATCH_MAX, OutboxMessageSchema, type OutboxAck, type OutboxKind } from '@fleet/protocol';

/** How a kind's handler answers one message; each message is answered at most once. */
export interface OutboxReply {
  /** Durably handled: the robot stops sending it. */
  ok(): Promise<void>;
  /** Refused for good (malformed, conflicting): the robot keeps its data and stops sending it. */
  refuse(code: string, message: string): Promise<void>;
  /** Not now: the robot keeps the message and sends it again after `retryAfterS`. */
  later(code: string, message: string, retryAfterS: number): Promise<void>;
  /**
   * No answer (the store failed, the robot is unknown): the robot sends the message again after
   * its ack timeout. Lets the answers of the other messages of its batch go without it.
   */
  unanswered(): void;
}

/** Handles one kind of outbox message whose envelope was checked. */
export interface OutboxKindHandler {
  /**
   * Handles one message. Unless `queues` is set, the message is answered (or left unanswered)
   * by the time the promise resolves.
   */
  handle(robotId: string, msgId: string, body: unknown, reply: OutboxReply): Promise<void>;
  /**
   * handle() may resolve before the answer (the message waits in a queue): the handler then calls
   * `reply.unanswered()` for a message it will not answer.
   */
  readonly queues?: boolean;
  /** Resolves when everything handed over so far is answered. */
  drain?(): Promise<void>;
}

export interface OutboxRouterOptions {
  logger: FastifyBaseLogger;
  /**
   * Sends the application-level acknowledgment to the robot: one, or the acknowledgments of a
   * batch's messages in one publish (`{acks: [...]}`).
   */
  ack: (robotId: string, ack: OutboxAck | { acks: OutboxAck[] }) => Promise<void>;
  handlers: Partial<Record<OutboxKind, OutboxKindHandler>>;
  /** When a robot resends a message of a kind this cloud does not handle. */
  unknownKindRetryS?: number;
  /** Counts the acknowledgments by kind and result. */
  metrics?: Pick<CloudMetrics, 'outboxAck'>;
}

/** The most refusals one answer to an oversized batch carries. */
const MAX_REFUSED_IN_ONE_ANSWER = 4 * OUTBOX_BATCH_MAX;

/** A newer agent's message kind is kept on the robot and offered again this much later. */
export const UNKNOWN_KIND_RETRY_S = 3600;

/**
 * The cloud end of the robots' durable outboxes. It bounds and checks each message's envelope
 * (size, JSON bounds, `msg_id`, `kind`) and hands the body to the handler of its kind. A message
 * too large, not bounded or malformed is refused for good, addressed by its `msg_id` when one can
 * be read; a kind with no handler here (an agent newer than this cloud) is answered "retry later",
 * never refused, so nothing a robot must report is lost across an upgrade.
 */
export class OutboxRouter {
  private readonly routing = new Set<Promise<void>>();

  constructor(private readonly opts: OutboxRouterOptions) {}

  submit(robotId: string, payload: Buffer): Promise<void> {
    const p: Promise<void> = this.route(robotId, payload).finally(() => this.routing.delete(p));
    this.routing.add(p);
    return p;
  }

  /** Resolves when every message received so far is answered (or dropped). */
  async drain(): Promise<void> {
    while (this.routing.size > 0) await Promise.allSettled([...this.routing]);
    for (const h of Object.values(this.opts.handlers)) await h?.drain?.();
  }

  private async route(robotId: string, payload: Buffer): Promise<void> {
    const { logger } = this.opts;
    if (payload.length > MAX_OUTBOX_MESSAGE_BYTES) {
      const msgId = peekMsgId(payload);
      logger.warn({ robot_id: robotId, bytes: payload.length, msg_id: msgId }, 'refused oversized outbox message');
      if (msgId) await this.reply(msgId, this.single(robotId)).refuse('payload_too_large', `message is ${payload.length} bytes; the limit is ${MAX_OUTBOX_MESSAGE_BYTES}`);
      return;
    }
    let value: unknown;
    try {
      value = JSON.parse(payload.toString('utf8'));
    } catch {
      logger.warn({ robot_id: robotId }, 'dropped outbox message that is not JSON');
      return;
    }
    const batch = batchOf(value);
    if (batch) return this.routeBatch(robotId, batch);
    await this.routeOne(robotId, value, this.single(robotId));
  }

  /**
   * A batch (outbox protocol 2): each message is checked and handled exactly as if it had come
   * alone, and their acknowledgments go back together once every message that can be named is
   * answered. A message that cannot be named (no usable msg_id) gets no answer, as alone.
   */
  private async routeBatch(robotId: string, messages: unknown[]): Promise<void> {
    if (messages.length > OUTBOX_BATCH_MAX) {
      this.opts.logger.warn({ robot_id: robotId, messages: messages.length }, `refused an outbox batch of more than ${OUTBOX_BATCH_MAX} messages`);
      // A robot that follows the protocol never sends one; the answer is bounded all the same (a
      // 1 MiB publish holds tens of thousands of tiny messages): the first ones are refused by
      // name, the rest get no answer.
      const named = messages.slice(0, MAX_REFUSED_IN_ONE_ANSWER);
      const refuse = this.collect(robotId, named.length);
      for (const m of named) {
        await this.refuseByName(msgIdOf(m), refuse, 'batch_too_large', `a batch carries at most ${OUTBOX_BATCH_MAX} messages; send them again in smaller batches`);
      }
      return;
    }
    const acks = this.collect(robotId, messages.length);
    await Promise.all(messages.map((m) => this.routeOne(robotId, m, acks)));
  }

  /**
   * Checks and hands over one message. Every path answers it through `sink` or tells the sink it
   * gets no answer (it cannot be named, or its handler failed), so a batch's answer never waits for it.
   */
  private async routeOne(robotId: string, value: unknown, sink: AckSink): Promise<void> {
    const { logger } = this.opts;
    const violation = findJsonBoundsViolation(value);
    if (violation) {
      // Never stored: a report nested beyond the bounds would break every later read of it.
      const msgId = msgIdOf(value);
      logger.warn({ robot_id: robotId, msg_id: msgId, path: violation.path }, 'refused outbox message beyond the JSON bounds');
      return this.refuseByName(msgId, sink, 'validation_failed', `${violation.message} at ${violation.path || 'the top'} (at most ${violation.max})`);
    }
    const msg = OutboxMessageSchema.safeParse(value);
    if (!msg.success) {
      logger.warn({ robot_id: robotId, issues: msg.error.issues }, 'refused malformed outbox message');
      return this.refuseByName(msgIdOf(value), sink, 'validation_failed', summarizeIssues(msg.error.issues));
    }
    const { msg_id: msgId, kind, body } = msg.data;
    const handler = isOutboxKind(kind) ? this.opts.handlers[kind] : undefined;
    if (!handler) {
      const retryAfterS = this.opts.unknownKindRetryS ?? UNKNOWN_KIND_RETRY_S;
      logger.warn({ robot_id: robotId, msg_id: msgId, kind }, 'outbox message of a kind this cloud does not handle; the robot keeps it');
      await this.reply(msgId, sink, kind).later('unknown_kind', `this cloud does not handle ${kind} messages yet`, retryAfterS);
      return;
    }
    const reply = this.reply(msgId, sink, kind);
    try {
      await handler.handle(robotId, msgId, body, reply);
    } catch (err) {
      // Unanswered: the robot sends it again after its ack timeout; a batch's others still go back.
      reply.unanswered();
      throw err;
    }
    if (!handler.queues) reply.unanswered();
  }

  /** Refuses a message by its name; one that cannot be named gets no answer (its sink is told). */
  private async refuseByName(msgId: string | null, sink: AckSink, code: string, message: string): Promise<void> {
    if (msgId) await this.reply(msgId, sink).refuse(code, message);
    else sink.skip();
  }

  /** Sends one acknowledgment on its own. */
  private single(robotId: string): AckSink {
    return { send: (ack) => this.sendAck(robotId, ack), skip: () => undefined };
  }

  /**
   * Gathers the acknowledgments of a batch of `expected` messages and sends them in one publish
   * when the last is in; `skip` counts a message that will get none.
   */
  private collect(robotId: string, expected: number): AckSink {
    const acks: OutboxAck[] = [];
    let remaining = expected;
    let flushed = false;
    const flush = async (): Promise<void> => {
      if (remaining > 0 || flushed) return;
      flushed = true;
      if (acks.length > 0) await this.sendAck(robotId, { acks });
    };
    return {
      send: (ack) => {
        acks.push(ack);
        remaining -= 1;
        return flush();
      },
      skip: () => {
        remaining -= 1;
        void flush();
      },
    };
  }

  private async sendAck(robotId: string, ack: OutboxAck | { acks: OutboxAck[] }): Promise<void> {
    try {
      await this.opts.ack(robotId, ack);
    } catch (err) {
      // The robot resends unacknowledged messages; every handler is idempotent.
      this.opts.logger.warn({ err, robot_id: robotId }, 'could not send outbox ack');
    }
  }

  /** One message's answer, given at most once; every answer says this cloud takes batches. */
  private reply(msgId: string, sink: AckSink, kind = 'invalid'): OutboxReply {
    let answered = false;
    const answer = async (ack: OutboxAck): Promise<void> => {
      if (answered) return;
      answered = true;
      this.opts.metrics?.outboxAck(kind, ack.ok ? 'ok' : ack.retry_after_s !== undefined ? 'later' : 'refused');
      await sink.send({ ...ack, batch_max: OUTBOX_BATCH_MAX });
    };
    return {
      unanswered: () => {
        if (answered) return;
        answered = true;
        sink.skip();
      },
      ok: () => answer({ msg_id: msgId, ok: true }),
      refuse: (code, message) => answer({ msg_id: msgId, ok: false, error: { code, message: message.slice(0, 1024) } }),
      later: (code, message, retryAfterS) => answer({ msg_id: msgId, ok: false, error: { code, message: message.slice(0, 1024) }, retry_after_s: retryAfterS }),
    };
  }
}

/** Where a message's answer goes: sent alone, or gathered with its batch's; `skip` when it gets none. */
interface AckSink {
  send(ack: OutboxAck): Promise<void>;
  skip(): void;
}

/** The messages of a batch (`{"batch": [...]}`), or null for a single message. */
function batchOf(value: unknown): unknown[] | null {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return null;
  const batch = (value as { batch?: unknown }).batch;
  return Array.isArray(batch) && batch.length > 0 && !('msg_id' in value) ? batch : null;
}

/** A message's `msg_id` when it has a usable one. */
function msgIdOf(value: unknown): string | null {
  const id = (value as { msg_id?: unknown } | null)?.msg_id;
  return typeof id === 'string' && id.length > 0 && id.length <= 128 ? id : null;
}

/** The msg_id of a message too large to parse whole: it is the first field the agent writes. */
function peekMsgId(payload: Buffer): string | null {
  const m = /^\{"msg_id":"([^"\\]{1,128})"/.exec(payload.subarray(0, 200).toString('utf8'));
  return m ? m[1]! : null;
}

/** The first few validation issues as one line, for a refusal's message. */
export function summarizeIssues(issues: readonly { path: PropertyKey[]; message: string }[]): string {
  return issues
    .slice(0, 5)
    .map((i) => `${i.path.map(String).join('.') || '(root)'}: ${i.message}`)
    .join('; ');
}
