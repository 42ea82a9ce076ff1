import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '@fleet/protocol';
import { ControlClient, controlSocketPath } from './control/client.js';
import type { Agent } from './daemon.js';
import { AgentMetrics } from './metrics.js';
import { openAgentStore } from './store/sqlite.js';
import type { AgentStore } from './store/types.js';
import { makeTempDir, removeTempDirs, startTestAgent } from './test-support.js';

/** The value of one sample line, e.g. `fleet_agent_connected 0`; undefined when absent. */
function sample(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

const running: Agent[] = [];
const clients: ControlClient[] = [];
const stores: AgentStore[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.close();
  for (const a of running.splice(0)) await a.stop();
  for (const s of stores.splice(0)) await s.close();
  await removeTempDirs();
});

describe('AgentMetrics', () => {
  it('reads outbox counts by kind and state, replicas by state and the uploader totals when asked', async () => {
    const dataDir = await makeTempDir();
    const store = openAgentStore(dataDir, new ManualClock());
    stores.push(store);
    await store.outbox.enqueue({ msgId: 'm1', kind: 'episode.report', body: {}, createdAt: 1 });
    await store.outbox.enqueue({ msgId: 'm2', kind: 'episode.report', body: {}, createdAt: 2 });
    await store.outbox.enqueue({ msgId: 'm3', kind: 'replica.state', body: {}, createdAt: 3 });
    await store.outbox.settle('m1', { state: 'acked' }, 4);
    await store.sync.add([{ episode_id: 'ep_1', destination_id: 'dst_1' }], 5);
    const totals = { bytesSent: 0, attempts: {} as Record<string, number> };
    const sends = { messages: 0, publishes: 0 };
    const metrics = new AgentMetrics({
      store,
      dataDir,
      clock: new ManualClock(),
      connected: () => true,
      uploader: () => ({ totals, activeCount: 1 }),
      outboxSends: () => sends,
      pressure: async () => ({ free_bytes: 5000, backlog_bytes: 1200, hours_to_full: null }),
    });
    sends.messages = 40;
    sends.publishes = 7;
    totals.bytesSent = 4096;
    totals.attempts = { completed: 2, deferred: 1 };
    const text = await metrics.text();
    expect(sample(text, 'fleet_agent_connected')).toBe(1);
    expect(sample(text, 'fleet_agent_outbox_messages{kind="episode.report",state="acked"}')).toBe(1);
    expect(sample(text, 'fleet_agent_outbox_messages{kind="episode.report",state="pending"}')).toBe(1);
    expect(sample(text, 'fleet_agent_outbox_messages{kind="replica.state",state="pending"}')).toBe(1);
    expect(sample(text, 'fleet_agent_outbox_sent_total')).toBe(40);
    expect(sample(text, 'fleet_agent_outbox_publishes_total')).toBe(7);
    expect(sample(text, 'fleet_agent_upload_bytes_sent_total')).toBe(4096);
    expect(sample(text, 'fleet_agent_upload_attempts_total{result="completed"}')).toBe(2);
    expect(sample(text, 'fleet_agent_upload_attempts_total{result="deferred"}')).toBe(1);
    expect(sample(text, 'fleet_agent_uploads_active')).toBe(1);
    expect(sample(text, 'fleet_agent_replicas{state="assigned"}')).toBe(1);
    expect(sample(text, 'fleet_agent_replicas{state="verified"}')).toBe(0);
    expect(sample(text, 'fleet_agent_disk_free_bytes')).toBe(5000);
    expect(sample(text, 'fleet_agent_sync_backlog_bytes')).toBe(1200);
    expect(text).toContain('fleet_agent_disk_hours_to_full +Inf');

    // Totals move on between scrapes; the counters follow, never double-count.
    totals.bytesSent = 8192;
    await store.outbox.settle('m2', { state: 'acked' }, 6);
    const again = await metrics.text();
    expect(sample(again, 'fleet_agent_upload_bytes_sent_total')).toBe(8192);
    expect(sample(again, 'fleet_agent_outbox_messages{kind="episode.report",state="acked"}')).toBe(2);
    expect(sample(again, 'fleet_agent_outbox_messages{kind="episode.report",state="pending"}')).toBeUndefined();
  });

  it('is answered on the control socket: an episode report waiting in the outbox, no link, sync counters at zero', async () => {
    const t = await startTestAgent({ controlSocket: true });
    running.push(t.agent);
    const client = await ControlClient.connect(controlSocketPath(t.dataDir));
    clients.push(client);
    await client.episode('start');
    t.clock.advance(1000);
    await client.episode('finish');
    await t.agent.machine.whenSettled();
    const text = await client.metrics();
    expect(text).toMatch(/^# HELP fleet_agent_connected /m);
    expect(sample(text, 'fleet_agent_connected')).toBe(0);
    expect(sample(text, 'fleet_agent_outbox_messages{kind="episode.report",state="pending"}')).toBe(1);
    expect(sample(text, 'fleet_agent_upload_bytes_sent_total')).toBe(0);
    expect(sample(text, 'fleet_agent_disk_free_bytes')).toBeGreaterThan(0);
  });
});
