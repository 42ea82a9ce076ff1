import type { FastifyBaseLogger } from 'fastify';
import {
  EpisodeReportSchema,
  parseBoundedJson,
  MAX_OUTBOX_MESSAGE_BYTES,
  OutboxMessageSchema,
  type Clock,
  type OutboxAck,
} from '@fleet/protocol';
import type { IngestItem, Store } from '../store/index.js';

interface Pending {
  item: IngestItem;
  msgId: string;
}

export interface IngestorOptions {
  store: Store;
  clock: Clock;
  logger: FastifyBaseLogger;
  /** Sends the application-level acknowledgment to the robot. */
  ack: (robotId: string, ack: OutboxAck) => Promise<void>;
  /** Most reports written in one transaction. */
  maxBatch?: number;
  /** Called after a batch committed new rows (and so new events), with the organizations they belong to. */
  onIndexed?: (orgIds: ReadonlySet<string>) => void;
}

/**
 * Turns robots' outbox messages into index rows. Reports are validated one by one (a bad one is
 * refused to its robot with a reason and never blocks the next), then written in batches: all
 * reports that arrived while the previous transaction ran go into the next one. A robot gets its
 * acknowledgment only after the transaction that holds its report committed.
 */
export class EpisodeIngestor {
  private queue: Pending[] = [];
  private flushing: Promise<void> | null = null;
  private readonly accepting = new Set<Promise<void>>();
  private readonly orgOf = new Map<string, string>();
  private readonly maxBatch: number;
  /** Reports indexed since start (inserted, not duplicates). */
  indexed = 0;

  constructor(private readonly opts: IngestorOptions) {
    this.maxBatch = opts.maxBatch ?? 1000;
  }

  submit(robotId: string, payload: Buffer): Promise<void> {
    // Tracked until queued (or refused), so drain() covers submissions still being checked.
    const accepting: Promise<void> = this.accept(robotId, payload).finally(() => this.accepting.delete(accepting));
    this.accepting.add(accepting);
    return accepting;
  }

  private async accept(robotId: string, payload: Buffer): Promise<void> {
    const { logger } = this.opts;
    if (payload.length > MAX_OUTBOX_MESSAGE_BYTES) {
      const msgId = peekMsgId(payload);
      logger.warn({ robot_id: robotId, bytes: payload.length, msg_id: msgId }, 'refused oversized outbox message');
      if (msgId) await this.refuse(robotId, msgId, 'payload_too_large', `message is ${payload.length} bytes; the limit is ${MAX_OUTBOX_MESSAGE_BYTES}`);
      return;
    }
    const parsed = parseBoundedJson(payload.toString('utf8'));
    if (!parsed.ok && parsed.reason === 'invalid_json') {
      logger.warn({ robot_id: robotId }, 'dropped outbox message that is not JSON');
      return;
    }
    if (!parsed.ok) {
      // Never stored: a report nested beyond the bounds would break every later read of it.
      const id = (parsed.value as { msg_id?: unknown } | null)?.msg_id;
      const msgId = typeof id === 'string' && id.length > 0 && id.length <= 128 ? id : null;
      logger.warn({ robot_id: robotId, msg_id: msgId, path: parsed.violation.path }, 'refused outbox message beyond the JSON bounds');
      if (msgId) await this.refuse(robotId, msgId, 'validation_failed', `${parsed.message} at ${parsed.violation.path || 'the top'} (at most ${parsed.violation.max})`);
      return;
    }
    const json = parsed.value;
    const msg = OutboxMessageSchema.safeParse(json);
    if (!msg.success) {
      const msgId = (json as { msg_id?: unknown } | null)?.msg_id;
      logger.warn({ robot_id: robotId, issues: msg.error.issues }, 'refused malformed outbox message');
      if (typeof msgId === 'string' && msgId.length <= 128) await this.refuse(robotId, msgId, 'validation_failed', summarize(msg.error.issues));
      return;
    }
    if (msg.data.kind !== 'episode.report') {
      await this.refuse(robotId, msg.data.msg_id, 'validation_failed', `unknown message kind ${msg.data.kind}`);
      return;
    }
    const report = EpisodeReportSchema.safeParse(msg.data.body);
    if (!report.success) {
      logger.warn({ robot_id: robotId, msg_id: msg.data.msg_id, issues: report.error.issues }, 'refused malformed episode report');
      await this.refuse(robotId, msg.data.msg_id, 'validation_failed', summarize(report.error.issues));
      return;
    }
    const orgId = await this.orgOfRobot(robotId);
    if (!orgId) {
      logger.warn({ robot_id: robotId }, 'outbox message from an unknown robot');
      return;
    }
    this.queue.push({ msgId: msg.data.msg_id, item: { orgId, robotId, report: report.data, reportedAt: this.opts.clock.now() } });
    this.schedule();
  }

  /** Resolves when everything submitted so far is written and acknowledged. */
  async drain(): Promise<void> {
    while (this.accepting.size > 0 || this.flushing || this.queue.length > 0) {
      if (this.accepting.size > 0) {
        await Promise.allSettled([...this.accepting]);
        continue;
      }
      if (!this.flushing) this.schedule();
      await this.flushing;
    }
  }

  private schedule(): void {
    if (this.flushing) return;
    this.flushing = (async () => {
      // Let the reports that arrive in the same tick join this batch.
      await new Promise<void>((resolve) => setImmediate(resolve));
      while (this.queue.length > 0) {
        const batch = this.queue.splice(0, this.maxBatch);
        await this.write(batch);
      }
    })().finally(() => {
      this.flushing = null;
    });
  }

  private async write(batch: Pending[]): Promise<void> {
    let results;
    try {
      results = await this.opts.store.episodes.ingest(batch.map((p) => p.item));
    } catch (err) {
      // Nothing is acknowledged: the robots resend and the next attempt is idempotent.
      this.opts.logger.error({ err, reports: batch.length }, 'episode ingest failed');
      return;
    }
    const orgIds = new Set(batch.filter((_p, i) => results[i] === 'inserted').map((p) => p.item.orgId));
    if (orgIds.size > 0) this.opts.onIndexed?.(orgIds);
    await Promise.all(
      batch.map(async (p, i) => {
        const r = results[i];
        if (r === 'inserted') this.indexed++;
        if (r === 'conflict') {
          this.opts.logger.warn({ robot_id: p.item.robotId, episode_id: p.item.report.id }, 'episode id already used by another robot');
          await this.refuse(p.item.robotId, p.msgId, 'conflict', 'this episode id belongs to another robot');
        } else {
          await this.sendAck(p.item.robotId, { msg_id: p.msgId, ok: true });
        }
      }),
    );
  }

  private async refuse(robotId: string, msgId: string, code: string, message: string): Promise<void> {
    await this.sendAck(robotId, { msg_id: msgId, ok: false, error: { code, message: message.slice(0, 1024) } });
  }

  private async sendAck(robotId: string, ack: OutboxAck): Promise<void> {
    try {
      await this.opts.ack(robotId, ack);
    } catch (err) {
      // The robot resends unacknowledged messages; ingest of a resend is idempotent.
      this.opts.logger.warn({ err, robot_id: robotId }, 'could not send outbox ack');
    }
  }

  private async orgOfRobot(robotId: string): Promise<string | undefined> {
    const known = this.orgOf.get(robotId);
    if (known) return known;
    const robot = await this.opts.store.robots.getById(robotId);
    if (robot) this.orgOf.set(robotId, robot.orgId);
    return robot?.orgId;
  }
}

function summarize(issues: readonly { path: PropertyKey[]; message: string }[]): string {
  return issues
    .slice(0, 5)
    .map((i) => `${i.path.map(String).join('.') || '(root)'}: ${i.message}`)
    .join('; ');
}

/** The msg_id of a message too large to parse whole: it is the first field the agent writes. */
function peekMsgId(payload: Buffer): string | null {
  const m = /^\{"msg_id":"([^"\\]{1,128})"/.exec(payload.subarray(0, 200).toString('utf8'));
  return m ? m[1]! : null;
}
