/**
 * `npm run bench -- lerobot` on ROS 2 inputs (the default `--input ros2`): for each of two inputs,
 * `--episodes` rosbag2 directories (metadata.yaml + .mcap, cdr, ros2msg schemas) of `--seconds`
 * each, written by Python's rosbags (bench/python/write_bench_bags.py, in the test venv; not
 * timed): JointState state and commands at 50 Hz and one camera of `--width`x`--height` at
 * `--fps` Hz, as sensor_msgs/msg/CompressedImage JPEG (input `jpeg`) or sensor_msgs/msg/Image rgb8
 * (input `rgb8`). Each bag goes into a local bucket as `<object_key>/bag/...` with its manifest
 * line, as the agent uploads a ROS 2 episode.
 *
 * Per input, in one run:
 * - the export (`exportLeRobot` over `file://<bucket>`, 2 episodes at a time, in a Node process of
 *   its own): episodes/min, frames/s, MB/s of bag read, its peak RSS (sampled every 100 ms, and
 *   the kernel's maxRSS) against the bound of 300 MB, and its ffmpeg children's;
 * - the baseline, ffmpeg alone doing the same decode and encode of the same frames with the
 *   export's settings, one ffmpeg per episode, 2 at a time: for `jpeg` it decodes the episode's
 *   JPEG frames stored back to back (written beside the bag, not timed; the frames are the grid's
 *   because every stream starts at the episode's first instant and camera frame k is at exactly
 *   grid time k, which is checked), for `rgb8` it reads raw rgb24 files of the grid frames read
 *   through the export's own source (not timed);
 * - the peer, forge-robotics 0.2.0 (bench/python/requirements-forge.txt, its own venv), the same
 *   bags 2 at a time, by its two routes: the .mcap file (its "mcap" reader: state, action and
 *   camera) and the bag directory (its "rosbag" reader: camera only; on the rgb8 input, the first
 *   10 bags);
 * - whether LeRobot 0.6.1 (the test venv) loads each dataset: ours, and the peer's first
 *   dataset of each route (every bag is a dataset of its own there).
 * `--profile` runs the export under `node --cpu-prof` and prints its top self-time functions.
 * Prints figures and ratios; asserts nothing about time.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createWriteStream, existsSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import { newEpisodeId } from '@fleet/agent';
import { parseMapping, type Mapping } from '@fleet/lerobot';
import { Recording, gridTimeNs, loadGridEpisode, parseManifestLine } from '../packages/lerobot/src/source/index.js';
import type { VideoCodec } from '../packages/lerobot/src/writer/ffmpeg.js';
import { eachLimited } from '../packages/lerobot/src/export.js';
import { ensurePythonEnv } from '../test/support/python.js';
import type { CommonArgs } from './lib/args.js';
import {
  CONCURRENCY,
  MB,
  RSS_BOUND_MB,
  RUN_HEADER,
  RssSampler,
  codecOption,
  exportInChild,
  ffmpeg,
  framesPerS,
  intOption,
  mb,
  mjpegBaselineArgs,
  rawBaselineArgs,
  runCells,
  sha256File,
  toAsync,
  type Member,
  type Run,
} from './lib/lerobot-export.js';
import { topSelfTime, type CpuProfile } from './lib/cpu-profile.js';
import { fmt, table } from './lib/measure.js';
import { BenchFailure, row, type SummaryRow } from './lib/summary.js';

const PYTHON_DIR = fileURLToPath(new URL('./python/', import.meta.url));
const FORGE_REQUIREMENTS = join(PYTHON_DIR, 'requirements-forge.txt');
const DST = 'dst_bench';
const ROBOT = 'rbt_bench';
/** The bags' first instant (write_bench_bags.py's T0), and the gap between episodes. */
const T0_MS = 1_780_000_000_000;
const GAP_S = 5;
const STATE_HZ = 50;

type CameraInput = 'jpeg' | 'rgb8';
const INPUTS: readonly CameraInput[] = ['jpeg', 'rgb8'];
const CAMERA_TOPIC: Record<CameraInput, string> = { jpeg: '/camera/front/image_raw/compressed', rgb8: '/camera/front/image_raw' };
const CAMERA_TYPE: Record<CameraInput, string> = { jpeg: 'CompressedImage JPEG', rgb8: 'Image rgb8' };
type ForgeRoute = 'mcap' | 'dir';
const ROUTES: readonly ForgeRoute[] = ['mcap', 'dir'];
/** Bags the peer's rosbag route converts of the rgb8 input (all of the jpeg input: it skips its images). */
const DIR_ROUTE_SAMPLE = 10;
const ROUTE_NAME: Record<ForgeRoute, string> = { mcap: 'forge convert bag/*.mcap (its mcap reader)', dir: 'forge convert bag/ (its rosbag reader)' };

interface Sizes {
  episodes: number;
  seconds: number;
  width: number;
  height: number;
  fps: number;
  codec: VideoCodec;
}

/** The default: 100 episodes of 1 s at 640x480 @ 30 Hz: 8.5 minutes on 2 shared cores, 4 of them the export (docs/performance.md). */
function sizesOf(args: CommonArgs): Sizes {
  if (args.extra.cameras !== undefined) throw new Error('--cameras is for --input json: the ROS 2 bags have one camera');
  return {
    episodes: intOption(args, 'episodes', 100, 1, 10_000),
    seconds: intOption(args, 'seconds', 1, 1, 600),
    width: intOption(args, 'width', 640, 16, 1920),
    height: intOption(args, 'height', 480, 16, 1920),
    fps: intOption(args, 'fps', 30, 1, 120),
    codec: codecOption(args),
  };
}

const log = (line: string) => process.stderr.write(`${line}\n`);

/** Runs a process to its end; its stdout, or a BenchFailure with the end of its stderr. */
async function run(bin: string, args: string[], opts: { env?: NodeJS.ProcessEnv; onSpawn?: (c: ChildProcess) => void } = {}): Promise<string> {
  const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...opts.env } });
  opts.onSpawn?.(child);
  let out = '';
  let err = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => {
    err = (err + d).slice(-4096);
  });
  const [code] = (await once(child, 'close')) as [number | null];
  if (code !== 0) throw new BenchFailure(`${bin} ${args.slice(0, 2).join(' ')} exited ${code}: ${err.trim().split('\n').slice(-5).join(' | ')}`);
  return out;
}

function mappingFor(input: CameraInput, s: Sizes): unknown {
  return {
    fps: s.fps,
    robot_type: 'bench-arm',
    features: {
      'observation.state': { topic: '/joint_states', fields: ['position'], names_from: 'name' },
      action: { topic: '/joint_commands', fields: ['position'], names_from: 'name' },
      'observation.images.front': { topic: CAMERA_TOPIC[input] },
    },
  };
}

/** Writes the bags with rosbags (not timed) and moves each into the bucket; their manifest lines. */
async function writeBags(python: string, root: string, input: CameraInput, s: Sizes): Promise<{ members: Member[]; bagBytes: number; ms: number }> {
  const gen = join(root, 'gen');
  const t0 = performance.now();
  const extra = input === 'jpeg' ? ['--jpeg-out', join(root, 'mjpeg')] : [];
  await run(python, [
    join(PYTHON_DIR, 'write_bench_bags.py'), gen,
    '--episodes', String(s.episodes), '--seconds', String(s.seconds), '--camera', input,
    '--width', String(s.width), '--height', String(s.height), '--camera-hz', String(s.fps), '--state-hz', String(STATE_HZ), ...extra,
  ]);
  const ms = performance.now() - t0;
  const bucket = join(root, 'bucket');
  const members: Member[] = [];
  let bagBytes = 0;
  for (let i = 0; i < s.episodes; i++) {
    const startedAt = T0_MS + i * (s.seconds + GAP_S) * 1000;
    const id = newEpisodeId(startedAt);
    const key = `org_bench/${ROBOT}/${id}/`;
    await mkdir(join(bucket, `org_bench/${ROBOT}`), { recursive: true });
    await rename(join(gen, `ep_${String(i).padStart(5, '0')}`), join(bucket, key));
    const files = [];
    for (const name of (await readdir(join(bucket, key, 'bag'))).sort()) {
      const path = join(bucket, key, 'bag', name);
      const size = (await stat(path)).size;
      bagBytes += size;
      files.push({ path: `bag/${name}`, size_bytes: size, sha256: await sha256File(path) });
    }
    members.push({
      id,
      robot_id: ROBOT,
      task_id: i % 3 === 0 ? 'stack-blocks' : 'pick-cube',
      outcome: i % 10 === 9 ? 'failure' : 'success',
      metadata: { operator: 'bench' },
      started_at: new Date(startedAt).toISOString(),
      ended_at: new Date(startedAt + s.seconds * 1000).toISOString(),
      files,
      locations: [{ destination_id: DST, state: 'verified', object_key: key, grant_id: 'gr_bench' }],
    });
  }
  return { members, bagBytes, ms };
}

const mcapOf = (bucket: string, m: Member) => join(bucket, m.locations[0]!.object_key, m.files.find((f) => f.path.endsWith('.mcap'))!.path);

/**
 * The JPEG baseline decodes the frames stored back to back beside the bag: they are the grid's
 * frames when every stream starts at one instant and camera message k is at grid time k. Checked
 * here from the bag, for every episode.
 */
async function checkJpegGrid(bucket: string, members: readonly Member[], fps: number, length: number): Promise<void> {
  for (const m of members) {
    await using rec = await Recording.open(mcapOf(bucket, m));
    const firsts = await Promise.all(['/joint_states', '/joint_commands', CAMERA_TOPIC.jpeg].map(async (t) => (await rec.first(t))?.timeNs));
    if (firsts.some((t) => t !== firsts[0])) throw new BenchFailure(`lerobot: ${m.id}: the streams start at ${firsts.join(', ')} ns, not at one instant`);
    let k = 0;
    for await (const msg of rec.messages([CAMERA_TOPIC.jpeg])) {
      if (k >= length) break;
      const want = gridTimeNs({ startNs: firsts[0]!, fps }, k);
      if (msg.timeNs !== want) throw new BenchFailure(`lerobot: ${m.id}: camera frame ${k} is at ${msg.timeNs} ns, grid frame ${k} at ${want} ns`);
      k++;
    }
    if (k !== length) throw new BenchFailure(`lerobot: ${m.id}: ${k} camera frames for a grid of ${length}`);
  }
}

/** Each episode's grid frames read through the export's own source, as raw rgb24 files (not timed). */
async function writeRawFrames(dir: string, bucket: string, members: readonly Member[], mapping: Mapping): Promise<string[]> {
  await mkdir(dir, { recursive: true });
  const files: string[] = [];
  for (const [i, m] of members.entries()) {
    const parsed = parseManifestLine(JSON.stringify(m), i + 2);
    if (parsed.kind !== 'episode') throw new BenchFailure('manifest line is not an episode');
    await using loaded = await loadGridEpisode(mcapOf(bucket, m), parsed.episode, mapping);
    const cam = Object.values(loaded.episode.cameras)[0]!;
    const path = join(dir, `${String(i).padStart(5, '0')}.rgb`);
    const out = createWriteStream(path);
    for await (const frame of cam.frames) if (!out.write(frame)) await once(out, 'drain');
    out.end();
    await once(out, 'close');
    files.push(path);
  }
  return files;
}

interface ForgeRun {
  route: ForgeRoute;
  run: Run;
  tried: number;
  converted: number;
  firstError: string | null;
  /** Datasets with a camera feature (a video); the first dataset written. */
  withCamera: number;
  firstOut: string | null;
}

interface ForgeLine {
  bag?: string;
  ok?: boolean;
  frames?: number;
  error?: string | null;
  out?: string;
  max_rss_bytes?: number;
}

/** forge-robotics on every bag by one route, `CONCURRENCY` processes each with its share of the bags. */
async function runForge(forgePython: string, root: string, route: ForgeRoute, bags: readonly string[], bagBytes: number): Promise<ForgeRun> {
  const out = join(root, `forge-${route}`);
  const shares = Array.from({ length: CONCURRENCY }, (_, w) => bags.filter((_, i) => i % CONCURRENCY === w)).filter((b) => b.length > 0);
  const sampler = new RssSampler();
  const t0 = performance.now();
  const outputs = await Promise.all(
    shares.map((share) => run(forgePython, [join(PYTHON_DIR, 'forge_convert.py'), route, out, ...share], { env: { HF_HUB_OFFLINE: '1' }, onSpawn: (c) => sampler.watch(c) })),
  );
  const ms = performance.now() - t0;
  sampler.stop();
  const lines = outputs.flatMap((o) => o.trim().split('\n').filter(Boolean).map((l) => JSON.parse(l) as ForgeLine));
  const perBag = lines.filter((l) => l.bag !== undefined);
  const ok = perBag.filter((l) => l.ok === true);
  const withCamera = ok.filter((l) => {
    const info = join(l.out!, 'meta', 'info.json');
    if (!existsSync(info)) return false;
    const features = (JSON.parse(readFileSync(info, 'utf8')) as { features?: Record<string, { dtype?: string }> }).features ?? {};
    return Object.entries(features).some(([k, f]) => k.startsWith('observation.images.') && f.dtype === 'video');
  }).length;
  const frames = ok.reduce((a, l) => a + (l.frames ?? 0), 0);
  return {
    route,
    tried: bags.length,
    converted: ok.length,
    firstError: perBag.find((l) => l.ok !== true)?.error ?? null,
    withCamera,
    firstOut: ok[0]?.out ?? null,
    run: {
      name: `${ROUTE_NAME[route]}, ${CONCURRENCY} at a time`,
      episodes: ok.length,
      frames,
      ms,
      bytesRead: bagBytes,
      peakSampled: sampler.peakWatched,
      maxRss: Math.max(0, ...lines.map((l) => l.max_rss_bytes ?? 0)),
      peakFfmpeg: 0,
    },
  };
}

interface Loaded {
  dir: string;
  loaded: boolean;
  frames: number | null;
  episodes: number | null;
  error: string | null;
}

/** LeRobot 0.6.1 (the test venv) opening each dataset offline with the pyav backend, reading its first and last items. */
async function lerobotLoads(python: string, dirs: readonly string[]): Promise<Map<string, Loaded>> {
  const out = await run(python, [join(PYTHON_DIR, 'lerobot_loads.py'), ...dirs], { env: { HF_HUB_OFFLINE: '1' } });
  return new Map(
    out
      .trim()
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Loaded)
      .map((l) => [l.dir, l]),
  );
}

const loadedText = (l: Loaded | undefined): string => (l === undefined ? 'not checked' : l.loaded ? `yes (${l.frames} frames, ${l.episodes} episode(s))` : `no: ${l.error}`);

async function benchInput(input: CameraInput, s: Sizes, python: string, forgePython: string, root: string, profile: boolean): Promise<SummaryRow[]> {
  await mkdir(root, { recursive: true });
  const mappingJson = mappingFor(input, s);
  const mapping = parseMapping(mappingJson);
  process.stderr.write(`lerobot: writing ${s.episodes} bags of ${s.seconds} s (${CAMERA_TYPE[input]} ${s.width}x${s.height} @ ${s.fps} Hz) with rosbags...\n`);
  const { members, bagBytes, ms: writeMs } = await writeBags(python, root, input, s);
  const bucket = join(root, 'bucket');
  process.stdout.write(
    `\nlerobot, ROS 2 input ${input}: ${s.episodes} rosbag2 episodes x ${s.seconds} s, ${CAMERA_TYPE[input]} ${s.width}x${s.height} @ ${s.fps} Hz, JointState @ ${STATE_HZ} Hz, codec ${s.codec}; ` +
      `written by rosbags in ${fmt(writeMs / 1000, 1)} s (not measured), ${fmt(mb(bagBytes), 1)} MB of bags\n`,
  );

  // The export, timed from the call to its return (assembly included).
  const outDir = join(root, 'dataset');
  const header = { dataset_id: 'ds_bench', name: 'bench', filter: {}, snapshot_at: '2026-12-02T00:00:00.000Z', episode_count: members.length };
  const manifestPath = join(root, 'manifest.ndjson');
  await writeFile(manifestPath, [header, ...members].map((l) => JSON.stringify(l)).join('\n') + '\n');
  const profDir = join(root, 'cpu-profile');
  const sampler = new RssSampler();
  const t0 = performance.now();
  const child = await exportInChild([manifestPath, outDir, `file://${bucket}`, JSON.stringify(mappingJson), s.codec, String(CONCURRENCY)], sampler, profile ? ['--cpu-prof', '--cpu-prof-dir', profDir] : []);
  const exportMs = performance.now() - t0;
  sampler.stop();
  const { result, maxRssBytes: maxRss } = child;
  if (result.episodes !== s.episodes) {
    throw new BenchFailure(`lerobot: INCOMPLETE, ${result.episodes} of ${s.episodes} ${input} episodes exported (${result.skipped.map((k) => `${k.episode_id}: ${k.reason}`).join('; ')})`);
  }
  const length = result.frames / result.episodes;
  if (!Number.isInteger(length)) throw new BenchFailure(`lerobot: ${result.frames} frames over ${result.episodes} episodes of one length`);
  const exported: Run = { name: `exportLeRobot, ${CONCURRENCY} at a time`, episodes: result.episodes, frames: result.frames, ms: exportMs, bytesRead: bagBytes, peakSampled: sampler.peakWatched, maxRss, peakFfmpeg: sampler.peakFfmpeg };

  // The baseline: the same frames, decoded and encoded by ffmpeg alone (its input made untimed).
  const encoded = join(root, 'baseline');
  await mkdir(encoded, { recursive: true });
  let inputs: { path: string; args: (out: string) => string[] }[];
  let baselineBytes = 0;
  if (input === 'jpeg') {
    await checkJpegGrid(bucket, members, s.fps, length);
    const files = (await readdir(join(root, 'mjpeg'))).sort().map((f) => join(root, 'mjpeg', f));
    for (const f of files) baselineBytes += (await stat(f)).size;
    inputs = files.map((path) => ({ path, args: (out) => mjpegBaselineArgs(path, length, s, out) }));
  } else {
    const files = await writeRawFrames(join(root, 'raw'), bucket, members, mapping);
    baselineBytes = result.frames * s.width * s.height * 3;
    inputs = files.map((path) => ({ path, args: (out) => rawBaselineArgs(path, length, s, out) }));
  }
  const baseSampler = new RssSampler();
  const b0 = performance.now();
  await eachLimited(toAsync(inputs), CONCURRENCY, (f) => ffmpeg(f.args(join(encoded, `${f.path.split('/').at(-1)}.mp4`))));
  const baseline: Run = {
    name: `ffmpeg alone per episode, ${CONCURRENCY} at a time (baseline: ${input === 'jpeg' ? 'JPEG frames -> decode' : 'raw rgb24'} -> encode)`,
    episodes: s.episodes,
    frames: result.frames,
    ms: performance.now() - b0,
    bytesRead: baselineBytes,
    peakSampled: null,
    maxRss: null,
    peakFfmpeg: baseSampler.stop().peakFfmpeg,
  };
  // The raw files are as big as the bags: gone before the peer runs.
  await rm(join(root, 'raw'), { recursive: true, force: true });
  await rm(encoded, { recursive: true, force: true });

  const bags = members.map((m) => join(bucket, m.locations[0]!.object_key, 'bag'));
  process.stderr.write(`lerobot: forge-robotics on the ${input} bags...\n`);
  const forge: ForgeRun[] = [];
  // The rosbag route encodes every frame too but writes no state or action: on the rgb8 bags it
  // runs on a sample only, so that the default run stays a few minutes.
  for (const route of ROUTES) {
    const these = input === 'rgb8' && route === 'dir' ? bags.slice(0, DIR_ROUTE_SAMPLE) : bags;
    forge.push(await runForge(forgePython, root, route, these, (bagBytes * these.length) / bags.length));
  }

  const checks = await lerobotLoads(python, [outDir, ...forge.flatMap((f) => (f.firstOut !== null ? [f.firstOut] : []))]);

  process.stdout.write(`${table(RUN_HEADER, [runCells(exported), runCells(baseline), ...forge.map((f) => runCells(f.run))])}\n`);
  const peak = Math.max(sampler.peakWatched, maxRss);
  const held = peak < RSS_BOUND_MB * MB;
  const ratio = framesPerS(exported) / framesPerS(baseline);
  const cameraFrames = s.seconds * s.fps + 1;
  process.stdout.write(
    `export: ${result.frames} grid frames (${length} per episode) encoded at ${s.fps} fps; MB/s read = bag bytes fetched from the bucket (baseline: its input files)\n` +
      `peak RSS of the export process: ${fmt(mb(sampler.peakWatched), 1)} MB sampled every 100 ms, maxRSS ${fmt(mb(maxRss), 1)} MB; bound ${RSS_BOUND_MB} MB: ${held ? 'held' : 'NOT held'}; ffmpeg children ${fmt(mb(sampler.peakFfmpeg), 1)} MB\n` +
      `ratio export / ffmpeg alone (frames/s): ${fmt(ratio, 3)} (target >= 0.8: ${ratio >= 0.8 ? 'met' : 'NOT met'})\n` +
      `LeRobot 0.6.1 loads our export: ${loadedText(checks.get(outDir))}\n`,
  );
  for (const f of forge) {
    const perCamera = (f.converted * cameraFrames) / (f.run.ms / 1000);
    process.stdout.write(
      `${ROUTE_NAME[f.route]}: converted ${f.converted} of ${f.tried} bags${f.firstError !== null ? ` (first refusal: ${f.firstError})` : ''}; ` +
        `${f.withCamera} of them with a camera video; ${f.run.frames} frames written (${f.converted > 0 ? fmt(f.run.frames / f.converted, 1) : '0'} per episode from ${cameraFrames} camera frames); ` +
        `${fmt(framesPerS(f.run), 1)} frames written/s, ${fmt(perCamera, 1)} camera frames read/s; ` +
        `export / forge per frame: ${f.withCamera > 0 ? fmt(framesPerS(exported) / framesPerS(f.run), 3) : 'n/a (no camera in its output)'}; ` +
        `LeRobot loads its output: ${f.firstOut === null ? 'no output' : loadedText(checks.get(f.firstOut))}\n`,
    );
  }

  if (profile) {
    const profiles = existsSync(profDir) ? (await readdir(profDir)).filter((f) => f.endsWith('.cpuprofile')) : [];
    if (profiles.length === 0) throw new BenchFailure('lerobot: --profile wrote no .cpuprofile');
    const top = topSelfTime(JSON.parse(readFileSync(join(profDir, profiles[0]!), 'utf8')) as CpuProfile, 15);
    process.stdout.write(`export CPU profile (node --cpu-prof), top self time:\n${table(['self ms', 'self %', 'function', 'where'], top.map((t) => [fmt(t.selfMs, 0), fmt(t.percent, 1), t.name, t.where]))}\n`);
  }

  const size = `ROS 2 ${input}, ${s.episodes} episodes x ${s.seconds} s, ${s.width}x${s.height}@${s.fps}, ${s.codec}`;
  const rows: SummaryRow[] = [
    row({
      name: `export frames/s, ${size}`,
      figure: framesPerS(exported),
      unit: 'frames/s',
      baseline: framesPerS(baseline),
      baselineUnit: 'frames/s',
      baselineName: `ffmpeg alone per episode (${input === 'jpeg' ? 'JPEG decode' : 'raw rgb24'} + encode), ${CONCURRENCY} at a time, same settings`,
      target: 'ratio >= 0.8',
    }),
    row({ name: `export episodes/min, ${size}`, figure: (s.episodes / exportMs) * 60_000, unit: 'episodes/min', baseline: null, baselineUnit: null }),
    row({ name: `export bag read, ${size}`, figure: mb(bagBytes) / (exportMs / 1000), unit: 'MB/s', baseline: null, baselineUnit: null }),
    row({
      name: `export peak RSS, ${size}`,
      figure: mb(peak),
      unit: 'MB',
      baseline: null,
      baselineUnit: null,
      target: `< ${RSS_BOUND_MB} MB — ${held ? 'held' : 'not held'}`,
      note: `sampled ${fmt(mb(sampler.peakWatched), 1)} MB; maxRSS ${fmt(mb(maxRss), 1)} MB; ffmpeg children ${fmt(mb(sampler.peakFfmpeg), 1)} MB`,
    }),
  ];
  for (const f of forge) {
    // Frames without their camera are not the same work: no row for them.
    if (f.withCamera === 0) continue;
    rows.push(
      row({
        name: `export frames/s vs ${ROUTE_NAME[f.route]}, ${size}`,
        figure: framesPerS(exported),
        unit: 'frames/s',
        baseline: framesPerS(f.run),
        baselineUnit: 'frames/s',
        baselineName: `forge-robotics 0.2.0, frames written/s, ${CONCURRENCY} at a time`,
        target: input === 'rgb8' ? 'ratio >= 1' : undefined,
        note: `forge converted ${f.converted}/${f.tried}; LeRobot loads it: ${f.firstOut === null ? 'no output' : checks.get(f.firstOut)?.loaded ? 'yes' : 'no'}`,
      }),
    );
  }
  return rows;
}

export async function runRos2(args: CommonArgs): Promise<SummaryRow[]> {
  const s = sizesOf(args);
  const python = ensurePythonEnv(log);
  const forgePython = ensurePythonEnv(log, FORGE_REQUIREMENTS);
  const root = await mkdtemp(join(tmpdir(), 'fleet-bench-lerobot-ros2-'));
  const rows: SummaryRow[] = [];
  try {
    for (const input of INPUTS) rows.push(...(await benchInput(input, s, python, forgePython, join(root, input), args.extra.profile === true)));
  } finally {
    if (args.extra.keep === true) process.stderr.write(`lerobot: kept ${root}\n`);
    else await rm(root, { recursive: true, force: true });
  }
  return rows;
}
