import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { EpisodeSchema, EpisodeWithLocationsSchema } from '@fleet/protocol';
import { describe, expect, test } from 'vitest';
import { startCloud } from './support/cloud.js';
import {
  AGENT_ARGS,
  agentControl,
  agentStatus,
  episodeFiles,
  exportEpisodes,
  getEpisode,
  getSegments,
  listEpisodes,
  recordEpisode,
  waitForIndexed,
  waitOutboxEmpty,
} from './support/episodes.js';
import { runAgentCli, startAgentProcess } from './support/robots.js';
import { waitFor } from './support/wait.js';

describe('episode reports from a real agent to a real cloud', () => {
  test('an episode recorded on the local control surface is indexed with its recorded facts, segments and files; the outbox empties', async () => {
    await using cloud = await startCloud();
    await using agent = await startAgentProcess(cloud, { args: AGENT_ARGS });
    const dir = agent.dataDir;
    await agentControl(dir, [
      'context',
      'set',
      '--session-name',
      'morning',
      '--task-id',
      'pick-cube',
      '--task-name',
      'Pick the cube',
      '--subtask-id',
      'reach',
      '--subtask-name',
      'Reach',
      '--operator-id',
      'op-7',
      '--operator-name',
      'Ada',
      '--control-mode',
      'teleop',
    ]);
    const id = await recordEpisode(dir, 'finish', async (started) => {
      // Some recording time (by the robot's clock), then a subtask change: two segments.
      const status = await agentControl(dir, ['status', '--json']);
      expect(status.episode_id).toBe(started);
      const startedAt = Date.parse(String(status.started_at));
      await waitFor(() => (Date.now() > startedAt + 300 ? true : undefined), { description: 'some recording time' });
      await agentControl(dir, ['context', 'set', '--subtask-id', 'grasp', '--subtask-name', 'Grasp']);
    });

    const episode = await waitFor(() => getEpisode(cloud, id), { timeoutMs: 30_000, description: `episode ${id} in the index` });
    EpisodeSchema.parse(episode);
    const { facts, manifest } = await episodeFiles(dir, id);
    // Every recorded fact as the agent wrote it into episode.json.
    for (const key of [
      'id',
      'robot_id',
      'recording_session_id',
      'episode_seq',
      'session_name',
      'task_id',
      'task_name',
      'subtask_id',
      'operator_id',
      'operator_name',
      'control_mode',
      'policy_version_id',
      'eval_id',
      'outcome',
      'started_at',
      'ended_at',
      'duration_s',
      'message_count',
      'bag_size_bytes',
      'metadata',
    ] as const) {
      expect({ key, value: episode[key] }).toEqual({ key, value: facts[key] });
    }
    expect(episode).toMatchObject({
      robot_id: agent.robotId,
      outcome: 'success',
      recorded_outcome: 'success',
      session_name: 'morning',
      task_id: 'pick-cube',
      subtask_id: 'reach',
      operator_id: 'op-7',
      control_mode: 'teleop',
      replicas: [],
    });
    expect(episode.bag_size_bytes).toBe(manifest.total_bytes);

    const segments = await getSegments(cloud, id);
    expect(segments).toEqual(facts.segments);
    expect(segments.map((s) => s.subtask_id)).toEqual(['reach', 'grasp']);

    const exported = await exportEpisodes(cloud, `robot_id=${agent.robotId}`);
    expect(exported).toHaveLength(1);
    const row = EpisodeWithLocationsSchema.parse(exported[0]);
    expect(row.files).toEqual(manifest.files);
    // The simulated robot's rosbag2 directory; the manifest describes each file on the robot byte for byte.
    expect(row.files.map((f) => f.path)).toEqual(['bag/bag_0.mcap', 'bag/metadata.yaml']);
    for (const f of row.files) {
      const bytes = await readFile(join(dir, 'episodes', id, ...f.path.split('/')));
      expect(f).toEqual({ path: f.path, size_bytes: bytes.length, sha256: createHash('sha256').update(bytes).digest('hex') });
    }

    await waitOutboxEmpty(dir);
    expect((await agentStatus(dir)).outbox).toEqual({ pending: 0, refused: 0 });
  });

  test('failed and discarded episodes are indexed too (a discard with no files), each exactly once', async () => {
    await using cloud = await startCloud();
    await using agent = await startAgentProcess(cloud, { args: AGENT_ARGS });
    const ids = [await recordEpisode(agent.dataDir, 'fail'), await recordEpisode(agent.dataDir, 'discard'), await recordEpisode(agent.dataDir, 'finish')];
    const counts = await waitForIndexed(cloud, ids);
    expect(ids.map((id) => counts.get(id))).toEqual([1, 1, 1]);
    await waitOutboxEmpty(agent.dataDir);

    const listed = await listEpisodes(cloud, `robot_id=${agent.robotId}`);
    // Listed in the order they were indexed: the order they were recorded.
    expect(listed.map((e) => [e.id, e.outcome])).toEqual([
      [ids[0], 'failure'],
      [ids[1], 'discarded'],
      [ids[2], 'success'],
    ]);
    const discarded = (await exportEpisodes(cloud, `robot_id=${agent.robotId}&outcome=discarded`))[0]!;
    expect(discarded).toMatchObject({ id: ids[1], outcome: 'discarded', recorded_outcome: 'discarded', bag_size_bytes: 0, files: [] });
    expect((await episodeFiles(agent.dataDir, ids[1]!)).manifest).toEqual({ files: [], total_bytes: 0 });
  });

  test('a backlog goes to a cloud that takes batches several reports per publish, each indexed once', async () => {
    await using cloud = await startCloud();
    // A window of 4: once the cloud said it takes batches, the agent refills in publishes of 2.
    await using agent = await startAgentProcess(cloud, { args: [...AGENT_ARGS, '--outbox-max-in-flight', '4'] });
    const first = await recordEpisode(agent.dataDir);
    await waitForIndexed(cloud, [first]);
    await waitOutboxEmpty(agent.dataDir);
    // The cloud stops answering (frozen, its connection kept) while the robot records a backlog.
    const backlog: string[] = [];
    for (const p of cloud.processes) p.child.kill('SIGSTOP');
    try {
      for (let i = 0; i < 8; i++) backlog.push(await recordEpisode(agent.dataDir, i % 4 === 3 ? 'fail' : 'finish'));
    } finally {
      for (const p of cloud.processes) p.child.kill('SIGCONT');
    }
    const counts = await waitForIndexed(cloud, backlog);
    expect(backlog.map((id) => counts.get(id))).toEqual(backlog.map(() => 1));
    await waitOutboxEmpty(agent.dataDir);
    const metrics = await runAgentCli(['metrics', '--data-dir', agent.dataDir]);
    expect(metrics.code).toBe(0);
    const value = (name: string) => Number(new RegExp(`^${name} (\\d+)$`, 'm').exec(metrics.stdout)?.[1]);
    // At least one publish carried more than one message.
    expect(value('fleet_agent_outbox_sent_total')).toBeGreaterThanOrEqual(backlog.length + 1);
    expect(value('fleet_agent_outbox_publishes_total')).toBeLessThan(value('fleet_agent_outbox_sent_total'));
    // Replicas may index a burst's reports in either order; each is there once.
    expect((await listEpisodes(cloud, `robot_id=${agent.robotId}`)).map((e) => e.id).sort()).toEqual([first, ...backlog].sort());
  });
});
