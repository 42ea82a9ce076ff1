import type { FastifyBaseLogger } from 'fastify';
import { EpisodeReportSchema, type Clock } from '@fleet/protocol';
import { summarizeIssues, type OutboxKindHandler, type OutboxReply } from '../robots/outbox-router.js';
import type { CloudMetrics } from '../metrics.js';
import type { IngestItem, Store } from '../store/index.js';

interface Pending {
  item: IngestItem;
  reply: OutboxReply;
}

export interface IngestorOptions {
  store: Store;
  clock: Clock;
  logger: FastifyBaseLogger;
  /** Most reports written in one transaction. */
  maxBatch?: number;
  /** Called after a batch committed new rows (and so new events), with the organizations they belong to. */
  onIndexed?: (orgIds: ReadonlySet<string>) => void;
  /** Counts each batch's size and results. */
  metrics?: Pick<CloudMetrics, 'ingestBatch'>;
}

/**
 * Turns robots' `episode.report` messages into index rows. Reports are validated one by one (a bad one is
 * refused to its robot with a reason and never blocks the next), then written in batches: all
 * reports that arrived while the previous transaction ran go into the next one. A robot gets its
 * acknowledgment only after the transaction that holds its report committed.
 */
export class EpisodeIngestor implements OutboxKindHandler {
  /** Reports wait in a queue for the next transaction: handle() resolves before they are answered. */
  readonly queues = true;
  private queue: Pending[] = [];
  private flushing: Promise<void> | null = null;
  private readonly accepting = new Set<Promise<void>>();
  /** Acknowledgments of committed batches still being sent; the next batch does not wait for them. */
  private readonly acking = new Set<Promise<void>>();
  private readonly orgOf = new Map<string, string>();
  private readonly orgLookups = new Map<string, Promise<string | undefined>>();
  private readonly maxBatch: number;
  /** Reports indexed since start (inserted, not duplicates). */
  indexed = 0;

  constructor(private readonly opts: IngestorOptions) {
    this.maxBatch = opts.maxBatch ?? 1000;
  }

  /** One `episode.report` whose envelope the outbox router checked. */
  handle(robotId: string, msgId: string, body: unknown, reply: OutboxReply): Promise<void> {
    // Tracked until queued (or refused), so drain() covers submissions still being checked.
    const accepting: Promise<void> = this.accept(robotId, msgId, body, reply).finally(() => this.accepting.delete(accepting));
    this.accepting.add(accepting);
    return accepting;
  }

  private async accept(robotId: string, msgId: string, body: unknown, reply: OutboxReply): Promise<void> {
    const { logger } = this.opts;
    const report = EpisodeReportSchema.safeParse(body);
    if (!report.success) {
      logger.warn({ robot_id: robotId, msg_id: msgId, issues: report.error.issues }, 'refused malformed episode report');
      await reply.refuse('validation_failed', summarizeIssues(report.error.issues));
      return;
    }
    const orgId = await this.orgOfRobot(robotId);
    if (!orgId) {
      logger.warn({ robot_id: robotId }, 'outbox message from an unknown robot');
      reply.unanswered();
      return;
    }
    this.queue.push({ reply, item: { orgId, robotId, report: report.data, reportedAt: this.opts.clock.now() } });
    this.schedule();
  }

  /** Resolves when everything submitted so far is written and acknowledged. */
  async drain(): Promise<void> {
    while (this.accepting.size > 0 || this.flushing || this.queue.length > 0 || this.acking.size > 0) {
      if (this.accepting.size > 0) {
        await Promise.allSettled([...this.accepting]);
        continue;
      }
      if (this.flushing || this.queue.length > 0) {
        if (!this.flushing) this.schedule();
        await this.flushing;
        continue;
      }
      await Promise.allSettled([...this.acking]);
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
      for (const p of batch) p.reply.unanswered();
      return;
    }
    this.opts.metrics?.ingestBatch(results);
    const orgIds = new Set(batch.filter((_p, i) => results[i] === 'inserted').map((p) => p.item.orgId));
    if (orgIds.size > 0) this.opts.onIndexed?.(orgIds);
    // The batch is committed: its acknowledgments go out while the next batch is written. Waiting
    // for every ack's publish (a broker round trip) before the next transaction left the cloud
    // idle between batches. An ack that fails to send is logged by the router; the robot resends
    // and the next attempt is a duplicate.
    const acks: Promise<void> = Promise.all(
      batch.map(async (p, i) => {
        const r = results[i];
        if (r === 'inserted') this.indexed++;
        if (r === 'conflict') {
          this.opts.logger.warn({ robot_id: p.item.robotId, episode_id: p.item.report.id }, 'episode id already used by another robot');
          await p.reply.refuse('conflict', 'this episode id belongs to another robot');
        } else {
          await p.reply.ok();
        }
      }),
    )
      .then(() => undefined)
      .catch((err: unknown) => this.opts.logger.warn({ err }, 'could not send episode acknowledgments'))
      .finally(() => this.acking.delete(acks));
    this.acking.add(acks);
  }

  /**
   * The robot's organization. Reports of a robot whose lookup is under way wait on that one
   * lookup, so they join the queue in the order they arrived: with separate lookups (a database a
   * round trip away answers them in any order) a robot's reports could be indexed out of order.
   */
  private orgOfRobot(robotId: string): string | Promise<string | undefined> {
    const known = this.orgOf.get(robotId);
    if (known) return known;
    let lookup = this.orgLookups.get(robotId);
    if (!lookup) {
      lookup = this.opts.store.robots
        .getById(robotId)
        .then((robot) => {
          if (robot) this.orgOf.set(robotId, robot.orgId);
          return robot?.orgId;
        })
        .finally(() => this.orgLookups.delete(robotId));
      this.orgLookups.set(robotId, lookup);
    }
    return lookup;
  }
}

