import type { Table } from 'apache-arrow';
import { checkDataFile, type DataScan } from './data.js';
import { readEpisodes, type EpisodeRecord } from './episodes.js';
import { readDatasetInfo, type DatasetInfo } from './info.js';
import { readParquetTable } from './parquet.js';
import { listFiles, templatePattern } from './paths.js';
import { ProblemLog, type ValidationResult } from './problems.js';
import { checkStats } from './stats.js';
import { readTasks } from './tasks.js';
import { checkVideoFile, episodesByVideoFile } from './videos.js';

export interface ValidateOptions {
  /** The ffprobe binary; `ffprobe` on the PATH unless told. */
  ffprobe?: string;
  /** Decode the videos with ffprobe (frame count, size, rate). Default true. */
  checkVideos?: boolean;
  /** Stop collecting after this many problems. Default 100. */
  maxProblems?: number;
}

/**
 * Reads a LeRobot v3.0 dataset back from `dir` and checks the invariants LeRobot's loader relies
 * on (see INVARIANTS). Collects every problem it finds rather than stopping at the first; each
 * invariant is reported once per file, so one gap does not bury the rest. `problem` is the first.
 * Only when info.json or meta/episodes cannot be trusted does it stop early, since every later
 * check reads through them. Data files are read one at a time.
 */
export async function validateLeRobotDataset(dir: string, opts: ValidateOptions = {}): Promise<ValidationResult> {
  const log = new ProblemLog(opts.maxProblems ?? 100);
  const summary = await check(dir, { ffprobe: opts.ffprobe ?? 'ffprobe', checkVideos: opts.checkVideos ?? true }, log);
  const [problem] = log.problems;
  if (problem !== undefined) return { ok: false, problem, problems: log.problems };
  return { ok: true, summary: summary! };
}

async function check(
  dir: string,
  opts: { ffprobe: string; checkVideos: boolean },
  log: ProblemLog,
): Promise<{ episodes: number; frames: number; tasks: number; dataFiles: number; videoFiles: number } | undefined> {
  const info = await readDatasetInfo(dir, log);
  if (info === undefined) return undefined;
  const tasks = await readTasks(dir, log);
  const episodes = await readEpisodes(dir, info, log);
  if (episodes === undefined) return undefined;
  if (tasks !== undefined) checkEpisodeTasks(episodes, tasks, log);

  const dataFiles = await checkDataLayout(dir, info, episodes, log);
  const scan: DataScan = { nextIndex: 0, rowsPerEpisode: new Map(), frames: 0, unchecked: new Set() };
  for (const file of dataFiles) {
    let table: Table;
    try {
      table = await readParquetTable(dir, file);
    } catch (error) {
      log.add('files.readable', file, `cannot read: ${String(error)}`);
      scan.unchecked.add(file);
      continue;
    }
    checkDataFile(file, table, info, episodes, tasks, scan, log);
  }
  for (const ep of episodes) {
    if (scan.unchecked.has(ep.dataFile)) continue;
    const rows = scan.rowsPerEpisode.get(ep.episodeIndex) ?? 0;
    if (rows !== ep.length) {
      log.add('data.length', `${ep.dataFile} (episode ${ep.episodeIndex}, ${ep.where})`, `has ${rows} rows, but the episode's length is ${ep.length}`);
    }
  }

  const totals: Array<[string, number, number]> = [
    ['total_episodes', info.totalEpisodes, episodes.length],
    ['total_frames', info.totalFrames, scan.frames],
  ];
  if (tasks !== undefined) totals.push(['total_tasks', info.totalTasks, tasks.length]);
  for (const [key, said, counted] of totals) {
    if (said !== counted) log.add('info.totals', `meta/info.json ${key}`, `is ${said}, but the dataset holds ${counted}`);
  }

  const videoFiles = await checkVideos(dir, info, episodes, opts, log);
  await checkStats(dir, info, log);
  return { episodes: episodes.length, frames: scan.frames, tasks: tasks?.length ?? 0, dataFiles: dataFiles.length, videoFiles };
}

function checkEpisodeTasks(episodes: readonly EpisodeRecord[], tasks: readonly string[], log: ProblemLog): void {
  const known = new Set(tasks);
  for (const ep of episodes) {
    if (ep.tasks.length === 0) log.add('episodes.tasks', `${ep.where} column tasks`, 'lists no task');
    for (const task of ep.tasks) {
      if (!known.has(task)) log.add('episodes.tasks', `${ep.where} column tasks`, `task ${JSON.stringify(task)} is not in meta/tasks.parquet`);
    }
  }
}

/**
 * The loader reads every data/*\/*.parquet and casts it to the features, so a stray file breaks
 * it. Returns the referenced data files that exist, in order.
 */
async function checkDataLayout(dir: string, info: DatasetInfo, episodes: readonly EpisodeRecord[], log: ProblemLog): Promise<string[]> {
  const present = await listFiles(dir, 'data');
  const referenced = new Set(episodes.map((ep) => ep.dataFile));
  const pattern = templatePattern(info.dataPath);
  for (const file of present) {
    if (!pattern.test(file)) log.add('files.data_path', file, `does not match data_path ${info.dataPath}`);
    else if (!referenced.has(file)) log.add('files.unreferenced', file, 'is a data file no episode references');
  }
  const existing = new Set(present);
  for (const ep of episodes) {
    if (!existing.has(ep.dataFile)) log.add('files.missing', `${ep.where} (episode ${ep.episodeIndex})`, `references ${ep.dataFile}, which does not exist`, ep.dataFile);
  }
  return [...referenced].filter((f) => existing.has(f)).sort();
}

async function checkVideos(
  dir: string,
  info: DatasetInfo,
  episodes: readonly EpisodeRecord[],
  opts: { ffprobe: string; checkVideos: boolean },
  log: ProblemLog,
): Promise<number> {
  const present = await listFiles(dir, 'videos');
  const existing = new Set(present);
  const cameras = Object.keys(info.features).filter((key) => info.features[key]?.dtype === 'video');
  const referenced = new Set<string>();
  for (const camera of cameras) {
    for (const [file, inFile] of episodesByVideoFile(camera, episodes)) {
      referenced.add(file);
      if (!existing.has(file)) {
        const first = inFile[0]!;
        log.add('files.missing', `${first.where} (episode ${first.episodeIndex}) videos/${camera}`, `references ${file}, which does not exist`);
        continue;
      }
      await checkVideoFile(dir, camera, file, inFile, info, opts, log);
    }
  }
  const patterns = cameras.map((camera) => templatePattern(info.videoPath!.replaceAll('{video_key}', camera)));
  for (const file of present) {
    if (!patterns.some((p) => p.test(file))) log.add('files.video_path', file, `does not match video_path ${String(info.videoPath)} for a video feature`);
    else if (!referenced.has(file)) log.add('files.unreferenced', file, 'is a video file no episode references');
  }
  return [...referenced].filter((f) => existing.has(f)).length;
}
