/**
 * The training bridge end to end, with real processes: a simulated robot records episodes with
 * joint states, commanded actions and two cameras; they sync to the S3-compatible test server
 * through the reference grant provider; a dataset is created and snapshotted; `fleet datasets
 * export-lerobot` reads every recording straight from that bucket (the cloud never serves a byte)
 * and writes a LeRobot v3.0 dataset; `fleet datasets validate-lerobot` passes, and independent
 * readers agree: DuckDB reads every parquet file, ffprobe counts every video's frames.
 * The recordings are the simulator's default, ROS 2 bags (cdr JointState, JPEG CompressedImage).
 * Then: an export killed halfway and run again gives the same bytes, file for file; an object
 * missing from the bucket is skipped with its reason (and fails `--strict`).
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { DeleteObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { DuckDBInstance } from '@duckdb/node-api';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createTestPki, type TestPki } from '../cloud/src/egress/test-https.js';
import { cleanEnv, makeTempDir, REPO_ROOT, startCloud, type CloudProcess, type TempDir } from './support/cloud.js';
import { ensureDebianPackages, FFMPEG } from './support/debian.js';
import { startGrantProvider, writeProviderTls, type GrantProviderProcess } from './support/grant-provider.js';
import { freePort, okJson } from './support/http.js';
import { runProcess, spawnProcess, type RunResult } from './support/process.js';
import { createEnrollmentToken, sendCommand, startFleet, type FleetProcess } from './support/robots.js';
import { startS3Server, type S3ServerProcess } from './support/s3-server.js';
import { waitFor } from './support/wait.js';

const FLEET_CLI = join(REPO_ROOT, 'packages', 'client', 'dist', 'cli.js');
const FPS = 10;

let pki: TestPki;
let tmp: TempDir;
let s3: S3ServerProcess;
let cloud: CloudProcess;
let provider: GrantProviderProcess;
let fleet: FleetProcess;
let robot: string;
const episodes: { id: string; end: 'finish' | 'fail' }[] = [];
let datasetId: string;
let mappingFile: string;

/** The default mapping plus the wrist camera (the simulator records two here, as a ROS 2 bag: cdr JointState and JPEG CompressedImage). */
const MAPPING = {
  fps: FPS,
  task: { from: 'task_id' },
  features: {
    'observation.state': { topic: '/joint_states', fields: ['position'], names_from: 'name' },
    action: { topic: '/joint_commands', fields: ['position'], names_from: 'name' },
    'observation.images.front': { topic: '/camera/front/image_raw/compressed' },
    'observation.images.wrist': { topic: '/camera/wrist/image_raw/compressed' },
  },
};

function fleetCli(args: readonly string[], timeoutMs = 180_000): Promise<RunResult> {
  return runProcess(process.execPath, [FLEET_CLI, ...args], {
    name: `fleet ${args.slice(0, 2).join(' ')}`,
    cwd: REPO_ROOT,
    env: cliEnv(),
    timeoutMs,
  });
}

function cliEnv() {
  return cleanEnv({
    HOME: tmp.path,
    XDG_CONFIG_HOME: undefined,
    FLEET_URL: cloud.http,
    FLEET_API_KEY: cloud.adminKey,
    // The customer's own credentials for the customer's own bucket.
    AWS_ACCESS_KEY_ID: s3.accessKeyId,
    AWS_SECRET_ACCESS_KEY: s3.secretAccessKey,
    AWS_REGION: s3.region,
  });
}

const exportArgs = (out: string, extra: readonly string[] = []) => [
  'datasets',
  'export-lerobot',
  datasetId,
  '--out',
  out,
  '--source',
  `s3://${s3.bucket}`,
  '--s3-endpoint',
  s3.endpoint,
  '--s3-force-path-style',
  '--codec',
  'h264',
  '--mapping',
  mappingFile,
  ...extra,
];

async function record(end: 'finish' | 'fail', ms: number): Promise<string> {
  await waitFor(
    async () => {
      const r = await cloud.fetch(`/v1/robots/${robot}`);
      return ((await r.json()) as { recording_state: string }).recording_state === 'idle' ? true : undefined;
    },
    { timeoutMs: 30_000, description: 'the robot idle' },
  );
  const started = await sendCommand(cloud, robot, 'episodes/start', { body: { task_id: 'pick-cube' } });
  expect(started.status, JSON.stringify(started.body)).toBe(200);
  await new Promise((r) => setTimeout(r, ms));
  const done = await sendCommand(cloud, robot, `episodes/${end}`);
  expect(done.status, JSON.stringify(done.body)).toBe(200);
  return String(started.body.result!.episode_id);
}

/** Every file under `dir` (but the work directory) with its SHA-256. */
function digestTree(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  const walk = (d: string) => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      if (statSync(p).isDirectory()) {
        if (name !== '.fleet-export') walk(p);
      } else out[relative(dir, p)] = createHash('sha256').update(readFileSync(p)).digest('hex');
    }
  };
  walk(dir);
  return out;
}

beforeAll(async () => {
  // The export encodes with ffmpeg and the test reads back with ffprobe: a missing binary fails
  // here, by name, rather than as an export that never finishes.
  const missing = ensureDebianPackages([FFMPEG]);
  if (missing.length > 0) throw new Error('ffmpeg and ffprobe are needed: apt-get install -y ffmpeg (as root the tests install it)');
  pki = createTestPki();
  tmp = await makeTempDir('fleet-lerobot-');
  const tls = writeProviderTls(pki, tmp.path);
  mappingFile = join(tmp.path, 'mapping.json');
  writeFileSync(mappingFile, JSON.stringify(MAPPING));
  s3 = await startS3Server();
  cloud = await startCloud({ args: ['--egress-allow-loopback', '--egress-ca-file', pki.caFile] });
  const port = await freePort();
  const destination = await okJson<{ id: string; secret: string }>(
    await cloud.fetch('/v1/destinations', { method: 'POST', json: { type: 'external', url: `https://127.0.0.1:${port}/grant` } }),
  );
  provider = await startGrantProvider({ s3, secret: destination.secret, tls: { ...tls, ca: pki.caPem }, args: ['--port', String(port)] });
  const token = await createEnrollmentToken(cloud, { maxUses: 1 });
  fleet = await startFleet(cloud, {
    count: 1,
    token: token.token,
    // The simulator's default recording: a rosbag2 directory, as `ros2 bag record --storage mcap` writes.
    args: ['--allow-http-uploads', '--cameras', '2', '--camera-width', '64', '--camera-height', '48', '--camera-hz', String(FPS), '--state-hz', '50'],
  });
  robot = fleet.robots[0]!;
  for (const [end, ms] of [
    ['finish', 1500],
    ['fail', 1200],
    ['finish', 1800],
    ['finish', 1000],
  ] as const) {
    episodes.push({ id: await record(end, ms), end });
  }
  const c = cloud.client();
  for (const e of episodes) {
    await waitFor(async () => ((await c.episodes.get(e.id)).replicas[0]?.state === 'verified' ? true : undefined), {
      timeoutMs: 90_000,
      intervalMs: 200,
      description: `episode ${e.id} verified in the bucket`,
    });
  }
  const ds = await c.datasets.create({ name: 'pick-cube for training', filter: { robot_id: robot } });
  datasetId = ds.id;
}, 240_000);

afterAll(async () => {
  await fleet?.[Symbol.asyncDispose]();
  await provider?.[Symbol.asyncDispose]();
  await cloud?.[Symbol.asyncDispose]();
  await s3?.[Symbol.asyncDispose]();
  await tmp?.[Symbol.asyncDispose]();
  pki?.cleanup();
});

describe('fleet datasets export-lerobot, end to end', () => {
  let full: string;

  test('a live dataset is refused without --snapshot; with it, the export writes a dataset validate-lerobot passes', async () => {
    const refused = await fleetCli(exportArgs(join(tmp.path, 'refused')));
    expect(refused.code, refused.stderr).toBe(1);
    expect(refused.stderr).toMatch(/conflict: dataset ds_\S+ is live/);
    expect(existsSync(join(tmp.path, 'refused'))).toBe(false);

    full = join(tmp.path, 'full');
    const res = await fleetCli(exportArgs(full, ['--snapshot']));
    expect(res.code, res.stderr).toBe(0);
    expect(res.stdout).toMatch(/wrote 4 episodes \(\d+ frames\)/);
    // Progress: episodes, frames, bytes, rate.
    expect(res.stderr).toMatch(/episodes 4\/4 {2}frames [\d,]+ {2}[\d.]+ (KiB|MiB) {2}[\d.]+ episodes\/min/);
    expect(existsSync(join(full, '.fleet-export'))).toBe(false);

    const valid = await fleetCli(['datasets', 'validate-lerobot', full]);
    expect(valid.code, valid.stderr).toBe(0);
    expect(valid.stdout).toMatch(/valid LeRobot v3\.0 dataset: 4 episodes/);
  });

  test('independent readers agree: DuckDB reads every parquet file, ffprobe counts every video frame', async () => {
    const info = JSON.parse(readFileSync(join(full, 'meta', 'info.json'), 'utf8')) as {
      codebase_version: string;
      fps: number;
      total_episodes: number;
      total_frames: number;
      features: Record<string, { dtype: string; shape: number[] }>;
    };
    expect(info).toMatchObject({ codebase_version: 'v3.0', fps: FPS, total_episodes: 4 });
    expect(Object.keys(info.features).sort()).toEqual(
      [
        'action',
        'episode_index',
        'frame_index',
        'index',
        'next.done',
        'next.success',
        'observation.images.front',
        'observation.images.wrist',
        'observation.state',
        'task_index',
        'timestamp',
      ].sort(),
    );

    const db = await DuckDBInstance.create(':memory:');
    const conn = await db.connect();
    const rows = async (sql: string) => (await conn.runAndReadAll(sql)).getRowObjectsJson();
    const data = join(full, 'data', '*', '*.parquet');
    const [totals] = await rows(
      `select count(*) n, min("index") lo, max("index") hi, count(distinct episode_index) eps, max(abs(timestamp - frame_index / ${FPS})) drift from '${data}'`,
    );
    expect(totals).toMatchObject({ n: String(info.total_frames), lo: '0', hi: String(info.total_frames - 1), eps: '4' });
    expect(Number(totals!.drift)).toBeLessThan(1e-4);
    const types = Object.fromEntries((await rows(`describe select * from '${data}'`)).map((r) => [r.column_name as string, r.column_type as string]));
    expect(types).toMatchObject({ 'observation.state': 'FLOAT[]', action: 'FLOAT[]', timestamp: 'FLOAT', index: 'BIGINT', task_index: 'BIGINT', 'next.done': 'BOOLEAN' });
    // One done frame per episode, a success only where the episode succeeded.
    const perEpisode = await rows(`select episode_index, count(*) n, sum(case when "next.done" then 1 else 0 end) done, bool_or("next.success") ok from '${data}' group by 1 order by 1`);
    expect(perEpisode.map((r) => [r.done, r.ok])).toEqual(episodes.map((e) => ['1', e.end === 'finish']));
    const eps = await rows(`select episode_index, length, "meta/episode_id" id, tasks from '${join(full, 'meta', 'episodes', '*', '*.parquet')}' order by 1`);
    expect(eps.map((e) => e.id)).toEqual(episodes.map((e) => e.id));
    expect(eps.map((e) => e.length)).toEqual(perEpisode.map((r) => r.n));
    // The task is each episode's task_id (the mapping's default), as a string, in row task_index.
    const taskIds = [...new Set(await Promise.all(episodes.map(async (e) => (await cloud.client().episodes.get(e.id)).task_id)))];
    const tasks = await rows(`select task_index, task from '${join(full, 'meta', 'tasks.parquet')}' order by task_index`);
    expect(tasks).toEqual(taskIds.map((t, i) => ({ task_index: String(i), task: t })));
    expect(eps.map((e) => e.tasks)).toEqual(episodes.map(() => [taskIds[0]]));

    for (const camera of ['front', 'wrist']) {
      const dir = join(full, 'videos', `observation.images.${camera}`);
      let frames = 0;
      for (const chunk of readdirSync(dir)) {
        for (const file of readdirSync(join(dir, chunk))) {
          const out = execFileSync('ffprobe', ['-v', 'error', '-count_frames', '-select_streams', 'v:0', '-show_entries', 'stream=nb_read_frames,width,height', '-of', 'csv=p=0', join(dir, chunk, file)], {
            encoding: 'utf8',
          });
          const [w, h, n] = out.trim().split(',').map(Number);
          expect([w, h]).toEqual([64, 48]);
          frames += n!;
        }
      }
      expect(frames).toBe(info.total_frames);
    }
    conn.closeSync();
  });

  test('an export killed halfway and run again continues, and writes the same bytes as one uninterrupted run', async () => {
    const out = join(tmp.path, 'resumed');
    const proc = spawnProcess(process.execPath, [FLEET_CLI, ...exportArgs(out, ['--concurrency', '1'])], { name: 'fleet export (killed)', cwd: REPO_ROOT, env: cliEnv() });
    // Killed once the first episode is staged and before the dataset is assembled.
    await waitFor(() => (existsSync(join(out, '.fleet-export', 'results', '00000001.json')) ? true : undefined), { timeoutMs: 120_000, intervalMs: 20, description: 'the first episode staged' });
    await proc.kill('SIGKILL');
    expect(existsSync(join(out, 'meta', 'info.json'))).toBe(false);
    const again = await fleetCli(exportArgs(out));
    expect(again.code, again.stderr).toBe(0);
    expect(digestTree(out)).toEqual(digestTree(full));
  });

  test('an object missing from the bucket: the episode is skipped with its reason; --strict fails instead', async () => {
    const c = cloud.client();
    const victim = episodes[1]!.id;
    const ep = await c.episodes.get(victim);
    const key = `${ep.replicas[0]!.object_key}bag/bag_0.mcap`;
    const client = new S3Client({ endpoint: s3.endpoint, region: s3.region, forcePathStyle: true, credentials: { accessKeyId: s3.accessKeyId, secretAccessKey: s3.secretAccessKey } });
    await client.send(new DeleteObjectCommand({ Bucket: s3.bucket, Key: key }));
    client.destroy();

    const strict = await fleetCli(exportArgs(join(tmp.path, 'strict'), ['--strict']));
    expect(strict.code).toBe(1);
    expect(strict.stderr).toContain(`strict: episode ${victim}`);
    expect(strict.stderr).toContain('missing');

    const out = join(tmp.path, 'skipping');
    const res = await fleetCli(exportArgs(out));
    expect(res.code, res.stderr).toBe(0);
    expect(res.stdout).toMatch(/wrote 3 episodes .*1 skipped/);
    expect(res.stderr).toContain(`skipped ${victim}: missing`);
    const report = JSON.parse(readFileSync(join(out, 'meta', 'fleet.json'), 'utf8')) as { provenance: { skipped: { episode_id: string; reason: string }[] } };
    expect(report.provenance.skipped).toEqual([expect.objectContaining({ episode_id: victim, reason: 'missing' })]);
    const valid = await fleetCli(['datasets', 'validate-lerobot', out]);
    expect(valid.code, valid.stderr).toBe(0);
  });
});
