import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DAY, HOUR, ManualClock, WebhookPayloadSchema, type EpisodeReport, type ReplicaReport } from '@fleet/protocol';
import { REPLICA_TRANSITIONS } from '../rules/replica-transitions.fixture.js';
import { SyncRouter } from '../sync/router.js';
import { testReport } from '../test-support.js';
import type { RouteRow } from './shared/sync-types.js';
import { describeStore, openTestStore, openTwin, postgresAvailable, sqliteDb, type TestEngine, type TestStore } from './test-store.js';
import type { Store } from './shared/types.js';

const T0 = Date.parse('2026-01-01T00:00:00Z');
const ORG = 'org_a';
const OTHER = 'org_b';
const ROBOT = 'rbt_1';
/** The events the sync store appends, read back through a webhook subscription to all of them. */
const SYNC_EVENTS = ['episode.synced', 'episode.verified', 'episode.failed', 'episode.pruned'];

/** The sync part of the store contract, on every engine, through the store interface only. */
describeStore('SyncStore', (open, engine) => {
  let store: TestStore;
  let clock: ManualClock;
  let destCounter = 0;
  /** Every episode ingested here: routes are read back per episode. */
  let ingested: { id: string; orgId: string; robotId: string; discarded: boolean }[];
  /** The sync events delivered so far to each organization's subscription, oldest first. */
  let seen: Map<string, { type: string; payload: Record<string, unknown> }[]>;

  beforeEach(async () => {
    store = await open();
    clock = new ManualClock(T0);
    ingested = [];
    seen = new Map();
    for (const id of [ORG, OTHER]) {
      await store.orgs.create({ id, name: id, tier: 'enterprise', createdAt: T0 });
      await store.webhooks.create({ id: `whk_${id}`, orgId: id, url: 'https://hooks.test/x', events: SYNC_EVENTS, secretSealed: 's', createdAt: T0 }, 10);
      seen.set(id, []);
    }
  });
  afterEach(async () => {
    await store.close();
  });

  async function destination(orgId = ORG): Promise<string> {
    destCounter += 1;
    const id = `dst_${destCounter}`;
    await store.sync.createDestination({ id, orgId, type: 'external', url: `https://grants.example.com/${id}`, secretSealed: 'sealed', retention: 'keep', createdAt: clock.now() });
    return id;
  }

  async function ingest(reports: EpisodeReport[], over: { orgId?: string; robotId?: string; reportedAt?: number } = {}): Promise<EpisodeReport[]> {
    const results = await store.episodes.ingest(
      reports.map((report) => ({ orgId: over.orgId ?? ORG, robotId: over.robotId ?? ROBOT, report, reportedAt: over.reportedAt ?? clock.now() })),
    );
    expect(results).toEqual(reports.map(() => 'inserted'));
    for (const r of reports) ingested.push({ id: r.id, orgId: over.orgId ?? ORG, robotId: over.robotId ?? ROBOT, discarded: r.outcome === 'discarded' });
    return reports;
  }

  const seqOf = async (id: string, orgId = ORG) => (await store.episodes.get(orgId, id))!.seq;

  function report(episodeId: string, destinationId: string, over: Partial<ReplicaReport> = {}): ReplicaReport {
    return { episode_id: episodeId, destination_id: destinationId, grant_id: 'gr_1', state: 'syncing', error: null, object_key: null, at: 1000, ...over };
  }

  /**
   * The sync events of ORG's log, oldest first: fanned out to each organization's subscription
   * and taken off its queue (claimed, recorded delivered). OTHER never gets one of ORG's.
   */
  async function events(type?: string, orgId = ORG): Promise<{ type: string; payload: Record<string, unknown> }[]> {
    await store.webhooks.fanOut(clock.now());
    for (;;) {
      const heads = await store.webhooks.claimDue(Number.MAX_SAFE_INTEGER - 1, 10, 1);
      if (heads.length === 0) break;
      for (const d of heads) {
        const sub = await store.webhooks.getById(d.subscriptionId);
        seen.get(sub!.orgId)!.push({ type: d.eventType, payload: JSON.parse(d.payload) as Record<string, unknown> });
        await store.webhooks.record(d.id, { kind: 'delivered', status: 200, at: clock.now() }, d.claim);
      }
    }
    return seen.get(orgId)!.filter((e) => type === undefined || e.type === type);
  }

  describe('destinations', () => {
    it('creates, gets, lists by creation, revokes once; another org sees none of it', async () => {
      const a = await destination();
      clock.advance(1);
      const b = await destination();
      expect((await store.sync.getDestination(ORG, a))).toMatchObject({ id: a, orgId: ORG, type: 'external', retention: 'keep', revokedAt: null, secretSealed: 'sealed' });
      expect(await store.sync.getDestination(OTHER, a)).toBeUndefined();
      expect((await store.sync.listDestinations(ORG, clock.now())).map((d) => d.id)).toEqual([a, b]);
      expect(await store.sync.listDestinations(OTHER, clock.now())).toEqual([]);

      expect(await store.sync.revokeDestination(OTHER, a, T0 + 5)).toBe(false);
      expect(await store.sync.revokeDestination(ORG, a, T0 + 5)).toBe(true);
      expect(await store.sync.revokeDestination(ORG, a, T0 + 9)).toBe(false);
      expect((await store.sync.getDestination(ORG, a))!.revokedAt).toBe(T0 + 5);
    });

    it('health: forwards and deferrals of the last 24 hours, and the newest forward', async () => {
      const a = await destination();
      const b = await destination();
      await store.sync.recordForward(ORG, a, T0, { kind: 'granted', grantId: 'g1' });
      await store.sync.recordForward(ORG, a, T0 + HOUR, { kind: 'deferred', reason: 'deferred' });
      await store.sync.recordForward(ORG, a, T0 + 2 * HOUR, { kind: 'granted', grantId: 'g2' });
      const at = async (now: number) => (await store.sync.listDestinations(ORG, now)).find((d) => d.id === a)!;
      expect(await at(T0 + 2 * HOUR)).toMatchObject({ lastForwardAt: T0 + 2 * HOUR, forwards24h: 3, deferrals24h: 1 });
      // Exactly 24 h after the first forward it has left the window.
      expect(await at(T0 + DAY)).toMatchObject({ forwards24h: 2, deferrals24h: 1 });
      expect(await at(T0 + DAY + HOUR)).toMatchObject({ forwards24h: 1, deferrals24h: 0 });
      expect(await at(T0 + 3 * DAY)).toMatchObject({ lastForwardAt: T0 + 2 * HOUR, forwards24h: 0, deferrals24h: 0 });
      expect((await store.sync.listDestinations(ORG, T0 + 2 * HOUR)).find((d) => d.id === b)).toMatchObject({ lastForwardAt: null, forwards24h: 0 });
      // Old rows are pruned as new forwards come in; the newest time stays.
      await store.sync.recordForward(ORG, a, T0 + 3 * DAY, { kind: 'deferred', reason: 'timeout' });
      // Only visible in the table (SQLite's, as an example of both).
      if (engine === 'sqlite') expect(sqliteDb(store).prepare('SELECT COUNT(*) FROM grant_forwards WHERE destination_id = ?').pluck().get(a)).toBe(1);
      expect(await at(T0 + 3 * DAY)).toMatchObject({ lastForwardAt: T0 + 3 * DAY, forwards24h: 1, deferrals24h: 1 });
    });

    it('claims a grant id once per destination', async () => {
      const a = await destination();
      const b = await destination();
      expect(await store.sync.claimGrantId(a, 'g1', T0)).toBe(true);
      expect(await store.sync.claimGrantId(a, 'g1', T0 + 1)).toBe(false);
      expect(await store.sync.claimGrantId(b, 'g1', T0)).toBe(true);
    });

    it('tells whether a grant id was used at a destination without claiming it', async () => {
      const a = await destination();
      const b = await destination();
      expect(await store.sync.grantIdUsed(a, 'g1')).toBe(false);
      expect(await store.sync.grantIdUsed(a, 'g1')).toBe(false);
      expect(await store.sync.claimGrantId(a, 'g1', T0)).toBe(true);
      expect(await store.sync.grantIdUsed(a, 'g1')).toBe(true);
      expect(await store.sync.grantIdUsed(b, 'g1')).toBe(false);
    });

    it('a forward claim keeps (episode, destination) until released or its lease runs out, per destination', async () => {
      const a = await destination();
      const b = await destination();
      const [ep] = await ingest([testReport()]);
      const seq = await seqOf(ep!.id);
      const LEASE = 15_000;
      const first = await store.sync.claimForward(ORG, seq, a, clock.now(), LEASE);
      expect(first).toEqual({ kind: 'claimed', token: expect.any(String) as unknown, until: T0 + LEASE });
      if (first.kind !== 'claimed') return;
      // Held for everyone else until the lease ends; another destination has its own claim.
      clock.advance(LEASE - 1);
      expect(await store.sync.claimForward(ORG, seq, a, clock.now(), LEASE)).toEqual({ kind: 'held', until: T0 + LEASE });
      expect(await store.sync.claimForward(ORG, seq, b, clock.now(), LEASE)).toMatchObject({ kind: 'claimed' });
      // A token that is not the holder's, or another organization's, releases nothing.
      expect(await store.sync.releaseForward(ORG, seq, a, 'not-the-token')).toBe(false);
      expect(await store.sync.releaseForward(OTHER, seq, a, first.token)).toBe(false);
      expect(await store.sync.claimForward(ORG, seq, a, clock.now(), LEASE)).toEqual({ kind: 'held', until: T0 + LEASE });
      // The holder's release frees it at once; a second release does nothing.
      expect(await store.sync.releaseForward(ORG, seq, a, first.token)).toBe(true);
      expect(await store.sync.releaseForward(ORG, seq, a, first.token)).toBe(false);
      const second = await store.sync.claimForward(ORG, seq, a, clock.now(), LEASE);
      expect(second).toMatchObject({ kind: 'claimed', until: clock.now() + LEASE });
      if (second.kind !== 'claimed') return;
      expect(second.token).not.toBe(first.token);
    });

    it('a forward claim whose lease ran out is taken over; the old holder can no longer release it', async () => {
      const a = await destination();
      const [ep] = await ingest([testReport()]);
      const seq = await seqOf(ep!.id);
      const dead = await store.sync.claimForward(ORG, seq, a, clock.now(), 15_000);
      if (dead.kind !== 'claimed') throw new Error('expected the first claim');
      clock.advance(15_000);
      const next = await store.sync.claimForward(ORG, seq, a, clock.now(), 15_000);
      expect(next).toMatchObject({ kind: 'claimed', until: T0 + 30_000 });
      expect(await store.sync.releaseForward(ORG, seq, a, dead.token)).toBe(false);
      expect(await store.sync.claimForward(ORG, seq, a, clock.now() + 1, 15_000)).toEqual({ kind: 'held', until: T0 + 30_000 });
      if (next.kind === 'claimed') expect(await store.sync.releaseForward(ORG, seq, a, next.token)).toBe(true);
    });
  });

  describe('routing rules', () => {
    it('appends, lists in order, deletes with positions kept 1..n, reorders only by a full permutation', async () => {
      const d = await destination();
      const mk = (id: string) => store.sync.createRule({ id, orgId: ORG, destinationId: d, match: { robot_id: [id] }, createdAt: T0 });
      expect((await mk('r1')).position).toBe(1);
      await mk('r2');
      await mk('r3');
      const order = async () => (await store.sync.listRules(ORG)).map((r) => `${r.id}@${r.position}`);
      expect(await order()).toEqual(['r1@1', 'r2@2', 'r3@3']);
      expect(await store.sync.listRules(OTHER)).toEqual([]);

      expect(await store.sync.reorderRules(ORG, ['r3', 'r1'])).toBe(false);
      expect(await store.sync.reorderRules(ORG, ['r3', 'r1', 'r1'])).toBe(false);
      expect(await store.sync.reorderRules(ORG, ['r3', 'r1', 'r2', 'r4'])).toBe(false);
      expect(await store.sync.reorderRules(OTHER, ['r3', 'r1', 'r2'])).toBe(false);
      expect(await order()).toEqual(['r1@1', 'r2@2', 'r3@3']);
      expect(await store.sync.reorderRules(ORG, ['r3', 'r1', 'r2'])).toBe(true);
      expect(await order()).toEqual(['r3@1', 'r1@2', 'r2@3']);

      expect(await store.sync.deleteRule(OTHER, 'r1')).toBe(false);
      expect(await store.sync.deleteRule(ORG, 'r1')).toBe(true);
      expect(await store.sync.deleteRule(ORG, 'r1')).toBe(false);
      expect(await order()).toEqual(['r3@1', 'r2@2']);
      expect((await store.sync.listRules(ORG))[0]!.match).toEqual({ robot_id: ['r3'] });
    });
  });

  describe('routes and the router', () => {
    let assigned: RouteRow[][];
    let router: SyncRouter;
    beforeEach(() => {
      assigned = [];
      router = new SyncRouter({ store, clock, batchSize: 2, onAssigned: (routes) => void assigned.push(routes) });
    });
    /**
     * Episode id -> destination of its route, for the org's routed episodes: a route to a live
     * destination is its assignment; one to a revoked destination (kept: its replica is synced)
     * only shows as "routed somewhere", `revoked`.
     */
    const routed = async (orgId = ORG): Promise<Record<string, string>> => {
      const unrouted = new Set((await store.sync.unroutedEpisodes(orgId, 0, 10_000)).map((u) => u.facts.episode_id));
      const live = (await store.sync.listDestinations(orgId, clock.now())).filter((d) => d.revokedAt === null).map((d) => d.id);
      const out: Record<string, string> = {};
      for (const ep of ingested.filter((e) => e.orgId === orgId && !e.discarded && !unrouted.has(e.id))) {
        let to = 'revoked';
        for (const d of live) if (await store.sync.assignment(ep.robotId, ep.id, d)) to = d;
        out[ep.id] = to;
      }
      return out;
    };

    /** The route of `ep` to `destinationId`, as a routing pass decides it at T0. */
    const route = async (ep: EpisodeReport, destinationId: string, orgId = ORG, robotId = ROBOT): Promise<RouteRow> => ({
      orgId,
      robotId,
      episodeId: ep.id,
      episodeSeq: await seqOf(ep.id, orgId),
      destinationId,
      decidedAt: T0,
    });

    it('one destination and no rules: every episode but the discarded routes there, in batches, told to onAssigned', async () => {
      const d = await destination();
      const [a, b, c, x] = await ingest([testReport(), testReport(), testReport(), testReport({ outcome: 'discarded' })]);
      const added = await router.routeNew(ORG);
      expect(added.map((r) => r.episodeId)).toEqual([a!.id, b!.id, c!.id]);
      expect(added[0]).toMatchObject({ orgId: ORG, robotId: ROBOT, destinationId: d, decidedAt: T0, episodeSeq: await seqOf(a!.id) });
      expect(assigned.map((batch) => batch.length)).toEqual([2, 1]);
      expect(await routed()).toEqual({ [a!.id]: d, [b!.id]: d, [c!.id]: d });
      expect(x).toBeDefined();
      // Idempotent: nothing new the second time, and the other org is untouched.
      expect(await router.reroute(ORG)).toEqual([]);
      expect(await routed(OTHER)).toEqual({});
    });

    it('no destination: a pass does not read the backlog; the episodes route once a destination exists', async () => {
      const [a] = await ingest([testReport()]);
      const reads: number[] = [];
      const unrouted = store.sync.unroutedEpisodes.bind(store.sync);
      store.sync.unroutedEpisodes = (orgId, after, limit) => {
        reads.push(after);
        return unrouted(orgId, after, limit);
      };
      expect(await router.routeNew(ORG)).toEqual([]);
      expect(await router.reroute(ORG)).toEqual([]);
      expect(reads).toEqual([]);
      const d = await destination();
      expect((await router.routeNew(ORG)).map((r) => `${r.episodeId}>${r.destinationId}`)).toEqual([`${a!.id}>${d}`]);
      expect(reads.length).toBeGreaterThan(0);
    });

    it('several destinations and no rules: nothing routes; a new rule routes the backlog', async () => {
      const d1 = await destination();
      const d2 = await destination();
      const [a, b] = await ingest([testReport({ task_id: 'pick' }), testReport({ task_id: 'place' })]);
      expect(await router.routeNew(ORG)).toEqual([]);
      await store.sync.createRule({ id: 'r1', orgId: ORG, destinationId: d2, match: { task_id: ['place'] }, createdAt: T0 });
      // routeNew looks only at episodes after its last pass; the backlog needs reroute.
      expect(await router.routeNew(ORG)).toEqual([]);
      expect((await router.reroute(ORG)).map((r) => r.episodeId)).toEqual([b!.id]);
      await store.sync.createRule({ id: 'r2', orgId: ORG, destinationId: d1, match: {}, createdAt: T0 });
      expect((await router.reroute(ORG)).map((r) => `${r.episodeId}>${r.destinationId}`)).toEqual([`${a!.id}>${d1}`]);
      // Newly indexed episodes are routed by routeNew.
      const [c] = await ingest([testReport({ task_id: 'place' })]);
      expect((await router.routeNew(ORG)).map((r) => `${r.episodeId}>${r.destinationId}`)).toEqual([`${c!.id}>${d2}`]);
    });

    it('reorder: episodes without a route follow the new order; decided routes stay', async () => {
      const d1 = await destination();
      const d2 = await destination();
      await store.sync.createRule({ id: 'r1', orgId: ORG, destinationId: d1, match: { task_id: ['pick'] }, createdAt: T0 });
      await store.sync.createRule({ id: 'r2', orgId: ORG, destinationId: d2, match: {}, createdAt: T0 });
      const [a] = await ingest([testReport({ task_id: 'pick' })]);
      await router.routeNew(ORG);
      expect(await routed()).toEqual({ [a!.id]: d1 });
      expect(await store.sync.reorderRules(ORG, ['r2', 'r1'])).toBe(true);
      const [b] = await ingest([testReport({ task_id: 'pick' })]);
      await router.reroute(ORG);
      expect(await routed()).toEqual({ [a!.id]: d1, [b!.id]: d2 });
    });

    it('revocation: pending routes are dropped and route again; synced ones stay; the revoked destination gets nothing new', async () => {
      const d1 = await destination();
      const [a, b, c] = await ingest([testReport(), testReport(), testReport()]);
      await router.routeNew(ORG);
      expect(await store.sync.applyReplicaReport(ROBOT, report(a!.id, d1, { state: 'synced' }), T0)).toBe('applied');
      expect(await store.sync.applyReplicaReport(ROBOT, report(b!.id, d1, { state: 'syncing' }), T0)).toBe('applied');
      expect((await store.sync.pendingAssignments(ROBOT)).map((r) => r.episodeId)).toEqual([a!.id, b!.id, c!.id]);

      const d2 = await destination();
      // Two live destinations and no rules: nothing would route, so add one rule for d2.
      await store.sync.createRule({ id: 'r1', orgId: ORG, destinationId: d2, match: {}, createdAt: T0 });
      expect(await store.sync.revokeDestination(ORG, d1, T0 + 1)).toBe(true);
      expect(await store.sync.pendingAssignments(ROBOT)).toEqual([]);
      expect(await store.sync.assignment(ROBOT, a!.id, d1)).toBeUndefined();
      const again = await router.destinationRevoked(ORG, d1);
      expect(again.map((r) => `${r.episodeId}>${r.destinationId}`)).toEqual([`${b!.id}>${d2}`, `${c!.id}>${d2}`]);
      expect(await routed()).toEqual({ [a!.id]: 'revoked', [b!.id]: d2, [c!.id]: d2 });
      // The synced replica at the revoked destination is untouched.
      expect((await store.episodes.get(ORG, a!.id))!.replicas).toEqual([expect.objectContaining({ destinationId: d1, state: 'synced' })]);
      expect(await store.sync.assignment(ROBOT, b!.id, d2)).toMatchObject({ episodeId: b!.id, destinationId: d2 });
      // A route to a revoked destination is never written, even by a pass that decided before the revocation.
      const [e] = await ingest([testReport()]);
      expect(await store.sync.addRoutes([{ orgId: ORG, robotId: ROBOT, episodeId: e!.id, episodeSeq: await seqOf(e!.id), destinationId: d1, decidedAt: T0 }])).toEqual([]);
    });

    it('dropRoutesTo drops the routes to a revoked destination whose replica is not synced or verified, and counts them', async () => {
      const d1 = await destination();
      const d2 = await destination();
      const theirs = await destination(OTHER);
      const [synced, verified, syncing, granted, assigned, elsewhere] = await ingest(Array.from({ length: 6 }, () => testReport()));
      const [other] = await ingest([testReport()], { orgId: OTHER, robotId: 'rbt_9' });
      const routes = [
        ...(await Promise.all([synced!, verified!, syncing!, granted!, assigned!].map((ep) => route(ep, d1)))),
        await route(elsewhere!, d2),
        await route(other!, theirs, OTHER, 'rbt_9'),
      ];
      expect(await store.sync.addRoutes(routes)).toHaveLength(7);
      expect(await store.sync.applyReplicaReport(ROBOT, report(synced!.id, d1, { state: 'synced' }), T0)).toBe('applied');
      expect(await store.sync.applyReplicaReport(ROBOT, report(verified!.id, d1, { state: 'verified' }), T0)).toBe('applied');
      expect(await store.sync.applyReplicaReport(ROBOT, report(syncing!.id, d1, { state: 'syncing', error: 'upload_failed: 503' }), T0)).toBe('applied');
      await store.sync.markGranted(ORG, await seqOf(granted!.id), d1, 'gr_g', null, T0);
      const unrouted = async (orgId = ORG) => (await store.sync.unroutedEpisodes(orgId, 0, 100)).map((u) => u.facts.episode_id);
      expect(await unrouted()).toEqual([]);

      // A live destination's routes are never dropped.
      expect(await store.sync.dropRoutesTo(ORG, d1)).toBe(0);
      expect(await store.sync.dropRoutesTo(ORG, d2)).toBe(0);
      expect((await store.sync.pendingAssignments(ROBOT)).filter((r) => r.destinationId === d1).map((r) => r.episodeId)).toEqual(
        [synced!, syncing!, granted!, assigned!].map((e) => e.id),
      );

      expect(await store.sync.revokeDestination(ORG, d1, T0 + 1)).toBe(true);
      // Another organization's id for it drops nothing.
      expect(await store.sync.dropRoutesTo(OTHER, d1)).toBe(0);
      expect(await unrouted()).toEqual([]);
      // Syncing, granted and not yet granted go; synced and verified stay.
      expect(await store.sync.dropRoutesTo(ORG, d1)).toBe(3);
      expect(await unrouted()).toEqual([syncing!.id, granted!.id, assigned!.id]);
      expect(await store.sync.dropRoutesTo(ORG, d1)).toBe(0);
      // The live destination's routes, and another organization's, are untouched.
      expect((await store.sync.pendingAssignments(ROBOT)).map((r) => `${r.episodeId}>${r.destinationId}`)).toEqual([`${elsewhere!.id}>${d2}`]);
      expect(await store.sync.pendingAssignments('rbt_9')).toEqual([expect.objectContaining({ episodeId: other!.id, destinationId: theirs })]);
      // The replicas themselves are kept.
      expect((await store.episodes.get(ORG, syncing!.id))!.replicas).toEqual([expect.objectContaining({ destinationId: d1, state: 'syncing' })]);

      expect(await store.sync.revokeDestination(OTHER, theirs, T0 + 2)).toBe(true);
      expect(await store.sync.dropRoutesTo(ORG, theirs)).toBe(0);
      expect(await store.sync.dropRoutesTo(OTHER, theirs)).toBe(1);
      expect(await unrouted(OTHER)).toEqual([other!.id]);
    });

    it('replicasByState counts the routed (episode, destination) pairs of every organization by replica state; a route without a replica is assigned', async () => {
      const zero = { assigned: 0, granted: 0, syncing: 0, synced: 0, verified: 0 };
      expect(await store.gauges.replicasByState()).toEqual(zero);
      const d1 = await destination();
      const d2 = await destination();
      const theirs = await destination(OTHER);
      const [a, b, c, e, f, unroutedEp] = await ingest(Array.from({ length: 6 }, () => testReport()));
      const [g] = await ingest([testReport()], { orgId: OTHER, robotId: 'rbt_9' });
      await store.sync.addRoutes([
        await route(a!, d1),
        await route(b!, d1),
        await route(c!, d1),
        await route(e!, d1),
        await route(f!, d2),
        await route(g!, theirs, OTHER, 'rbt_9'),
      ]);
      expect(await store.gauges.replicasByState()).toEqual({ ...zero, assigned: 6 });
      await store.sync.markGranted(ORG, await seqOf(b!.id), d1, 'gr_b', null, T0);
      await store.sync.applyReplicaReport(ROBOT, report(c!.id, d1, { state: 'syncing' }), T0);
      await store.sync.applyReplicaReport(ROBOT, report(e!.id, d1, { state: 'synced' }), T0);
      await store.sync.applyReplicaReport(ROBOT, report(f!.id, d2, { state: 'verified' }), T0);
      await store.sync.applyReplicaReport('rbt_9', report(g!.id, theirs, { state: 'verified' }), T0);
      // A replica without a route (an unrouted episode, or a destination the episode was not routed to) is not counted.
      expect(await store.sync.applyReplicaReport(ROBOT, report(unroutedEp!.id, d1, { state: 'synced' }), T0)).toBe('applied');
      expect(await store.sync.applyReplicaReport(ROBOT, report(a!.id, d2, { state: 'synced' }), T0)).toBe('applied');
      expect(await store.gauges.replicasByState()).toEqual({ assigned: 1, granted: 1, syncing: 1, synced: 1, verified: 2 });
      // A state moving on moves its count.
      await store.sync.applyReplicaReport(ROBOT, report(e!.id, d1, { state: 'verified', at: 2000 }), T0 + 1);
      expect(await store.gauges.replicasByState()).toEqual({ assigned: 1, granted: 1, syncing: 1, synced: 0, verified: 3 });
    });

    it('pending assignments end at verified; assignment() is only the robot\'s own', async () => {
      const d = await destination();
      const [a] = await ingest([testReport()]);
      await router.routeNew(ORG);
      expect(await store.sync.assignment('rbt_other', a!.id, d)).toBeUndefined();
      expect(await store.sync.assignment(ROBOT, a!.id, d)).toMatchObject({ robotId: ROBOT, episodeSeq: await seqOf(a!.id) });
      await store.sync.applyReplicaReport(ROBOT, report(a!.id, d, { state: 'verified' }), T0);
      expect(await store.sync.pendingAssignments(ROBOT)).toEqual([]);
    });
  });

  describe('replica reports', () => {
    let d: string;
    let ep: EpisodeReport;
    beforeEach(async () => {
      d = await destination();
      [ep] = (await ingest([testReport({ recording_session_id: 'rs_9', episode_seq: 4 })])) as [EpisodeReport];
    });
    const replica = async () => (await store.episodes.get(ORG, ep.id))!.replicas;

    it('moves forward only; an earlier state or an older report of the same state changes nothing', async () => {
      expect(await store.sync.applyReplicaReport(ROBOT, report(ep.id, d, { state: 'granted', at: 10 }), T0)).toBe('applied');
      expect(await store.sync.applyReplicaReport(ROBOT, report(ep.id, d, { state: 'synced', at: 30, object_key: 'k/1' }), T0 + 1)).toBe('applied');
      // Out of order: the syncing report arrives after synced.
      expect(await store.sync.applyReplicaReport(ROBOT, report(ep.id, d, { state: 'syncing', at: 20 }), T0 + 2)).toBe('unchanged');
      // The exact repeat of the last report.
      expect(await store.sync.applyReplicaReport(ROBOT, report(ep.id, d, { state: 'synced', at: 30, object_key: 'k/1' }), T0 + 3)).toBe('unchanged');
      // An older report of the same state.
      expect(await store.sync.applyReplicaReport(ROBOT, report(ep.id, d, { state: 'synced', at: 25, grant_id: 'gr_old' }), T0 + 4)).toBe('unchanged');
      expect(await replica()).toEqual([{ destinationId: d, state: 'synced', grantId: 'gr_1', error: null, objectKey: 'k/1', updatedAt: T0 + 1 }]);
      expect((await events()).map((e) => e.type)).toEqual(['episode.synced']);

      expect(await store.sync.applyReplicaReport(ROBOT, report(ep.id, d, { state: 'verified', at: 40 }), T0 + 5)).toBe('applied');
      // The object key reported earlier is kept when a later report carries none.
      expect(await replica()).toEqual([expect.objectContaining({ state: 'verified', objectKey: 'k/1', updatedAt: T0 + 5 })]);
      expect(await store.sync.applyReplicaReport(ROBOT, report(ep.id, d, { state: 'synced', at: 50 }), T0 + 6)).toBe('unchanged');
      expect((await events()).map((e) => e.type)).toEqual(['episode.synced', 'episode.verified']);
    });

    it('every (current, reported) pair: only a transition appends episode.synced / episode.verified; a newer same-state report updates, announcing nothing', async () => {
      for (const [from, to, when, result, appended, after] of REPLICA_TRANSITIONS) {
        const pair = `${from ?? 'none'} -> ${to} (${when})`;
        const [e] = await ingest([testReport()]);
        const mine = async () => (await events()).filter((x) => x.payload.episode_id === e!.id);
        if (from !== null) {
          expect(await store.sync.applyReplicaReport(ROBOT, report(e!.id, d, { state: from, at: 100, grant_id: 'gr_old', object_key: 'k/old' }), T0), pair).toBe('applied');
        }
        const before = (await mine()).length;
        const at = { newer: 200, repeat: 100, older: 50 }[when];
        expect(await store.sync.applyReplicaReport(ROBOT, report(e!.id, d, { state: to, at, grant_id: 'gr_new', object_key: 'k/new' }), T0 + 1), pair).toBe(result);
        const added = (await mine()).slice(before);
        expect(added.map((x) => x.type), pair).toEqual(appended);
        for (const x of added) expect(x.payload, pair).toMatchObject({ destination_id: d, grant_id: 'gr_new', state: x.type === 'episode.synced' ? 'synced' : 'verified' });
        const applied = result === 'applied';
        expect((await store.episodes.get(ORG, e!.id))!.replicas, pair).toEqual([
          { destinationId: d, state: after, grantId: applied ? 'gr_new' : 'gr_old', error: null, objectKey: applied ? 'k/new' : 'k/old', updatedAt: applied ? T0 + 1 : T0 },
        ]);
      }
    });

    it('writes the spec payloads, valid against the protocol schema', async () => {
      await store.sync.applyReplicaReport(ROBOT, report(ep.id, d, { state: 'synced', object_key: 'k/1', at: 1 }), T0);
      await store.sync.applyReplicaReport(ROBOT, report(ep.id, d, { state: 'verified', at: 2 }), T0);
      const all = await events();
      for (const e of all) expect(WebhookPayloadSchema.safeParse(e.payload).success).toBe(true);
      const base = { schema_version: 1, episode_id: ep.id, robot_id: ROBOT, recording_session_id: 'rs_9', episode_seq: 4, destination_id: d, grant_id: 'gr_1', object_key: 'k/1' };
      expect(all).toEqual([
        { type: 'episode.synced', payload: { ...base, state: 'synced' } },
        { type: 'episode.verified', payload: { ...base, state: 'verified' } },
      ]);
      // The events belong to the episode's org: the other organization's subscription got none.
      expect(await events(undefined, OTHER)).toEqual([]);
    });

    it('a jump to verified tells both synced and verified; object_key is left out when unknown', async () => {
      expect(await store.sync.applyReplicaReport(ROBOT, report(ep.id, d, { state: 'verified' }), T0)).toBe('applied');
      expect((await events()).map((e) => [e.type, e.payload.state, 'object_key' in e.payload])).toEqual([
        ['episode.synced', 'synced', false],
        ['episode.verified', 'verified', false],
      ]);
    });

    it('an error keeps the state, is stored, and appends episode.failed with {code, message}; a repeat appends nothing', async () => {
      await store.sync.applyReplicaReport(ROBOT, report(ep.id, d, { state: 'syncing', at: 10 }), T0);
      const failed = report(ep.id, d, { state: 'syncing', at: 20, error: 'upload_failed: PUT recording.mcap answered 403' });
      expect(await store.sync.applyReplicaReport(ROBOT, failed, T0 + 1)).toBe('applied');
      expect(await store.sync.applyReplicaReport(ROBOT, failed, T0 + 2)).toBe('unchanged');
      expect(await replica()).toEqual([expect.objectContaining({ state: 'syncing', error: 'upload_failed: PUT recording.mcap answered 403' })]);
      expect((await events()).map((e) => e.type)).toEqual(['episode.failed']);
      expect((await events())[0]!.payload).toMatchObject({ state: 'syncing', destination_id: d, grant_id: 'gr_1', error: { code: 'upload_failed', message: 'PUT recording.mcap answered 403' } });
      expect(WebhookPayloadSchema.safeParse((await events())[0]!.payload).success).toBe(true);
      // The next attempt succeeds: the error clears.
      expect(await store.sync.applyReplicaReport(ROBOT, report(ep.id, d, { state: 'synced', at: 30 }), T0 + 3)).toBe('applied');
      expect(await replica()).toEqual([expect.objectContaining({ state: 'synced', error: null })]);
      // A failed first report creates the replica in the state it names.
      const [other] = await ingest([testReport()]);
      expect(await store.sync.applyReplicaReport(ROBOT, report(other!.id, d, { state: 'granted', error: 'no colon here' }), T0)).toBe('applied');
      expect((await events('episode.failed')).at(-1)!.payload.error).toEqual({ code: 'failed', message: 'no colon here' });
    });

    it('unknown episode, another robot\'s episode, and a destination outside the org are refused without a write', async () => {
      expect(await store.sync.applyReplicaReport(ROBOT, report('ep_doesnotexist00', d), T0)).toBe('unknown_episode');
      expect(await store.sync.applyReplicaReport('rbt_other', report(ep.id, d), T0)).toBe('conflict');
      const foreign = await destination(OTHER);
      expect(await store.sync.applyReplicaReport(ROBOT, report(ep.id, foreign), T0)).toBe('unknown_destination');
      expect(await store.sync.applyReplicaReport(ROBOT, report(ep.id, 'dst_nope'), T0)).toBe('unknown_destination');
      expect(await replica()).toEqual([]);
      expect(await events()).toEqual([]);
    });

    it('is recorded for a destination of the org the episode is not routed to, and for a revoked one', async () => {
      const other = await destination();
      await store.sync.revokeDestination(ORG, other, T0);
      expect(await store.sync.applyReplicaReport(ROBOT, report(ep.id, other, { state: 'synced' }), T0)).toBe('applied');
      expect(await replica()).toEqual([expect.objectContaining({ destinationId: other, state: 'synced' })]);
    });

    it('markGranted creates a granted replica, takes a new grant while uploading, never moves one back', async () => {
      const seq = await seqOf(ep.id);
      await store.sync.markGranted(OTHER, seq, d, 'g0', null, T0);
      expect(await replica()).toEqual([]);
      await store.sync.markGranted(ORG, seq, d, 'g1', 'k/1', T0);
      expect(await replica()).toEqual([{ destinationId: d, state: 'granted', grantId: 'g1', error: null, objectKey: 'k/1', updatedAt: T0 }]);
      await store.sync.applyReplicaReport(ROBOT, report(ep.id, d, { state: 'syncing', grant_id: 'g1', at: 5 }), T0 + 1);
      await store.sync.markGranted(ORG, seq, d, 'g2', null, T0 + 2);
      expect(await replica()).toEqual([expect.objectContaining({ state: 'syncing', grantId: 'g2', objectKey: 'k/1' })]);
      await store.sync.applyReplicaReport(ROBOT, report(ep.id, d, { state: 'verified', grant_id: 'g2', at: 6 }), T0 + 3);
      await store.sync.markGranted(ORG, seq, d, 'g3', null, T0 + 4);
      expect(await replica()).toEqual([expect.objectContaining({ state: 'verified', grantId: 'g2' })]);
    });

    it("grantIssued is true only for a grant markGranted recorded for that robot's episode and that destination", async () => {
      const seq = await seqOf(ep.id);
      const d2 = await destination();
      const [other] = await ingest([testReport()]);
      const issued = (robotId: string, episodeId: string, destinationId: string, grantId: string) => store.sync.grantIssued(robotId, episodeId, destinationId, grantId);
      expect(await issued(ROBOT, ep.id, d, 'g1')).toBe(false);
      await store.sync.markGranted(ORG, seq, d, 'g1', 'k/1', T0);
      expect(await issued(ROBOT, ep.id, d, 'g1')).toBe(true);
      expect(await issued(ROBOT, ep.id, d, 'g2')).toBe(false);
      expect(await issued(ROBOT, ep.id, d2, 'g1')).toBe(false);
      expect(await issued(ROBOT, other!.id, d, 'g1')).toBe(false);
      expect(await issued('rbt_other', ep.id, d, 'g1')).toBe(false);
      expect(await issued(ROBOT, 'ep_doesnotexist00', d, 'g1')).toBe(false);
      // A robot's report naming a grant id does not make it issued.
      expect(await store.sync.applyReplicaReport(ROBOT, report(ep.id, d2, { state: 'syncing', grant_id: 'g9' }), T0)).toBe('applied');
      expect(await issued(ROBOT, ep.id, d2, 'g9')).toBe(false);
      // Another organization's markGranted for the episode's seq records nothing.
      await store.sync.markGranted(OTHER, seq, d2, 'g4', null, T0);
      expect(await issued(ROBOT, ep.id, d2, 'g4')).toBe(false);
      // Recorded whatever the replica's state: a grant after verified is issued, though the replica keeps its grant id.
      expect(await store.sync.applyReplicaReport(ROBOT, report(ep.id, d, { state: 'verified', grant_id: 'g1', at: 5 }), T0 + 1)).toBe('applied');
      await store.sync.markGranted(ORG, seq, d, 'g3', null, T0 + 2);
      expect(await issued(ROBOT, ep.id, d, 'g3')).toBe(true);
      expect(await issued(ROBOT, ep.id, d, 'g1')).toBe(true);
      expect((await replica()).find((r) => r.destinationId === d)).toMatchObject({ state: 'verified', grantId: 'g1' });
    });

    it('sync_state filters follow the replicas written by reports', async () => {
      const [b] = await ingest([testReport()]);
      const d2 = await destination();
      const list = async (state: 'unverified' | 'synced' | 'verified', destinationId?: string) =>
        (await store.episodes.list(ORG, { eq: {}, metadata: {}, annotation: {}, syncState: { state, ...(destinationId ? { destinationId } : {}) } }, 0, 10)).map((e) => e.id);
      await store.sync.applyReplicaReport(ROBOT, report(ep.id, d, { state: 'synced', at: 1 }), T0);
      await store.sync.applyReplicaReport(ROBOT, report(b!.id, d2, { state: 'verified', at: 1 }), T0);
      expect(await list('synced')).toEqual([ep.id, b!.id]);
      expect(await list('verified')).toEqual([b!.id]);
      expect(await list('unverified')).toEqual([ep.id]);
      expect(await list('unverified', d2)).toEqual([ep.id]);
      expect(await list('unverified', d)).toEqual([ep.id, b!.id]);
      // An out-of-order older report does not take verified back.
      await store.sync.applyReplicaReport(ROBOT, report(b!.id, d2, { state: 'syncing', at: 0 }), T0);
      expect(await list('verified')).toEqual([b!.id]);
    });
  });

  describe('sync health', () => {
    it('counts per robot from the replicas, with the 72 h boundary on reported_at, bytes, local_missing and pressure', async () => {
      const d = await destination();
      const manifest = (n: number) => ({ files: [], total_bytes: n });
      const [old1, old2, verified] = await ingest([testReport({ manifest: manifest(100) }), testReport({ manifest: manifest(20) }), testReport({ manifest: manifest(1000) })], { reportedAt: T0 });
      await ingest([testReport({ outcome: 'discarded', manifest: manifest(5) })], { reportedAt: T0 });
      await ingest([testReport({ manifest: manifest(3) })], { reportedAt: T0 + HOUR });
      await ingest([testReport({ manifest: manifest(7) })], { robotId: 'rbt_2', reportedAt: T0 });
      await ingest([testReport()], { orgId: OTHER, robotId: 'rbt_9', reportedAt: T0 });
      await store.sync.applyReplicaReport(ROBOT, report(verified!.id, d, { state: 'verified' }), T0);
      await store.sync.applyReplicaReport(ROBOT, report(old2!.id, d, { state: 'synced' }), T0);
      expect(await store.sync.markLocalMissing(ROBOT, old1!.id)).toBe('applied');
      expect(await store.sync.markLocalMissing(ROBOT, old1!.id)).toBe('unchanged');
      expect(await store.sync.markLocalMissing('rbt_2', old1!.id)).toBe('conflict');
      expect(await store.sync.markLocalMissing(ROBOT, 'ep_nope000000000')).toBe('unknown_episode');
      await store.sync.notePressure(ROBOT, { free_bytes: 10, backlog_bytes: 123, hours_to_full: 4.5 }, T0 + 5);
      // An older pressure report does not replace a newer one.
      await store.sync.notePressure(ROBOT, { free_bytes: 99, backlog_bytes: 0, hours_to_full: null }, T0 + 1);

      const row = (now: number) => store.sync.syncHealth(ORG, now);
      const at72 = await row(T0 + 72 * HOUR);
      expect(at72).toEqual([
        {
          robotId: ROBOT,
          episodesReported: 5,
          unverified: 3,
          unverifiedOver72h: 0,
          bytesUnverified: 123,
          localMissing: 1,
          pressure: { free_bytes: 10, backlog_bytes: 123, hours_to_full: 4.5, reportedAt: T0 + 5 },
        },
        { robotId: 'rbt_2', episodesReported: 1, unverified: 1, unverifiedOver72h: 0, bytesUnverified: 7, localMissing: 0, pressure: null },
      ]);
      // One millisecond past 72 h the episodes reported at T0 are over; the one reported an hour later is not.
      expect((await row(T0 + 72 * HOUR + 1)).map((r) => r.unverifiedOver72h)).toEqual([2, 1]);
      expect((await row(T0 + 73 * HOUR + 1)).map((r) => r.unverifiedOver72h)).toEqual([3, 1]);
      expect((await store.sync.syncHealth(OTHER, T0)).map((r) => r.robotId)).toEqual(['rbt_9']);
    });

    it('answers only the robots asked for, by id, with their counts and pressure unchanged', async () => {
      await ingest([testReport({ manifest: { files: [], total_bytes: 10 } }), testReport()], { reportedAt: T0 });
      await ingest([testReport()], { robotId: 'rbt_2', reportedAt: T0 });
      await ingest([testReport()], { robotId: 'rbt_3', reportedAt: T0 });
      await ingest([testReport()], { orgId: OTHER, robotId: 'rbt_9', reportedAt: T0 });
      await store.sync.notePressure(ROBOT, { free_bytes: 10, backlog_bytes: 1, hours_to_full: 2 }, T0);
      const all = await store.sync.syncHealth(ORG, T0);
      expect(all.map((r) => r.robotId)).toEqual([ROBOT, 'rbt_2', 'rbt_3']);
      const some = await store.sync.syncHealth(ORG, T0, { robotIds: ['rbt_3', ROBOT, 'rbt_unknown', 'rbt_9'] });
      expect(some).toEqual([all[0], all[2]]);
      expect(some[0]).toMatchObject({ episodesReported: 2, bytesUnverified: 10, pressure: { hours_to_full: 2 } });
      expect(await store.sync.syncHealth(ORG, T0, { robotIds: [] })).toEqual([]);
    });
  });

  describe('pruned local copies', () => {
    it('the first report sets pruned_at and appends one episode.pruned without destination_id; repeats change nothing', async () => {
      const [ep] = await ingest([testReport()]);
      expect(await store.sync.markPruned(ROBOT, ep!.id, T0 + 72 * HOUR, T0 + 72 * HOUR + 5)).toBe('applied');
      // The robot resends (an acknowledgment lost) or reports again after a restart.
      expect(await store.sync.markPruned(ROBOT, ep!.id, T0 + 72 * HOUR, T0 + 72 * HOUR + 9)).toBe('unchanged');
      expect(await store.sync.markPruned(ROBOT, ep!.id, T0 + 80 * HOUR, T0 + 80 * HOUR)).toBe('unchanged');
      expect(await store.sync.markPruned('rbt_2', ep!.id, T0, T0)).toBe('conflict');
      expect(await store.sync.markPruned(ROBOT, 'ep_nope000000000', T0, T0)).toBe('unknown_episode');
      const pruned = await events('episode.pruned');
      expect(pruned).toHaveLength(1);
      expect(pruned[0]!.payload).toEqual({ schema_version: 1, episode_id: ep!.id, robot_id: ROBOT, recording_session_id: ep!.recording_session_id, episode_seq: ep!.episode_seq, state: 'pruned' });
      expect(WebhookPayloadSchema.safeParse(pruned[0]!.payload).success).toBe(true);
      expect(await events(undefined, OTHER)).toEqual([]);
      // pruned_at is not part of any read (SQLite's table, as an example of both).
      if (engine === 'sqlite') expect(sqliteDb(store).prepare('SELECT pruned_at FROM episodes WHERE id = ?').pluck().get(ep!.id)).toBe(T0 + 72 * HOUR);
    });
  });
});

/** Writes two replicas make at once on one database (SQLite: one store, its writes in turn). */
describeStore('SyncStore, two replicas at once', (open, engine) => {
  let store: TestStore;
  let other: Store;

  beforeEach(async () => {
    store = await open();
    other = engine === 'postgres' ? await openTwin(store) : store;
    await store.orgs.create({ id: ORG, name: ORG, tier: 'enterprise', createdAt: T0 });
    await store.sync.createDestination({ id: 'dst_1', orgId: ORG, type: 'external', url: 'https://grants.example.com/1', secretSealed: 's', retention: 'keep', createdAt: T0 });
  });
  afterEach(async () => {
    if (other !== store) await other.close();
    await store.close();
  });

  it('a grant id is claimed by exactly one of many claims at once', async () => {
    const claims = await Promise.all(Array.from({ length: 12 }, (_, i) => (i % 2 ? other : store).sync.claimGrantId('dst_1', 'gr_same', T0 + i)));
    expect(claims.filter(Boolean)).toHaveLength(1);
  });

  it('rules created at once get positions 1..n', async () => {
    await Promise.all(
      Array.from({ length: 10 }, (_, i) => (i % 2 ? other : store).sync.createRule({ id: `r${i}`, orgId: ORG, destinationId: 'dst_1', match: {}, createdAt: T0 })),
    );
    expect((await store.sync.listRules(ORG)).map((r) => r.position)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
  });

  it('the same routes written by both at once are written once, each told to exactly one writer', async () => {
    const reports = Array.from({ length: 20 }, () => testReport());
    await store.episodes.ingest(reports.map((report) => ({ orgId: ORG, robotId: ROBOT, report, reportedAt: T0 })));
    const routes = await Promise.all(
      reports.map(async (r) => ({ orgId: ORG, robotId: ROBOT, episodeId: r.id, episodeSeq: (await store.episodes.get(ORG, r.id))!.seq, destinationId: 'dst_1', decidedAt: T0 })),
    );
    const written = await Promise.all([store.sync.addRoutes(routes), other.sync.addRoutes(routes), store.sync.addRoutes(routes.slice(5)), other.sync.addRoutes(routes.slice(0, 7))]);
    expect(written.flat().map((r) => r.episodeId).sort()).toEqual(reports.map((r) => r.id).sort());
    expect((await store.sync.pendingAssignments(ROBOT)).map((r) => r.episodeId)).toEqual(reports.map((r) => r.id));
  });
});

const engines: TestEngine[] = postgresAvailable() ? ['sqlite', 'postgres'] : ['sqlite'];

/** Two processes on one database: PostgreSQL pools, or two SQLite connections on one data directory. */
describe.each(engines)('SyncStore forward claims across processes [%s]', (engine) => {
  let dir: string;
  let store: TestStore;
  let twin: Store;

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'fleet-forward-claims-'));
    store = await openTestStore(engine, { dataDir: dir });
    twin = await openTwin(store);
    await store.orgs.create({ id: ORG, name: ORG, tier: 'enterprise', createdAt: T0 });
    await store.sync.createDestination({ id: 'dst_1', orgId: ORG, type: 'external', url: 'https://grants.example.com/1', secretSealed: 's', retention: 'keep', createdAt: T0 });
  });
  afterEach(async () => {
    await twin.close();
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('of many claims at once on both, exactly one gets (episode, destination); after its release exactly one again', async () => {
    const reports = Array.from({ length: 3 }, () => testReport());
    await store.episodes.ingest(reports.map((report) => ({ orgId: ORG, robotId: ROBOT, report, reportedAt: T0 })));
    for (const r of reports) {
      const seq = (await store.episodes.get(ORG, r.id))!.seq;
      const race = () => Promise.all(Array.from({ length: 10 }, (_, i) => (i % 2 ? twin : store).sync.claimForward(ORG, seq, 'dst_1', T0 + 100, 15_000)));
      const claims = await race();
      const won = claims.filter((c) => c.kind === 'claimed');
      expect(won).toHaveLength(1);
      expect(claims.filter((c) => c.kind === 'held').map((c) => c.until)).toEqual(Array.from({ length: 9 }, () => T0 + 15_100));
      // Released by the other process than the one that claimed it: the token decides, not the process.
      expect(await twin.sync.releaseForward(ORG, seq, 'dst_1', (won[0] as { token: string }).token)).toBe(true);
      expect((await race()).filter((c) => c.kind === 'claimed')).toHaveLength(1);
    }
  });

  it('a claim held by a process that died is taken over by exactly one once its lease ran out', async () => {
    const report = testReport();
    await store.episodes.ingest([{ orgId: ORG, robotId: ROBOT, report, reportedAt: T0 }]);
    const seq = (await store.episodes.get(ORG, report.id))!.seq;
    expect(await twin.sync.claimForward(ORG, seq, 'dst_1', T0, 15_000)).toMatchObject({ kind: 'claimed' });
    const before = await Promise.all([store.sync.claimForward(ORG, seq, 'dst_1', T0 + 14_999, 15_000), store.sync.claimForward(ORG, seq, 'dst_1', T0 + 14_999, 15_000)]);
    expect(before).toEqual([{ kind: 'held', until: T0 + 15_000 }, { kind: 'held', until: T0 + 15_000 }]);
    const after = await Promise.all(Array.from({ length: 6 }, (_, i) => (i % 2 ? twin : store).sync.claimForward(ORG, seq, 'dst_1', T0 + 15_000, 15_000)));
    expect(after.filter((c) => c.kind === 'claimed')).toHaveLength(1);
  });
});
