import type { FastifyBaseLogger } from 'fastify';
import { ReplicaReportSchema, type Clock } from '@fleet/protocol';
import { summarizeIssues, type OutboxKindHandler, type OutboxReply } from '../robots/outbox-router.js';
import type { ReplicaIngestResult, SyncStore } from '../store/shared/sync-types.js';

/** A replica state that arrives before its episode is indexed is offered again this much later. */
export const REPLICA_BEFORE_EPISODE_RETRY_S = 30;

/**
 * The `replica.state` outbox kind: a robot's report that a replica moved (granted, syncing,
 * synced, verified) or that an attempt failed. A report naming a grant the relay never issued
 * for that robot, episode and destination is refused (the relay records a grant before the robot
 * gets it, and only for an indexed episode, so an honest report always finds its grant). The store
 * applies the others idempotently and never moves a replica backwards, writing the webhook events
 * in the same transaction.
 */
export class ReplicaStateHandler implements OutboxKindHandler {
  constructor(
    private readonly opts: {
      store: { sync: SyncStore };
      clock: Clock;
      logger: FastifyBaseLogger;
      /** Called after a report appended events (wakes the webhook worker). */
      onApplied?: () => void;
    },
  ) {}

  async handle(robotId: string, msgId: string, body: unknown, reply: OutboxReply): Promise<void> {
    const { logger } = this.opts;
    const report = ReplicaReportSchema.safeParse(body);
    if (!report.success) {
      logger.warn({ robot_id: robotId, msg_id: msgId, issues: report.error.issues.slice(0, 5) }, 'refused malformed replica report');
      await reply.refuse('validation_failed', summarizeIssues(report.error.issues));
      return;
    }
    const { episode_id, destination_id, grant_id, state } = report.data;
    let result;
    try {
      // Only a grant the relay handed to this robot for this episode and destination moves a
      // replica: a robot cannot claim `verified` for an upload the customer's provider never granted.
      if (!(await this.opts.store.sync.grantIssued(robotId, episode_id, destination_id, grant_id))) {
        logger.warn({ robot_id: robotId, msg_id: msgId, episode_id, destination_id, grant_id, state }, 'refused replica report for a grant the relay did not issue');
        await reply.refuse('unknown_grant', 'no grant with this grant_id was issued to this robot for this episode and destination');
        return;
      }
      result = await this.opts.store.sync.applyReplicaReport(robotId, report.data, this.opts.clock.now());
    } catch (err) {
      // Not acknowledged: the robot resends, and applying a report again changes nothing.
      logger.error({ err, robot_id: robotId, msg_id: msgId }, 'replica report failed');
      return;
    }
    await answerSyncReport(result, reply, this.opts.onApplied);
  }
}

/**
 * Answers a store result the way every sync outbox kind does: idempotent (`unchanged` is
 * acknowledged), "later" before the episode is indexed, refused for good when it can never apply.
 */
export async function answerSyncReport(result: ReplicaIngestResult, reply: OutboxReply, onApplied?: () => void): Promise<void> {
  switch (result) {
    case 'applied':
      onApplied?.();
      await reply.ok();
      return;
    case 'unchanged':
      await reply.ok();
      return;
    case 'unknown_episode':
      await reply.later('unknown_episode', 'the episode is not indexed yet', REPLICA_BEFORE_EPISODE_RETRY_S);
      return;
    case 'conflict':
      await reply.refuse('conflict', 'the episode belongs to another robot');
      return;
    case 'unknown_destination':
      await reply.refuse('not_found', "the destination is not one of the episode's organization");
      return;
    default: {
      const never: never = result;
      throw new Error(`unhandled sync report result ${String(never)}`);
    }
  }
}
