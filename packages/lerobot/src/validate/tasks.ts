import { DataType } from 'apache-arrow';
import { integer, readParquetTable } from './parquet.js';
import type { ProblemLog } from './problems.js';

const WHERE = 'meta/tasks.parquet';

/**
 * Reads meta/tasks.parquet: task strings by task_index. LeRobot writes it with pandas, the task
 * strings as the DataFrame's index, and finds a task by row position, so the index column must be
 * named in the pandas metadata and row i must hold task_index i.
 */
export async function readTasks(dir: string, log: ProblemLog): Promise<string[] | undefined> {
  let table;
  try {
    table = await readParquetTable(dir, WHERE);
  } catch (error) {
    log.add('files.readable', WHERE, `cannot read: ${String(error)}`);
    return undefined;
  }
  const pandasJson = table.schema.metadata.get('pandas');
  if (pandasJson === undefined) {
    log.add('tasks.pandas', WHERE, 'has no pandas metadata: pandas would read the task strings as a column, not the index');
    return undefined;
  }
  let indexColumns: unknown;
  try {
    indexColumns = (JSON.parse(pandasJson) as { index_columns?: unknown }).index_columns;
  } catch {
    log.add('tasks.pandas', WHERE, 'its pandas metadata is not JSON');
    return undefined;
  }
  const indexColumn = Array.isArray(indexColumns) && indexColumns.length === 1 ? (indexColumns as unknown[])[0] : undefined;
  if (typeof indexColumn !== 'string') {
    log.add('tasks.pandas', WHERE, `pandas index_columns must name one column, is ${JSON.stringify(indexColumns)}`);
    return undefined;
  }
  const taskField = table.schema.fields.find((f) => f.name === indexColumn);
  if (taskField === undefined || !(DataType.isUtf8(taskField.type) || DataType.isLargeUtf8(taskField.type))) {
    log.add('tasks.pandas', `${WHERE} column ${indexColumn}`, 'the pandas index column is missing or does not hold strings');
    return undefined;
  }
  const taskIndex = table.getChild('task_index');
  if (taskIndex === null || !DataType.isInt(taskIndex.type)) {
    log.add('tasks.order', `${WHERE} column task_index`, 'is missing or not an integer column');
    return undefined;
  }
  const strings = table.getChild(indexColumn);
  const tasks: string[] = [];
  const seen = new Set<string>();
  for (let row = 0; row < table.numRows; row++) {
    const task: unknown = strings?.get(row);
    const index = integer(taskIndex.get(row));
    if (typeof task !== 'string') {
      log.add('tasks.order', `${WHERE} row ${row}`, 'task is null', WHERE);
    } else if (seen.has(task)) {
      log.add('tasks.order', `${WHERE} row ${row}`, `task ${JSON.stringify(task)} appears twice`, WHERE);
    }
    if (index !== row) {
      log.add('tasks.order', `${WHERE} row ${row}`, `task_index is ${index}, expected ${row}: LeRobot finds tasks by row`, WHERE);
    }
    seen.add(String(task));
    tasks.push(String(task));
  }
  return tasks;
}
