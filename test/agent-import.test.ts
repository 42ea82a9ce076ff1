import { spawn, type ChildProcess } from 'node:child_process';
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { Episode } from '@fleet/protocol';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { makeTempDir, REPO_ROOT, startCloud, type CloudProcess, type TempDir } from './support/cloud.js';
import { listEpisodes } from './support/episodes.js';
import { ensurePythonEnv } from './support/python.js';
import { sendCommand, spawnAgent, startAgentProcess } from './support/robots.js';
import { waitFor } from './support/wait.js';

/**
 * The `import` recorder with the real agent process: the robot's own stack (here the stand-in
 * `ros2 bag record`, writing with Python's rosbags) writes rosbag2 directories into a folder the
 * agent watches. While a bag is being written the robot reports `recording`; a closed bag becomes
 * one episode with the times it holds; `fail` runs the configured stop program; kill -9 of the
 * agent mid-import resumes the same episode; a corrupt entry is rejected, never an episode.
 */

const FAKE_ROS2 = join(REPO_ROOT, 'test', 'support', 'fake-ros2', 'ros2');

let tmp: TempDir;
let cloud: CloudProcess;
let python: string;
let folder: string;
let configFile: string;
const stacks: ChildProcess[] = [];

beforeAll(async () => {
  python = ensurePythonEnv();
  tmp = await makeTempDir('fleet-import-');
  cloud = await startCloud();
  folder = join(tmp.path, 'import');
  await mkdir(folder);
  configFile = join(tmp.path, 'agent.yaml');
  await writeFile(
    configFile,
    [
      'recorder:',
      '  kind: import',
      `  folder: ${JSON.stringify(folder)}`,
      '  poll_ms: 200',
      // What `fail` runs: the robot stack's own way to close its recording (SIGINT to its ros2).
      `  stop_shell: ${JSON.stringify(`pkill -INT -f -- '--output ${folder}/'`)}`,
      '  stop_timeout_ms: 20000',
      '',
    ].join('\n'),
  );
}, 600_000);
afterAll(async () => {
  for (const s of stacks) s.kill('SIGKILL');
  await cloud?.[Symbol.asyncDispose]();
  await tmp?.[Symbol.asyncDispose]();
});

/** The robot's stack starts a recording into the folder; resolves once the bag's MCAP exists. */
async function stackRecords(name: string): Promise<{ stop(): Promise<void>; child: ChildProcess }> {
  const child = spawn(FAKE_ROS2, ['bag', 'record', '--storage', 'mcap', '--output', join(folder, name), '/joint_states'], {
    env: { PATH: `${dirname(python)}:/usr/bin:/bin` },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  stacks.push(child);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  await waitFor(async () => ((await readdir(join(folder, name)).catch(() => [] as string[])).some((f) => f.endsWith('.mcap')) ? true : undefined), {
    timeoutMs: 60_000,
    description: `the stack writing ${name}`,
  });
  return {
    child,
    async stop() {
      child.kill('SIGINT');
      await exited;
    },
  };
}

async function robotState(robotId: string): Promise<string> {
  const r = await cloud.fetch(`/v1/robots/${robotId}`);
  return ((await r.json()) as { recording_state: string }).recording_state;
}

const waitState = (robotId: string, state: string) =>
  waitFor(async () => ((await robotState(robotId)) === state ? true : undefined), { timeoutMs: 60_000, description: `the robot ${state}` });

async function episodesOf(robotId: string): Promise<Episode[]> {
  return listEpisodes(cloud, `robot_id=${robotId}`);
}

describe('a configured agent importing what the robot stack records', () => {
  test('bags written into the folder become episodes; fail stops one; kill -9 mid-import resumes it; corrupt ones are rejected', async () => {
    await using agent = await startAgentProcess(cloud, { simulate: false, args: ['--config', configFile] });

    // The robot's stack decides when recordings start and end: no episodes.v1, start answers 422.
    const robot = (await (await cloud.fetch(`/v1/robots/${agent.robotId}`)).json()) as { capabilities: string[] };
    expect(robot.capabilities).not.toContain('episodes.v1');
    expect((await sendCommand(cloud, agent.robotId, 'episodes/start')).status).toBe(422);
    // fail while idle: refused, nothing changes.
    expect((await sendCommand(cloud, agent.robotId, 'episodes/fail')).status).toBe(500);

    // 1. A bag written and closed by the stack: recording while written, then one episode.
    const first = await stackRecords('run1');
    await waitState(agent.robotId, 'recording');
    await first.stop();
    const one = await waitFor(async () => {
      const eps = await episodesOf(agent.robotId);
      return eps.length === 1 && eps[0]!.outcome === 'success' ? eps[0] : undefined;
    }, { timeoutMs: 60_000, description: 'the first import reported' });
    // The bag left the folder (moved into the episode directory), and its times are the bag's own.
    expect(await readdir(folder)).not.toContain('run1');
    const bagMeta = await readFile(join(agent.dataDir, 'episodes', one.id, 'run1', 'metadata.yaml'), 'utf8');
    const startNs = Number(/starting_time:\s*\n\s*nanoseconds_since_epoch: (\d+)/.exec(bagMeta)?.[1]);
    expect(Math.abs(Date.parse(one.started_at) - startNs / 1e6)).toBeLessThan(2);

    // 2. fail while the stack writes: the stop program closes the bag, the episode is a failure.
    await stackRecords('run2');
    await waitState(agent.robotId, 'recording');
    const failed = await sendCommand(cloud, agent.robotId, 'episodes/fail');
    expect(failed.status, JSON.stringify(failed.body)).toBe(200);
    await waitFor(async () => ((await episodesOf(agent.robotId)).some((e) => e.outcome === 'failure') ? true : undefined), { timeoutMs: 60_000, description: 'the failed import reported' });
    await waitState(agent.robotId, 'idle');

    // 3. kill -9 of the agent while the stack writes: the restarted agent resumes the same episode.
    const third = await stackRecords('run3');
    await waitState(agent.robotId, 'recording');
    const before = (await agent.status()) as { episode_id: string };
    await agent.kill('SIGKILL');
    await using restarted = await spawnAgent(agent.dataDir, { simulate: false, args: ['--config', configFile] });
    await restarted.waitForStdout((l) => l.includes('"state":"connected"'), { description: 'connected again' });
    await third.stop();
    const resumed = await waitFor(async () => {
      const eps = await episodesOf(agent.robotId);
      return eps.length === 3 ? eps : undefined;
    }, { timeoutMs: 60_000, description: 'the third import reported' });
    const third3 = resumed.find((e) => e.id === before.episode_id);
    expect(third3?.outcome).toBe('success');

    // 4. A corrupt recording: rejected with its reason, never an episode.
    await writeFile(join(folder, 'broken.mcap'), Buffer.from('not an mcap file at all, just bytes'));
    await waitFor(async () => ((await readdir(join(folder, '.rejected')).catch(() => [] as string[])).includes('broken.mcap.reason') ? true : undefined), {
      timeoutMs: 30_000,
      description: 'broken.mcap rejected',
    });
    expect(await readFile(join(folder, '.rejected', 'broken.mcap.reason'), 'utf8')).toMatch(/\w/);
    expect(await episodesOf(agent.robotId)).toHaveLength(3);
  });
});
