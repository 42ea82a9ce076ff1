import type { Clock } from '@fleet/protocol';
import type { Store } from '../store/index.js';
import type { RouteRow } from '../store/shared/sync-types.js';
import { decideRoute } from '../rules/routing.js';

export interface SyncRouterOptions {
  store: Store;
  clock: Clock;
  /**
   * New assignments, once written (the MQTT side pushes them to their robots). Called once per
   * batch; a failure is reported to `onError` and routing goes on: the routes are durable, and a
   * robot asks for all its assignments after each connect.
   */
  onAssigned?: (routes: RouteRow[]) => void | Promise<void>;
  onError?: (err: unknown, orgId: string) => void;
  /** Episodes read and routed per store call. */
  batchSize?: number;
}

/**
 * Writes the routes of episodes that have none, from the org's rules and destinations. Passes
 * run one at a time per organization, so a pass never decides with rules older than the change
 * that scheduled it. A decided route is kept when rules change later (a robot may be uploading
 * it); only a revocation drops the routes whose replica has not reached the destination, so
 * those episodes route again.
 */
export class SyncRouter {
  /** Per org, the highest episode seq a pass has looked at: `routeNew` starts after it. */
  private readonly seen = new Map<string, number>();
  private readonly tails = new Map<string, Promise<unknown>>();
  private readonly batchSize: number;

  constructor(private readonly opts: SyncRouterOptions) {
    this.batchSize = opts.batchSize ?? 500;
  }

  /** Routes episodes indexed since the last pass (after ingest). */
  routeNew(orgId: string): Promise<RouteRow[]> {
    return this.enqueue(orgId, () => this.pass(orgId, this.seen.get(orgId) ?? 0));
  }

  /** Routes every episode without a route (after a change of rules or destinations: the backlog). */
  reroute(orgId: string): Promise<RouteRow[]> {
    return this.enqueue(orgId, () => this.pass(orgId, 0));
  }

  /** After a revocation: drops the routes to it that have not synced, then routes those episodes again. */
  destinationRevoked(orgId: string, destinationId: string): Promise<RouteRow[]> {
    return this.enqueue(orgId, async () => {
      await this.opts.store.sync.dropRoutesTo(orgId, destinationId);
      return this.pass(orgId, 0);
    });
  }

  /** The same, without waiting: failures go to `onError` (HTTP handlers and ingest hooks). */
  schedule(orgId: string, what: 'new' | 'all' | { revoked: string }): void {
    const run = what === 'new' ? this.routeNew(orgId) : what === 'all' ? this.reroute(orgId) : this.destinationRevoked(orgId, what.revoked);
    run.catch((err: unknown) => this.opts.onError?.(err, orgId));
  }

  /** Resolves when every pass scheduled so far has finished (tests, shutdown). */
  async idle(): Promise<void> {
    while (this.tails.size > 0) await Promise.allSettled([...this.tails.values()]);
  }

  private enqueue<T>(orgId: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.tails.get(orgId) ?? Promise.resolve();
    const run = prev.then(fn, fn);
    const tail = run.finally(() => {
      if (this.tails.get(orgId) === tail) this.tails.delete(orgId);
    });
    tail.catch(() => undefined);
    this.tails.set(orgId, tail);
    return run;
  }

  private async pass(orgId: string, fromSeq: number): Promise<RouteRow[]> {
    const { store, clock } = this.opts;
    const [rules, destinations] = await Promise.all([store.sync.listRules(orgId), store.sync.listDestinations(orgId, clock.now())]);
    // No destination: nothing can be routed, so the backlog is not read at all (a restarted cloud
    // with a million episodes and no sync configured would otherwise walk them all after its first
    // ingest). `seen` stays where it was: the pass that follows a new destination starts at 0.
    if (destinations.length === 0) return [];
    const added: RouteRow[] = [];
    let after = fromSeq;
    for (;;) {
      const batch = await store.sync.unroutedEpisodes(orgId, after, this.batchSize);
      if (batch.length === 0) break;
      after = batch[batch.length - 1]!.seq;
      const decidedAt = clock.now();
      const routes: RouteRow[] = [];
      for (const ep of batch) {
        const destinationId = decideRoute(ep.facts, rules, destinations);
        if (destinationId) routes.push({ orgId, robotId: ep.robotId, episodeId: ep.facts.episode_id, episodeSeq: ep.seq, destinationId, decidedAt });
      }
      const written = routes.length > 0 ? await store.sync.addRoutes(routes) : [];
      if (written.length > 0) {
        added.push(...written);
        try {
          await this.opts.onAssigned?.(written);
        } catch (err) {
          this.opts.onError?.(err, orgId);
        }
      }
      if (batch.length < this.batchSize) break;
      // Let requests in between batches of a large backlog.
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
    this.seen.set(orgId, Math.max(this.seen.get(orgId) ?? 0, after));
    return added;
  }
}
