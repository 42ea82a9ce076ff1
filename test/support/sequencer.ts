import { BaseSequencer, type TestSpecification } from 'vitest/node';

/**
 * vitest's order (within a group: by project name, then the slowest or largest files first),
 * with the browser project's files spread out among the others instead of all at the front.
 * They take a lock across workers (one chromium at a time, console/test/harness.ts): four at the
 * front had one worker waiting on it while the other ran them, about 150 s of a worker idle.
 * Spread out, each runs beside end-to-end files, and the next comes minutes after it ended.
 */
export default class SpreadBrowserFiles extends BaseSequencer {
  /** Other files between two browser files (each end-to-end file takes 20 s to minutes). */
  static readonly GAP = 8;

  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    return spreadOut(await super.sort(files), (f) => f.project.name === 'browser', SpreadBrowserFiles.GAP);
  }
}

/** `sorted` with the items `pick` selects moved to positions 0, gap + 1, 2 (gap + 1), ... (the rest keep their order). */
export function spreadOut<T>(sorted: readonly T[], pick: (item: T) => boolean, gap: number): T[] {
  const picked = sorted.filter(pick);
  const out = sorted.filter((f) => !pick(f));
  picked.forEach((item, i) => out.splice(Math.min(i * (gap + 1), out.length), 0, item));
  return out;
}
