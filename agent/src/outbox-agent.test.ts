import { EpisodeReportSchema } from '@fleet/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import type { Agent } from './daemon.js';
import { episodeReportMsgId, toEpisodeReport } from './recording/report.js';
import { openAgentStore } from './store/sqlite.js';
import { FakeCloud, removeTempDirs, startTestAgent, startTestBroker, testCredentials, type TestAgent, type TestBroker } from './test-support.js';
import { systemScheduler } from './time.js';

const cleanups: (() => Promise<void>)[] = [];
const running = new Set<Agent>();

afterEach(async () => {
  for (const a of running) await a.stop();
  running.clear();
  for (const c of cleanups.splice(0).reverse()) await c();
  await removeTempDirs();
});

async function setup(): Promise<{ broker: TestBroker; cloud: FakeCloud }> {
  const broker = await startTestBroker();
  cleanups.push(() => broker.close());
  const cloud = await FakeCloud.connect(broker.url);
  cleanups.push(() => cloud.close());
  return { broker, cloud };
}

/** A full agent on the broker (real time for the link and the recorder, so episodes record). */
async function agent(broker: TestBroker, opts: { dataDir?: string; credentials?: TestAgent['credentials'] } = {}): Promise<TestAgent> {
  const t = await startTestAgent({
    ...(opts.dataDir ? { dataDir: opts.dataDir } : {}),
    credentials: opts.credentials ?? testCredentials(undefined, broker.url),
    link: true,
    scheduler: systemScheduler,
    config: { chunkIntervalMs: 20, bytesPerSecond: 4096 },
  });
  running.add(t.agent);
  return t;
}

async function stop(t: TestAgent): Promise<void> {
  running.delete(t.agent);
  await t.agent.stop();
}

async function recordEpisode(t: TestAgent, end: 'finish' | 'fail' | 'discard' = 'finish'): Promise<string> {
  const { episode_id } = await t.agent.episode('start');
  await t.agent.episode(end);
  await t.agent.machine.whenSettled();
  return episode_id;
}

describe('Agent with its outbox', () => {
  it('reports a finished episode to the cloud and shows the outbox in its status', async () => {
    const { broker, cloud } = await setup();
    cloud.policy = 'silent';
    const t = await agent(broker);
    await t.agent.whenConnected();
    expect(t.agent.status().outbox).toEqual({ pending: 0, refused: 0 });
    const id = await recordEpisode(t);
    await expect.poll(() => cloud.ids()).toEqual([episodeReportMsgId(id)]);
    expect(t.agent.status().outbox).toEqual({ pending: 1, refused: 0 });

    const m = cloud.received[0]!;
    expect(m.robotId).toBe(t.credentials.robot_id);
    const report = EpisodeReportSchema.parse(m.message.body);
    const stored = openAgentStore(t.dataDir, t.clock);
    try {
      expect(report).toEqual(toEpisodeReport((await stored.episodes.get(id))!));
    } finally {
      await stored.close();
    }
    await cloud.send(t.credentials.robot_id, { msg_id: m.message.msg_id, ok: true });
    await expect.poll(() => t.agent.status().outbox).toEqual({ pending: 0, refused: 0 });
  });

  it('reports a discarded episode: outcome discarded, empty manifest', async () => {
    const { broker, cloud } = await setup();
    const t = await agent(broker);
    await t.agent.whenConnected();
    const id = await recordEpisode(t, 'discard');
    await expect.poll(() => t.agent.status().outbox.pending).toBe(0);
    expect(cloud.ids()).toEqual([episodeReportMsgId(id)]);
    expect(EpisodeReportSchema.parse(cloud.received[0]!.message.body)).toMatchObject({ id, outcome: 'discarded', manifest: { files: [], total_bytes: 0 }, bag_size_bytes: 0 });
  });

  it('a refused report shows in the status and does not hold back the next one', async () => {
    const { broker, cloud } = await setup();
    const t = await agent(broker);
    await t.agent.whenConnected();
    cloud.policy = (m) => ({ msg_id: m.message.msg_id, ok: false, error: { code: 'conflict', message: 'this episode id belongs to another robot' } });
    await recordEpisode(t);
    await expect.poll(() => t.agent.status().outbox).toEqual({ pending: 0, refused: 1 });
    cloud.policy = 'ack';
    const next = await recordEpisode(t);
    await expect.poll(() => cloud.ids().at(-1)).toBe(episodeReportMsgId(next));
    await expect.poll(() => t.agent.status().outbox).toEqual({ pending: 0, refused: 1 });
  });

  it('pending reports survive a restart of the agent and are delivered by the next one', async () => {
    const { broker, cloud } = await setup();
    cloud.policy = 'silent';
    const first = await agent(broker);
    await first.agent.whenConnected();
    const ids = [await recordEpisode(first), await recordEpisode(first, 'fail')];
    await expect.poll(() => cloud.ids()).toEqual(ids.map(episodeReportMsgId));
    await stop(first);

    cloud.policy = 'ack';
    const second = await agent(broker, { dataDir: first.dataDir, credentials: first.credentials });
    expect(second.agent.status().outbox).toEqual({ pending: 2, refused: 0 });
    await expect.poll(() => second.agent.status().outbox.pending).toBe(0);
    expect(cloud.ids()).toEqual([...ids, ...ids].map(episodeReportMsgId));
  });

  it('a recording interrupted by a crash is finalized at the next start and its report delivered', async () => {
    const { broker, cloud } = await setup();
    // The first process records without a link and is killed: nothing of it is stopped.
    const credentials = testCredentials(undefined, broker.url);
    const first = await startTestAgent({ credentials, link: false, scheduler: systemScheduler, config: { chunkIntervalMs: 20 } });
    const { episode_id } = await first.agent.episode('start');
    expect(first.agent.machine.state).toBe('recording');

    const second = await agent(broker, { dataDir: first.dataDir, credentials });
    await expect.poll(() => second.agent.status().outbox.pending).toBe(0);
    expect(cloud.ids()).toEqual([episodeReportMsgId(episode_id)]);
    expect(EpisodeReportSchema.parse(cloud.received[0]!.message.body)).toMatchObject({ id: episode_id, outcome: 'failure', interrupted: true });
    // Let the abandoned process go (its late writes no longer matter to this test).
    cleanups.push(() => first.agent.stop().catch(() => undefined));
  });
});
