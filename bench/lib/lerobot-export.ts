/**
 * What the LeRobot benchmarks share (bench/lerobot.ts on the simulator's JSON recordings,
 * bench/lerobot-ros2.ts on rosbag2 directories): the export in a Node process of its own, the
 * ffmpeg baseline with the export's encoder settings, peak-RSS sampling from /proc, and the
 * table cells of one run.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { createReadStream, readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { CommonArgs } from './args.js';
import { codecNames, videoEncoding, type VideoCodec } from '../../packages/lerobot/src/writer/ffmpeg.js';
import { fmt } from './measure.js';
import { BenchFailure } from './summary.js';

export const REPO_ROOT = fileURLToPath(new URL('../..', import.meta.url));
export const RSS_BOUND_MB = 300;
/** Episodes the export works on at once, and ffmpeg runs the baseline runs at once. */
export const CONCURRENCY = 2;
export const MB = 1e6;
export const mb = (bytes: number): number => bytes / MB;

export async function sha256File(path: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return hash.digest('hex');
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

/** VmRSS of one process in bytes; 0 once it is gone. */
function rssOf(pid: number): number {
  try {
    return Number(/^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) * 1024;
  } catch {
    return 0;
  }
}

/** VmRSS (bytes) summed over the processes named `name` among this one's descendants. */
function descendantsRss(name: string): number {
  let total = 0;
  const queue = childrenOf('self');
  const named = new RegExp(`^Name:\\s+${name}$`, 'm');
  while (queue.length > 0) {
    const pid = queue.shift()!;
    queue.push(...childrenOf(pid));
    try {
      if (named.test(readFileSync(`/proc/${pid}/status`, 'utf8'))) total += rssOf(pid);
    } catch {
      // The process exited between the two reads.
    }
  }
  return total;
}

/**
 * Peaks sampled every 100 ms: the RSS of the watched processes (their sum at one moment: the
 * export's, or the peer's two workers) and of every ffmpeg among this process's descendants.
 */
export class RssSampler {
  peakWatched = 0;
  peakFfmpeg = 0;
  private readonly pids = new Set<number>();
  private readonly timer: NodeJS.Timeout;
  constructor() {
    this.timer = setInterval(() => this.sample(), 100);
  }
  watch(child: ChildProcess): void {
    if (child.pid !== undefined) this.pids.add(child.pid);
  }
  private sample(): void {
    let watched = 0;
    for (const pid of this.pids) watched += rssOf(pid);
    this.peakWatched = Math.max(this.peakWatched, watched);
    this.peakFfmpeg = Math.max(this.peakFfmpeg, descendantsRss('ffmpeg'));
  }
  stop(): this {
    this.sample();
    clearInterval(this.timer);
    return this;
  }
}

/**
 * The export in a Node process of its own (the built @fleet/lerobot, as the `fleet` CLI runs it),
 * so its peak RSS is the export's and not the benchmark's: the manifest from an NDJSON file, the
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

export interface ExportChildResult {
  result: { episodes: number; frames: number; skipped: { episode_id: string; reason: string }[] };
  maxRssBytes: number;
}

/**
 * Runs the export: `[manifestPath, outDir, sourceUrl, mappingJson, codec, concurrency]`. Extra
 * Node flags (`--cpu-prof`) go before the script. The sampler watches the process.
 */
export async function exportInChild(args: string[], sampler?: RssSampler, nodeFlags: string[] = []): Promise<ExportChildResult> {
  const child = spawn(process.execPath, [...nodeFlags, '--input-type=module', '-e', EXPORT_CHILD, ...args], { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
  sampler?.watch(child);
  let out = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
  const [code] = (await once(child, 'exit')) as [number | null];
  if (code !== 0) throw new BenchFailure(`lerobot: the export process exited ${code}`);
  return JSON.parse(out.trim().split('\n').at(-1)!) as ExportChildResult;
}

/** The export's encoder settings (writer/ffmpeg.ts `codecArgs`) and output flags, after an input. */
export function encodeArgs(codec: VideoCodec, frames: number, out: string): string[] {
  const enc = videoEncoding(codec);
  const args = ['-c:v', codecNames(codec).encoder, '-pix_fmt', 'yuv420p', '-g', String(enc.gop), '-crf', String(enc.crf)];
  if (enc.preset !== null) args.push('-preset', String(enc.preset));
  if (codec === 'av1') args.push('-svtav1-params', ['fast-decode=0', ...(enc.threads !== null ? [`lp=${enc.threads}`] : [])].join(':'));
  else if (enc.threads !== null) args.push('-threads', String(enc.threads));
  return [
    '-frames:v', String(frames), ...args, '-fps_mode', 'cfr',
    '-fflags', '+bitexact', '-flags:v', '+bitexact', '-map_metadata', '-1', '-map_chapters', '-1',
    '-movflags', '+faststart', '-f', 'mp4', '-y', out,
  ];
}

/** ffmpeg with the export's settings, reading a raw rgb24 input of `width`x`height` at `fps`. */
export function rawBaselineArgs(input: string, frames: number, s: { width: number; height: number; fps: number; codec: VideoCodec }, out: string): string[] {
  return ['-hide_banner', '-v', 'error', '-f', 'rawvideo', '-pix_fmt', 'rgb24', '-s', `${s.width}x${s.height}`, '-r', String(s.fps), '-i', input, ...encodeArgs(s.codec, frames, out)];
}

/** ffmpeg with the export's settings, decoding JPEG frames stored back to back (its mjpeg demuxer). */
export function mjpegBaselineArgs(input: string, frames: number, s: { fps: number; codec: VideoCodec }, out: string): string[] {
  return ['-hide_banner', '-v', 'error', '-f', 'mjpeg', '-framerate', String(s.fps), '-i', input, ...encodeArgs(s.codec, frames, out)];
}

export async function ffmpeg(args: string[]): Promise<void> {
  const child = spawn('ffmpeg', args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  child.stderr.setEncoding('utf8').on('data', (d: string) => {
    if (err.length < 4096) err += d;
  });
  const [code] = (await once(child, 'close')) as [number | null];
  if (code !== 0) throw new BenchFailure(`baseline ffmpeg exited with ${code}: ${err.trim()}`);
}

/** One measured run: a row of the benchmark's table. */
export interface Run {
  name: string;
  episodes: number;
  frames: number;
  ms: number;
  bytesRead: number;
  /** Peak RSS of the run's own process(es): sampled, and the kernel's maxRSS when known. */
  peakSampled: number | null;
  maxRss: number | null;
  peakFfmpeg: number;
}

export const framesPerS = (r: Run): number => (r.frames / r.ms) * 1000;

export const RUN_HEADER = ['run', 'episodes', 'frames', 'seconds', 'episodes/min', 'frames/s', 'MB/s read', 'peak RSS MB (sampled)', 'maxRSS MB', 'peak RSS MB (ffmpeg children)'];

export function runCells(r: Run): string[] {
  return [
    r.name,
    String(r.episodes),
    String(r.frames),
    fmt(r.ms / 1000, 2),
    fmt((r.episodes / r.ms) * 60_000, 1),
    fmt(framesPerS(r), 1),
    fmt(mb(r.bytesRead) / (r.ms / 1000), 1),
    r.peakSampled === null || r.peakSampled === 0 ? '-' : fmt(mb(r.peakSampled), 1),
    r.maxRss === null ? '-' : fmt(mb(r.maxRss), 1),
    r.peakFfmpeg > 0 ? fmt(mb(r.peakFfmpeg), 1) : 'n/a',
  ];
}

export async function* toAsync<T>(items: readonly T[]): AsyncGenerator<T> {
  yield* items;
}

/** A manifest line of one episode, as the cloud's dataset manifest has it. */
export interface Member {
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

/** An integer option of `args`, or `fallback`; a clear error out of bounds. */
export function intOption(args: CommonArgs, name: string, fallback: number, min: number, max: number): number {
  const raw = args.extra[name];
  const n = typeof raw === 'string' ? Number(raw) : fallback;
  if (!Number.isInteger(n) || n < min || n > max) throw new Error(`--${name} must be an integer from ${min} to ${max}`);
  return n;
}

export function codecOption(args: CommonArgs): VideoCodec {
  const codec = args.extra.codec ?? 'av1';
  if (codec !== 'av1' && codec !== 'h264') throw new Error('--codec must be av1 or h264');
  return codec;
}

