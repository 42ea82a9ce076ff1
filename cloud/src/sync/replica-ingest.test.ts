import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { pino } from 'pino';
import { ManualClock, OUTBOX_BATCH_MAX, type OutboxAck, type ReplicaReport } from '@fleet/protocol';
import { OutboxRouter } from '../robots/outbox-router.js';
import { MIGRATIONS } from '../store/sqlite/migrations.js';
import { PG_MIGRATIONS } from '../store/postgres/migrations.js';
import type { PgStore } from '../store/postgres/store.js';
import { describeStore, openTestStore, openTwin, postgresAvailable, sqliteDb, type TestEngine, type TestStore } from '../store/test-store.js';
import { testReport } from '../test-support.js';
import { ReplicaStateHandler } from './replica-ingest.js';

/** The acknowledgments of one publish, each checked to say the cloud takes batches and then compared without that field. */
function answered(published: OutboxAck | { acks: OutboxAck[] }): OutboxAck[] {
  return ('acks' in published ? published.acks : [published]).map(({ batch_max, ...ack }) => {
    expect(batch_max).toBe(OUTBOX_BATCH_MAX);
    return ack;
  });
}


const T0 = Date.parse('2026-01-01T00:00:00Z');
const ORG = 'org_a';
const ROBOT = 'rbt_1';

describeStore('replica.state outbox kind', (open) => {
  let store: TestStore;
  let clock: ManualClock;
  let acks: OutboxAck[];
  let counted: string[];
  let logs: Record<string, unknown>[];
  let router: OutboxRouter;
  let d1: string;
  let d2: string;

  beforeEach(async () => {
    store = await open();
    clock = new ManualClock(T0);
    acks = [];
    counted = [];
    logs = [];
    await store.orgs.create({ id: ORG, name: ORG, tier: 'enterprise', createdAt: T0 });
    await store.webhooks.create({ id: 'whk_1', orgId: ORG, url: 'https://hooks.test/x', events: ['episode.synced', 'episode.verified'], secretSealed: 's', createdAt: T0 }, 10);
    for (const id of ['dst_1', 'dst_2']) {
      await store.sync.createDestination({ id, orgId: ORG, type: 'external', url: `https://grants.example.com/${id}`, secretSealed: 's', retention: 'keep', createdAt: T0 });
    }
    [d1, d2] = ['dst_1', 'dst_2'];
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        logs.push(JSON.parse(chunk.toString()) as Record<string, unknown>);
        done();
      },
    });
    const logger = pino({ level: 'info' }, sink);
    router = new OutboxRouter({
      logger,
      ack: async (_robotId, ack) => void acks.push(...answered(ack)),
      handlers: { 'replica.state': new ReplicaStateHandler({ store, clock, logger }) },
      metrics: { outboxAck: (kind, result) => void counted.push(`${kind}:${result}`) },
    });
  });
  afterEach(async () => {
    await store.close();
  });

  async function indexed(robotId = ROBOT) {
    const report = testReport();
    await store.episodes.ingest([{ orgId: ORG, robotId, report, reportedAt: T0 }]);
    return { id: report.id, seq: (await store.episodes.get(ORG, report.id))!.seq };
  }
  const send = (msgId: string, body: ReplicaReport, robotId = ROBOT) => router.submit(robotId, Buffer.from(JSON.stringify({ msg_id: msgId, kind: 'replica.state', body })));
  const verified = (episodeId: string, destinationId: string, grantId: string): ReplicaReport => ({
    episode_id: episodeId,
    destination_id: destinationId,
    grant_id: grantId,
    state: 'verified',
    error: null,
    object_key: 'k/1',
    at: 10,
  });
  /** Event types of the log, oldest first (fanned out, then taken off the subscription's queue). */
  async function events(): Promise<string[]> {
    await store.webhooks.fanOut(clock.now());
    const out: string[] = [];
    for (let d = await store.webhooks.dueHead('whk_1', clock.now(), 1000); d; d = await store.webhooks.dueHead('whk_1', clock.now(), 1000)) {
      out.push(d.eventType);
      await store.webhooks.record(d.id, { kind: 'delivered', status: 200, at: clock.now() }, d.claim);
    }
    return out;
  }

  it('verified for a grant the relay never issued for that robot, episode and destination: refused, logged, counted; nothing moves', async () => {
    const ep = await indexed();
    const other = await indexed();
    const foreign = await indexed('rbt_2');
    // Grants the relay did issue, each for something else than the report names.
    await store.sync.markGranted(ORG, other.seq, d1, 'gr_other_episode', null, T0);
    await store.sync.markGranted(ORG, ep.seq, d2, 'gr_other_destination', null, T0);
    await store.sync.markGranted(ORG, foreign.seq, d1, 'gr_other_robot', null, T0);

    const forged = [
      verified(ep.id, d1, 'gr_never_issued'),
      verified(ep.id, d1, 'gr_other_episode'),
      verified(ep.id, d1, 'gr_other_destination'),
      verified(ep.id, d1, 'gr_other_robot'),
    ];
    for (const [i, body] of forged.entries()) await send(`m${i}`, body);
    // Another robot reporting under a grant issued for someone else's episode.
    await send('m-foreign', verified(foreign.id, d1, 'gr_other_robot'), ROBOT);

    const refusal = { ok: false, error: { code: 'unknown_grant', message: expect.any(String) as string } };
    expect(acks).toEqual([...forged.map((_b, i) => ({ msg_id: `m${i}`, ...refusal })), { msg_id: 'm-foreign', ...refusal }]);
    expect(counted).toEqual(acks.map(() => 'replica.state:refused'));
    const refused = logs.filter((l) => l.msg === 'refused replica report for a grant the relay did not issue');
    expect(refused.map((l) => l.grant_id)).toEqual(['gr_never_issued', 'gr_other_episode', 'gr_other_destination', 'gr_other_robot', 'gr_other_robot']);
    expect(refused[0]).toMatchObject({ level: 40, robot_id: ROBOT, episode_id: ep.id, destination_id: d1, state: 'verified' });
    expect((await store.episodes.get(ORG, ep.id))!.replicas.filter((r) => r.destinationId === d1)).toEqual([]);
    expect(await events()).toEqual([]);
  });

  it('a report under a grant the relay issued (any of the replica\'s grants) is applied', async () => {
    const ep = await indexed();
    await store.sync.markGranted(ORG, ep.seq, d1, 'gr_first', null, T0);
    // URLs expired, the robot asked again: a second grant for the same replica.
    await store.sync.markGranted(ORG, ep.seq, d1, 'gr_second', null, T0 + 1);
    await send('m1', { ...verified(ep.id, d1, 'gr_first'), state: 'synced' });
    await send('m2', verified(ep.id, d1, 'gr_second'));
    expect(acks).toEqual([
      { msg_id: 'm1', ok: true },
      { msg_id: 'm2', ok: true },
    ]);
    expect(counted).toEqual(['replica.state:ok', 'replica.state:ok']);
    expect((await store.episodes.get(ORG, ep.id))!.replicas).toEqual([expect.objectContaining({ destinationId: d1, state: 'verified', grantId: 'gr_second' })]);
    expect(await events()).toEqual(['episode.synced', 'episode.verified']);
  });
});

describe.each((postgresAvailable() ? ['sqlite', 'postgres'] : ['sqlite']) as TestEngine[])('the upgrade that records issued grants [%s]', (engine) => {
  it('counts the grant each replica already names as issued, so uploads under way keep reporting', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'fleet-issued-grants-'));
    const store = await openTestStore(engine, engine === 'sqlite' ? { dataDir: dir } : {});
    try {
      await store.orgs.create({ id: ORG, name: ORG, tier: 'enterprise', createdAt: T0 });
      await store.sync.createDestination({ id: 'dst_1', orgId: ORG, type: 'external', url: 'https://grants.example.com/1', secretSealed: 's', retention: 'keep', createdAt: T0 });
      const report = testReport();
      await store.episodes.ingest([{ orgId: ORG, robotId: ROBOT, report, reportedAt: T0 }]);
      const body: ReplicaReport = { episode_id: report.id, destination_id: 'dst_1', grant_id: 'gr_before', state: 'syncing', error: null, object_key: null, at: 1 };
      expect(await store.sync.applyReplicaReport(ROBOT, body, T0)).toBe('applied');
      // The database as the previous version left it: no record of issued grants.
      if (engine === 'sqlite') {
        const version = MIGRATIONS.find((m) => m.name.startsWith('issued grants'))!.version;
        sqliteDb(store).exec(`DROP TABLE issued_grants; DELETE FROM schema_migrations WHERE version = ${version}`);
      } else {
        const version = PG_MIGRATIONS.find((m) => m.name.startsWith('issued grants'))!.version;
        await (store as PgStore).db.query(`DROP TABLE issued_grants; DELETE FROM schema_migrations WHERE version = ${version}`);
      }
      const upgraded = await openTwin(store);
      try {
        expect(await upgraded.sync.grantIssued(ROBOT, report.id, 'dst_1', 'gr_before')).toBe(true);
        expect(await upgraded.sync.grantIssued(ROBOT, report.id, 'dst_1', 'gr_other')).toBe(false);
        expect(await upgraded.sync.grantIssued('rbt_2', report.id, 'dst_1', 'gr_before')).toBe(false);
      } finally {
        await upgraded.close();
      }
    } finally {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
