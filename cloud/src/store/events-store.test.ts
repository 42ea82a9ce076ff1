import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ManualClock, type RobotStatusPayload, type WebhookPayload } from '@fleet/protocol';
import { robotStatusEvent } from '../rules/events.js';
import { createEnrollmentToken, enrollRobot } from '../robots/enrollment.js';
import { testReport } from '../test-support.js';
import { describeStore, type TestStore } from './test-store.js';
import type { EventRow } from './shared/types.js';

const T0 = Date.parse('2026-01-01T00:00:00Z');

/**
 * The event log as the event stream reads it, on every engine: an organization's events after
 * an id, in id order, filtered by type and robot on the `(org_id, id)` index, and the robot.status
 * events the store appends when a status changes presence or the recording state.
 */
describeStore('event log reads', (open) => {
  let store: TestStore;
  let clock: ManualClock;

  beforeEach(async () => {
    clock = new ManualClock(T0);
    store = await open();
    for (const id of ['org_a', 'org_b']) await store.orgs.create({ id, name: id, tier: 'enterprise', createdAt: T0 });
  });
  afterEach(async () => {
    await store.close();
  });

  async function robotsOf(orgId: string, count: number): Promise<string[]> {
    const org = (await store.orgs.get(orgId))!;
    const t = await createEnrollmentToken(store, clock, { org, createdBy: 'test', maxUses: count });
    const ids: string[] = [];
    for (let i = 0; i < count; i++) ids.push((await enrollRobot(store, clock, { token: t.token }, ['mqtt://x'])).robot_id);
    return ids;
  }

  async function finalized(orgId: string, robotId: string): Promise<string> {
    const r = testReport();
    clock.advance(1000);
    await store.episodes.ingest([{ orgId, robotId, report: r, reportedAt: clock.now() }]);
    return r.id;
  }

  const status = (robotId: string, connected: boolean, recordingState?: 'idle' | 'recording') => {
    clock.advance(1000);
    return store.robots.updateStatus(robotId, { connected, ...(recordingState ? { recordingState } : {}), seenAt: clock.now() }, robotStatusEvent);
  };

  const payloads = (rows: EventRow[]) => rows.map((r) => JSON.parse(r.payload) as Record<string, unknown>);

  describe('listAfter and latestId', () => {
    it("reads one organization's events after an id, in id order, never another organization's", async () => {
      const [a] = await robotsOf('org_a', 1);
      const [b] = await robotsOf('org_b', 1);
      expect(await store.events.latestId('org_a')).toBe(0);
      expect(await store.events.listAfter('org_a', 0, { limit: 10 })).toEqual([]);
      const epA1 = await finalized('org_a', a!);
      await finalized('org_b', b!);
      const epA2 = await finalized('org_a', a!);
      const rows = await store.events.listAfter('org_a', 0, { limit: 10 });
      expect(rows.map((r) => r.type)).toEqual(['episode.finalized', 'episode.finalized']);
      expect(payloads(rows).map((p) => p.episode_id)).toEqual([epA1, epA2]);
      expect(rows[0]!.id).toBeLessThan(rows[1]!.id);
      // The payload is the stored text, as webhooks send it.
      expect(JSON.parse(rows[0]!.payload) as WebhookPayload).toMatchObject({ schema_version: 1, episode_id: epA1, robot_id: a, state: 'reported' });
      expect(await store.events.latestId('org_a')).toBe(rows[1]!.id);
      expect(await store.events.latestId('org_b')).toBeLessThan(rows[1]!.id);
      expect(await store.events.listAfter('org_a', rows[1]!.id, { limit: 10 })).toEqual([]);
      expect(payloads(await store.events.listAfter('org_b', 0, { limit: 10 })).map((p) => p.robot_id)).toEqual([b]);
      expect(await store.events.listAfter('org_none', 0, { limit: 10 })).toEqual([]);
    });

    it('pages on the last id: every event once, none repeated', async () => {
      const [a] = await robotsOf('org_a', 1);
      const made: string[] = [];
      for (let i = 0; i < 7; i++) made.push(await finalized('org_a', a!));
      const seen: string[] = [];
      let after = 0;
      for (;;) {
        const page = await store.events.listAfter('org_a', after, { limit: 3 });
        seen.push(...payloads(page).map((p) => p.episode_id as string));
        if (page.length < 3) break;
        after = page[page.length - 1]!.id;
      }
      expect(seen).toEqual(made);
    });

    it('filters by type and by robot, and stops at upTo', async () => {
      const [r1, r2] = await robotsOf('org_a', 2);
      await status(r1!, true, 'idle');
      const ep1 = await finalized('org_a', r1!);
      await status(r2!, true, 'idle');
      const ep2 = await finalized('org_a', r2!);
      await status(r1!, true, 'recording');
      const all = await store.events.listAfter('org_a', 0, { limit: 100 });
      expect(all.map((r) => r.type)).toEqual(['robot.status', 'episode.finalized', 'robot.status', 'episode.finalized', 'robot.status']);

      const episodes = await store.events.listAfter('org_a', 0, { limit: 100, types: ['episode.finalized', 'episode.synced'] });
      expect(payloads(episodes).map((p) => p.episode_id)).toEqual([ep1, ep2]);
      const statuses = await store.events.listAfter('org_a', 0, { limit: 100, types: ['robot.status'] });
      expect(payloads(statuses).map((p) => [p.robot_id, p.recording_state])).toEqual([
        [r1, 'idle'],
        [r2, 'idle'],
        [r1, 'recording'],
      ]);
      expect(await store.events.listAfter('org_a', 0, { limit: 100, types: [] })).toEqual([]);

      const ofR2 = await store.events.listAfter('org_a', 0, { limit: 100, robotId: r2! });
      expect(ofR2.map((r) => r.type)).toEqual(['robot.status', 'episode.finalized']);
      expect(payloads(ofR2).every((p) => p.robot_id === r2)).toBe(true);
      const both = await store.events.listAfter('org_a', 0, { limit: 100, robotId: r1!, types: ['robot.status'] });
      expect(both.map((r) => r.id)).toEqual([all[0]!.id, all[4]!.id]);
      // Another organization's robot id matches nothing here.
      expect(await store.events.listAfter('org_b', 0, { limit: 100, robotId: r1! })).toEqual([]);

      // upTo is inclusive; a filtered page ends where the range ends.
      expect((await store.events.listAfter('org_a', 0, { limit: 100, upTo: all[2]!.id })).map((r) => r.id)).toEqual(all.slice(0, 3).map((r) => r.id));
      expect((await store.events.listAfter('org_a', all[0]!.id, { limit: 100, upTo: all[3]!.id, robotId: r1! })).map((r) => r.id)).toEqual([all[1]!.id]);
    });
  });

  describe('robot.status', () => {
    it('is logged when presence or the recording state changes, not when only the rest of a status does', async () => {
      const [r] = await robotsOf('org_a', 1);
      expect(await status(r!, true, 'idle')).toBe(true);
      // The same state again (a robot's periodic status, or a second replica writing it): no event.
      expect(await status(r!, true, 'idle')).toBe(false);
      clock.advance(1000);
      expect(await store.robots.updateStatus(r!, { connected: true, runtimeVersion: '2.0.0', seenAt: clock.now() }, robotStatusEvent)).toBe(false);
      expect(await status(r!, true, 'recording')).toBe(true);
      expect(await status(r!, false)).toBe(true);
      // Without a builder the change is written and reported, and nothing is logged.
      clock.advance(1000);
      expect(await store.robots.updateStatus(r!, { connected: true, seenAt: clock.now() })).toBe(true);

      const rows = await store.events.listAfter('org_a', 0, { limit: 100 });
      expect(rows.map((e) => e.type)).toEqual(['robot.status', 'robot.status', 'robot.status']);
      expect(payloads(rows) as RobotStatusPayload[]).toEqual([
        { schema_version: 1, robot_id: r, online: true, recording_state: 'idle', last_seen_at: new Date(T0 + 1000).toISOString() },
        { schema_version: 1, robot_id: r, online: true, recording_state: 'recording', last_seen_at: new Date(T0 + 4000).toISOString() },
        { schema_version: 1, robot_id: r, online: false, recording_state: 'recording', last_seen_at: new Date(T0 + 5000).toISOString() },
      ]);
      const robot = await store.robots.get('org_a', r!);
      expect(robot).toMatchObject({ connected: true, recordingState: 'recording', runtimeVersion: '2.0.0' });
    });

    it("orders a robot's statuses by its clock: a late copy changes nothing, a will and a clock set back are written", async () => {
      const [r] = await robotsOf('org_a', 1);
      // What a second replica that is behind writes: statuses the first one already wrote.
      const robotStatus = (at: number, online: boolean, recordingState?: 'idle' | 'recording') => {
        clock.advance(1000);
        return store.robots.updateStatus(r!, { connected: online, ...(recordingState ? { recordingState } : {}), seenAt: clock.now(), status: { at, online } }, robotStatusEvent);
      };
      const R = T0 + 60_000;
      expect(await robotStatus(R, true, 'idle')).toBe(true);
      expect(await robotStatus(R + 10, true, 'recording')).toBe(true);
      expect(await robotStatus(R + 20, true, 'idle')).toBe(true);
      // Late copies of the first two: nothing changes, nothing is logged, last seen still moves.
      expect(await robotStatus(R + 10, true, 'recording')).toBe(false);
      expect(await robotStatus(R, true, 'idle')).toBe(false);
      expect(await store.robots.get('org_a', r!)).toMatchObject({ connected: true, recordingState: 'idle', lastSeenAt: clock.now() });
      // The same instant twice (two statuses published in one millisecond) is written.
      expect(await robotStatus(R + 20, true, 'recording')).toBe(true);
      // A last will carries the time of the connection attempt, older than the statuses: written.
      expect(await robotStatus(R - 5, false)).toBe(true);
      // A late copy of the connection's last status after the will: the robot stays offline.
      expect(await robotStatus(R + 20, true, 'recording')).toBe(false);
      expect(await store.robots.get('org_a', r!)).toMatchObject({ connected: false });
      // The next connection's status is newer.
      expect(await robotStatus(R + 30, true, 'idle')).toBe(true);
      // The robot's clock set back by an hour (an NTP step): followed from there.
      expect(await robotStatus(R + 30 - 3_600_000, true, 'recording')).toBe(true);
      expect(await robotStatus(R + 40 - 3_600_000, true, 'idle')).toBe(true);
      expect(await robotStatus(R + 35 - 3_600_000, true, 'recording')).toBe(false);
      // Presence the cloud saw (no robot status) is written whatever the order.
      clock.advance(1000);
      expect(await store.robots.updateStatus(r!, { connected: false, seenAt: clock.now() }, robotStatusEvent)).toBe(true);

      const states = payloads(await store.events.listAfter('org_a', 0, { limit: 100 })).map((p) => [p.online, p.recording_state]);
      expect(states).toEqual([
        [true, 'idle'],
        [true, 'recording'],
        [true, 'idle'],
        [true, 'recording'],
        [false, 'recording'],
        [true, 'idle'],
        [true, 'recording'],
        [true, 'idle'],
        [false, 'idle'],
      ]);
    });

    it("statuses of many robots at once, three per robot: each robot ends in its last state, each change logged once, in each robot's order", async () => {
      const ids = await robotsOf('org_a', 40);
      const seen = clock.now() + 1000;
      const writes = ids.flatMap((id) => [
        store.robots.updateStatus(id, { connected: true, recordingState: 'idle', seenAt: seen }, robotStatusEvent),
        store.robots.updateStatus(id, { connected: true, recordingState: 'recording', seenAt: seen + 1 }, robotStatusEvent),
        store.robots.updateStatus(id, { connected: false, seenAt: seen + 2 }, robotStatusEvent),
      ]);
      expect(await Promise.all(writes)).toEqual(writes.map(() => true));
      const rows = payloads(await store.events.listAfter('org_a', 0, { limit: 1000 })) as RobotStatusPayload[];
      expect(rows).toHaveLength(120);
      for (const id of ids) {
        expect(rows.filter((p) => p.robot_id === id).map((p) => [p.online, p.recording_state])).toEqual([
          [true, 'idle'],
          [true, 'recording'],
          [false, 'recording'],
        ]);
        expect(await store.robots.get('org_a', id)).toMatchObject({ connected: false, recordingState: 'recording', lastSeenAt: seen + 2 });
      }
    });

    it('is not logged for an unknown or a de-enrolled robot', async () => {
      const [r] = await robotsOf('org_a', 1);
      expect(await status('rbt_unknown', true, 'idle')).toBe(false);
      await store.robots.deenroll('org_a', r!, clock.now());
      expect(await status(r!, true, 'idle')).toBe(false);
      expect(await store.events.listAfter('org_a', 0, { limit: 100 })).toEqual([]);
    });

    it('marks every connected robot offline with its event when the embedded broker starts', async () => {
      const [r1, r2] = await robotsOf('org_a', 2);
      const [b] = await robotsOf('org_b', 1);
      await status(r1!, true, 'recording');
      await status(b!, true, 'idle');
      const before = await store.events.latestId('org_a');
      await store.robots.markAllDisconnected({ at: T0 + 60_000, logChange: robotStatusEvent });
      const a = await store.events.listAfter('org_a', before, { limit: 100 });
      expect(payloads(a)).toEqual([{ schema_version: 1, robot_id: r1, online: false, recording_state: 'recording', last_seen_at: expect.any(String) as unknown }]);
      expect(payloads(await store.events.listAfter('org_b', 0, { limit: 100 })).map((p) => p.online)).toEqual([true, false]);
      expect((await store.robots.get('org_a', r2!))?.connected).toBe(false);
      // Nobody connected any more: a second start logs nothing.
      const top = await store.events.latestId('org_a');
      await store.robots.markAllDisconnected({ at: T0 + 70_000, logChange: robotStatusEvent });
      expect(await store.events.latestId('org_a')).toBe(top);
    });
  });
});
