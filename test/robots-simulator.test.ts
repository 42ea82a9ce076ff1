import { AGENT_RUNTIME_VERSION } from '@fleet/agent';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { cleanEnv, makeTempDir, REPO_ROOT, startCloud, type CloudProcess } from './support/cloud.js';
import { exitWithin } from './support/process.js';
import { runProcess } from './support/process.js';
import { createEnrollmentToken, finalizedEpisodes, listRobots, runAgentCli, sendCommand, SIM_CLI, startFleet, waitForRobot, type EpisodeFile } from './support/robots.js';
import { waitFor } from './support/wait.js';

let cloud: CloudProcess;
beforeAll(async () => {
  cloud = await startCloud();
});
afterAll(async () => {
  await cloud?.[Symbol.asyncDispose]();
});

describe('fleet-sim fleet', () => {
  test('--count 3 prints the robot ids once all are connected; the operator steps through subtasks of an API recording; SIGTERM stops cleanly; a restart reuses the credentials', async () => {
    await using dir = await makeTempDir('fs-e2e-');
    const dataDir = `${dir.path}/fleet`;
    const token = await createEnrollmentToken(cloud, { maxUses: 3, namePrefix: 'sim' });
    const fleet = await startFleet(cloud, { count: 3, token: token.token, dataDir, subtaskMs: 300 });
    try {
      expect(fleet.robots).toHaveLength(3);
      expect(new Set(fleet.robots).size).toBe(3);
      for (const id of fleet.robots) expect(id).toMatch(/^rbt_[a-z2-7]{26}$/);
      // Exactly one line on stdout: the ids.
      expect(fleet.process.stdoutLines).toEqual([JSON.stringify({ robots: fleet.robots })]);
      // Logs are JSON on stderr.
      expect(fleet.process.stderrLines.length).toBeGreaterThan(0);
      for (const line of fleet.process.stderrLines) expect(() => JSON.parse(line) as unknown).not.toThrow();

      // Connected to the broker when the line came; shown connected once the cloud read their status.
      for (const id of fleet.robots) await waitForRobot(cloud, id, (r) => r.connected, { description: 'connected' });
      const listed = (await listRobots(cloud)).filter((r) => fleet.robots.includes(r.id));
      expect(listed).toHaveLength(3);
      for (const r of listed) {
        expect(r).toMatchObject({ connected: true, recording_state: 'idle', capabilities: ['episodes.v1'], platform: 'sim-arm', runtime_version: AGENT_RUNTIME_VERSION });
        expect(r.name).toMatch(/^sim-[0-2]$/);
      }

      // A recording started through the API: robot 0's operator steps through its subtasks.
      const robot0 = fleet.robots[0]!;
      const started = await sendCommand(cloud, robot0, 'episodes/start');
      expect(started.status, JSON.stringify(started.body)).toBe(200);
      await waitFor(
        async () => {
          const r = await runAgentCli(['context', 'get', '--data-dir', fleet.robotDir(0)]);
          return r.code === 0 && (JSON.parse(r.stdout) as { context: { subtask_id: string | null } }).context.subtask_id === 'place' ? true : undefined;
        },
        { description: "robot 0's operator reaching its last subtask" },
      );
      const finished = await sendCommand(cloud, robot0, 'episodes/finish');
      expect(finished.status).toBe(200);
      await waitForRobot(cloud, robot0, (r) => r.recording_state === 'idle', { description: 'idle' });
      const [ep] = await waitFor(async () => {
        const eps = await finalizedEpisodes(fleet.robotDir(0));
        return eps.length === 1 ? eps : undefined;
      });
      expect(ep).toMatchObject({ id: started.body.result!.episode_id, outcome: 'success', task_id: 'task_pick_place', operator_id: 'op_0' });
      expect(ep!.segments.map((s) => s.subtask_id)).toEqual(['reach', 'grasp', 'place']);
      // Without --auto-episodes nobody else starts a recording.
      expect(await finalizedEpisodes(fleet.robotDir(1))).toEqual([]);

      // SIGTERM: every agent publishes offline, the process exits 0. Shown by what happened, not
      // by a stopwatch: each agent's link was up when it stopped (no "connection lost"), its QoS 1
      // offline status was acknowledged (no "could not publish the offline status") and it
      // stopped; the API then shows each offline (a failure bound far below the 45 s keepalive
      // timeout that would mark a silent robot offline).
      fleet.process.child.kill('SIGTERM');
      expect(await exitWithin(fleet.process, 20_000)).toEqual({ code: 0, signal: null });
      for (const id of fleet.robots) {
        const logs = fleet.process.stderrLines.filter((l) => l.includes(`"robot_id":"${id}"`)).join('\n');
        expect({ id, lost: /mqtt connection lost/.test(logs), unpublished: /could not publish the offline status/.test(logs), stopped: /agent stopped/.test(logs) }).toEqual({
          id,
          lost: false,
          unpublished: false,
          stopped: true,
        });
      }
      for (const id of fleet.robots) await waitForRobot(cloud, id, (r) => !r.connected, { timeoutMs: 20_000, description: 'offline after SIGTERM' });
    } finally {
      await fleet[Symbol.asyncDispose]();
    }

    // The token is used up; a restart on the same directory needs none of it: same robots.
    const again = await startFleet(cloud, { count: 3, token: token.token, dataDir });
    try {
      expect(again.robots).toEqual(fleet.robots);
      for (const id of again.robots) expect((await waitForRobot(cloud, id, (r) => r.connected)).connected).toBe(true);
    } finally {
      await again[Symbol.asyncDispose]();
    }
  });

  test('--legacy-runtime: the robots announce no episodes.v1 and the API answers 422 to episodes/start', async () => {
    await using fleet = await startFleet(cloud, { count: 2, legacy: true });
    // The robots line comes once the agents are connected to the broker; the cloud shows them
    // connected once it has read their status messages.
    for (const id of fleet.robots) await waitForRobot(cloud, id, (r) => r.connected, { description: 'connected' });
    const listed = (await listRobots(cloud)).filter((r) => fleet.robots.includes(r.id));
    expect(listed).toHaveLength(2);
    for (const r of listed) {
      expect(r).toMatchObject({ connected: true, capabilities: [], runtime_version: '0.0.9-legacy' });
    }
    const r = await sendCommand(cloud, fleet.robots[0]!, 'episodes/start');
    expect(r.status).toBe(422);
    expect(r.body.error?.code).toBe('validation_failed');
  });

  test('--auto-episodes: the operators record on their own, visible as recording_state changes, with drawn outcomes', async () => {
    await using fleet = await startFleet(cloud, { count: 2, autoEpisodes: 60, subtaskMs: 200 });
    const seen = new Set<string>();
    await waitFor(
      async () => {
        for (const r of await listRobots(cloud)) if (fleet.robots.includes(r.id) && r.recording_state) seen.add(r.recording_state);
        return seen.has('recording') && seen.has('idle') ? true : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 25, description: () => `recording_state changes (seen: ${[...seen].join(', ')})` },
    );
    const eps: EpisodeFile[] = await waitFor(
      async () => {
        const all = [...(await finalizedEpisodes(fleet.robotDir(0))), ...(await finalizedEpisodes(fleet.robotDir(1)))];
        return all.length >= 3 ? all : undefined;
      },
      { timeoutMs: 30_000, description: 'three finalized episodes' },
    );
    for (const e of eps) {
      expect(['success', 'failure', 'discarded']).toContain(e.outcome);
      expect(e.task_id).toMatch(/^task_/);
      expect(e.segments.length).toBeGreaterThan(0);
    }
  });

  test('a robot without credentials and no --token: exits 1 saying so, prints no robots line; bad usage exits 2', async () => {
    await using dir = await makeTempDir('fs-e2e-');
    const run = (args: string[]) => runProcess(process.execPath, [SIM_CLI, 'fleet', ...args], { cwd: REPO_ROOT, env: cleanEnv() });
    const noToken = await run(['--api', cloud.http, '--count', '2', '--data-dir', `${dir.path}/fleet`]);
    expect(noToken.code).toBe(1);
    expect(noToken.stderr).toMatch(/no credentials and no enrollment token/);
    expect(noToken.stdout).toBe('');
    const usage = await run(['--api', cloud.http, '--count', '2']);
    expect(usage.code).toBe(2);
    expect(usage.stderr).toMatch(/--data-dir/);
  });
});
