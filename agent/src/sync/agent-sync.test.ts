import { randomBytes } from 'node:crypto';
import { createServer, type AddressInfo } from 'node:net';
import { Aedes } from 'aedes';
import mqtt from 'mqtt';
import { EpisodeReportSchema, parseRobotTopic, ReplicaReportSchema, SyncRequestSchema, topics, type SyncMessage } from '@fleet/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import type { Agent } from '../daemon.js';
import { FakeCloud, removeTempDirs, startTestAgent, startTestBroker, testCredentials } from '../test-support.js';
import { systemScheduler } from '../time.js';
import { TestStorage } from './test-storage.js';

const cleanups: (() => Promise<void>)[] = [];
const running = new Set<Agent>();
afterEach(async () => {
  for (const a of running) await a.stop();
  running.clear();
  for (const c of cleanups.splice(0).reverse()) await c();
  await removeTempDirs();
});

describe('Agent with sync on (the default), over a real broker', () => {
  it('asks for its assignments at connect, takes a pushed assignment, gets a grant on …/sync and reports the replica up to verified', async () => {
    const broker = await startTestBroker();
    cleanups.push(() => broker.close());
    const storage = await TestStorage.start();
    cleanups.push(() => storage.close());
    const cloud = await FakeCloud.connect(broker.url);
    cleanups.push(() => cloud.close());
    // The cloud's sync relay, on the same topics the real one uses.
    const relay = await mqtt.connectAsync(broker.url, { protocolVersion: 4, clientId: `relay_${randomBytes(4).toString('hex')}` });
    cleanups.push(() => relay.endAsync(true));
    const requests: unknown[] = [];
    const manifests = new Map<string, { path: string; size_bytes: number }[]>();
    const answer = (robotId: string, msg: SyncMessage) => void relay.publishAsync(topics.sync(robotId), JSON.stringify(msg), { qos: 1 });
    relay.on('message', (topic, payload) => {
      const t = parseRobotTopic(topic);
      if (!t || t.rest !== 'sync/request') return;
      const req = SyncRequestSchema.parse(JSON.parse(payload.toString('utf8')));
      requests.push(req);
      if (req.type === 'assignments.request') {
        answer(t.robotId, { type: 'assignments', req_id: req.req_id, assignments: [], complete: true });
        return;
      }
      const files = manifests.get(req.episode_id)!;
      answer(t.robotId, {
        type: 'grant',
        req_id: req.req_id,
        episode_id: req.episode_id,
        destination_id: req.destination_id,
        grant_id: 'grt_e2e',
        expires_at: Date.now() + 3_600_000,
        protocol: 'http-put',
        retention: 'keep',
        files: files.map((f) => storage.grantFile(f.path, `${req.episode_id}/${f.path}`, f.size_bytes)),
      });
    });
    await relay.subscribeAsync(topics.allSyncRequests, { qos: 1 });
    // Indexing an episode report assigns it (what the cloud's routing does), then acknowledges it.
    cloud.policy = (m) => {
      if (m.message.kind === 'episode.report') {
        const report = EpisodeReportSchema.parse(m.message.body);
        manifests.set(report.id, report.manifest.files);
        answer(m.robotId, { type: 'assignments', assignments: [{ episode_id: report.id, destination_id: 'dst_e2e' }], complete: false });
      }
      return { msg_id: m.message.msg_id, ok: true };
    };

    const t = await startTestAgent({
      credentials: testCredentials(undefined, broker.url),
      link: true,
      scheduler: systemScheduler,
      config: { chunkIntervalMs: 20, bytesPerSecond: 4096, allowHttpUploads: true },
    });
    running.add(t.agent);
    await t.agent.whenConnected();
    await expect.poll(() => requests.length).toBeGreaterThan(0);
    expect(requests[0]).toMatchObject({ type: 'assignments.request' });

    const { episode_id } = await t.agent.episode('start');
    await new Promise((r) => setTimeout(r, 100));
    await t.agent.episode('finish');
    await t.agent.machine.whenSettled();

    const replicaStates = () => cloud.received.filter((m) => m.message.kind === 'replica.state').map((m) => ReplicaReportSchema.parse(m.message.body));
    await expect.poll(() => replicaStates().map((r) => r.state), { timeout: 10_000 }).toEqual(['granted', 'syncing', 'synced', 'verified']);
    expect(replicaStates().every((r) => r.episode_id === episode_id && r.destination_id === 'dst_e2e' && r.grant_id === 'grt_e2e')).toBe(true);
    const [file] = manifests.get(episode_id)!;
    expect(storage.objects.get(`${episode_id}/${file!.path}`)!.body.length).toBe(file!.size_bytes);
    await expect.poll(() => t.agent.status().outbox).toEqual({ pending: 0, refused: 0 });
    await expect.poll(() => t.agent.status().sync).toEqual({ open: 0, failing: 0, verified: 1, settled: 0, uploading: 0 });
  });

  it('a broker that refuses the sync topic leaves commands and the outbox working and publishes no sync request', async () => {
    const broker = await Aedes.createBroker({
      authorizeSubscribe: (_client, sub, done) => done(null, sub.topic.endsWith('/sync') ? null : sub),
    });
    const published: string[] = [];
    broker.on('publish', (packet, client) => {
      if (client) published.push(packet.topic);
    });
    const server = createServer(broker.handle);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
    const url = `mqtt://127.0.0.1:${(server.address() as AddressInfo).port}`;
    cleanups.push(async () => {
      await new Promise<void>((resolve) => broker.close(() => resolve()));
      await new Promise<void>((resolve) => server.close(() => resolve()));
    });
    const cloud = await FakeCloud.connect(url);
    cleanups.push(() => cloud.close());
    const t = await startTestAgent({ credentials: testCredentials(undefined, url), link: true, scheduler: systemScheduler, config: { chunkIntervalMs: 20 } });
    running.add(t.agent);
    await t.agent.whenConnected();
    expect(t.agent.link!.syncAvailable).toBe(false);
    await t.agent.episode('start');
    await t.agent.episode('finish');
    await t.agent.machine.whenSettled();
    await expect.poll(() => t.agent.status().outbox).toEqual({ pending: 0, refused: 0 });
    expect(published.filter((topic) => topic.endsWith('/sync/request'))).toEqual([]);
    expect(t.logs.messages()).toContain('the broker refused the sync topic; uploads wait for the next connect');
  });
});
