import { access, mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { DatasetShape, GridEpisode } from '../types.js';
import { WriterError } from './errors.js';
import { fsyncPath, jsonText, tempSibling } from './files.js';
import { datasetFeatures, padFrame, stageFingerprint, videoSize } from './features.js';
import { encodeFrames, probeDurationS, videoEncoding, type VideoCodec, type VideoEncoding } from './ffmpeg.js';
import { boolColumn, float32Column, float32ListColumn, int64Column, parquetBytes, tableOf, type Column } from './parquet.js';
import { ImageStatsAccumulator, vectorStats, type StatsByFeature } from './stats.js';

export interface StageOptions {
  /** Camera codec (default `av1`, libsvtav1 as LeRobot). */
  codec?: VideoCodec;
  /** Overrides of the encoding settings (GOP, CRF, preset, threads, binaries). */
  encoding?: Partial<VideoEncoding>;
}

/** `episode.json` of a staged episode: what assembly needs besides the frames and videos. */
export interface StagedEpisode {
  version: 1;
  fingerprint: string;
  episodeIndex: number;
  episodeId: string;
  task: string;
  length: number;
  success: boolean;
  metadata: Record<string, string>;
  /** Size of `frames.parquet`: the estimate of the episode's share of a data file. */
  framesBytes: number;
  /** Per camera: the mp4's size and its probed duration (LeRobot's `get_video_duration_in_s`). */
  cameras: Record<string, { bytes: number; durationS: number }>;
}

export const FRAMES_FILE = 'frames.parquet';
export const STATS_FILE = 'stats.json';
export const EPISODE_FILE = 'episode.json';

export function resolveEncoding(opts: StageOptions = {}): VideoEncoding {
  return videoEncoding(opts.codec ?? 'av1', opts.encoding ?? {});
}

export function stagedDir(stageDir: string, episodeIndex: number): string {
  return join(stageDir, `ep-${String(episodeIndex).padStart(6, '0')}`);
}

export function stagedVideo(stageDir: string, episodeIndex: number, cameraKey: string): string {
  return join(stagedDir(stageDir, episodeIndex), `${cameraKey}.mp4`);
}

/**
 * Whether episode `episodeIndex` is staged. The directory only appears by an atomic rename of a
 * complete one; given the shape (and options), an episode staged for another shape or encoding
 * does not count.
 */
export async function isStaged(stageDir: string, episodeIndex: number, shape?: DatasetShape, opts?: StageOptions): Promise<boolean> {
  const staged = await readStagedEpisode(stageDir, episodeIndex).catch(() => null);
  if (staged === null) return false;
  return shape === undefined || staged.fingerprint === stageFingerprint(shape, resolveEncoding(opts));
}

export async function readStagedEpisode(stageDir: string, episodeIndex: number): Promise<StagedEpisode> {
  const text = await readFile(join(stagedDir(stageDir, episodeIndex), EPISODE_FILE), 'utf8');
  return JSON.parse(text) as StagedEpisode;
}

async function* padded(frames: AsyncIterable<Uint8Array>, from: { width: number; height: number }, to: { width: number; height: number }): AsyncGenerator<Uint8Array> {
  for await (const f of frames) yield padFrame(f, from, to);
}

function validate(ep: GridEpisode, shape: DatasetShape): void {
  const fail = (msg: string) => {
    throw new WriterError('invalid_episode', `${ep.episodeId}: ${msg}`);
  };
  if (!Number.isInteger(ep.length) || ep.length < 1) fail(`length must be a positive integer, got ${ep.length}`);
  for (const [key, v] of Object.entries(shape.vectors)) {
    const data = ep.vectors[key];
    if (data === undefined) fail(`missing vector ${key}`);
    else if (data.length !== ep.length * v.shape[0]) fail(`${key} has ${data.length} values, expected ${ep.length * v.shape[0]}`);
  }
  for (const key of Object.keys(ep.vectors)) if (!(key in shape.vectors)) fail(`vector ${key} is not in the dataset shape`);
  for (const [key, cam] of Object.entries(shape.cameras)) {
    const c = ep.cameras[key];
    if (c === undefined) fail(`missing camera ${key}`);
    else if (c.width !== cam.width || c.height !== cam.height) fail(`${key} is ${c.width}x${c.height}, expected ${cam.width}x${cam.height}`);
  }
  for (const key of Object.keys(ep.cameras)) if (!(key in shape.cameras)) fail(`camera ${key} is not in the dataset shape`);
  for (const key of shape.metadataKeys) if (typeof ep.metadata[key] !== 'string') fail(`missing metadata ${key}`);
}

/** What the caller hears while an episode is staged (the export's progress). */
export interface StageProgress {
  /** Frame `index` of camera `key` went to the encoder. */
  onFrame?(key: string, index: number): void;
}

/**
 * Stage one episode under `stageDir/ep-<6 digits>/`: its frame table (without the global `index`
 * and `task_index`), one mp4 per camera, its stats and `episode.json`. Camera frames stream from
 * their iterables through the stats into ffmpeg; none is kept. Written into a temp directory,
 * fsynced, then renamed, so a crash leaves either nothing or the whole episode. Staging an episode
 * that is already staged replaces it.
 */
export async function stageEpisode(
  stageDir: string,
  episodeIndex: number,
  ep: GridEpisode,
  shape: DatasetShape,
  opts: StageOptions = {},
  progress: StageProgress = {},
): Promise<StagedEpisode> {
  const enc = resolveEncoding(opts);
  const features = datasetFeatures(shape, enc);
  validate(ep, shape);
  await mkdir(stageDir, { recursive: true });
  const final = stagedDir(stageDir, episodeIndex);
  const tmp = tempSibling(final);
  await rm(tmp, { recursive: true, force: true });
  await mkdir(tmp);
  try {
    const n = ep.length;
    const stats: StatsByFeature = {};
    const columns: Column[] = [];
    const cameras: StagedEpisode['cameras'] = {};
    const frameIndex = Float64Array.from({ length: n }, (_, i) => i);
    const timestamps = Float64Array.from({ length: n }, (_, i) => i / shape.fps);
    for (const f of features) {
      switch (f.kind) {
        case 'vector': {
          const dim = f.info.shape[0]!;
          const data = ep.vectors[f.key]!;
          columns.push(dim === 1 ? float32Column(f.key, Float32Array.from(data)) : float32ListColumn(f.key, Float32Array.from(data), dim));
          stats[f.key] = vectorStats(data, n, dim);
          break;
        }
        case 'video': {
          const cam = ep.cameras[f.key]!;
          // Padded to the video's size (features.ts videoSize), and the stats are of what the video
          // holds; or, with `resize`, sent at their own size for ffmpeg to scale, and the stats are
          // of the source frames (ffmpeg's scaled frames never come back to this process).
          const size = enc.resize !== null ? { width: cam.width, height: cam.height } : videoSize(cam, enc.codec);
          const acc = new ImageStatsAccumulator(size.width, size.height, n);
          const path = join(tmp, `${f.key}.mp4`);
          const frames = size.width === cam.width && size.height === cam.height ? cam.frames : padded(cam.frames, cam, size);
          await encodeFrames(path, frames, { width: size.width, height: size.height, length: n, fps: shape.fps }, enc, (i, frame) => {
            acc.add(i, frame);
            progress.onFrame?.(f.key, i);
          });
          stats[f.key] = acc.result();
          const bytes = (await readFile(path)).byteLength;
          const durationS = await probeDurationS(path, enc);
          // Assembly places episode k of a video file at (frames before it) / fps; that holds only if
          // every episode's video lasts exactly length / fps.
          if (Math.abs(durationS - n / shape.fps) > 1e-6) {
            throw new WriterError('ffmpeg_failed', `${f.key}: video lasts ${durationS} s, expected ${n / shape.fps} s`);
          }
          cameras[f.key] = { bytes, durationS };
          break;
        }
        case 'bool': {
          // `next.done` on the last frame; `next.success` on the last frame of a successful episode.
          const on = f.key === 'next.done' || ep.success;
          const values = Array.from({ length: n }, (_, i) => on && i === n - 1);
          columns.push(boolColumn(f.key, values));
          stats[f.key] = vectorStats(values.map(Number), n, 1);
          break;
        }
        case 'timestamp':
          columns.push(float32Column(f.key, Float32Array.from(timestamps)));
          // LeRobot's stats see the float64 `frame_index / fps`, not the stored float32.
          stats[f.key] = vectorStats(timestamps, n, 1);
          break;
        case 'int':
          if (f.key === 'frame_index') {
            columns.push(int64Column(f.key, frameIndex));
            stats[f.key] = vectorStats(frameIndex, n, 1);
          } else if (f.key === 'episode_index') {
            columns.push(int64Column(f.key, new Float64Array(n).fill(episodeIndex)));
            stats[f.key] = vectorStats(new Float64Array(n).fill(episodeIndex), n, 1);
          }
          // `index` and `task_index` depend on earlier episodes: assembly adds them and their stats.
          break;
      }
    }
    const frames = parquetBytes(tableOf(columns));
    await writeFile(join(tmp, FRAMES_FILE), frames);
    await writeFile(join(tmp, STATS_FILE), JSON.stringify(stats));
    const staged: StagedEpisode = {
      version: 1,
      fingerprint: stageFingerprint(shape, enc),
      episodeIndex,
      episodeId: ep.episodeId,
      task: ep.task,
      length: n,
      success: ep.success,
      metadata: Object.fromEntries(shape.metadataKeys.map((k) => [k, ep.metadata[k]!])),
      framesBytes: frames.byteLength,
      cameras,
    };
    await writeFile(join(tmp, EPISODE_FILE), jsonText(staged));
    for (const name of [FRAMES_FILE, STATS_FILE, EPISODE_FILE, ...Object.keys(cameras).map((k) => `${k}.mp4`)]) {
      await fsyncPath(join(tmp, name));
    }
    await fsyncPath(tmp);
    await rm(final, { recursive: true, force: true });
    await rename(tmp, final);
    await fsyncPath(stageDir);
    return staged;
  } catch (err) {
    await rm(tmp, { recursive: true, force: true });
    throw err;
  }
}

export async function exists(path: string): Promise<boolean> {
  return access(path).then(
    () => true,
    () => false,
  );
}
