import type { FastifyBaseLogger } from 'fastify';
import { EpisodePrunedSchema, LocalMissingSchema, type Clock } from '@fleet/protocol';
import { summarizeIssues, type OutboxKindHandler, type OutboxReply } from '../robots/outbox-router.js';
import type { SyncStore } from '../store/shared/sync-types.js';
import { answerSyncReport as answer } from './replica-ingest.js';

type MarkResult = 'applied' | 'unchanged' | 'unknown_episode' | 'conflict';

interface Options {
  store: { sync: SyncStore };
  clock: Clock;
  logger: FastifyBaseLogger;
  /** Called after a report appended events (wakes the webhook worker). */
  onApplied?: () => void;
}

/**
 * The `episode.pruned` outbox kind: the robot's retention deleted an episode's local copy. The
 * first report appends one `episode.pruned` event (in the store's transaction); a resend of the
 * same message, or a second report, is acknowledged and changes nothing.
 */
export class EpisodePrunedHandler implements OutboxKindHandler {
  constructor(private readonly opts: Options) {}

  async handle(robotId: string, msgId: string, body: unknown, reply: OutboxReply): Promise<void> {
    const { logger } = this.opts;
    const parsed = EpisodePrunedSchema.safeParse(body);
    if (!parsed.success) {
      logger.warn({ robot_id: robotId, msg_id: msgId, issues: parsed.error.issues.slice(0, 5) }, 'refused malformed pruned report');
      await reply.refuse('validation_failed', summarizeIssues(parsed.error.issues));
      return;
    }
    let result: MarkResult;
    try {
      result = await this.opts.store.sync.markPruned(robotId, parsed.data.episode_id, parsed.data.pruned_at, this.opts.clock.now());
    } catch (err) {
      // Not acknowledged: the robot resends, and a repeat changes nothing.
      logger.error({ err, robot_id: robotId, msg_id: msgId }, 'pruned report failed');
      return;
    }
    if (result === 'applied') logger.info({ robot_id: robotId, episode_id: parsed.data.episode_id }, 'episode local copy pruned');
    await answer(result, reply, this.opts.onApplied);
  }
}

/**
 * The `episode.local_missing` outbox kind: files of an episode disappeared from the robot before
 * a verified sync. Marks the episode once (counted as `local_missing` in sync health); no event.
 */
export class LocalMissingHandler implements OutboxKindHandler {
  constructor(private readonly opts: Omit<Options, 'onApplied'>) {}

  async handle(robotId: string, msgId: string, body: unknown, reply: OutboxReply): Promise<void> {
    const { logger } = this.opts;
    const parsed = LocalMissingSchema.safeParse(body);
    if (!parsed.success) {
      logger.warn({ robot_id: robotId, msg_id: msgId, issues: parsed.error.issues.slice(0, 5) }, 'refused malformed local-missing report');
      await reply.refuse('validation_failed', summarizeIssues(parsed.error.issues));
      return;
    }
    let result: MarkResult;
    try {
      result = await this.opts.store.sync.markLocalMissing(robotId, parsed.data.episode_id);
    } catch (err) {
      logger.error({ err, robot_id: robotId, msg_id: msgId }, 'local-missing report failed');
      return;
    }
    if (result === 'applied') logger.warn({ robot_id: robotId, episode_id: parsed.data.episode_id, paths: parsed.data.paths.slice(0, 20) }, 'episode files missing on the robot before a verified sync');
    await answer(result, reply);
  }
}
