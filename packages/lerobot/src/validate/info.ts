import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { FeatureInfo } from '../types.js';
import type { ProblemLog } from './problems.js';

/** The parts of meta/info.json the validator relies on, checked. */
export interface DatasetInfo {
  fps: number;
  features: Record<string, FeatureInfo>;
  totalEpisodes: number;
  totalFrames: number;
  totalTasks: number;
  dataPath: string;
  videoPath: string | null;
}

const DTYPES = new Set(['float32', 'float64', 'int64', 'int32', 'int16', 'int8', 'uint8', 'bool', 'string', 'video', 'image']);

/** LeRobot adds these to every dataset; the loader casts the data files to them. */
export const DEFAULT_FEATURES: Record<string, FeatureInfo['dtype']> = {
  timestamp: 'float32',
  frame_index: 'int64',
  episode_index: 'int64',
  index: 'int64',
  task_index: 'int64',
};

const WHERE = 'meta/info.json';

/** Reads and checks meta/info.json; undefined when the rest cannot be checked without it. */
export async function readDatasetInfo(dir: string, log: ProblemLog): Promise<DatasetInfo | undefined> {
  let raw: unknown;
  try {
    raw = JSON.parse(await readFile(join(dir, WHERE), 'utf8'));
  } catch (error) {
    log.add('info.parses', WHERE, `cannot read as JSON: ${String(error)}`);
    return undefined;
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    log.add('info.parses', WHERE, 'is not a JSON object');
    return undefined;
  }
  const info = raw as Record<string, unknown>;
  if (info['codebase_version'] !== 'v3.0') {
    log.add('info.version', `${WHERE} codebase_version`, `is ${JSON.stringify(info['codebase_version'])}, expected "v3.0"`);
    return undefined;
  }

  let keysOk = true;
  const need = (key: string, ok: (v: unknown) => boolean, what: string): void => {
    if (!ok(info[key])) {
      log.add('info.keys', `${WHERE} ${key}`, `must be ${what}, is ${JSON.stringify(info[key])}`);
      keysOk = false;
    }
  };
  const count = (v: unknown): boolean => Number.isInteger(v) && (v as number) >= 0;
  const positive = (v: unknown): boolean => typeof v === 'number' && v > 0;
  const text = (v: unknown): boolean => typeof v === 'string' && v.length > 0;
  need('fps', positive, 'a positive number');
  need('features', (v) => typeof v === 'object' && v !== null && !Array.isArray(v), 'an object');
  for (const key of ['total_episodes', 'total_frames', 'total_tasks']) need(key, count, 'a non-negative integer');
  for (const key of ['chunks_size', 'data_files_size_in_mb', 'video_files_size_in_mb']) need(key, positive, 'a positive number');
  need('data_path', text, 'a path template');
  need('video_path', (v) => v === null || text(v), 'a path template or null');
  need('splits', (v) => typeof v === 'object' && v !== null && !Array.isArray(v), 'an object');
  need('robot_type', (v) => v === null || typeof v === 'string', 'a string or null');
  if (!keysOk) return undefined;

  const features = info['features'] as Record<string, unknown>;
  let featuresOk = true;
  for (const [key, value] of Object.entries(features)) {
    const ft = value as Partial<FeatureInfo> | null;
    const where = `${WHERE} features.${key}`;
    if (typeof ft !== 'object' || ft === null || typeof ft.dtype !== 'string' || !DTYPES.has(ft.dtype)) {
      log.add('info.features', where, `dtype ${JSON.stringify(ft?.dtype)} is not a LeRobot dtype`);
      featuresOk = false;
    } else if (!Array.isArray(ft.shape) || ft.shape.length === 0 || !ft.shape.every((n) => Number.isInteger(n) && n > 0)) {
      log.add('info.features', where, `shape ${JSON.stringify(ft.shape)} is not a list of positive integers`);
      featuresOk = false;
    } else if ((ft.dtype === 'video' || ft.dtype === 'image') && ft.shape.length !== 3) {
      log.add('info.features', where, `an ${ft.dtype} feature's shape must have 3 dimensions, is ${JSON.stringify(ft.shape)}`);
      featuresOk = false;
    }
  }
  for (const [key, dtype] of Object.entries(DEFAULT_FEATURES)) {
    const ft = features[key] as Partial<FeatureInfo> | undefined;
    if (ft?.dtype !== dtype || JSON.stringify(ft.shape) !== '[1]') {
      log.add('info.features', `${WHERE} features.${key}`, `the default feature must be ${dtype} of shape [1]`);
      featuresOk = false;
    }
  }
  if (!featuresOk) return undefined;
  const hasVideo = Object.values(features).some((ft) => (ft as FeatureInfo).dtype === 'video');
  if (hasVideo && typeof info['video_path'] !== 'string') {
    log.add('info.keys', `${WHERE} video_path`, 'is null but the dataset has video features');
    return undefined;
  }

  return {
    fps: info['fps'] as number,
    features: features as Record<string, FeatureInfo>,
    totalEpisodes: info['total_episodes'] as number,
    totalFrames: info['total_frames'] as number,
    totalTasks: info['total_tasks'] as number,
    dataPath: info['data_path'] as string,
    videoPath: (info['video_path'] as string | null) ?? null,
  };
}

/** Height and width of a video or image feature, read by its names when it has them. */
export function frameSize(ft: FeatureInfo): { height: number; width: number } {
  const names = Array.isArray(ft.names) ? ft.names : null;
  const h = names?.indexOf('height') ?? -1;
  const w = names?.indexOf('width') ?? -1;
  if (h >= 0 && w >= 0) return { height: ft.shape[h] ?? 0, width: ft.shape[w] ?? 0 };
  // LeRobot writes (height, width, channels) when it does not name them.
  return { height: ft.shape[0] ?? 0, width: ft.shape[1] ?? 0 };
}
