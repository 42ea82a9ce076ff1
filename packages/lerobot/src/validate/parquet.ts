import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { tableFromIPC, type Table } from 'apache-arrow';
import { readParquet } from 'parquet-wasm/node';

/** Reads a whole parquet file of the dataset as an Arrow table (one file at a time). */
export async function readParquetTable(dir: string, path: string): Promise<Table> {
  const bytes = await readFile(join(dir, path));
  const wasmTable = readParquet(new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength));
  return tableFromIPC(wasmTable.intoIPCStream());
}

/** An integer cell as a number: Arrow hands int64 back as bigint. NaN when it is not one. */
export function integer(value: unknown): number {
  if (typeof value === 'bigint') return Number(value);
  if (typeof value === 'number' && Number.isInteger(value)) return value;
  return Number.NaN;
}

/** A numeric cell as a number; NaN when it is not one. */
export function numeric(value: unknown): number {
  if (typeof value === 'bigint') return Number(value);
  if (typeof value === 'number') return value;
  return Number.NaN;
}
