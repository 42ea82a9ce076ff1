/**
 * The invariants of a LeRobot v3.0 dataset that the validator checks, each with the one-line
 * promise it stands for. A problem names one of these, where it broke, and how.
 */
export const INVARIANTS = {
  'info.parses': 'meta/info.json exists and is a JSON object',
  'info.version': 'codebase_version is "v3.0"',
  'info.keys': 'info.json has every required key with the right type',
  'info.features': 'every feature has a known dtype and a shape; the default features are present',
  'info.totals': 'total_episodes, total_frames and total_tasks equal what the files hold',
  'files.readable': 'every parquet file and video the dataset names can be read',
  'files.data_path': 'every file under data/ matches data_path',
  'files.video_path': 'every file under videos/ matches video_path for a video feature',
  'files.unreferenced': 'every data and video file is referenced by an episode (no stray files)',
  'files.missing': 'every file an episode references exists',
  'tasks.pandas': 'tasks.parquet carries pandas metadata naming its index column, which holds the task strings',
  'tasks.order': 'row i of tasks.parquet has task_index i, and task strings are unique',
  'episodes.columns': 'meta/episodes has the columns LeRobot reads, per camera too',
  'episodes.order': 'episode_index runs 0..N-1 and dataset_from_index/dataset_to_index tile the frames',
  'episodes.tasks': "an episode's tasks are tasks of meta/tasks.parquet",
  'episodes.stats': 'meta/episodes has a stats/<feature>/<stat> column for every feature and stat',
  'data.columns': "a data file's columns are exactly the non-video features",
  'data.types': "a column's type matches the feature's dtype and shape, with no nulls",
  'data.index': '`index` runs contiguously from 0 across the data files in order',
  'data.episode': "a row's episode is an episode of this file and its index lies in the episode's range",
  'data.length': "an episode's row count equals its `length`",
  'data.frame_index': "frame_index runs 0..length-1 within each episode",
  'data.timestamp': 'timestamp is within 1e-4 s of frame_index / fps',
  'data.task_index': "task_index names a tasks row, and that task is one of the episode's tasks",
  'video.timestamps': "an episode's from/to timestamps are its frames' span in its video file",
  'video.frames': "a video file's decoded frame count equals the sum of its episodes' lengths",
  'video.size': "a video's width and height match the feature's shape",
  'video.fps': "a video's frame rate equals fps",
  'stats.features': 'meta/stats.json has every feature with min, max, mean, std, count, q01..q99',
  'stats.shape': "each stat's shape matches the feature (vector [n], plain [1], image [3,1,1])",
} as const;

export type Invariant = keyof typeof INVARIANTS;

export interface Problem {
  invariant: Invariant;
  /** The file, and within it the row, episode or column. */
  where: string;
  message: string;
}

export interface DatasetSummary {
  episodes: number;
  frames: number;
  tasks: number;
  dataFiles: number;
  videoFiles: number;
}

export type ValidationResult =
  | { ok: true; summary: DatasetSummary }
  | { ok: false; problem: Problem; problems: Problem[] };

/**
 * Collects problems. Within one scope (a file, a camera) each invariant is reported once: a
 * gap in `index` would otherwise repeat on every later row and bury the cause.
 */
export class ProblemLog {
  readonly problems: Problem[] = [];
  readonly #reported = new Set<string>();

  constructor(private readonly limit = 100) {}

  add(invariant: Invariant, where: string, message: string, scope?: string): void {
    if (scope !== undefined) {
      const key = `${invariant}\u0000${scope}`;
      if (this.#reported.has(key)) return;
      this.#reported.add(key);
    }
    if (this.problems.length < this.limit) this.problems.push({ invariant, where, message });
  }

  get empty(): boolean {
    return this.problems.length === 0;
  }
}
