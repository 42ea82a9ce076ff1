import type { Table } from 'apache-arrow';
import type { DatasetInfo } from './info.js';
import { formatPath, listFiles, templatePattern } from './paths.js';
import { integer, numeric, readParquetTable } from './parquet.js';
import type { ProblemLog } from './problems.js';
import { STAT_KEYS, statFeatures } from './stats.js';

/** What one row of meta/episodes says about an episode. */
export interface EpisodeRecord {
  episodeIndex: number;
  length: number;
  tasks: string[];
  /** The data file holding its rows, dataset-relative. */
  dataFile: string;
  from: number;
  to: number;
  /** By video feature key. */
  videos: Record<string, { file: string; from: number; to: number }>;
  /** Its row in meta/episodes, for messages. */
  where: string;
}

const EPISODES_TEMPLATE = 'meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet';
const COLUMNS = ['episode_index', 'tasks', 'length', 'data/chunk_index', 'data/file_index', 'dataset_from_index', 'dataset_to_index'];

/** Reads every meta/episodes file in order; the table is metadata, small beside the frames. */
export async function readEpisodes(dir: string, info: DatasetInfo, log: ProblemLog): Promise<EpisodeRecord[] | undefined> {
  const files = await listFiles(dir, 'meta/episodes');
  const pattern = templatePattern(EPISODES_TEMPLATE);
  const cameras = Object.keys(info.features).filter((key) => info.features[key]?.dtype === 'video');
  const columns = [...COLUMNS];
  for (const camera of cameras) {
    for (const part of ['chunk_index', 'file_index', 'from_timestamp', 'to_timestamp']) columns.push(`videos/${camera}/${part}`);
  }
  const statColumns = statFeatures(info).flatMap((key) => STAT_KEYS.map((stat) => `stats/${key}/${stat}`));
  if (files.length === 0) {
    log.add('files.missing', 'meta/episodes', 'holds no episodes file');
    return undefined;
  }

  const episodes: EpisodeRecord[] = [];
  for (const file of files) {
    if (!pattern.test(file)) {
      log.add('files.unreferenced', file, `does not match ${EPISODES_TEMPLATE}`);
      continue;
    }
    let table: Table;
    try {
      table = await readParquetTable(dir, file);
    } catch (error) {
      log.add('files.readable', file, `cannot read: ${String(error)}`);
      return undefined;
    }
    const names = new Set(table.schema.names.map(String));
    const missing = columns.filter((c) => !names.has(c));
    if (missing.length > 0) {
      log.add('episodes.columns', file, `missing columns ${missing.join(', ')}`);
      return undefined;
    }
    const missingStats = statColumns.filter((c) => !names.has(c));
    if (missingStats.length > 0) {
      log.add('episodes.stats', file, `missing stats columns ${missingStats.slice(0, 5).join(', ')}${missingStats.length > 5 ? ', …' : ''}`);
    }
    const column = (name: string) => table.getChild(name)!;
    for (let row = 0; row < table.numRows; row++) {
      const where = `${file} row ${row}`;
      const at = (name: string): number => integer(column(name).get(row));
      const tasksCell: unknown = column('tasks').get(row);
      const tasks = tasksCell !== null && typeof tasksCell === 'object' && Symbol.iterator in tasksCell ? [...(tasksCell as Iterable<unknown>)].map(String) : [];
      const videos: EpisodeRecord['videos'] = {};
      for (const camera of cameras) {
        const v = (part: string): unknown => column(`videos/${camera}/${part}`).get(row);
        videos[camera] = {
          file: formatPath(info.videoPath ?? '', { video_key: camera, chunk_index: integer(v('chunk_index')), file_index: integer(v('file_index')) }),
          from: numeric(v('from_timestamp')),
          to: numeric(v('to_timestamp')),
        };
      }
      episodes.push({
        episodeIndex: at('episode_index'),
        length: at('length'),
        tasks,
        dataFile: formatPath(info.dataPath, { chunk_index: at('data/chunk_index'), file_index: at('data/file_index') }),
        from: at('dataset_from_index'),
        to: at('dataset_to_index'),
        videos,
        where,
      });
    }
  }
  checkEpisodeOrder(episodes, log);
  return episodes;
}

/** episode_index 0..N-1 in order, and each episode's [from, to) follows the previous one's. */
function checkEpisodeOrder(episodes: EpisodeRecord[], log: ProblemLog): void {
  let next = 0;
  episodes.forEach((ep, position) => {
    if (ep.episodeIndex !== position) {
      log.add('episodes.order', `${ep.where} column episode_index`, `is ${ep.episodeIndex}, expected ${position}`, 'episodes');
    }
    if (!(ep.length > 0)) log.add('episodes.order', `${ep.where} column length`, `is ${ep.length}, expected a positive integer`, 'episodes');
    if (ep.from !== next || ep.to - ep.from !== ep.length) {
      log.add(
        'episodes.order',
        `${ep.where} (episode ${ep.episodeIndex}) columns dataset_from_index/dataset_to_index`,
        `are [${ep.from}, ${ep.to}), expected [${next}, ${next + ep.length}) for length ${ep.length}`,
        'episodes',
      );
    }
    next = ep.to;
  });
}
