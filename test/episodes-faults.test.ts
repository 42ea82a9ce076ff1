import { join } from 'node:path';
import Database from 'better-sqlite3';
import { MAX_OUTBOX_MESSAGE_BYTES } from '@fleet/protocol';
import { describe, expect, test } from 'vitest';
import { makeTempDir, startCloud } from './support/cloud.js';
import {
  AGENT_ARGS as RECORDING_AGENT_ARGS,
  agentStatus,
  listEpisodes,
  portsOf,
  reconnectAttempts,
  recordEpisode,
  restartCloud,
  startOfflineAgent,
  waitForIndexed,
  waitOutboxEmpty,
} from './support/episodes.js';
import { startAgentProcess } from './support/robots.js';
import { waitFor } from './support/wait.js';

// Ingest under faults is the subject, not the recording: the JSON recorder is the cheapest, so
// several agents recording back to back leave the CPU to the cloud on a loaded 2-core machine.
const AGENT_ARGS = [...RECORDING_AGENT_ARGS, '--recording-format', 'json'];

/** Every id in `ids` appears exactly once in the whole index. */
function expectExactlyOnce(counts: Map<string, number>, ids: readonly string[]): void {
  expect(new Set(ids).size).toBe(ids.length);
  expect(ids.filter((id) => counts.get(id) !== 1).map((id) => [id, counts.get(id)])).toEqual([]);
}

describe('no report is lost or doubled, whatever crashes', () => {
  test('kill -9 of the agent between finalize and acknowledgment: exactly one row, and the outbox drains', async () => {
    await using cloud = await startCloud();
    await using first = await startAgentProcess(cloud, { args: AGENT_ARGS });
    const dir = first.dataDir;

    // The cloud is frozen (every replica, when the suites run on several): whatever the agent
    // publishes now is not acknowledged.
    for (const p of cloud.processes) p.child.kill('SIGSTOP');
    let id: string;
    try {
      id = await recordEpisode(dir);
      // Finalized, and its report waits in the outbox.
      expect((await agentStatus(dir)).outbox).toEqual({ pending: 1, refused: 0 });
      const killed = await first.kill('SIGKILL');
      expect(killed.signal).toBe('SIGKILL');
    } finally {
      for (const p of cloud.processes) p.child.kill('SIGCONT');
    }

    // The next start finds the report still pending and sends it again; the cloud may or may
    // not have indexed the first copy (it was on the wire when the agent died).
    await using second = await startAgentProcess(cloud, { dataDir: dir, enroll: false, args: AGENT_ARGS });
    const counts = await waitForIndexed(cloud, [id]);
    await waitOutboxEmpty(second.dataDir);
    expectExactlyOnce(counts, [id]);
    expect((await listEpisodes(cloud, `robot_id=${second.robotId}`)).map((e) => e.id)).toEqual([id]);
  });

  test('kill -9 of the cloud during a burst of reports from several agents loses none', async () => {
    await using dir = await makeTempDir();
    const dataDir = join(dir.path, 'cloud');
    const cloud = await startCloud({ dataDir });
    const ports = portsOf(cloud);
    await using a = await startAgentProcess(cloud, { args: AGENT_ARGS });
    await using b = await startAgentProcess(cloud, { args: AGENT_ARGS });
    await using c = await startAgentProcess(cloud, { args: AGENT_ARGS });
    const agents = [a, b, c];
    const recorded: string[] = [];

    // Three agents record episodes back to back; once the cloud has indexed some of them, it
    // is killed in the middle of the burst.
    const burst = Promise.all(
      agents.map(async (agent) => {
        for (let i = 0; i < 4; i++) recorded.push(await recordEpisode(agent.dataDir, i % 3 === 2 ? 'discard' : 'finish'));
      }),
    );
    let killedAfter = 0;
    await waitFor(
      async () => {
        killedAfter = (await listEpisodes(cloud)).length;
        return killedAfter >= 2 ? true : undefined;
      },
      { timeoutMs: 30_000, description: 'the cloud to index the first reports' },
    );
    expect((await cloud.kill('SIGKILL')).signal).toBe('SIGKILL');
    await burst;
    // More while the cloud is dead.
    for (const agent of agents) recorded.push(await recordEpisode(agent.dataDir, 'fail'));
    expect(killedAfter).toBeLessThan(recorded.length);

    await using again = await restartCloud(dataDir, ports);
    const counts = await waitForIndexed(again, recorded);
    expectExactlyOnce(counts, recorded);
    expect([...counts.keys()].sort()).toEqual([...recorded].sort());
    for (const agent of agents) await waitOutboxEmpty(agent.dataDir);
  });

  // The embedded broker goes down with its process: one process, also when the suites run on
  // replicas (there a broker restart is test/robots-replicas.test.ts's).
  test('a restart of the broker (with the cloud) loses none while agents keep recording offline', async () => {
    await using dir = await makeTempDir();
    const dataDir = join(dir.path, 'cloud');
    const cloud = await startCloud({ dataDir, topology: 'single' });
    const ports = portsOf(cloud);
    await using a = await startAgentProcess(cloud, { args: AGENT_ARGS });
    await using b = await startAgentProcess(cloud, { args: AGENT_ARGS });
    const before = [await recordEpisode(a.dataDir), await recordEpisode(b.dataDir)];
    expectExactlyOnce(await waitForIndexed(cloud, before), before);

    // Episodes that end right before the broker goes down (their acks may not make it) and
    // while it is down.
    const around = [await recordEpisode(a.dataDir), await recordEpisode(b.dataDir, 'fail')];
    expect((await cloud.kill('SIGTERM')).code).toBe(0);
    const offline: string[] = [];
    for (let i = 0; i < 2; i++) offline.push(await recordEpisode(a.dataDir), await recordEpisode(b.dataDir, 'discard'));
    for (const agent of [a, b]) {
      const s = await agentStatus(agent.dataDir);
      expect(s.connected).toBe(false);
      expect(s.outbox.pending).toBeGreaterThanOrEqual(2);
    }

    await using again = await restartCloud(dataDir, ports, { topology: 'single' });
    const all = [...before, ...around, ...offline];
    expectExactlyOnce(await waitForIndexed(again, all), all);
    expect((await listEpisodes(again)).length).toBe(all.length);
    for (const agent of [a, b]) await waitOutboxEmpty(agent.dataDir);
  });

  test('an agent offline for a while (and restarted meanwhile) keeps its reports and delivers them when the cloud is back', async () => {
    await using dir = await makeTempDir();
    const dataDir = join(dir.path, 'cloud');
    // Offline = the cloud and its embedded broker gone: one process (see above).
    const cloud = await startCloud({ dataDir, topology: 'single' });
    const ports = portsOf(cloud);
    await using first = await startAgentProcess(cloud, { args: AGENT_ARGS });
    const robotDir = first.dataDir;
    expect((await cloud.kill('SIGTERM')).code).toBe(0);

    const ids = [await recordEpisode(robotDir), await recordEpisode(robotDir, 'fail')];
    // A restart of the agent while offline keeps them.
    expect((await first.kill('SIGTERM')).code).toBe(0);
    await using second = await startOfflineAgent(robotDir, { logLevel: 'debug' });
    expect((await agentStatus(robotDir)).outbox).toEqual({ pending: 2, refused: 0 });
    ids.push(await recordEpisode(robotDir, 'discard'));
    // "A while": the agent has kept trying to reconnect, its backoff at its ceiling.
    await waitFor(() => (reconnectAttempts(second) >= 6 ? true : undefined), { timeoutMs: 30_000, description: 'six reconnect attempts' });
    const s = await agentStatus(robotDir);
    expect(s.connected).toBe(false);
    expect(s.outbox).toEqual({ pending: 3, refused: 0 });

    await using again = await restartCloud(dataDir, ports, { topology: 'single' });
    expectExactlyOnce(await waitForIndexed(again, ids), ids);
    await waitOutboxEmpty(robotDir);
    expect((await listEpisodes(again, `robot_id=${s.robot_id}`)).map((e) => e.id)).toEqual(ids);
  });

  test('reports the cloud refuses (malformed, oversized) are kept as refused with the reason and hold back none after them', async () => {
    await using cloud = await startCloud();
    await using first = await startAgentProcess(cloud, { args: AGENT_ARGS });
    const dir = first.dataDir;
    expect((await first.kill('SIGTERM')).code).toBe(0);
    // Two bad reports ahead of a good one in the stopped agent's outbox.
    const db = new Database(join(dir, 'agent.sqlite'));
    const insert = db.prepare(`INSERT INTO outbox (msg_id, kind, body, created_at) VALUES (?, 'episode.report', ?, 0)`);
    insert.run('episode.report:malformed', JSON.stringify({ id: 'not-an-episode-id' }));
    insert.run('episode.report:oversized', JSON.stringify({ id: 'ep_aaaaaaaaaaaaaaaa', padding: 'x'.repeat(MAX_OUTBOX_MESSAGE_BYTES) }));
    db.close();

    await using second = await startAgentProcess(cloud, { dataDir: dir, enroll: false, args: AGENT_ARGS });
    const good = await recordEpisode(dir);
    expectExactlyOnce(await waitForIndexed(cloud, [good]), [good]);
    await waitFor(async () => ((await agentStatus(dir)).outbox.refused === 2 ? true : undefined), { description: 'two refusals' });
    expect((await agentStatus(dir)).outbox).toEqual({ pending: 0, refused: 2 });
    // Log lines come through another pipe than the status: wait for them rather than assume
    // they were read already.
    const refusalLines = await waitFor(
      () => {
        const lines = second.process.stderrLines.filter((l) => l.includes('the cloud refused an outbox message'));
        return lines.length >= 2 ? lines : undefined;
      },
      { description: "the agent's two refusal log lines" },
    );
    const refusals = refusalLines.map((l) => JSON.parse(l) as { msg_id: string; code: string });
    expect(refusals.map((r) => [r.msg_id, r.code]).sort()).toEqual([
      ['episode.report:malformed', 'validation_failed'],
      ['episode.report:oversized', 'payload_too_large'],
    ]);
    await cloud.waitForStderr((l) => l.includes('refused oversized outbox message'), { description: 'the oversized refusal log line' });
    await cloud.waitForStderr((l) => l.includes('refused malformed episode report'), { description: 'the malformed refusal log line' });
    const refused = () => {
      const ro = new Database(join(dir, 'agent.sqlite'), { readonly: true });
      try {
        return ro.prepare(`SELECT msg_id, state, refusal_code, attempts FROM outbox WHERE state = 'refused' ORDER BY msg_id`).all() as { msg_id: string; attempts: number }[];
      } finally {
        ro.close();
      }
    };
    const atRefusal = refused();
    expect(atRefusal.map(({ attempts: _a, ...r }) => r)).toEqual([
      { msg_id: 'episode.report:malformed', state: 'refused', refusal_code: 'validation_failed' },
      { msg_id: 'episode.report:oversized', state: 'refused', refusal_code: 'payload_too_large' },
    ]);
    // Never sent again: another report goes through while they stay as they were.
    const later = await recordEpisode(dir, 'fail');
    expectExactlyOnce(await waitForIndexed(cloud, [good, later]), [good, later]);
    await waitFor(async () => ((await agentStatus(dir)).outbox.pending === 0 ? true : undefined), { description: 'the later report acknowledged' });
    expect(refused()).toEqual(atRefusal);
  });
});
