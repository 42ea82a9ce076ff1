import { DataType, Precision, type Data, type Table, type Vector } from 'apache-arrow';
import type { FeatureInfo } from '../types.js';
import type { EpisodeRecord } from './episodes.js';
import type { DatasetInfo } from './info.js';
import { integer, numeric } from './parquet.js';
import type { ProblemLog } from './problems.js';

/** LeRobot's loader tolerance for timestamps against frame_index / fps. */
export const TIMESTAMP_TOLERANCE_S = 1e-4;

/** The running state carried from one data file to the next, in order. */
export interface DataScan {
  /** The `index` the next row must have. */
  nextIndex: number;
  /** Rows seen per episode_index. */
  rowsPerEpisode: Map<number, number>;
  frames: number;
  /** Files whose rows could not be checked (unreadable, or unsound default columns). */
  unchecked: Set<string>;
}

/** Whether an Arrow leaf type stores a LeRobot dtype as the loader casts it. */
function leafMatches(type: DataType, dtype: string): boolean {
  switch (dtype) {
    case 'float32':
      return DataType.isFloat(type) && type.precision === Precision.SINGLE;
    case 'float64':
      return DataType.isFloat(type) && type.precision === Precision.DOUBLE;
    case 'int64':
    case 'int32':
    case 'int16':
    case 'int8':
      return DataType.isInt(type) && type.isSigned && type.bitWidth === Number(dtype.slice(3));
    case 'uint8':
      return DataType.isInt(type) && !type.isSigned && type.bitWidth === 8;
    case 'bool':
      return DataType.isBool(type);
    case 'string':
      return DataType.isUtf8(type) || DataType.isLargeUtf8(type);
    case 'image':
      // datasets.Image(): a struct of the encoded bytes and a path.
      return DataType.isStruct(type) && type.children.some((f) => f.name === 'bytes');
    default:
      return false;
  }
}

/** Arrow's own name for a type, e.g. `List<Float32>`: every concrete type class defines toString. */
function typeName(type: DataType): string {
  return (type as DataType & { toString(): string }).toString();
}

/** Checks one chunk against dims (the feature's shape, [1] meaning a plain value); a message when it breaks. */
function shapeProblem(data: Data<DataType>, dims: number[], dtype: FeatureInfo['dtype'], depth: number): string | null {
  if (data.nullCount > 0) return `holds ${data.nullCount} null(s) at depth ${depth}`;
  const [size, ...rest] = dims;
  if (size === undefined) return leafMatches(data.type, dtype) ? null : `has ${typeName(data.type)} where ${dtype} is expected`;
  if (DataType.isFixedSizeList(data.type)) {
    if (data.type.listSize !== size) return `is a fixed list of ${data.type.listSize} at depth ${depth}, expected ${size}`;
  } else if (DataType.isList(data.type)) {
    const offsets = data.valueOffsets as ArrayLike<number | bigint>;
    for (let i = 0; i < data.length; i++) {
      const n = Number(offsets[data.offset + i + 1]) - Number(offsets[data.offset + i]);
      if (n !== size) return `has a list of ${n} at row ${i}${depth > 0 ? ` (depth ${depth})` : ''}, expected ${size}`;
    }
  } else {
    return `has ${typeName(data.type)} where a list of ${size} ${dtype} is expected`;
  }
  const child = data.children[0];
  return child === undefined ? 'has a list without values' : shapeProblem(child, rest, dtype, depth + 1);
}

/** The column's problem against its feature, or null. Shape [1] is a plain value, [n] a list of n. */
export function columnProblem(column: Vector, ft: FeatureInfo): string | null {
  const dims = ft.dtype === 'image' || (ft.shape.length === 1 && ft.shape[0] === 1) ? [] : ft.shape;
  for (const chunk of column.data) {
    const problem = shapeProblem(chunk as Data<DataType>, dims, ft.dtype, 0);
    if (problem !== null) return `${problem} (feature is ${ft.dtype} ${JSON.stringify(ft.shape)})`;
  }
  return null;
}

/**
 * Checks one data file, already read, and advances the scan. `episodes` is by episode_index;
 * `tasks` is undefined when tasks.parquet could not be read.
 */
export function checkDataFile(
  file: string,
  table: Table,
  info: DatasetInfo,
  episodes: readonly EpisodeRecord[],
  tasks: readonly string[] | undefined,
  scan: DataScan,
  log: ProblemLog,
): void {
  const expected = Object.keys(info.features).filter((key) => info.features[key]?.dtype !== 'video');
  const actual = table.schema.names.map(String);
  const extra = actual.filter((c) => !expected.includes(c));
  const missing = expected.filter((c) => !actual.includes(c));
  if (extra.length > 0) log.add('data.columns', `${file} columns ${extra.join(', ')}`, 'are not features of info.json (or are video features)');
  if (missing.length > 0) log.add('data.columns', `${file} columns ${missing.join(', ')}`, 'are features of info.json missing from the file');

  let typesOk = true;
  for (const key of expected) {
    const column = table.getChild(key);
    const ft = info.features[key]!;
    if (column === null) {
      typesOk = false;
      continue;
    }
    const problem = columnProblem(column, ft);
    if (problem !== null) {
      log.add('data.types', `${file} column ${key}`, problem);
      typesOk = false;
    }
  }
  scan.frames += table.numRows;
  if (!typesOk) {
    // Without sound default columns the row checks would only echo the type problem.
    scan.nextIndex += table.numRows;
    scan.unchecked.add(file);
    return;
  }

  const index = table.getChild('index')!;
  const episodeIndex = table.getChild('episode_index')!;
  const frameIndex = table.getChild('frame_index')!;
  const taskIndex = table.getChild('task_index')!;
  const timestamp = table.getChild('timestamp')!;
  for (let row = 0; row < table.numRows; row++) {
    const at = `${file} row ${row}`;
    const idx = integer(index.get(row));
    if (idx !== scan.nextIndex) {
      log.add('data.index', `${at} column index`, `is ${idx}, expected ${scan.nextIndex}: index must run contiguously from 0`, file);
    }
    scan.nextIndex = idx + 1;

    const e = integer(episodeIndex.get(row));
    const ep = episodes[e];
    if (ep === undefined || ep.episodeIndex !== e) {
      log.add('data.episode', `${at} column episode_index`, `episode ${e} is not in meta/episodes`, file);
      continue;
    }
    if (ep.dataFile !== file) {
      log.add('data.episode', `${at} (episode ${e})`, `meta/episodes puts episode ${e} in ${ep.dataFile}`, file);
    } else if (idx < ep.from || idx >= ep.to) {
      log.add('data.episode', `${at} (episode ${e}) column index`, `${idx} is outside the episode's [dataset_from_index, dataset_to_index) = [${ep.from}, ${ep.to})`, file);
    }
    const position = scan.rowsPerEpisode.get(e) ?? 0;
    scan.rowsPerEpisode.set(e, position + 1);

    const frame = integer(frameIndex.get(row));
    if (frame !== position) {
      log.add('data.frame_index', `${at} (episode ${e}) column frame_index`, `is ${frame}, expected ${position}`, file);
    }
    const t = numeric(timestamp.get(row));
    if (!(Math.abs(t - frame / info.fps) <= TIMESTAMP_TOLERANCE_S)) {
      log.add('data.timestamp', `${at} (episode ${e}) column timestamp`, `is ${t}, expected ${frame / info.fps} (frame_index ${frame} / fps ${info.fps}) within ${TIMESTAMP_TOLERANCE_S} s`, file);
    }
    if (tasks !== undefined) {
      const ti = integer(taskIndex.get(row));
      const task = tasks[ti];
      if (task === undefined) {
        log.add('data.task_index', `${at} (episode ${e}) column task_index`, `${ti} names no row of meta/tasks.parquet (${tasks.length} tasks)`, file);
      } else if (!ep.tasks.includes(task)) {
        log.add('data.task_index', `${at} (episode ${e}) column task_index`, `task ${JSON.stringify(task)} is not among the episode's tasks`, file);
      }
    }
  }
}
