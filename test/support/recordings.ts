/**
 * Recordings for end-to-end tests that need real ones in the bucket: recordings written by
 * libraries that are not the project's (Python's rosbags, Foxglove's mcap-protobuf-support:
 * test/python/write_judge_recordings.py) and imported by a real agent with the `import`
 * recorder, as a robot whose own stack records; and the wait for an episode's replica to be
 * verified. LeRobot's judge (test/lerobot-judge.test.ts) and the console's playback harness
 * (console/test/playback-harness.ts) use them; the playback benchmark imports its own bags the
 * same way.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { Episode } from '@fleet/client';
import { REPO_ROOT, type CloudProcess } from './cloud.js';
import { listEpisodes } from './episodes.js';
import { runProcess } from './process.js';
import { startAgentProcess, type AgentProcess } from './robots.js';
import { waitFor } from './wait.js';

export const WRITE_JUDGE_RECORDINGS = join(REPO_ROOT, 'test', 'python', 'write_judge_recordings.py');

/** What write_judge_recordings.py writes: a rosbag2 directory (rosbags) or one protobuf MCAP (mcap-protobuf-support). */
export type PythonRecordingKind = 'rosbag2' | 'protobuf';

/**
 * One recording by Python (test/python/write_judge_recordings.py, with the test venv's `python`)
 * starting at `startNs`, at `out` (a directory for `rosbag2`, a file for `protobuf`). Throws
 * with the writer's stderr when it fails.
 */
export async function writePythonRecording(python: string, kind: PythonRecordingKind, out: string, startNs: bigint, opts: { cwd?: string } = {}): Promise<void> {
  const r = await runProcess(python, [WRITE_JUDGE_RECORDINGS, kind, out, String(startNs)], {
    name: `write ${kind}`,
    cwd: opts.cwd ?? dirname(out),
    env: { PATH: `${dirname(python)}:/usr/bin:/bin` },
    timeoutMs: 120_000,
  });
  if (r.code !== 0) throw new Error(`write_judge_recordings.py ${kind} exited ${r.code}: ${r.stderr}`);
}

/** The episode once its first replica is `verified`; throws after `timeoutMs` (default 120 s) naming the last state seen. */
export async function waitVerified(cloud: CloudProcess, episodeId: string, opts: { timeoutMs?: number } = {}): Promise<Episode> {
  const c = cloud.client();
  let last = 'not seen';
  return waitFor(
    async () => {
      const e = await c.episodes.get(episodeId);
      last = e.replicas.length === 0 ? 'no replica' : e.replicas.map((r) => r.state).join(', ');
      return e.replicas[0]?.state === 'verified' ? e : undefined;
    },
    { timeoutMs: opts.timeoutMs ?? 120_000, intervalMs: 200, description: () => `episode ${episodeId} verified in the bucket (last: ${last})` },
  );
}

/** A robot whose own stack records: a real `fleet-agent start` with the `import` recorder on a folder. */
export interface ImportRobot extends AsyncDisposable {
  readonly agent: AgentProcess;
  readonly robotId: string;
  /** Where recordings go in; on the agent data directory's file system (the agent moves, never copies). */
  readonly folder: string;
  /**
   * With `task` as the robot's context, `write(i, startNs)` puts each of `count` recordings into
   * the folder; each is waited on until it is an episode (before the next is written, so the
   * context is its own). Returns the episodes in order, as first listed (not yet verified:
   * `waitVerified`).
   */
  importEpisodes(task: string, count: number, write: (i: number, startNs: bigint) => Promise<void>): Promise<{ id: string; outcome: string; task_id: string | null }[]>;
}

export interface ImportRobotOptions {
  /** A directory of the caller's (kept): the agent's data dir, the folder and the config go under it. */
  dir: string;
  /** How often the agent scans the folder (default 200 ms). */
  pollMs?: number;
  /** More `fleet-agent start` flags (default `--allow-http-uploads`, for the tests' S3 server on plain HTTP). */
  args?: readonly string[];
  /** How long an import may take to show as an episode (default 120 s; a 1 GB bag is hashed first). */
  importTimeoutMs?: number;
}

/** Enrolls and starts the agent with `recorder: {kind: import, folder: <dir>/import}`. Dispose it to stop the agent. */
export async function startImportRobot(cloud: CloudProcess, opts: ImportRobotOptions): Promise<ImportRobot> {
  const folder = join(opts.dir, 'import');
  mkdirSync(folder, { recursive: true });
  const configFile = join(opts.dir, 'agent.yaml');
  writeFileSync(configFile, ['recorder:', '  kind: import', `  folder: ${JSON.stringify(folder)}`, `  poll_ms: ${opts.pollMs ?? 200}`, ''].join('\n'));
  const agent = await startAgentProcess(cloud, { simulate: false, dataDir: join(opts.dir, 'robot'), args: ['--config', configFile, ...(opts.args ?? ['--allow-http-uploads'])] });
  return {
    agent,
    robotId: agent.robotId,
    folder,
    async importEpisodes(task, count, write) {
      const set = await agent.control(['context', 'set', '--task-id', task]);
      if (set.code !== 0) throw new Error(`fleet-agent context set exited ${set.code}: ${set.stderr}`);
      const out: { id: string; outcome: string; task_id: string | null }[] = [];
      for (let i = 0; i < count; i++) {
        // Recorded a while ago (the bag's own times become the episode's), each at its own time.
        const startNs = BigInt(Date.now() - 60_000 + i * 10_000) * 1_000_000n;
        await write(i, startNs);
        const ep = await waitFor(
          async () => (await listEpisodes(cloud, `robot_id=${agent.robotId}&task_id=${encodeURIComponent(task)}`)).find((e) => !out.some((o) => o.id === e.id)),
          { timeoutMs: opts.importTimeoutMs ?? 120_000, intervalMs: 200, description: `recording ${i + 1} of ${task} imported as an episode` },
        );
        out.push({ id: ep.id, outcome: ep.outcome, task_id: ep.task_id });
      }
      return out;
    },
    [Symbol.asyncDispose]: () => agent[Symbol.asyncDispose](),
  };
}
