/**
 * `npm run bench -- lerobot [--input ros2|json] ...`: the LeRobot export (`exportLeRobot` of
 * @fleet/lerobot) over a local "bucket" of recordings, beside ffmpeg alone doing the same decode
 * and encode. `--input ros2` (the default) is bench/lerobot-ros2.ts: rosbag2 directories written
 * by Python's rosbags (CompressedImage JPEG and Image rgb8 at 640x480 @ 30 Hz), with the peer
 * converter forge-robotics in the same run.
 *
 * `--input json`, this file: the agent's synthetic recorder on a manual clock writes `--episodes`
 * MCAPs of `--seconds` each (`--cameras` cameras of `--width`x`--height` at `--fps`, JSON messages,
 * foxglove.RawImage frames) laid out as `<bucket>/<object_key>/recording.mcap`, with their
 * manifest lines in memory; recording is not measured. Then the export from `file://<bucket>` with
 * 2 episodes at a time: episodes/min, frames/s (grid frames × cameras, each encoded once), MB/s
 * read, and the export process's peak RSS (sampled every 100 ms and `maxRSS`) next to the bound
 * of 300 MB, with the ffmpeg children's.
 *
 * The baseline is ffmpeg alone encoding the same frames with the export's settings from raw rgb24
 * files on disk (the frames read back through the export's own source, `loadGridEpisode`): one
 * ffmpeg per episode and camera, 2 at a time as the export runs them (the main ratio), and one
 * ffmpeg over all frames. Only the ffmpeg runs are timed. Prints figures and ratios; asserts
 * nothing about time.
 */
import { createWriteStream } from 'node:fs';
import { mkdir, mkdtemp, rename, rm, stat, writeFile } from 'node:fs/promises';
import { once } from 'node:events';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { ManualClock } from '@fleet/protocol';
import { ManualScheduler, newEpisodeId } from '@fleet/agent';
import { SyntheticRecorder } from '@fleet/simulator/synthetic-recorder';
import { DEFAULT_MAPPING, parseMapping, type Mapping } from '@fleet/lerobot';
import { WRIST_CAMERA_TOPIC, loadGridEpisode, parseManifestLine } from '../packages/lerobot/src/source/index.js';
import type { VideoCodec } from '../packages/lerobot/src/writer/ffmpeg.js';
import { eachLimited } from '../packages/lerobot/src/export.js';
import { parseBenchArgs, type BenchModule, type CommonArgs } from './lib/args.js';
import {
  CONCURRENCY,
  codecOption,
  intOption,
  MB,
  RSS_BOUND_MB,
  RUN_HEADER,
  RssSampler,
  exportInChild,
  ffmpeg,
  framesPerS,
  mb,
  rawBaselineArgs,
  runCells,
  sha256File,
  toAsync,
  type Member,
  type Run,
} from './lib/lerobot-export.js';
import { fmt, table } from './lib/measure.js';
import { BenchFailure, row, type SummaryRow } from './lib/summary.js';

const DST = 'dst_bench';
const ROBOT = 'rbt_bench';

interface Sizes {
  episodes: number;
  seconds: number;
  width: number;
  height: number;
  fps: number;
  cameras: 1 | 2;
  codec: VideoCodec;
}

/** Records episode `index` as the agent would, moving a manual clock 100 ms at a time, into the bucket. */
async function recordEpisode(root: string, bucket: string, index: number, s: Sizes): Promise<Member> {
  const startedAt = Date.UTC(2026, 0, 1) + index * (s.seconds + 5) * 1000;
  const id = newEpisodeId(startedAt);
  const dir = join(root, 'robot', id);
  await mkdir(dir, { recursive: true });
  const clock = new ManualClock(startedAt);
  const scheduler = new ManualScheduler(clock);
  const recorder = new SyntheticRecorder({
    clock,
    scheduler,
    // The exporter reads JSON recordings only (until it reads ROS 2 bags).
    format: 'json',
    bytesPerSecond: s.cameras * s.width * s.height * 3 * s.fps + 64 * 1024,
    chunkIntervalMs: 100,
    cameras: s.cameras,
    cameraWidth: s.width,
    cameraHeight: s.height,
    cameraHz: s.fps,
    stateHz: 50,
  });
  const handle = await recorder.start(dir, { robotId: ROBOT, episodeId: id, startedAt: clock.now() });
  for (let t = 0; t < s.seconds * 1000; t += 100) {
    scheduler.advance(100);
    await recorder.settled();
  }
  await handle.stop();
  const key = `org_bench/${ROBOT}/${id}/`;
  await mkdir(join(bucket, key), { recursive: true });
  const path = join(bucket, key, 'recording.mcap');
  await rename(join(dir, 'recording.mcap'), path);
  await rm(dir, { recursive: true, force: true });
  return {
    id,
    robot_id: ROBOT,
    task_id: index % 3 === 0 ? 'stack-blocks' : 'pick-cube',
    outcome: index % 10 === 9 ? 'failure' : 'success',
    metadata: { operator: 'bench' },
    started_at: new Date(startedAt).toISOString(),
    ended_at: new Date(startedAt + s.seconds * 1000).toISOString(),
    files: [{ path: 'recording.mcap', size_bytes: (await stat(path)).size, sha256: await sha256File(path) }],
    locations: [{ destination_id: DST, state: 'verified', object_key: key, grant_id: 'gr_bench' }],
  };
}

/** The export's mapping for these sizes: the simulator's, at `fps`, with the wrist camera when there are two. */
function mappingFor(s: Sizes): unknown {
  const features: Record<string, unknown> = { ...DEFAULT_MAPPING.features };
  if (s.cameras === 2) features['observation.images.wrist'] = { topic: WRIST_CAMERA_TOPIC };
  return { ...DEFAULT_MAPPING, fps: s.fps, features };
}

interface RawFile {
  path: string;
  frames: number;
}

/** Each episode's camera frames on the export's grid, read through its own source, as raw rgb24 files. */
async function writeRawFrames(dir: string, bucket: string, members: readonly Member[], mapping: Mapping): Promise<RawFile[]> {
  await mkdir(dir, { recursive: true });
  const files: RawFile[] = [];
  for (const [i, m] of members.entries()) {
    const parsed = parseManifestLine(JSON.stringify(m), i + 2);
    if (parsed.kind !== 'episode') throw new BenchFailure('manifest line is not an episode');
    await using loaded = await loadGridEpisode(join(bucket, m.locations[0]!.object_key, 'recording.mcap'), parsed.episode, mapping);
    for (const [c, [, cam]] of Object.entries(loaded.episode.cameras).entries()) {
      const path = join(dir, `${String(i).padStart(5, '0')}-${c}.rgb`);
      const out = createWriteStream(path);
      let frames = 0;
      for await (const frame of cam.frames) {
        frames++;
        if (!out.write(frame)) await once(out, 'drain');
      }
      out.end();
      await once(out, 'close');
      if (frames !== loaded.episode.length) throw new BenchFailure(`episode ${m.id}: ${frames} frames read, grid has ${loaded.episode.length}`);
      files.push({ path, frames });
    }
  }
  return files;
}

export const lerobot: BenchModule = {
  description: 'exportLeRobot of N recordings (ROS 2 bags: JPEG and rgb8; or --input json) vs ffmpeg alone on the same frames, and the peer converter forge-robotics',
  async run(argv) {
    const args = parseBenchArgs(argv, {
      input: { type: 'string' },
      episodes: { type: 'string' },
      seconds: { type: 'string' },
      width: { type: 'string' },
      height: { type: 'string' },
      fps: { type: 'string' },
      cameras: { type: 'string' },
      codec: { type: 'string' },
      profile: { type: 'boolean' },
      keep: { type: 'boolean' },
    });
    const input = args.extra.input ?? 'ros2';
    if (input === 'ros2') return (await import('./lerobot-ros2.js')).runRos2(args);
    if (input !== 'json') throw new Error('--input must be ros2 or json');
    return runJson(args);
  },
};

async function runJson(args: CommonArgs): Promise<SummaryRow[]> {
  if (args.extra.profile === true) throw new Error('--profile is for --input ros2');
  const s: Sizes = {
    episodes: intOption(args, 'episodes', 100, 1, 100_000),
    seconds: intOption(args, 'seconds', 10, 1, 3600),
    width: intOption(args, 'width', 320, 16, 1920),
    height: intOption(args, 'height', 240, 16, 1920),
    fps: intOption(args, 'fps', 10, 1, 120),
    cameras: intOption(args, 'cameras', 1, 1, 2) as 1 | 2,
    codec: codecOption(args),
  };
  const mappingJson = mappingFor(s);
  const mapping = parseMapping(mappingJson);
  const root = await mkdtemp(join(tmpdir(), 'fleet-bench-lerobot-'));
  const bucket = join(root, 'bucket');
  const rows: SummaryRow[] = [];
  try {
    process.stderr.write(`lerobot: recording ${s.episodes} episodes of ${s.seconds} s (${s.cameras} camera(s) ${s.width}x${s.height} at ${s.fps} fps)...\n`);
    const rec0 = performance.now();
    const members: Member[] = [];
    for (let i = 0; i < s.episodes; i++) members.push(await recordEpisode(root, bucket, i, s));
    const recordMs = performance.now() - rec0;
    const mcapBytes = members.reduce((a, m) => a + m.files[0]!.size_bytes, 0);
    process.stdout.write(
      `lerobot: ${s.episodes} episodes x ${s.seconds} s, ${s.cameras} camera(s) ${s.width}x${s.height} at ${s.fps} fps, codec ${s.codec}; ` +
        `recorded in ${fmt(recordMs / 1000, 1)} s (not measured), ${fmt(mb(mcapBytes), 1)} MB of MCAP\n`,
    );

    // The export, timed from the call to its return (assembly included).
    const outDir = join(root, 'dataset');
    const header = { dataset_id: 'ds_bench', name: 'bench', filter: {}, snapshot_at: '2026-01-02T00:00:00.000Z', episode_count: members.length };
    const manifestPath = join(root, 'manifest.ndjson');
    await writeFile(manifestPath, [header, ...members].map((l) => JSON.stringify(l)).join('\n') + '\n');
    const sampler = new RssSampler();
    const t0 = performance.now();
    const child = await exportInChild([manifestPath, outDir, `file://${bucket}`, JSON.stringify(mappingJson), s.codec, String(CONCURRENCY)], sampler);
    const exportMs = performance.now() - t0;
    sampler.stop();
    const { result, maxRssBytes: maxRss } = child;
    if (result.episodes !== s.episodes) {
      throw new BenchFailure(`lerobot: INCOMPLETE, ${result.episodes} of ${s.episodes} episodes exported (${result.skipped.map((k) => `${k.episode_id}: ${k.reason}`).join('; ')})`);
    }
    const exported: Run = {
      name: `exportLeRobot (${CONCURRENCY} at a time)`,
      episodes: result.episodes,
      frames: result.frames * s.cameras,
      ms: exportMs,
      bytesRead: mcapBytes,
      peakSampled: sampler.peakWatched,
      maxRss,
      peakFfmpeg: sampler.peakFfmpeg,
    };

    // The baseline's input: the same grid frames as raw files (not timed).
    const w0 = performance.now();
    const raw = await writeRawFrames(join(root, 'raw'), bucket, members, mapping);
    const writeMs = performance.now() - w0;
    const rawFrames = raw.reduce((a, f) => a + f.frames, 0);
    if (rawFrames !== exported.frames) throw new BenchFailure(`lerobot: the raw files hold ${rawFrames} frames, the export encoded ${exported.frames}`);
    const frameBytes = s.width * s.height * 3;
    const encoded = join(root, 'baseline');
    await mkdir(encoded, { recursive: true });

    const perSampler = new RssSampler();
    const p0 = performance.now();
    await eachLimited(toAsync(raw), CONCURRENCY, (f) => ffmpeg(rawBaselineArgs(f.path, f.frames, s, join(encoded, `${f.path.split('/').at(-1)}.mp4`))));
    const perEpisode: Run = {
      name: `ffmpeg per episode+camera, ${CONCURRENCY} at a time (baseline)`,
      episodes: s.episodes,
      frames: rawFrames,
      ms: performance.now() - p0,
      bytesRead: rawFrames * frameBytes,
      peakSampled: null,
      maxRss: null,
      peakFfmpeg: perSampler.stop().peakFfmpeg,
    };

    // ffmpeg's concat protocol reads the raw files back to back as one input.
    const oneSampler = new RssSampler();
    const o0 = performance.now();
    await ffmpeg(rawBaselineArgs(`concat:${raw.map((f) => f.path).join('|')}`, rawFrames, s, join(encoded, 'all.mp4')));
    const oneRun: Run = {
      name: 'ffmpeg alone, one run over all frames',
      episodes: s.episodes,
      frames: rawFrames,
      ms: performance.now() - o0,
      bytesRead: rawFrames * frameBytes,
      peakSampled: null,
      maxRss: null,
      peakFfmpeg: oneSampler.stop().peakFfmpeg,
    };

    process.stdout.write(`${table(RUN_HEADER, [runCells(exported), runCells(perEpisode), runCells(oneRun)])}\n`);
    const peak = Math.max(sampler.peakWatched, maxRss);
    const held = peak < RSS_BOUND_MB * MB;
    process.stdout.write(
      `export: ${result.frames} grid frames x ${s.cameras} camera(s) encoded; MB/s read = MCAP bytes fetched from the bucket (baselines: raw rgb24 read); ` +
        `raw frames written for the baselines in ${fmt(writeMs / 1000, 1)} s (not measured)\n` +
        `peak RSS of the export process: ${fmt(mb(sampler.peakWatched), 1)} MB sampled every 100 ms, maxRSS ${fmt(mb(maxRss), 1)} MB; bound ${RSS_BOUND_MB} MB: ${held ? 'held' : 'NOT held'}\n` +
        `ratio (export frames/s / ffmpeg per episode, ${CONCURRENCY} at a time): ${fmt(framesPerS(exported) / framesPerS(perEpisode), 3)} (target >= 0.8); ` +
        `vs one ffmpeg over all frames: ${fmt(framesPerS(exported) / framesPerS(oneRun), 3)}\n`,
    );
    const size = `${s.episodes} episodes x ${s.seconds} s, ${s.cameras} cam ${s.width}x${s.height}@${s.fps}, ${s.codec}`;
    rows.push(
      row({
        name: `export frames/s, ${size}`,
        figure: framesPerS(exported),
        unit: 'frames/s',
        baseline: framesPerS(perEpisode),
        baselineUnit: 'frames/s',
        baselineName: `ffmpeg alone per episode from raw rgb24, ${CONCURRENCY} at a time, same settings`,
        target: 'ratio >= 0.8',
      }),
      row({
        name: `export frames/s vs one ffmpeg run, ${size}`,
        figure: framesPerS(exported),
        unit: 'frames/s',
        baseline: framesPerS(oneRun),
        baselineUnit: 'frames/s',
        baselineName: 'one ffmpeg over all frames from raw rgb24, same settings',
      }),
      row({ name: `export episodes/min, ${size}`, figure: (s.episodes / exportMs) * 60_000, unit: 'episodes/min', baseline: null, baselineUnit: null }),
      row({ name: `export MCAP read, ${size}`, figure: mb(mcapBytes) / (exportMs / 1000), unit: 'MB/s', baseline: null, baselineUnit: null }),
      row({
        name: `export peak RSS (node, sampled), ${size}`,
        figure: mb(peak),
        unit: 'MB',
        baseline: null,
        baselineUnit: null,
        target: `< ${RSS_BOUND_MB} MB — ${held ? 'held' : 'not held'}`,
        note: `sampled ${fmt(mb(sampler.peakWatched), 1)} MB; maxRSS ${fmt(mb(maxRss), 1)} MB; ffmpeg children ${fmt(mb(sampler.peakFfmpeg), 1)} MB`,
      }),
    );
  } finally {
    if (args.extra.keep === true) process.stderr.write(`lerobot: kept ${root}\n`);
    else await rm(root, { recursive: true, force: true });
  }
  return rows;
}
