import type { FastifyBaseLogger } from 'fastify';
import { parseBoundedJson, SyncRequestSchema, type SyncMessage, type SyncRequest } from '@fleet/protocol';
import type { RouteRow, SyncStore } from '../store/shared/sync-types.js';
import type { GrantRelay } from './grant-relay.js';

/** Largest sync request a robot may send (a resume block of many parts fits easily). */
export const MAX_SYNC_REQUEST_BYTES = 512 * 1024;
/** Assignments per `assignments` message; a long backlog goes in several. */
export const ASSIGNMENTS_PER_MESSAGE = 1000;

export interface SyncServiceOptions {
  store: { sync: SyncStore };
  relay: Pick<GrantRelay, 'handle'>;
  /** Publishes to the robot's `…/sync` topic. */
  publish: (robotId: string, msg: SyncMessage) => Promise<void>;
  logger: FastifyBaseLogger;
}

/**
 * The cloud end of a robot's sync requests: the robot's pending assignments (after each connect)
 * and its grant requests, each answered on its `…/sync` topic. Requests are handled
 * concurrently, so one slow grant provider never holds another robot's (or another episode's)
 * grant. New routes are pushed to connected robots as they are decided; a robot that is away
 * asks for the complete list when it comes back.
 */
export class SyncService {
  private readonly inFlight = new Set<Promise<void>>();

  constructor(private readonly opts: SyncServiceOptions) {}

  /** One MQTT payload from `…/sync/request`. Never throws; malformed requests are logged and dropped. */
  submit(robotId: string, payload: Buffer): Promise<void> {
    const p: Promise<void> = this.handle(robotId, payload)
      .catch((err: unknown) => this.opts.logger.error({ err, robot_id: robotId }, 'sync request failed'))
      .finally(() => this.inFlight.delete(p));
    this.inFlight.add(p);
    return p;
  }

  async drain(): Promise<void> {
    while (this.inFlight.size > 0) await Promise.allSettled([...this.inFlight]);
  }

  private async handle(robotId: string, payload: Buffer): Promise<void> {
    const { logger } = this.opts;
    if (payload.length > MAX_SYNC_REQUEST_BYTES) {
      logger.warn({ robot_id: robotId, bytes: payload.length }, 'dropped oversized sync request');
      return;
    }
    const parsed = parseBoundedJson(payload.toString('utf8'));
    const req = parsed.ok ? SyncRequestSchema.safeParse(parsed.value) : null;
    if (!req?.success) {
      logger.warn({ robot_id: robotId, reason: parsed.ok ? 'schema' : parsed.message }, 'dropped malformed sync request');
      return;
    }
    await this.answer(robotId, req.data);
  }

  private async answer(robotId: string, req: SyncRequest): Promise<void> {
    if (req.type === 'assignments.request') {
      const routes = await this.opts.store.sync.pendingAssignments(robotId);
      const pages = chunk(routes.map(toAssignment), ASSIGNMENTS_PER_MESSAGE);
      for (const [i, page] of pages.entries()) {
        await this.opts.publish(robotId, { type: 'assignments', req_id: req.req_id, assignments: page, complete: i === pages.length - 1 });
      }
      return;
    }
    await this.opts.publish(robotId, await this.opts.relay.handle(robotId, req));
  }

  /** Pushes newly decided routes to their robots (a robot that is away asks again on connect). */
  async pushAssignments(routes: readonly RouteRow[]): Promise<void> {
    const byRobot = new Map<string, RouteRow[]>();
    for (const r of routes) byRobot.set(r.robotId, [...(byRobot.get(r.robotId) ?? []), r]);
    for (const [robotId, rs] of byRobot) {
      for (const page of chunk(rs.map(toAssignment), ASSIGNMENTS_PER_MESSAGE)) {
        try {
          await this.opts.publish(robotId, { type: 'assignments', assignments: page, complete: false });
        } catch (err) {
          this.opts.logger.warn({ err, robot_id: robotId }, 'could not push assignments; the robot gets them at its next connect');
        }
      }
    }
  }
}

const toAssignment = (r: RouteRow) => ({ episode_id: r.episodeId, destination_id: r.destinationId });

/** Splits `items` into pages; an empty list is one empty page (a complete, empty answer). */
function chunk<T>(items: readonly T[], size: number): T[][] {
  if (items.length === 0) return [[]];
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}
