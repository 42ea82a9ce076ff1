import { afterEach, beforeEach, expect, it } from 'vitest';
import { pino } from 'pino';
import { HOUR, ManualClock, OUTBOX_BATCH_MAX, type OutboxAck } from '@fleet/protocol';
import { OutboxRouter } from '../robots/outbox-router.js';
import { describeStore, type TestStore } from '../store/test-store.js';
import { testReport } from '../test-support.js';
import { EpisodePrunedHandler, LocalMissingHandler } from './local-copy-ingest.js';

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

describeStore('episode.pruned and episode.local_missing outbox kinds', (open) => {
  let store: TestStore;
  let clock: ManualClock;
  let acks: OutboxAck[];
  let woken: number;
  let router: OutboxRouter;

  beforeEach(async () => {
    store = await open();
    clock = new ManualClock(T0);
    acks = [];
    woken = 0;
    await store.orgs.create({ id: ORG, name: ORG, tier: 'enterprise', createdAt: T0 });
    // The log's events, read back through a subscription to them.
    await store.webhooks.create({ id: 'whk_1', orgId: ORG, url: 'https://hooks.test/x', events: ['episode.pruned'], secretSealed: 's', createdAt: T0 }, 10);
    const logger = pino({ level: 'silent' });
    router = new OutboxRouter({
      logger,
      ack: async (_robotId, ack) => {
        acks.push(...answered(ack));
      },
      handlers: {
        'episode.pruned': new EpisodePrunedHandler({ store, clock, logger, onApplied: () => (woken += 1) }),
        'episode.local_missing': new LocalMissingHandler({ store, clock, logger }),
      },
    });
  });
  afterEach(async () => {
    await store.close();
  });

  const send = (msg: unknown, robotId = ROBOT) => router.submit(robotId, Buffer.from(JSON.stringify(msg)));
  /** The events of the log of `type`, oldest first: fanned out, then taken off the subscription's queue. */
  async function events(type: string): Promise<Record<string, unknown>[]> {
    await store.webhooks.fanOut(clock.now());
    const out: Record<string, unknown>[] = [];
    for (let d = await store.webhooks.dueHead('whk_1', clock.now(), 1000); d; d = await store.webhooks.dueHead('whk_1', clock.now(), 1000)) {
      if (d.eventType === type) out.push(JSON.parse(d.payload) as Record<string, unknown>);
      await store.webhooks.record(d.id, { kind: 'delivered', status: 200, at: clock.now() }, d.claim);
    }
    return out;
  }

  async function indexed() {
    const report = testReport();
    await store.episodes.ingest([{ orgId: ORG, robotId: ROBOT, report, reportedAt: T0 }]);
    return report;
  }

  it('one episode.pruned event per episode, without destination_id, however often the robot resends; every copy is acknowledged', async () => {
    const ep = await indexed();
    const msg = { msg_id: `pruned:${ep.id}`, kind: 'episode.pruned', body: { episode_id: ep.id, pruned_at: T0 + 72 * HOUR } };
    await send(msg);
    await send(msg);
    // A robot whose store lost the acked row reports again under the same id.
    await send({ ...msg, body: { ...msg.body, pruned_at: T0 + 80 * HOUR } });
    expect(acks).toEqual([msg, msg, msg].map(() => ({ msg_id: msg.msg_id, ok: true })));
    const pruned = await events('episode.pruned');
    expect(pruned).toEqual([{ schema_version: 1, episode_id: ep.id, robot_id: ROBOT, recording_session_id: ep.recording_session_id, episode_seq: ep.episode_seq, state: 'pruned' }]);
    expect(woken).toBe(1);
  });

  it('before the episode is indexed: retry later; another robot: refused; a malformed body: refused', async () => {
    await send({ msg_id: 'pruned:ep_early', kind: 'episode.pruned', body: { episode_id: 'ep_notyet000000', pruned_at: T0 } });
    const ep = await indexed();
    await send({ msg_id: 'pruned:x', kind: 'episode.pruned', body: { episode_id: ep.id, pruned_at: T0 } }, 'rbt_2');
    await send({ msg_id: 'pruned:bad', kind: 'episode.pruned', body: { episode_id: ep.id } });
    expect(acks).toEqual([
      { msg_id: 'pruned:ep_early', ok: false, error: { code: 'unknown_episode', message: expect.any(String) as string }, retry_after_s: expect.any(Number) as number },
      { msg_id: 'pruned:x', ok: false, error: { code: 'conflict', message: expect.any(String) as string } },
      { msg_id: 'pruned:bad', ok: false, error: { code: 'validation_failed', message: expect.any(String) as string } },
    ]);
    expect(await events('episode.pruned')).toEqual([]);
  });

  it('episode.local_missing marks the episode once; sync health counts it in local_missing', async () => {
    const ep = await indexed();
    const msg = { msg_id: `local_missing:${ep.id}`, kind: 'episode.local_missing', body: { episode_id: ep.id, paths: ['recording.mcap'], at: T0 } };
    await send(msg);
    await send(msg);
    expect(acks).toEqual([
      { msg_id: msg.msg_id, ok: true },
      { msg_id: msg.msg_id, ok: true },
    ]);
    const [row] = await store.sync.syncHealth(ORG, clock.now());
    expect(row).toMatchObject({ robotId: ROBOT, localMissing: 1, unverified: 1 });
  });
});
