import type { FastifyBaseLogger } from 'fastify';
import type { CloudMetrics } from '../metrics.js';
import { isOutboxKind, MAX_OUTBOX_MESSAGE_BYTES, OutboxMessageSchema, parseBoundedJson, type OutboxAck, type OutboxKind } from '@fleet/protocol';

/** How a kind's handler answers one message; each message is answered at most once. */
export interface OutboxReply {
  /** Durably handled: the robot stops sending it. */
  ok(): Promise<void>;
  /** Refused for good (malformed, conflicting): the robot keeps its data and stops sending it. */
  refuse(code: string, message: string): Promise<void>;
  /** Not now: the robot keeps the message and sends it again after `retryAfterS`. */
  later(code: string, message: string, retryAfterS: number): Promise<void>;
}

/** Handles one kind of outbox message whose envelope was checked. */
export interface OutboxKindHandler {
  handle(robotId: string, msgId: string, body: unknown, reply: OutboxReply): Promise<void>;
  /** Resolves when everything handed over so far is answered. */
  drain?(): Promise<void>;
}

export interface OutboxRouterOptions {
  logger: FastifyBaseLogger;
  /** Sends the application-level acknowledgment to the robot. */
  ack: (robotId: string, ack: OutboxAck) => Promise<void>;
  handlers: Partial<Record<OutboxKind, OutboxKindHandler>>;
  /** When a robot resends a message of a kind this cloud does not handle. */
  unknownKindRetryS?: number;
  /** Counts the acknowledgments by kind and result. */
  metrics?: Pick<CloudMetrics, 'outboxAck'>;
}

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
      if (msgId) await this.reply(robotId, msgId).refuse('payload_too_large', `message is ${payload.length} bytes; the limit is ${MAX_OUTBOX_MESSAGE_BYTES}`);
      return;
    }
    const parsed = parseBoundedJson(payload.toString('utf8'));
    if (!parsed.ok && parsed.reason === 'invalid_json') {
      logger.warn({ robot_id: robotId }, 'dropped outbox message that is not JSON');
      return;
    }
    if (!parsed.ok) {
      // Never stored: a report nested beyond the bounds would break every later read of it.
      const msgId = msgIdOf(parsed.value);
      logger.warn({ robot_id: robotId, msg_id: msgId, path: parsed.violation.path }, 'refused outbox message beyond the JSON bounds');
      if (msgId) await this.reply(robotId, msgId).refuse('validation_failed', `${parsed.message} at ${parsed.violation.path || 'the top'} (at most ${parsed.violation.max})`);
      return;
    }
    const msg = OutboxMessageSchema.safeParse(parsed.value);
    if (!msg.success) {
      const msgId = msgIdOf(parsed.value);
      logger.warn({ robot_id: robotId, issues: msg.error.issues }, 'refused malformed outbox message');
      if (msgId) await this.reply(robotId, msgId).refuse('validation_failed', summarizeIssues(msg.error.issues));
      return;
    }
    const { msg_id: msgId, kind, body } = msg.data;
    const handler = isOutboxKind(kind) ? this.opts.handlers[kind] : undefined;
    if (!handler) {
      const retryAfterS = this.opts.unknownKindRetryS ?? UNKNOWN_KIND_RETRY_S;
      logger.warn({ robot_id: robotId, msg_id: msgId, kind }, 'outbox message of a kind this cloud does not handle; the robot keeps it');
      await this.reply(robotId, msgId, kind).later('unknown_kind', `this cloud does not handle ${kind} messages yet`, retryAfterS);
      return;
    }
    await handler.handle(robotId, msgId, body, this.reply(robotId, msgId, kind));
  }

  private reply(robotId: string, msgId: string, kind = 'invalid'): OutboxReply {
    let answered = false;
    const send = async (ack: OutboxAck): Promise<void> => {
      if (answered) return;
      answered = true;
      this.opts.metrics?.outboxAck(kind, ack.ok ? 'ok' : ack.retry_after_s !== undefined ? 'later' : 'refused');
      try {
        await this.opts.ack(robotId, ack);
      } catch (err) {
        // The robot resends unacknowledged messages; every handler is idempotent.
        this.opts.logger.warn({ err, robot_id: robotId }, 'could not send outbox ack');
      }
    };
    return {
      ok: () => send({ msg_id: msgId, ok: true }),
      refuse: (code, message) => send({ msg_id: msgId, ok: false, error: { code, message: message.slice(0, 1024) } }),
      later: (code, message, retryAfterS) => send({ msg_id: msgId, ok: false, error: { code, message: message.slice(0, 1024) }, retry_after_s: retryAfterS }),
    };
  }
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
