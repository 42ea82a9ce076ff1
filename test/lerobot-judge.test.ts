/**
 * LeRobot 0.6.1 judges the export (test/python/lerobot_judge.py): a robot's episodes sync to the
 * S3-compatible test server, `fleet datasets export-lerobot` writes a LeRobot v3.0 dataset from
 * the bucket, and one Python process per dataset (importing torch is slow) loads it with
 * `LeRobotDataset` offline with the pyav backend, reads every item, compares every state, action
 * and camera frame with the source recordings it reads itself from the same bucket (Foxglove's
 * mcap readers), and runs `lerobot-train` for four ACT steps on the CPU. The robot is the
 * simulator, or a real agent with the `import` recorder over recordings that Python's rosbags and
 * Foxglove's mcap-protobuf-support wrote (test/python/write_judge_recordings.py).
 */
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { GetObjectCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createTestPki, type TestPki } from '../cloud/src/egress/test-https.js';
import { cleanEnv, makeTempDir, REPO_ROOT, startCloud, type CloudProcess, type TempDir } from './support/cloud.js';
import { ensureDebianPackages, FFMPEG } from './support/debian.js';
import { startGrantProvider, writeProviderTls, type GrantProviderProcess } from './support/grant-provider.js';
import { freePort, okJson } from './support/http.js';
import { runProcess, type RunResult } from './support/process.js';
import { ensurePythonEnv } from './support/python.js';
import { startImportRobot, waitVerified, writePythonRecording, type ImportRobot, type PythonRecordingKind } from './support/recordings.js';
import { createEnrollmentToken, sendCommand, startFleet } from './support/robots.js';
import { startS3Server, type S3ServerProcess } from './support/s3-server.js';
import { waitFor } from './support/wait.js';

const FLEET_CLI = join(REPO_ROOT, 'packages', 'client', 'dist', 'cli.js');
const JUDGE = join(REPO_ROOT, 'test', 'python', 'lerobot_judge.py');
/** The lowest PSNR accepted of a frame against its source image (measured at worst 25.5 to 29 dB: docs/training.md). */
const MIN_PSNR_DB = 24;
/** Loading torch, reading every item and training take minutes on a loaded 2-core machine. */
const JUDGE_TIMEOUT_MS = 900_000;
const REPO_ID = 'fleet/judge';

let pki: TestPki;
let tmp: TempDir;
let s3: S3ServerProcess;
let cloud: CloudProcess;
let provider: GrantProviderProcess;
let python: string;

beforeAll(async () => {
  const missing = ensureDebianPackages([FFMPEG]);
  if (missing.length > 0) throw new Error('ffmpeg and ffprobe are needed: apt-get install -y ffmpeg (as root the tests install it)');
  python = ensurePythonEnv();
  pki = createTestPki();
  tmp = await makeTempDir('fleet-lerobot-judge-');
  const tls = writeProviderTls(pki, tmp.path);
  s3 = await startS3Server();
  cloud = await startCloud({ args: ['--egress-allow-loopback', '--egress-ca-file', pki.caFile] });
  const port = await freePort();
  const destination = await okJson<{ id: string; secret: string }>(
    await cloud.fetch('/v1/destinations', { method: 'POST', json: { type: 'external', url: `https://127.0.0.1:${port}/grant` } }),
  );
  provider = await startGrantProvider({ s3, secret: destination.secret, tls: { ...tls, ca: pki.caPem }, args: ['--port', String(port)] });
}, 600_000);

afterAll(async () => {
  await provider?.[Symbol.asyncDispose]();
  await cloud?.[Symbol.asyncDispose]();
  await s3?.[Symbol.asyncDispose]();
  await tmp?.[Symbol.asyncDispose]();
  pki?.cleanup();
});

function cliEnv() {
  return cleanEnv({
    HOME: tmp.path,
    XDG_CONFIG_HOME: undefined,
    FLEET_URL: cloud.http,
    FLEET_API_KEY: cloud.adminKey,
    AWS_ACCESS_KEY_ID: s3.accessKeyId,
    AWS_SECRET_ACCESS_KEY: s3.secretAccessKey,
    AWS_REGION: s3.region,
  });
}

function fleetCli(args: readonly string[], timeoutMs = 300_000): Promise<RunResult> {
  return runProcess(process.execPath, [FLEET_CLI, ...args], { name: `fleet ${args.slice(0, 2).join(' ')}`, cwd: REPO_ROOT, env: cliEnv(), timeoutMs });
}

interface Recorded {
  datasetId: string;
  episodes: { id: string; task: string; objectKey: string }[];
}

/** One simulated robot with `simArgs` records an episode per duration; all verified in the bucket, then one dataset of them. */
async function recordEpisodes(simArgs: readonly string[], durationsMs: readonly number[]): Promise<Recorded> {
  const token = await createEnrollmentToken(cloud, { maxUses: 1 });
  await using fleet = await startFleet(cloud, { count: 1, token: token.token, args: ['--allow-http-uploads', ...simArgs] });
  const robot = fleet.robots[0]!;
  const ids: string[] = [];
  for (const [i, ms] of durationsMs.entries()) {
    await waitFor(
      async () => {
        const r = await cloud.fetch(`/v1/robots/${robot}`);
        return ((await r.json()) as { recording_state: string }).recording_state === 'idle' ? true : undefined;
      },
      { timeoutMs: 30_000, description: 'the robot idle' },
    );
    const started = await sendCommand(cloud, robot, 'episodes/start', { body: { task_id: 'pick-cube' } });
    expect(started.status, JSON.stringify(started.body)).toBe(200);
    // The episode's length is what is recorded; the test waits on nothing else here.
    await new Promise((r) => setTimeout(r, ms));
    const done = await sendCommand(cloud, robot, i % 2 === 0 ? 'episodes/finish' : 'episodes/fail');
    expect(done.status, JSON.stringify(done.body)).toBe(200);
    ids.push(String(started.body.result!.episode_id));
  }
  const c = cloud.client();
  const episodes: Recorded['episodes'] = [];
  for (const id of ids) {
    const ep = await waitFor(
      async () => {
        const e = await c.episodes.get(id);
        return e.replicas[0]?.state === 'verified' ? e : undefined;
      },
      { timeoutMs: 120_000, intervalMs: 200, description: `episode ${id} verified in the bucket` },
    );
    episodes.push({ id, task: String(ep.task_id), objectKey: ep.replicas[0]!.object_key! });
  }
  const ds = await c.datasets.create({ name: `judge ${simArgs.join(' ')}`.slice(0, 120), filter: { robot_id: robot } });
  return { datasetId: ds.id, episodes };
}

/** The episode's files as the robot uploaded them, straight from the bucket (the judge's own copy of the source). */
async function downloadEpisode(objectKey: string, dir: string): Promise<void> {
  const client = new S3Client({ endpoint: s3.endpoint, region: s3.region, forcePathStyle: true, credentials: { accessKeyId: s3.accessKeyId, secretAccessKey: s3.secretAccessKey } });
  try {
    const listed = await client.send(new ListObjectsV2Command({ Bucket: s3.bucket, Prefix: objectKey }));
    const keys = (listed.Contents ?? []).map((o) => o.Key!).filter((k) => k.endsWith('.mcap') || k.endsWith('.yaml'));
    expect(keys.length, `objects under ${objectKey}`).toBeGreaterThan(0);
    for (const key of keys) {
      const body = await (await client.send(new GetObjectCommand({ Bucket: s3.bucket, Key: key }))).Body!.transformToByteArray();
      const file = join(dir, key.slice(objectKey.length));
      mkdirSync(dirname(file), { recursive: true });
      writeFileSync(file, body);
    }
  } finally {
    client.destroy();
  }
}

interface JudgeSummary {
  ok: boolean;
  episodes: number;
  frames: number;
  cameras: Record<string, { size: number[]; min_db: number; mean_db: number }>;
  train: { steps: number; step_s: number[] };
}

/** Exports the dataset with `exportArgs`, then runs the judge on it against the sources; returns its summary. */
async function exportAndJudge(name: string, rec: Recorded, mapping: object, exportArgs: readonly string[]): Promise<JudgeSummary> {
  const mappingFile = join(tmp.path, `${name}.mapping.json`);
  writeFileSync(mappingFile, JSON.stringify(mapping));
  const out = join(tmp.path, name);
  const source = ['--source', `s3://${s3.bucket}`, '--s3-endpoint', s3.endpoint, '--s3-force-path-style'];
  const exported = await fleetCli(['datasets', 'export-lerobot', rec.datasetId, '--snapshot', '--out', out, ...source, '--mapping', mappingFile, '--strict', ...exportArgs]);
  expect(exported.code, exported.stderr).toBe(0);

  const episodes = [];
  for (const e of rec.episodes) {
    const dir = join(tmp.path, `${name}.sources`, e.id);
    await downloadEpisode(e.objectKey, dir);
    episodes.push({ episode_id: e.id, task: e.task, recording: dir });
  }
  const expectFile = join(tmp.path, `${name}.expect.json`);
  writeFileSync(expectFile, JSON.stringify({ repo_id: REPO_ID, num_episodes: rec.episodes.length, min_psnr_db: MIN_PSNR_DB, mapping, episodes, train: { steps: 4, batch_size: 2 } }));
  const judged = await runProcess(python, [JUDGE, out, expectFile], {
    name: `lerobot judge ${name}`,
    cwd: tmp.path,
    env: { HF_HUB_OFFLINE: '1', HF_HOME: join(tmp.path, `${name}.hf`), PATH: `${dirname(python)}:${process.env.PATH ?? '/usr/bin:/bin'}` },
    timeoutMs: JUDGE_TIMEOUT_MS,
  });
  expect(judged.code, `${judged.stderr.split('\n').slice(-30).join('\n')}`).toBe(0);
  const summary = JSON.parse(judged.stdout.trim().split('\n').at(-1)!) as JudgeSummary;
  // The figures a reader of the log wants: PSNR per camera and the training step times.
  console.warn(`lerobot judge ${name}: ${JSON.stringify(summary)}`);
  return summary;
}

/** The simulator's JSON recordings, as the exporter's default mapping reads them, with both cameras. */
const JSON_MAPPING = {
  fps: 10,
  task: { from: 'task_id' },
  features: {
    'observation.state': { topic: '/joint_states', fields: ['position'], names_from: 'name' },
    action: { topic: '/joint_commands', fields: ['position'], names_from: 'name' },
    'observation.images.front': { topic: '/camera/image' },
    'observation.images.wrist': { topic: '/camera/wrist/image' },
  },
};

/** The simulator's ROS 2 recording: both JPEG streams and the front camera's raw rgb8 one. */
const ROS2_MAPPING = {
  fps: 10,
  task: { from: 'task_id' },
  features: {
    'observation.state': { topic: '/joint_states', fields: ['position'], names_from: 'name' },
    action: { topic: '/joint_commands', fields: ['position'], names_from: 'name' },
    'observation.images.front': { topic: '/camera/front/image_raw/compressed' },
    'observation.images.front_raw': { topic: '/camera/front/image_raw' },
    'observation.images.wrist': { topic: '/camera/wrist/image_raw/compressed' },
  },
};

/**
 * A ROS 2 arm's bag (test/python/write_judge_recordings.py rosbag2): joints picked and ordered by
 * name (the driver publishes them in another order, and one more), state and commanded action
 * from their own topics, both cameras, every stream stamped by its header. At 30 fps, whose frame
 * is not a whole millisecond: the episodes' video offsets must still be within LeRobot's 1e-4 s.
 */
const ARM_JOINTS = ['shoulder', 'elbow', 'wrist', 'gripper'];
const ROSBAG_MAPPING = {
  fps: 30,
  robot_type: 'ros2-arm',
  task: { from: 'task_id' },
  stamp: 'header',
  features: {
    'observation.state': { topic: '/joint_states', fields: ['position', 'velocity'], joints: ARM_JOINTS },
    action: { topic: '/joint_commands', fields: ['position'], joints: ARM_JOINTS },
    'observation.images.front': { topic: '/camera/front/image_raw/compressed' },
    'observation.images.wrist': { topic: '/camera/wrist/image_raw' },
  },
};

/** The protobuf MCAP (write_judge_recordings.py protobuf): the action is the next state; stamps are the messages' `timestamp`. */
const PROTOBUF_MAPPING = {
  fps: 10,
  robot_type: 'foxglove-arm',
  task: { from: 'task_id' },
  stamp: 'header',
  features: {
    'observation.state': { topic: '/arm/joints', fields: ['position'], joints: ['shoulder', 'elbow', 'wrist'] },
    action: { from_next_state: true, fields: ['position'] },
    'observation.images.front': { topic: '/camera/front' },
    'observation.images.side': { topic: '/camera/side' },
  },
};

describe('LeRobot 0.6.1 loads, reads back and trains on the export', () => {
  test(
    "the simulator's JSON recordings at 64x64, AV1 (LeRobot's default codec)",
    async () => {
      const rec = await recordEpisodes(['--recording-format', 'json', '--cameras', '2', '--camera-width', '64', '--camera-height', '64', '--camera-hz', '10', '--state-hz', '50'], [1800, 1300]);
      const summary = await exportAndJudge('json-64', rec, JSON_MAPPING, []);
      expect(summary).toMatchObject({ ok: true, episodes: 2 });
      expect(summary.cameras['observation.images.front']!.size).toEqual([64, 64, 3]);
      expect(summary.train.steps).toBe(4);
    },
    JUDGE_TIMEOUT_MS + 300_000,
  );

  test(
    "the simulator's JSON recordings at its default rate (51x39 frames, padded to AV1's 64x64 minimum)",
    async () => {
      const rec = await recordEpisodes(['--recording-format', 'json', '--cameras', '2'], [2200, 1500]);
      const summary = await exportAndJudge('json-default', rec, JSON_MAPPING, []);
      expect(summary).toMatchObject({ ok: true, episodes: 2 });
      expect(summary.cameras['observation.images.front']!.size).toEqual([64, 64, 3]);
      expect(summary.train.steps).toBe(4);
    },
    JUDGE_TIMEOUT_MS + 300_000,
  );

  test(
    "the simulator's default ROS 2 recording: cdr JointState, CompressedImage JPEG and Image rgb8, stamped by their headers",
    async () => {
      const rec = await recordEpisodes(['--cameras', '2', '--camera-width', '64', '--camera-height', '48', '--camera-hz', '10', '--state-hz', '50'], [2000, 1400]);
      const summary = await exportAndJudge('ros2-default', rec, ROS2_MAPPING, ['--codec', 'h264']);
      expect(summary).toMatchObject({ ok: true, episodes: 2 });
      expect(Object.keys(summary.cameras).sort()).toEqual(['observation.images.front', 'observation.images.front_raw', 'observation.images.wrist']);
      expect(summary.train.steps).toBe(4);
    },
    JUDGE_TIMEOUT_MS + 300_000,
  );

  describe("recordings the robot's own stack wrote, imported by a real agent (recorder `import`)", () => {
    let robot: ImportRobot;
    let folder: string;

    beforeAll(async () => {
      // Its data directory on the folder's file system: the agent moves recordings, never copies.
      robot = await startImportRobot(cloud, { dir: tmp.path });
      folder = robot.folder;
    }, 300_000);
    afterAll(async () => {
      await robot?.[Symbol.asyncDispose]();
    });

    test(
      'a ROS 2 bag written by Python rosbags (JointState, CompressedImage JPEG and Image rgb8 at different rates, joints out of order, header stamps behind log time)',
      async () => {
        // Written in place, as `ros2 bag record` does: the watcher waits for metadata.yaml and closed MCAPs.
        const rec = await importEpisodes('stack-cups', 2, (i, start) => writeRecording('rosbag2', join(folder, `rosbag2_run${i}`), start));
        const summary = await exportAndJudge('rosbags-import', rec, ROSBAG_MAPPING, []);
        expect(summary).toMatchObject({ ok: true, episodes: 2 });
        // AV1 pads both cameras (64x48 and 40x30) to its 64x64 minimum.
        expect(summary.cameras['observation.images.front']!.size).toEqual([64, 64, 3]);
        expect(summary.cameras['observation.images.wrist']!.size).toEqual([64, 64, 3]);
        expect(summary.train.steps).toBe(4);
      },
      JUDGE_TIMEOUT_MS + 300_000,
    );

    test(
      "a protobuf MCAP as Foxglove's SDK writes it (a joints type of the robot's own, foxglove.CompressedImage JPEG and foxglove.RawImage rgb8)",
      async () => {
        // Copied in under a `.` name and renamed when complete, the other documented way in.
        const rec = await importEpisodes('sort-parts', 2, async (i, start) => {
          const hidden = join(folder, `.proto-run${i}.mcap`);
          await writeRecording('protobuf', hidden, start);
          renameSync(hidden, join(folder, `proto-run${i}.mcap`));
        });
        const summary = await exportAndJudge('protobuf-import', rec, PROTOBUF_MAPPING, ['--codec', 'h264']);
        expect(summary).toMatchObject({ ok: true, episodes: 2 });
        // H.264 needs only even sides: 48x36 and 32x24 are encoded as they are.
        expect(summary.cameras['observation.images.front']!.size).toEqual([36, 48, 3]);
        expect(summary.cameras['observation.images.side']!.size).toEqual([24, 32, 3]);
        expect(summary.train.steps).toBe(4);
      },
      JUDGE_TIMEOUT_MS + 300_000,
    );

    /** One recording by Python (rosbags or mcap-protobuf-support: test/python/write_judge_recordings.py) starting at `startNs`. */
    async function writeRecording(kind: PythonRecordingKind, out: string, startNs: bigint): Promise<void> {
      await writePythonRecording(python, kind, out, startNs, { cwd: tmp.path });
    }

    /**
     * With `task` as the robot's context, `write(i, startNs)` puts each of `count` recordings into
     * the folder; each becomes an episode, syncs to the bucket and is verified there; then one
     * dataset of them.
     */
    async function importEpisodes(task: string, count: number, write: (i: number, startNs: bigint) => Promise<void>): Promise<Recorded> {
      const imported = await robot.importEpisodes(task, count, write);
      for (const ep of imported) expect(ep.outcome).toBe('success');
      const episodes: Recorded['episodes'] = [];
      for (const { id } of imported) {
        const ep = await waitVerified(cloud, id);
        episodes.push({ id, task: String(ep.task_id), objectKey: ep.replicas[0]!.object_key! });
      }
      expect(episodes.map((e) => e.task)).toEqual(imported.map(() => task));
      const ds = await cloud.client().datasets.create({ name: `judge import ${task}`, filter: { robot_id: robot.robotId, task_id: task } });
      return { datasetId: ds.id, episodes };
    }
  });
});
