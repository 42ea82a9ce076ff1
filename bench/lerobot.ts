/**
 * The LeRobot export (`exportLeRobot` of @fleet/lerobot) over a dataset of real recordings: the
 * agent's synthetic recorder on a manual clock writes `--episodes` MCAPs of `--seconds` each
 * (`--cameras` cameras of `--width`x`--height` at `--fps`) into a local "bucket" laid out as
 * `<bucket>/<object_key>/recording.mcap`, with their manifest lines in memory; recording is not
 * measured. Then the export from `file://<bucket>` with 2 episodes at a time: episodes/min,
 * frames/s (grid frames × cameras, each encoded once), MB/s read, and this process's peak RSS
 * (sampled every 100 ms and `maxRSS`) next to the bound of 300 MB, with the ffmpeg children's.
 *
 * The baseline is ffmpeg alone encoding the same frames with the export's settings from raw rgb24
 * files on disk (the frames read back through the export's own source, `loadGridEpisode`): one
 * ffmpeg per episode and camera, 2 at a time as the export runs them (the main ratio), and one
 * ffmpeg over all frames. Only the ffmpeg runs are timed. Prints figures and ratios; asserts
 * nothing about time.
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream, readdirSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rename, rm, stat, writeFile } from 'node:fs/promises';
import { once } from 'node:events';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import { ManualClock } from '@fleet/protocol';
import { ManualScheduler, newEpisodeId } from '@fleet/agent';
import { SyntheticRecorder } from '@fleet/simulator/synthetic-recorder';
import { DEFAULT_MAPPING, parseMapping, type Mapping } from '@fleet/lerobot';
import { WRIST_CAMERA_TOPIC, loadGridEpisode, parseManifestLine } from '../packages/lerobot/src/source/index.js';
import { codecNames, videoEncoding, type VideoCodec } from '../packages/lerobot/src/writer/ffmpeg.js';
import { eachLimited } from '../packages/lerobot/src/export.js';
import { parseBenchArgs, type BenchModule } from './lib/args.js';
import { fmt, table } from './lib/measure.js';
import { BenchFailure, row, type SummaryRow } from './lib/summary.js';

const DST = 'dst_bench';
const REPO_ROOT = fileURLToPath(new URL('..', import.meta.url));
const ROBOT = 'rbt_bench';
const RSS_BOUND_MB = 300;
const CONCURRENCY = 2;
const MB = 1e6;

interface Member {
  id: string;
  robot_id: string;
  task_id: string;
  outcome: string;
  metadata: Record<string, unknown>;
  started_at: string;
  ended_at: string;
  files: { path: string; size_bytes: number; sha256: string }[];
  locations: { destination_id: string; state: string; object_key: string; grant_id: string }[];
}

interface Sizes {
  episodes: number;
  seconds: number;
  width: number;
  height: number;
  fps: number;
  cameras: 1 | 2;
  codec: VideoCodec;
}

async function sha256File(path: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return hash.digest('hex');
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

/** Peak RSS of this process and of its ffmpeg children (their sum at one moment), sampled every 100 ms. */
class RssSampler {
  readonly startSelf = process.memoryUsage().rss;
  peakSelf = 0;
  peakChildren = 0;
  private readonly timer: NodeJS.Timeout;
  constructor() {
    this.sample();
    this.timer = setInterval(() => this.sample(), 100);
  }
  private sample(): void {
    this.peakSelf = Math.max(this.peakSelf, process.memoryUsage().rss);
    this.peakChildren = Math.max(this.peakChildren, ffmpegChildrenRss());
  }
  stop(): this {
    this.sample();
    clearInterval(this.timer);
    return this;
  }
}

/** The child pids of `pid` (every thread's), from /proc; empty when /proc says nothing. */
function childrenOf(pid: number | 'self'): number[] {
  const out: number[] = [];
  try {
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      try {
        out.push(...readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number));
      } catch {
        // The thread ended between the two reads.
      }
    }
  } catch {
    // The process ended.
  }
  return out;
}

/** VmRSS (bytes) summed over the ffmpeg processes among this one's descendants; 0 when /proc says nothing. */
function ffmpegChildrenRss(): number {
  let total = 0;
  const queue = childrenOf('self');
  while (queue.length > 0) {
    const pid = queue.shift()!;
    queue.push(...childrenOf(pid));
    try {
      const status = readFileSync(`/proc/${pid}/status`, 'utf8');
      if (!/^Name:\s+ffmpeg$/m.test(status)) continue;
      total += Number(/^VmRSS:\s+(\d+) kB/m.exec(status)?.[1] ?? 0) * 1024;
    } catch {
      // The process exited between the two reads.
    }
  }
  return total;
}

/**
 * The export in a Node process of its own (the built @fleet/lerobot, as the `fleet` CLI runs it),
 * so its peak RSS is the export's and not the recording's: the manifest from an NDJSON file, the
 * result and `maxRSS` as one JSON line on stdout.
 */
const EXPORT_CHILD = `
import { createReadStream } from 'node:fs';
import { createInterface } from 'node:readline';
import { exportLeRobot } from '@fleet/lerobot';
const [manifestPath, outDir, source, mapping, codec, concurrency] = process.argv.slice(1);
async function* manifest() {
  for await (const line of createInterface({ input: createReadStream(manifestPath), crlfDelay: Infinity })) if (line !== '') yield JSON.parse(line);
}
const result = await exportLeRobot({ manifest: manifest(), outDir, sources: { '*': source }, mapping: JSON.parse(mapping), codec, concurrency: Number(concurrency) });
process.stdout.write(JSON.stringify({ result, maxRssBytes: process.resourceUsage().maxRSS * 1024 }) + String.fromCharCode(10));
`;

async function exportInChild(args: string[]): Promise<{ result: { episodes: number; frames: number; skipped: { episode_id: string; reason: string }[] }; maxRssBytes: number }> {
  const child = spawn(process.execPath, ['--input-type=module', '-e', EXPORT_CHILD, ...args], { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
  const [code] = (await once(child, 'exit')) as [number | null];
  if (code !== 0) throw new BenchFailure(`lerobot: the export process exited ${code}`);
  return JSON.parse(out.trim().split('\n').at(-1)!) as Awaited<ReturnType<typeof exportInChild>>;
}

/** ffmpeg with the export's encoder settings (writer/ffmpeg.ts `encodeFrames`), reading a raw rgb24 input. */
function baselineArgs(input: string, frames: number, s: Sizes, out: string): string[] {
  const enc = videoEncoding(s.codec);
  const codec = ['-c:v', codecNames(s.codec).encoder, '-pix_fmt', 'yuv420p', '-g', String(enc.gop), '-crf', String(enc.crf)];
  if (enc.preset !== null) codec.push('-preset', String(enc.preset));
  if (s.codec === 'av1') codec.push('-svtav1-params', ['fast-decode=0', ...(enc.threads !== null ? [`lp=${enc.threads}`] : [])].join(':'));
  else if (enc.threads !== null) codec.push('-threads', String(enc.threads));
  return [
    '-hide_banner', '-v', 'error',
    '-f', 'rawvideo', '-pix_fmt', 'rgb24', '-s', `${s.width}x${s.height}`, '-r', String(s.fps), '-i', input,
    '-frames:v', String(frames), ...codec, '-fps_mode', 'cfr',
    '-fflags', '+bitexact', '-flags:v', '+bitexact', '-map_metadata', '-1', '-map_chapters', '-1',
    '-movflags', '+faststart', '-f', 'mp4', '-y', out,
  ];
}

async function ffmpeg(args: string[]): Promise<void> {
  const child = spawn('ffmpeg', args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  child.stderr.setEncoding('utf8').on('data', (d: string) => {
    if (err.length < 4096) err += d;
  });
  const [code] = (await once(child, 'close')) as [number | null];
  if (code !== 0) throw new BenchFailure(`baseline ffmpeg exited with ${code}: ${err.trim()}`);
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

interface Run {
  name: string;
  episodes: number;
  frames: number;
  ms: number;
  bytesRead: number;
  peakSelf: number | null;
  peakChildren: number;
}

const mb = (bytes: number) => bytes / MB;

export const lerobot: BenchModule = {
  description: 'exportLeRobot of N synthetic recordings (episodes/min, frames/s, MB/s, peak RSS) vs ffmpeg alone encoding the same frames',
  async run(argv) {
    const args = parseBenchArgs(argv, {
      episodes: { type: 'string' },
      seconds: { type: 'string' },
      width: { type: 'string' },
      height: { type: 'string' },
      fps: { type: 'string' },
      cameras: { type: 'string' },
      codec: { type: 'string' },
      keep: { type: 'boolean' },
    });
    const int = (name: string, fallback: number, min: number, max: number): number => {
      const raw = args.extra[name];
      const n = typeof raw === 'string' ? Number(raw) : fallback;
      if (!Number.isInteger(n) || n < min || n > max) throw new Error(`--${name} must be an integer from ${min} to ${max}`);
      return n;
    };
    const codec = args.extra.codec ?? 'av1';
    if (codec !== 'av1' && codec !== 'h264') throw new Error('--codec must be av1 or h264');
    const s: Sizes = {
      episodes: int('episodes', 100, 1, 100_000),
      seconds: int('seconds', 10, 1, 3600),
      width: int('width', 320, 16, 1920),
      height: int('height', 240, 16, 1920),
      fps: int('fps', 10, 1, 120),
      cameras: int('cameras', 1, 1, 2) as 1 | 2,
      codec,
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
      const child = await exportInChild([manifestPath, outDir, `file://${bucket}`, JSON.stringify(mappingJson), s.codec, String(CONCURRENCY)]);
      const exportMs = performance.now() - t0;
      sampler.stop();
      const { result } = child;
      // The export's own process: its peak from the kernel (maxRSS), whatever the sampling missed.
      const maxRss = child.maxRssBytes;
      sampler.peakSelf = maxRss;
      if (result.episodes !== s.episodes) {
        throw new BenchFailure(`lerobot: INCOMPLETE, ${result.episodes} of ${s.episodes} episodes exported (${result.skipped.map((k) => `${k.episode_id}: ${k.reason}`).join('; ')})`);
      }
      const exported: Run = { name: `exportLeRobot (${CONCURRENCY} at a time)`, episodes: result.episodes, frames: result.frames * s.cameras, ms: exportMs, bytesRead: mcapBytes, peakSelf: sampler.peakSelf, peakChildren: sampler.peakChildren };

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
      await eachLimited(toAsync(raw), CONCURRENCY, (f) => ffmpeg(baselineArgs(f.path, f.frames, s, join(encoded, `${f.path.split('/').at(-1)}.mp4`))));
      const perEpisode: Run = { name: `ffmpeg per episode+camera, ${CONCURRENCY} at a time (baseline)`, episodes: s.episodes, frames: rawFrames, ms: performance.now() - p0, bytesRead: rawFrames * frameBytes, peakSelf: null, peakChildren: perSampler.stop().peakChildren };

      // ffmpeg's concat protocol reads the raw files back to back as one input.
      const oneSampler = new RssSampler();
      const o0 = performance.now();
      await ffmpeg(baselineArgs(`concat:${raw.map((f) => f.path).join('|')}`, rawFrames, s, join(encoded, 'all.mp4')));
      const oneRun: Run = { name: 'ffmpeg alone, one run over all frames', episodes: s.episodes, frames: rawFrames, ms: performance.now() - o0, bytesRead: rawFrames * frameBytes, peakSelf: null, peakChildren: oneSampler.stop().peakChildren };

      const fps = (r: Run) => (r.frames / r.ms) * 1000;
      const cells = (r: Run) => [
        r.name,
        String(r.episodes),
        String(r.frames),
        fmt(r.ms / 1000, 2),
        fmt((r.episodes / r.ms) * 60_000, 1),
        fmt(fps(r), 1),
        fmt(mb(r.bytesRead) / (r.ms / 1000), 1),
        r.peakSelf === null ? '-' : fmt(mb(r.peakSelf), 1),
        r.peakChildren > 0 ? fmt(mb(r.peakChildren), 1) : 'n/a',
      ];
      process.stdout.write(
        `${table(
          ['run', 'episodes', 'frames', 'seconds', 'episodes/min', 'frames/s', 'MB/s read', 'peak RSS MB (node)', 'peak RSS MB (ffmpeg children)'],
          [cells(exported), cells(perEpisode), cells(oneRun)],
        )}\n`,
      );
      const held = Math.max(sampler.peakSelf, maxRss) < RSS_BOUND_MB * MB;
      process.stdout.write(
        `export: ${result.frames} grid frames x ${s.cameras} camera(s) encoded; MB/s read = MCAP bytes fetched from the bucket (baselines: raw rgb24 read); ` +
          `raw frames written for the baselines in ${fmt(writeMs / 1000, 1)} s (not measured)\n` +
          `peak RSS of this process during the export: ${fmt(mb(sampler.peakSelf), 1)} MB sampled every 100 ms (${fmt(mb(sampler.startSelf), 1)} MB before it), maxRSS ${fmt(mb(maxRss), 1)} MB ` +
          `(maxRSS covers the whole process so far, recording included); bound ${RSS_BOUND_MB} MB: ${held ? 'held' : 'NOT held'}\n` +
          `ratio (export frames/s / ffmpeg per episode, ${CONCURRENCY} at a time): ${fmt(fps(exported) / fps(perEpisode), 3)} (target >= 0.8); ` +
          `vs one ffmpeg over all frames: ${fmt(fps(exported) / fps(oneRun), 3)}\n`,
      );
      const size = `${s.episodes} episodes x ${s.seconds} s, ${s.cameras} cam ${s.width}x${s.height}@${s.fps}, ${s.codec}`;
      rows.push(
        row({
          name: `export frames/s, ${size}`,
          figure: fps(exported),
          unit: 'frames/s',
          baseline: fps(perEpisode),
          baselineUnit: 'frames/s',
          baselineName: `ffmpeg alone per episode from raw rgb24, ${CONCURRENCY} at a time, same settings`,
          target: 'ratio >= 0.8',
        }),
        row({
          name: `export frames/s vs one ffmpeg run, ${size}`,
          figure: fps(exported),
          unit: 'frames/s',
          baseline: fps(oneRun),
          baselineUnit: 'frames/s',
          baselineName: 'one ffmpeg over all frames from raw rgb24, same settings',
        }),
        row({ name: `export episodes/min, ${size}`, figure: (s.episodes / exportMs) * 60_000, unit: 'episodes/min', baseline: null, baselineUnit: null }),
        row({ name: `export MCAP read, ${size}`, figure: mb(mcapBytes) / (exportMs / 1000), unit: 'MB/s', baseline: null, baselineUnit: null }),
        row({
          name: `export peak RSS (node, sampled), ${size}`,
          figure: mb(sampler.peakSelf),
          unit: 'MB',
          baseline: null,
          baselineUnit: null,
          target: `< ${RSS_BOUND_MB} MB — ${held ? 'held' : 'not held'}`,
          note: `${fmt(mb(sampler.startSelf), 1)} MB before the export; maxRSS ${fmt(mb(maxRss), 1)} MB; ffmpeg children ${fmt(mb(sampler.peakChildren), 1)} MB`,
        }),
      );
    } finally {
      if (args.extra.keep === true) process.stderr.write(`lerobot: kept ${root}\n`);
      else await rm(root, { recursive: true, force: true });
    }
    return rows;
  },
};

async function* toAsync<T>(items: readonly T[]): AsyncGenerator<T> {
  yield* items;
}
