import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { DatasetInfo } from './info.js';
import type { ProblemLog } from './problems.js';

export const STAT_KEYS = ['min', 'max', 'mean', 'std', 'count', 'q01', 'q10', 'q50', 'q90', 'q99'] as const;

const WHERE = 'meta/stats.json';

/** The features LeRobot computes stats for: all but strings. */
export function statFeatures(info: DatasetInfo): string[] {
  return Object.keys(info.features).filter((key) => info.features[key]?.dtype !== 'string');
}

/** The shape a stat of this feature has: images per channel, everything else the feature's shape. */
function expectedShape(info: DatasetInfo, key: string, stat: string): number[] {
  const ft = info.features[key]!;
  if (stat === 'count') return [1];
  if (ft.dtype === 'video' || ft.dtype === 'image') return [3, 1, 1];
  return ft.shape;
}

/** The shape of a nested JSON array; null when ragged or not numbers. */
function shapeOf(value: unknown): number[] | null {
  if (typeof value === 'number') return [];
  if (!Array.isArray(value) || value.length === 0) return null;
  const inner = value.map(shapeOf);
  const first = inner[0];
  if (first == null || inner.some((s) => s === null || JSON.stringify(s) !== JSON.stringify(first))) return null;
  return [value.length, ...first];
}

export async function checkStats(dir: string, info: DatasetInfo, log: ProblemLog): Promise<void> {
  let stats: Record<string, unknown>;
  try {
    stats = JSON.parse(await readFile(join(dir, WHERE), 'utf8')) as Record<string, unknown>;
  } catch (error) {
    log.add('files.readable', WHERE, `cannot read as JSON: ${String(error)}`);
    return;
  }
  for (const key of statFeatures(info)) {
    const entry = stats[key];
    if (typeof entry !== 'object' || entry === null) {
      log.add('stats.features', `${WHERE} ${key}`, 'has no stats');
      continue;
    }
    for (const stat of STAT_KEYS) {
      const value = (entry as Record<string, unknown>)[stat];
      if (value === undefined) {
        log.add('stats.features', `${WHERE} ${key}.${stat}`, 'is missing');
        continue;
      }
      const expected = expectedShape(info, key, stat);
      const actual = shapeOf(value);
      if (actual === null || JSON.stringify(actual) !== JSON.stringify(expected)) {
        log.add('stats.shape', `${WHERE} ${key}.${stat}`, `has shape ${JSON.stringify(actual)}, expected ${JSON.stringify(expected)}`);
      }
    }
  }
}
