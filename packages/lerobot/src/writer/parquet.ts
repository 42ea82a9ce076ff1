import { createWriteStream } from 'node:fs';
import { Writable } from 'node:stream';
import {
  Bool,
  Field,
  Float32,
  Float64,
  Int64,
  List,
  makeData,
  RecordBatch,
  Schema,
  Struct,
  Table,
  tableFromIPC,
  tableToIPC,
  Utf8,
  vectorFromArray,
  type Data,
  type DataType,
  type Vector,
} from 'apache-arrow';
import * as pw from 'parquet-wasm/node';

/** A column under construction: its arrow field and data. */
export interface Column {
  field: Field;
  data: Data;
}

export function float32Column(name: string, values: Float32Array): Column {
  return { field: new Field(name, new Float32(), false), data: makeData({ type: new Float32(), data: values }) };
}

export function float64Column(name: string, values: ArrayLike<number>): Column {
  return { field: new Field(name, new Float64(), false), data: makeData({ type: new Float64(), data: Float64Array.from(values) }) };
}

export function int64Column(name: string, values: ArrayLike<number>): Column {
  const data = BigInt64Array.from(Array.from(values, (v) => BigInt(v)));
  return { field: new Field(name, new Int64(), false), data: makeData({ type: new Int64(), data }) };
}

export function boolColumn(name: string, values: boolean[]): Column {
  const vec = vectorFromArray(values, new Bool());
  return { field: new Field(name, new Bool(), false), data: vec.data[0]! };
}

export function stringColumn(name: string, values: string[]): Column {
  const vec = vectorFromArray(values, new Utf8());
  return { field: new Field(name, new Utf8(), false), data: vec.data[0]! };
}

/** `list<float32>` with `dim` values per row (element field `item`, as pyarrow names it). */
export function float32ListColumn(name: string, values: Float32Array, dim: number): Column {
  const rows = values.length / dim;
  const child = makeData({ type: new Float32(), data: values });
  const type = new List(new Field('item', new Float32(), true));
  const valueOffsets = Int32Array.from({ length: rows + 1 }, (_, i) => i * dim);
  return { field: new Field(name, type, false), data: makeData({ type, length: rows, valueOffsets, child }) };
}

/** A column built by arrow's own inference from JS values (nested lists of numbers, strings). */
export function inferredColumn<T extends DataType>(name: string, type: T, values: unknown[]): Column {
  const vec: Vector<T> = vectorFromArray(values as never[], type);
  return { field: new Field(name, type, false), data: vec.data[0]! };
}

/** One record batch from columns of equal length, with optional schema metadata. */
export function tableOf(columns: Column[], metadata?: Map<string, string>): Table {
  const schema = new Schema(
    columns.map((c) => c.field),
    metadata,
  );
  const length = columns[0]?.data.length ?? 0;
  const struct = makeData({ type: new Struct(schema.fields), length, nullCount: 0, children: columns.map((c) => c.data) });
  return new Table(schema, [new RecordBatch(schema, struct)]);
}

function writerProperties(metadata?: Map<string, string>): pw.WriterProperties {
  let builder = new pw.WriterPropertiesBuilder()
    .setCompression(pw.Compression.SNAPPY)
    .setCreatedBy('fleet-lerobot')
    .setDictionaryEnabled(true);
  if (metadata !== undefined && metadata.size > 0) builder = builder.setKeyValueMetadata(metadata);
  return builder.build();
}

/** Snappy parquet bytes of `table`, with `metadata` as the file's key-value metadata as well. */
export function parquetBytes(table: Table, metadata?: Map<string, string>): Uint8Array {
  // writeParquet consumes (frees) the wasm table.
  return pw.writeParquet(pw.Table.fromIPCStream(tableToIPC(table, 'stream')), writerProperties(metadata));
}

export function readParquetTable(bytes: Uint8Array): Table {
  const wasm = pw.readParquet(bytes);
  return tableFromIPC(wasm.intoIPCStream());
}

/**
 * Write the tables that `next` yields (one per episode) as one parquet file, streaming: only the
 * current table and the writer's open row group are in memory.
 */
export async function writeParquetStream(path: string, next: () => Promise<Table | null>): Promise<void> {
  const source = new ReadableStream<pw.RecordBatch>({
    async pull(controller) {
      const table = await next();
      if (table === null) {
        controller.close();
        return;
      }
      const wasm = pw.Table.fromIPCStream(tableToIPC(table, 'stream'));
      for (const batch of wasm.recordBatches()) controller.enqueue(batch);
      wasm.free();
    },
  });
  const out = await pw.transformParquetStream(source, writerProperties());
  const sink = Writable.toWeb(createWriteStream(path)) as WritableStream<Uint8Array>;
  await (out as ReadableStream<Uint8Array>).pipeTo(sink);
}
