import { createHash } from 'node:crypto';
import type { DatasetShape, FeatureInfo } from '../types.js';
import { WriterError } from './errors.js';
import { codecNames, type VideoCodec, type VideoEncoding } from './ffmpeg.js';

/** LeRobot's `DEFAULT_FEATURES`, in its order; `index` and `task_index` are set at assembly. */
export const DEFAULT_FEATURE_KEYS = ['timestamp', 'frame_index', 'episode_index', 'index', 'task_index'] as const;
export const DONE_KEY = 'next.done';
export const SUCCESS_KEY = 'next.success';

/** What a feature is to the writer; decides its parquet column and its stats. */
export type FeatureKind = 'vector' | 'bool' | 'video' | 'timestamp' | 'int';

export interface DatasetFeature {
  key: string;
  kind: FeatureKind;
  info: FeatureInfo;
}

// A camera key becomes a directory name (`videos/<key>/…`) and a staged file name.
const SAFE_KEY = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

/**
 * The dataset's features in the order LeRobot keeps them (`{**user_features, **DEFAULT_FEATURES}`):
 * the vectors, the cameras, `next.done`, `next.success`, then the five defaults. The data parquet's
 * columns are these minus the cameras, in this order.
 */
export function datasetFeatures(shape: DatasetShape, enc: VideoEncoding): DatasetFeature[] {
  const out: DatasetFeature[] = [];
  const taken = new Set<string>([...DEFAULT_FEATURE_KEYS, DONE_KEY, SUCCESS_KEY]);
  const claim = (key: string) => {
    if (taken.has(key)) throw new WriterError('invalid_shape', `feature key ${key} is reserved or repeated`);
    taken.add(key);
  };
  for (const [key, v] of Object.entries(shape.vectors)) {
    claim(key);
    const dim = v.shape[0];
    if (!Number.isInteger(dim) || dim < 1) throw new WriterError('invalid_shape', `${key}: shape must be [n], n >= 1`);
    if (v.names.length !== dim) throw new WriterError('invalid_shape', `${key}: ${v.names.length} names for ${dim} values`);
    out.push({ key, kind: 'vector', info: { dtype: 'float32', shape: [dim], names: [...v.names] } });
  }
  for (const [key, cam] of Object.entries(shape.cameras)) {
    claim(key);
    if (!SAFE_KEY.test(key)) throw new WriterError('invalid_shape', `camera key ${key} is not usable as a path segment`);
    if (!Number.isInteger(cam.width) || !Number.isInteger(cam.height) || cam.width < 1 || cam.height < 1) {
      throw new WriterError('invalid_shape', `${key}: width and height must be positive integers, got ${cam.width}x${cam.height}`);
    }
    const { width, height } = videoSize(cam, enc.codec, enc.resize);
    const max = MAX_VIDEO_SIZE[enc.codec];
    if (width > max.width || height > max.height) {
      throw new WriterError('frame_too_large', `${key}: ${cam.width}x${cam.height} frames are larger than ${codecNames(enc.codec).encoder} encodes (at most ${max.width}x${max.height}); scale them down with --resize WxH`);
    }
    out.push({
      key,
      kind: 'video',
      info: { dtype: 'video', shape: [height, width, 3], names: ['height', 'width', 'channels'], info: videoInfo(width, height, shape.fps, enc) },
    });
  }
  for (const key of [DONE_KEY, SUCCESS_KEY]) out.push({ key, kind: 'bool', info: { dtype: 'bool', shape: [1], names: null } });
  out.push({ key: 'timestamp', kind: 'timestamp', info: { dtype: 'float32', shape: [1], names: null } });
  for (const key of DEFAULT_FEATURE_KEYS.slice(1)) out.push({ key, kind: 'int', info: { dtype: 'int64', shape: [1], names: null } });
  return out;
}

/** The smallest side each codec encodes: SVT-AV1 refuses frames under 64 pixels on either side. */
export const MIN_VIDEO_SIDE: Readonly<Record<VideoCodec, number>> = { av1: 64, h264: 2 };

/**
 * The largest frame each codec encodes, as measured with Debian's ffmpeg 5.1: libsvtav1 refuses a
 * width over 16384 or a height over 8704, libx264 either side over 16384.
 */
export const MAX_VIDEO_SIZE: Readonly<Record<VideoCodec, { width: number; height: number }>> = { av1: { width: 16384, height: 8704 }, h264: { width: 16384, height: 16384 } };

/**
 * Why `size` cannot be the `--resize` size for `codec` (yuv420p needs even sides, SVT-AV1 at
 * least 64x64, neither codec more than `MAX_VIDEO_SIZE`), or null when it can.
 */
export function resizeProblem(size: { width: number; height: number }, codec: VideoCodec): string | null {
  const { width, height } = size;
  if (!Number.isInteger(width) || !Number.isInteger(height) || width < 1 || height < 1) return `${width}x${height}: width and height are positive integers`;
  if (width % 2 !== 0 || height % 2 !== 0) return `${width}x${height}: yuv420p video needs even width and height`;
  const min = MIN_VIDEO_SIDE[codec];
  if (width < min || height < min) return `${width}x${height}: ${codecNames(codec).encoder} needs at least ${min}x${min}`;
  const max = MAX_VIDEO_SIZE[codec];
  if (width > max.width || height > max.height) return `${width}x${height}: ${codecNames(codec).encoder} encodes at most ${max.width}x${max.height}`;
  return null;
}

/**
 * The size a camera's video is encoded at: `resize` when given (every frame scaled to exactly it),
 * else the frame's own size with both sides made even (yuv420p halves the chroma planes) and at
 * least the codec's minimum (`MIN_VIDEO_SIDE`). Unscaled frames are padded to it on the right and
 * at the bottom with black (`padFrame`): the source pixels keep their place, at (0, 0), and the
 * dataset's `shape` is the padded size.
 */
export function videoSize(size: { width: number; height: number }, codec: VideoCodec, resize: { width: number; height: number } | null = null): { width: number; height: number } {
  if (resize !== null) return { width: resize.width, height: resize.height };
  const side = (n: number) => Math.max(n + (n % 2), MIN_VIDEO_SIDE[codec]);
  return { width: side(size.width), height: side(size.height) };
}

/** `frame` (packed RGB, `from` size) placed at the top left of a black frame of `to` size. */
export function padFrame(frame: Uint8Array, from: { width: number; height: number }, to: { width: number; height: number }): Uint8Array {
  if (from.width === to.width && from.height === to.height) return frame;
  const out = new Uint8Array(to.width * to.height * 3);
  const row = from.width * 3;
  for (let y = 0; y < from.height; y++) out.set(frame.subarray(y * row, y * row + row), y * to.width * 3);
  return out;
}

/**
 * A video feature's `info` block as LeRobot's `get_video_info` records it for a video encoded with
 * a `VideoEncoderConfig`: the stream's properties, then the encoder's fields, then `is_depth_map`.
 * `video.video_backend` says "pyav" because that is the only backend LeRobot accepts when it rebuilds
 * an encoder config from this block; our ffmpeg arguments are those pyav would pass.
 */
export function videoInfo(width: number, height: number, fps: number, enc: VideoEncoding): Record<string, unknown> {
  return {
    'video.height': height,
    'video.width': width,
    'video.codec': codecNames(enc.codec).canonical,
    'video.pix_fmt': 'yuv420p',
    'video.fps': fps,
    'video.channels': 3,
    has_audio: false,
    'video.g': enc.gop,
    'video.crf': enc.crf,
    'video.preset': enc.preset,
    'video.fast_decode': 0,
    'video.video_backend': 'pyav',
    'video.extra_options': {},
    is_depth_map: false,
  };
}

/**
 * A digest of everything that makes staged episodes of one export interchangeable: the shape and
 * the encoding. An episode staged under another fingerprint is not reused.
 */
export function stageFingerprint(shape: DatasetShape, enc: VideoEncoding): string {
  const { ffmpegPath: _f, ffprobePath: _p, resize, ...encoding } = enc;
  // `resize` only when set: episodes staged before it existed keep their fingerprint.
  return createHash('sha256').update(JSON.stringify({ v: 1, shape, encoding, ...(resize !== null ? { resize } : {}) })).digest('hex').slice(0, 32);
}

/** `chunk-XXX/file-XXX`, LeRobot's `CHUNK_FILE_PATTERN`. */
export function chunkFile(chunk: number, file: number): string {
  return `chunk-${String(chunk).padStart(3, '0')}/file-${String(file).padStart(3, '0')}`;
}

/** LeRobot's `update_chunk_file_indices`: the next file, rolling to a new chunk after `chunksSize`. */
export function nextChunkFile(chunk: number, file: number, chunksSize: number): [number, number] {
  return file === chunksSize - 1 ? [chunk + 1, 0] : [chunk, file + 1];
}
