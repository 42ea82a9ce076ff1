import { spawnSync } from 'node:child_process';
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { Episode } from '@fleet/protocol';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createTestPki, type TestPki } from '../cloud/src/egress/test-https.js';
import { makeTempDir, REPO_ROOT, type TempDir } from './support/cloud.js';
import { episodeFiles, getEpisode, listEpisodes } from './support/episodes.js';
import { writeProviderTls } from './support/grant-provider.js';
import { ensurePythonEnv } from './support/python.js';
import { sendCommand, spawnAgent, startAgentProcess } from './support/robots.js';
import { expectBucketHolds, startSyncStack, type SyncStack } from './support/sync-stack.js';
import { waitFor } from './support/wait.js';

/**
 * The agent on a ROS 2 robot, as a team would run it: `fleet-agent start --config agent.yaml`
 * whose recorder is `ros2 bag record --storage mcap`. The `ros2` here is a stand-in
 * (test/support/fake-ros2/ros2) that writes its bag with Python's `rosbags`, not our code.
 * Episodes are started and ended through /v1 and through `fleet-agent episode` (a button),
 * synced to the S3-compatible server and verified, and the objects read back by `rosbags`.
 */

const FAKE_ROS2 = join(REPO_ROOT, 'test', 'support', 'fake-ros2', 'ros2');

let pki: TestPki;
let tmp: TempDir;
let stack: SyncStack;
let python: string;
let configFile: string;

/** What Python's rosbags reads from a bag directory: topics with type and count, and the joint names. */
function readBag(dir: string): { topics: Record<string, { type: string; count: number }>; names: string[]; stampsMatch: boolean } {
  const script = `
import json, sys
from pathlib import Path
from rosbags.highlevel import AnyReader
topics, names, ok = {}, [], True
with AnyReader([Path(sys.argv[1])]) as reader:
    for c in reader.connections:
        topics[c.topic] = {"type": c.msgtype, "count": 0}
    for conn, t, raw in reader.messages():
        msg = reader.deserialize(raw, conn.msgtype)
        topics[conn.topic]["count"] += 1
        names = list(msg.name)
        ok = ok and msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec == t
print(json.dumps({"topics": topics, "names": names, "stampsMatch": ok}))
`;
  const r = spawnSync(python, ['-c', script, dir], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`rosbags could not read ${dir}: ${r.stderr}`);
  return JSON.parse(r.stdout) as ReturnType<typeof readBag>;
}

beforeAll(async () => {
  python = ensurePythonEnv();
  pki = createTestPki();
  tmp = await makeTempDir('fleet-ros2-');
  stack = await startSyncStack({ pki, tls: writeProviderTls(pki, tmp.path), events: ['episode.verified'] });
  configFile = join(tmp.path, 'agent.yaml');
  // What docs/robots.md tells a ROS 2 team to write, with the stand-in's path for `ros2`.
  await writeFile(
    configFile,
    [
      '# a ROS 2 arm',
      'allow_http_uploads: true   # the test bucket is plain http',
      'recorder:',
      '  kind: command',
      `  command: [${JSON.stringify(FAKE_ROS2)}, bag, record, --storage, mcap, --output, "{dir}/bag", /joint_states]`,
      '  env:',
      `    PATH: ${JSON.stringify(`${dirname(python)}:/usr/bin:/bin`)}`,
      '  stop_timeout_ms: 20000',
      '',
    ].join('\n'),
  );
}, 600_000);
afterAll(async () => {
  await stack?.dispose();
  await tmp?.[Symbol.asyncDispose]();
  pki?.cleanup();
});

/** MCAP files ros2 has opened in the episode's bag directory (rosbags keeps the bytes in memory until it closes). */
const bagFile = async (dataDir: string, episodeId: string): Promise<number> =>
  (await readdir(join(dataDir, 'episodes', episodeId, 'bag')).catch(() => [] as string[])).filter((f) => f.endsWith('.mcap')).length;

async function verified(id: string): Promise<Episode | undefined> {
  const ep = await getEpisode(stack.cloud, id);
  return ep?.replicas.length === 1 && ep.replicas[0]!.state === 'verified' ? ep : undefined;
}

async function waitIdle(robotId: string): Promise<void> {
  await waitFor(
    async () => {
      const r = await stack.cloud.fetch(`/v1/robots/${robotId}`);
      return ((await r.json()) as { recording_state: string }).recording_state === 'idle' ? true : undefined;
    },
    { timeoutMs: 60_000, description: 'the robot back to idle' },
  );
}

describe('a configured agent with `ros2 bag record` as its recorder', () => {
  test('episodes through /v1 and a button are recorded by ros2, synced, verified, and read back by rosbags', async () => {
    await using agent = await startAgentProcess(stack.cloud, { simulate: false, args: ['--config', configFile] });

    // Through the API.
    const start = await sendCommand(stack.cloud, agent.robotId, 'episodes/start');
    expect(start.status, JSON.stringify(start.body)).toBe(200);
    const viaApi = (start.body as { result: { episode_id: string } }).result.episode_id;
    await waitFor(async () => ((await bagFile(agent.dataDir, viaApi)) > 0 ? true : undefined), { timeoutMs: 60_000, description: 'ros2 writing its bag' });
    const finish = await sendCommand(stack.cloud, agent.robotId, 'episodes/finish');
    expect(finish.status, JSON.stringify(finish.body)).toBe(200);
    await waitIdle(agent.robotId);

    // Through the control socket, as a button node does.
    const pressed = await agent.control(['episode', 'start']);
    expect(pressed.code, pressed.stderr).toBe(0);
    const viaButton = (JSON.parse(pressed.stdout) as { episode_id: string }).episode_id;
    await waitFor(async () => ((await bagFile(agent.dataDir, viaButton)) > 0 ? true : undefined), { timeoutMs: 60_000, description: 'ros2 writing its bag' });
    const released = await agent.control(['episode', 'finish']);
    expect(released.code, released.stderr).toBe(0);
    await waitIdle(agent.robotId);

    for (const id of [viaApi, viaButton]) await waitFor(() => verified(id), { timeoutMs: 120_000, description: `episode ${id} verified` });

    const expected = [];
    for (const id of [viaApi, viaButton]) {
      const ep = (await getEpisode(stack.cloud, id))!;
      expect(ep.outcome).toBe('success');
      const { manifest } = await episodeFiles(agent.dataDir, id);
      // rosbag2's layout: the MCAP and metadata.yaml in the output directory.
      expect(manifest.files.map((f) => f.path).sort()).toEqual([expect.stringMatching(/^bag\/[^/]+\.mcap$/), 'bag/metadata.yaml']);
      expected.push({ objectKey: ep.replicas[0]!.object_key!, manifest });
    }
    await expectBucketHolds(stack.s3, expected);

    // The objects as the bucket holds them, read by rosbags: what the stand-in wrote.
    for (const { objectKey, manifest } of expected) {
      const dir = join(tmp.path, 'from-bucket', objectKey, 'bag');
      await mkdir(dir, { recursive: true });
      for (const f of manifest.files) await writeFile(join(dir, f.path.slice('bag/'.length)), (await stack.s3.getObject(`${objectKey}${f.path}`))!.body);
      const read = readBag(dir);
      const metadata = await readFile(join(dir, 'metadata.yaml'), 'utf8');
      const count = Number(/message_count: (\d+)/.exec(metadata)?.[1]);
      expect(read.topics['/joint_states']).toEqual({ type: 'sensor_msgs/msg/JointState', count });
      expect(count).toBeGreaterThan(0);
      expect(read.names).toEqual(['shoulder_pan', 'shoulder_lift', 'elbow', 'wrist_1', 'wrist_2', 'wrist_3']);
      expect(read.stampsMatch).toBe(true);
    }
  });

  test('a ros2 that exits at start refuses the start (500, details.robot_error failed, its reason); one that dies mid-recording ends the episode as a failure with recorder_exit', async () => {
    const broken = join(tmp.path, 'broken.yaml');
    // The stand-in, like rosbag2, refuses a storage it does not have.
    await writeFile(broken, (await readFile(configFile, 'utf8')).replace('--storage, mcap', '--storage, sqlite9'));
    {
      await using agent = await startAgentProcess(stack.cloud, { simulate: false, args: ['--config', broken] });
      const refused = await sendCommand(stack.cloud, agent.robotId, 'episodes/start');
      expect(refused.status).toBe(500);
      const error = (refused.body as { error: { code: string; message: string; details: { robot_error: string } } }).error;
      expect(error.code).toBe('internal');
      expect(error.details.robot_error).toBe('failed');
      expect(error.message).toContain('only --storage mcap is supported');
      // Nothing changed: the robot is idle and has no episode.
      expect(await (await stack.cloud.fetch(`/v1/robots/${agent.robotId}`)).json()).toMatchObject({ recording_state: 'idle' });
      expect(await listEpisodes(stack.cloud, `robot_id=${agent.robotId}`)).toEqual([]);
    }

    await using agent = await startAgentProcess(stack.cloud, { simulate: false, args: ['--config', configFile] });
    const start = await sendCommand(stack.cloud, agent.robotId, 'episodes/start');
    expect(start.status, JSON.stringify(start.body)).toBe(200);
    const id = (start.body as { result: { episode_id: string } }).result.episode_id;
    await waitFor(async () => ((await bagFile(agent.dataDir, id)) > 0 ? true : undefined), { timeoutMs: 60_000, description: 'ros2 writing its bag' });
    // The recorder dies on its own (a crash of ros2): SIGKILL, so it cannot close its bag.
    expect(spawnSync('pkill', ['-KILL', '-f', `${join(agent.dataDir, 'episodes', id)}/bag`]).status).toBe(0);
    const ep = await waitFor(async () => {
      const e = await getEpisode(stack.cloud, id);
      return e?.outcome === 'failure' ? e : undefined;
    }, { timeoutMs: 60_000, description: 'the episode ended as a failure' });
    expect(ep.metadata).toMatchObject({ recorder_exit: { code: null, signal: 'SIGKILL' } });
    await waitIdle(agent.robotId);
  });

  test('kill -9 of the agent mid-recording: the next start stops the ros2 left running, and the episode is finalized once', async () => {
    await using agent = await startAgentProcess(stack.cloud, { simulate: false, args: ['--config', configFile] });
    const start = await sendCommand(stack.cloud, agent.robotId, 'episodes/start');
    expect(start.status, JSON.stringify(start.body)).toBe(200);
    const id = (start.body as { result: { episode_id: string } }).result.episode_id;
    await waitFor(async () => ((await bagFile(agent.dataDir, id)) > 0 ? true : undefined), { timeoutMs: 60_000, description: 'ros2 writing its bag' });
    await agent.kill('SIGKILL');

    // The recorder outlived the agent (its own process group) and is still writing.
    const orphan = (): boolean => spawnSync('pgrep', ['-f', `${join(agent.dataDir, 'episodes', id)}/bag`]).status === 0;
    expect(orphan()).toBe(true);

    await using restarted = await spawnAgent(agent.dataDir, { simulate: false, args: ['--config', configFile] });
    // The agent comes online once it has finalized the interrupted episode: after the orphan has
    // closed its bag (up to stop_timeout_ms on SIGINT, as much again after SIGKILL) and the files
    // are hashed. On a loaded machine that is well past the default wait.
    await restarted.waitForStdout((l) => l.includes('"state":"connected"'), { timeoutMs: 2 * 20_000 + 60_000, description: 'connected again' });
    await waitFor(() => (orphan() ? undefined : true), { timeoutMs: 60_000, description: 'the orphaned ros2 stopped' });
    await waitFor(async () => ((await getEpisode(stack.cloud, id))?.outcome === 'failure' ? true : undefined), { timeoutMs: 60_000, description: 'the episode reported' });

    const ep = (await getEpisode(stack.cloud, id))!;
    expect(ep.metadata).toMatchObject({ interrupted: true });
    const all = await listEpisodes(stack.cloud, `robot_id=${agent.robotId}`);
    expect(all.filter((e) => e.id === id)).toHaveLength(1);
    // The bag was closed by the stand-in on SIGINT: rosbags reads it whole.
    const read = readBag(join(agent.dataDir, 'episodes', id, 'bag'));
    expect(read.topics['/joint_states']!.count).toBeGreaterThan(0);
  }, 300_000);
});
