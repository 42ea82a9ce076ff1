/**
 * The protobuf decoder (protobuf.ts, @bufbuild/protobuf) against the one it replaced: protobufjs
 * loading the same FileDescriptorSet (`protobufFromBinaryDescriptor` of @mcap/support) and
 * `toObject(decode(bytes), {defaults: true, longs: Number})`. Compared as a canonical text (key
 * order, value types, NaN and -0 kept, bytes as bytes), on:
 *
 * - every message of every protobuf channel of MCAPs written by Python's mcap-protobuf-support
 *   with foxglove-schemas-protobuf and a type built from a descriptor (the fixtures the other
 *   tests use: test-fixtures/write_protobuf_mcap.py, test/python/write_judge_recordings.py);
 * - a synthetic proto3 schema, built with @bufbuild/protobuf's descriptor messages, with every
 *   field kind: all scalar types at their limits (64-bit ones past 2^53), bytes, enums, nested
 *   and recursive messages, repeated packed and unpacked, maps, oneofs, proto3 `optional`,
 *   Timestamp, Duration, the wrappers, Struct, Value, ListValue, Any; messages encoded by
 *   protobufjs and by @bufbuild/protobuf, and concatenations (protobuf's merge);
 * - a proto2 schema: explicit defaults, closed enums, required fields.
 */
import { execFileSync } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { create, createFileRegistry, toBinary, type DescMessage } from '@bufbuild/protobuf';
import {
  FieldDescriptorProto_Label as Label,
  FieldDescriptorProto_Type as Type,
  FieldOptions_JSType as JSType,
  FileDescriptorProtoSchema,
  FileDescriptorSetSchema,
  file_google_protobuf_any,
  file_google_protobuf_duration,
  file_google_protobuf_struct,
  file_google_protobuf_timestamp,
  file_google_protobuf_wrappers,
  type FieldDescriptorProto,
  type FileDescriptorProto,
} from '@bufbuild/protobuf/wkt';
import { McapIndexedReader, type TypedMcapRecords } from '@mcap/core';
import { loadDecompressHandlers, protobufFromBinaryDescriptor } from '@mcap/support';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensurePythonEnv } from '../../../test/support/python.js';
import { decoderFor } from './decoders.js';
import { isRecordingError } from './errors.js';
import { protobufDecoder } from './protobuf.js';

const FIXTURES = resolve(dirname(fileURLToPath(import.meta.url)), '..', 'test-fixtures');
const JUDGE_WRITER = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'test', 'python', 'write_judge_recordings.py');

/** The old decoder: what decoders.ts did with protobufjs. */
function oracle(name: string, descriptorSet: Uint8Array): (data: Uint8Array) => unknown {
  const type = protobufFromBinaryDescriptor(descriptorSet).lookupType(name);
  return (data) => type.toObject(type.decode(data), { defaults: true, longs: Number });
}

/** A text of `v` that keeps what toEqual would blur: key order, bytes vs arrays, NaN, -0, ±Infinity, undefined. */
function canonical(v: unknown): string {
  const walk = (x: unknown): unknown => {
    if (x instanceof Uint8Array) return { $bytes: Array.from(x) };
    if (typeof x === 'number') return Object.is(x, -0) || !Number.isFinite(x) ? { $number: Object.is(x, -0) ? '-0' : String(x) } : x;
    if (x === undefined) return { $undefined: true };
    if (typeof x === 'bigint') return { $bigint: String(x) };
    if (Array.isArray(x)) return x.map(walk);
    if (typeof x === 'object' && x !== null) {
      if (Object.getPrototypeOf(x) !== Object.prototype) return { $object: Object.prototype.toString.call(x), keys: Object.keys(x) };
      return Object.fromEntries(Object.entries(x).map(([k, y]) => [k, walk(y)]));
    }
    return x;
  };
  return JSON.stringify(walk(v), null, 1);
}

/** protobufjs encodes into a Node Buffer; MCAP readers hand out plain Uint8Arrays. */
const plain = (b: Uint8Array) => new Uint8Array(b);

function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0));
  let o = 0;
  for (const p of parts) out.set(p, (o += p.byteLength) - p.byteLength);
  return out;
}

// ---------------------------------------------------------------------------------------------
// The MCAPs written by Python.

interface RawChannel {
  topic: string;
  schema: { name: string; encoding: string; data: Uint8Array };
  messages: Uint8Array[];
}

async function protobufChannels(path: string): Promise<RawChannel[]> {
  const bytes = new Uint8Array(await readFile(path));
  const reader = await McapIndexedReader.Initialize({
    readable: { size: async () => BigInt(bytes.byteLength), read: async (offset, size) => bytes.subarray(Number(offset), Number(offset + size)) },
    decompressHandlers: await loadDecompressHandlers(),
  });
  const channels = new Map<number, RawChannel>();
  for (const c of reader.channelsById.values()) {
    const schema = reader.schemasById.get(c.schemaId);
    if (c.messageEncoding === 'protobuf' && schema) channels.set(c.id, { topic: c.topic, schema: { name: schema.name, encoding: schema.encoding, data: schema.data }, messages: [] });
  }
  for await (const m of reader.readMessages() as AsyncIterable<TypedMcapRecords['Message']>) channels.get(m.channelId)?.messages.push(m.data);
  return [...channels.values()].sort((a, b) => a.topic.localeCompare(b.topic));
}

let dir: string;
const recordings: { name: string; channels: RawChannel[] }[] = [];

beforeAll(async () => {
  const python = ensurePythonEnv();
  dir = await mkdtemp(join(tmpdir(), 'protobuf-'));
  execFileSync(python, [join(FIXTURES, 'write_protobuf_mcap.py'), join(dir, 'pb.mcap'), join(dir, 'pb.json')]);
  execFileSync(python, [JUDGE_WRITER, 'protobuf', join(dir, 'judge.mcap'), '1700000000000000000']);
  recordings.push({ name: 'write_protobuf_mcap.py (foxglove schemas, lz4)', channels: await protobufChannels(join(dir, 'pb.mcap')) });
  recordings.push({ name: 'write_judge_recordings.py protobuf (arm.JointPositions from a descriptor, zstd)', channels: await protobufChannels(join(dir, 'judge.mcap')) });
}, 600_000);

afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('MCAPs written by mcap-protobuf-support: every message as protobufjs decoded it', () => {
  it('the channels are the ones the writers write', () => {
    expect(recordings.map((r) => r.channels.map((c) => [c.topic, c.schema.name, c.messages.length > 0]))).toEqual([
      [
        ['/camera/jpeg', 'foxglove.CompressedImage', true],
        ['/camera/raw', 'foxglove.RawImage', true],
        ['/pose', 'foxglove.PoseInFrame', true],
      ],
      [
        ['/arm/joints', 'arm.JointPositions', true],
        ['/camera/front', 'foxglove.CompressedImage', true],
        ['/camera/side', 'foxglove.RawImage', true],
      ],
    ]);
  });

  it('decoderFor (decoders.ts) gives protobufjs\' toObject for each message of each channel', () => {
    let compared = 0;
    for (const r of recordings) {
      for (const c of r.channels) {
        const ours = decoderFor(c.topic, 'protobuf', c.schema);
        const theirs = oracle(c.schema.name, c.schema.data);
        for (const [i, m] of c.messages.entries()) {
          expect(canonical(ours(m)), `${r.name} ${c.topic} message ${i}`).toBe(canonical(theirs(m)));
          compared++;
        }
      }
    }
    expect(compared).toBeGreaterThan(200);
  });

  it('the shapes the rest of the project reads: snake_case names, Timestamp as {seconds, nanos}, bytes as Uint8Array', () => {
    const jpeg = recordings[0]!.channels.find((c) => c.topic === '/camera/jpeg')!;
    const m = decoderFor(jpeg.topic, 'protobuf', jpeg.schema)(jpeg.messages[0]!) as Record<string, unknown>;
    expect(Object.keys(m)).toEqual(['timestamp', 'data', 'format', 'frame_id']); // by field number
    expect(m.timestamp).toEqual({ seconds: 1_699_999_999, nanos: 997_000_000 });
    expect(m.frame_id).toBe('cam');
    expect(m.format).toBe('jpeg');
    expect(m.data).toBeInstanceOf(Uint8Array);
    expect([...(m.data as Uint8Array).subarray(0, 2)]).toEqual([0xff, 0xd8]);
    const joints = recordings[1]!.channels.find((c) => c.topic === '/arm/joints')!;
    const j = decoderFor(joints.topic, 'protobuf', joints.schema)(joints.messages[0]!) as Record<string, unknown>;
    expect(Object.keys(j)).toEqual(['name', 'position', 'velocity', 'timestamp']);
    expect(j.name).toEqual(['wrist', 'shoulder', 'elbow']);
    expect(j.timestamp).toEqual({ seconds: 1_700_000_000, nanos: 0 });
  });
});

// ---------------------------------------------------------------------------------------------
// Synthetic schemas.

const { OPTIONAL, REPEATED, REQUIRED } = Label;
type FieldInit = Partial<Omit<FieldDescriptorProto, '$typeName' | 'options'>> & { options?: { packed?: boolean; jstype?: JSType } };
const f = (name: string, number: number, type: Type, more: FieldInit = {}): FieldInit => ({ name, number, type, label: OPTIONAL, ...more });
const msg = (name: string, typeName: string, number: number, more: FieldInit = {}) => f(name, number, Type.MESSAGE, { typeName, ...more });
const entry = (name: string, key: FieldInit, value: FieldInit) => ({ name, options: { mapEntry: true }, field: [{ ...key, name: 'key', number: 1 }, { ...value, name: 'value', number: 2 }] });

const SCALARS: [string, Type][] = [
  ['a_double', Type.DOUBLE],
  ['a_float', Type.FLOAT],
  ['an_int32', Type.INT32],
  ['an_int64', Type.INT64],
  ['a_uint32', Type.UINT32],
  ['a_uint64', Type.UINT64],
  ['a_sint32', Type.SINT32],
  ['a_sint64', Type.SINT64],
  ['a_fixed32', Type.FIXED32],
  ['a_fixed64', Type.FIXED64],
  ['an_sfixed32', Type.SFIXED32],
  ['an_sfixed64', Type.SFIXED64],
  ['a_bool', Type.BOOL],
  ['a_string', Type.STRING],
  ['some_bytes', Type.BYTES],
];

const PROTO3: FileDescriptorProto = create(FileDescriptorProtoSchema, {
  name: 'synthetic/all.proto',
  package: 'synthetic',
  syntax: 'proto3',
  dependency: ['google/protobuf/timestamp.proto', 'google/protobuf/duration.proto', 'google/protobuf/wrappers.proto', 'google/protobuf/struct.proto', 'google/protobuf/any.proto'],
  enumType: [{ name: 'Color', value: [{ name: 'COLOR_UNSPECIFIED', number: 0 }, { name: 'RED', number: 1 }, { name: 'BLUE', number: 2 }, { name: 'BELOW', number: -5 }] }],
  messageType: [
    { name: 'Scalars', field: SCALARS.map(([name, type], i) => f(name, i + 1, type)) },
    {
      name: 'All',
      field: [
        msg('scalars', '.synthetic.Scalars', 1),
        f('color', 2, Type.ENUM, { typeName: '.synthetic.Color' }),
        msg('inner', '.synthetic.All.Inner', 3),
        f('packed_doubles', 4, Type.DOUBLE, { label: REPEATED }),
        f('unpacked_ints', 5, Type.INT32, { label: REPEATED, options: { packed: false } }),
        f('longs', 6, Type.INT64, { label: REPEATED }),
        f('unsigned_longs', 7, Type.FIXED64, { label: REPEATED, options: { packed: false } }),
        f('names', 8, Type.STRING, { label: REPEATED }),
        f('blobs', 9, Type.BYTES, { label: REPEATED }),
        f('colors', 10, Type.ENUM, { label: REPEATED, typeName: '.synthetic.Color' }),
        msg('children', '.synthetic.All.Inner', 11, { label: REPEATED }),
        msg('counts', '.synthetic.All.CountsEntry', 12, { label: REPEATED }),
        msg('by_id', '.synthetic.All.ByIdEntry', 13, { label: REPEATED }),
        msg('flags', '.synthetic.All.FlagsEntry', 14, { label: REPEATED }),
        f('text', 15, Type.STRING, { oneofIndex: 0 }),
        f('number', 16, Type.SINT64, { oneofIndex: 0 }),
        msg('choice_inner', '.synthetic.All.Inner', 17, { oneofIndex: 0 }),
        msg('choice_wrapped', '.google.protobuf.Int32Value', 18, { oneofIndex: 0 }),
        msg('stamp', '.google.protobuf.Timestamp', 19),
        msg('span', '.google.protobuf.Duration', 20),
        msg('maybe_int', '.google.protobuf.Int32Value', 21),
        msg('maybe_u64', '.google.protobuf.UInt64Value', 22),
        msg('maybe_text', '.google.protobuf.StringValue', 23),
        msg('maybe_bytes', '.google.protobuf.BytesValue', 24),
        msg('extra', '.google.protobuf.Struct', 25),
        msg('any', '.google.protobuf.Any', 26),
        f('opt', 27, Type.INT32, { oneofIndex: 1, proto3Optional: true }),
        msg('stamps', '.google.protobuf.Timestamp', 28, { label: REPEATED }),
        f('as_string', 29, Type.INT64, { options: { jstype: JSType.JS_STRING } }),
        msg('value', '.google.protobuf.Value', 30),
        msg('list', '.google.protobuf.ListValue', 31),
        msg('structs', '.google.protobuf.Struct', 32, { label: REPEATED }),
        msg('wrapped_list', '.google.protobuf.DoubleValue', 33, { label: REPEATED }),
        msg('struct_by_name', '.synthetic.All.StructByNameEntry', 34, { label: REPEATED }),
        f('opt_color', 35, Type.ENUM, { typeName: '.synthetic.Color', oneofIndex: 2, proto3Optional: true }),
        msg('choice_struct', '.google.protobuf.Struct', 36, { oneofIndex: 0 }),
        msg('opt_inner', '.synthetic.All.Inner', 37, { oneofIndex: 3, proto3Optional: true }),
        msg('opt_wrapped', '.google.protobuf.Int64Value', 38, { oneofIndex: 4, proto3Optional: true }),
      ],
      oneofDecl: [{ name: 'choice' }, { name: '_opt' }, { name: '_opt_color' }, { name: '_opt_inner' }, { name: '_opt_wrapped' }],
      nestedType: [
        { name: 'Inner', field: [f('x', 1, Type.DOUBLE), msg('children', '.synthetic.All.Inner', 2, { label: REPEATED }), f('label', 3, Type.STRING)] },
        entry('CountsEntry', f('', 0, Type.STRING), f('', 0, Type.INT32)),
        entry('ByIdEntry', f('', 0, Type.INT64), msg('', '.synthetic.All.Inner', 0)),
        entry('FlagsEntry', f('', 0, Type.BOOL), f('', 0, Type.ENUM, { typeName: '.synthetic.Color' })),
        entry('StructByNameEntry', f('', 0, Type.STRING), msg('', '.google.protobuf.Struct', 0)),
      ],
    },
  ],
});

const PROTO2: FileDescriptorProto = create(FileDescriptorProtoSchema, {
  name: 'synthetic/legacy.proto',
  package: 'legacy',
  syntax: 'proto2',
  enumType: [{ name: 'Level', value: [{ name: 'LOW', number: 3 }, { name: 'HIGH', number: 9 }] }],
  messageType: [
    {
      name: 'Legacy',
      field: [
        f('count', 1, Type.INT32, { defaultValue: '7' }),
        f('label', 2, Type.STRING, { defaultValue: 'hello' }),
        f('level', 3, Type.ENUM, { typeName: '.legacy.Level', defaultValue: 'HIGH' }),
        f('plain_level', 4, Type.ENUM, { typeName: '.legacy.Level' }),
        f('big', 5, Type.UINT64, { defaultValue: '12345678901' }),
        f('needed', 6, Type.SINT32, { label: REQUIRED }),
        f('unpacked', 7, Type.INT32, { label: REPEATED }),
        f('packed', 8, Type.INT32, { label: REPEATED, options: { packed: true } }),
        f('flag', 9, Type.BOOL, { defaultValue: 'true' }),
        f('ratio', 10, Type.DOUBLE, { defaultValue: '1.5' }),
        f('plain', 11, Type.DOUBLE),
      ],
    },
  ],
});

const WKT = [file_google_protobuf_timestamp, file_google_protobuf_duration, file_google_protobuf_wrappers, file_google_protobuf_struct, file_google_protobuf_any].map((file) => file.proto);
const SET = toBinary(FileDescriptorSetSchema, create(FileDescriptorSetSchema, { file: [...WKT, PROTO3, PROTO2] }));
/** The same schemas as @bufbuild/protobuf's registry has them (with maps): an encoder of our own messages. */
const registry = createFileRegistry(create(FileDescriptorSetSchema, { file: [...WKT, PROTO3, PROTO2] }));
const desc = (name: string): DescMessage => registry.getMessage(name)!;
const protobufjsType = (name: string) => protobufFromBinaryDescriptor(SET).lookupType(name);

const I64_MAX = '9223372036854775807';
const I64_MIN = '-9223372036854775808';
const U64_MAX = '18446744073709551615';
const TWO_53_PLUS_1 = '9007199254740993';

/** Every scalar at an interesting value, as protobufjs' fromObject takes it (64-bit ones as decimal strings: exact). */
const SCALARS_FULL = {
  a_double: -0,
  a_float: 0.1,
  an_int32: -2147483648,
  an_int64: I64_MAX,
  a_uint32: 4294967295,
  a_uint64: U64_MAX,
  a_sint32: -1,
  a_sint64: I64_MIN,
  a_fixed32: 4294967295,
  a_fixed64: TWO_53_PLUS_1,
  an_sfixed32: -2147483648,
  an_sfixed64: '-9007199254740993',
  a_bool: true,
  a_string: 'grüße, 世界 🤖',
  some_bytes: Uint8Array.from({ length: 256 }, (_, i) => i),
};

/** A message with every field of All set, encoded by protobufjs from its own object form. */
function fullByProtobufjs(): Uint8Array {
  const t = protobufjsType('synthetic.All');
  const inner = (x: number, label: string, children: unknown[] = []) => ({ x, label, children });
  return plain(
    t.encode(
      t.fromObject({
        scalars: SCALARS_FULL,
        color: 2,
        inner: inner(1.25, 'root', [inner(2, 'a', [inner(3, 'deep')]), inner(Number.NaN, 'nan')]),
        packed_doubles: [0, -1.5, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, 5e-324],
        unpacked_ints: [1, -1, 2147483647],
        longs: [I64_MAX, I64_MIN, TWO_53_PLUS_1, '-1', '0'],
        unsigned_longs: [U64_MAX, '1'],
        names: ['', 'b', 'ü'],
        blobs: [new Uint8Array(0), Uint8Array.of(1, 2, 3)],
        colors: [0, 1, -5, 77],
        children: [inner(9, 'c0'), inner(0, '')],
        // Wire order on purpose: 10 before 2, a key twice (JS objects would sort and merge them).
        counts: [{ key: '10', value: 1 }, { key: '2', value: 2 }, { key: 'b', value: 3 }, { key: 'b', value: 4 }],
        by_id: [{ key: I64_MAX, value: inner(1, 'max') }, { key: '-3', value: {} }, { key: '5' }],
        flags: [{ key: true, value: 1 }, { key: false, value: 2 }],
        text: 'the text case',
        stamp: { seconds: 1_700_000_000, nanos: 123_456_789 },
        span: { seconds: '-5', nanos: -500 },
        maybe_int: { value: 0 },
        maybe_u64: { value: U64_MAX },
        maybe_text: { value: 'wrapped' },
        maybe_bytes: { value: Uint8Array.of(9, 8) },
        extra: { fields: [{ key: 'n', value: { number_value: 1.5 } }, { key: 's', value: { string_value: 'x' } }, { key: 'z', value: { null_value: 0 } }, { key: 'l', value: { list_value: { values: [{ bool_value: true }, { struct_value: { fields: [{ key: 'k', value: { number_value: 2 } }] } }] } } }] },
        any: { type_url: 'type.googleapis.com/google.protobuf.Duration', value: Uint8Array.of(8, 1) },
        opt: 0,
        stamps: [{ seconds: 1, nanos: 2 }, {}],
        as_string: I64_MIN,
        value: { list_value: { values: [{ number_value: 3 }, { string_value: 'v' }] } },
        list: { values: [{ null_value: 0 }, { bool_value: false }] },
        structs: [{ fields: [{ key: 'a', value: { number_value: 1 } }] }, {}],
        wrapped_list: [{ value: 1.5 }, {}],
        struct_by_name: [{ key: 'one', value: { fields: [{ key: 'q', value: { bool_value: true } }] } }],
        opt_color: 0,
      }),
    ).finish(),
  );
}

/** Messages of All encoded by @bufbuild/protobuf, with real maps, unwrapped wrappers and Struct as JSON. */
function byBufbuild(): Uint8Array[] {
  const d = desc('synthetic.All');
  const enc = (init: Record<string, unknown>) => toBinary(d, create(d, init as never));
  return [
    enc({}),
    enc({ choice: { case: 'number', value: -(2n ** 63n) } }),
    enc({ choice: { case: 'choiceInner', value: { x: 4, label: 'in the oneof' } } }),
    enc({ choice: { case: 'choiceWrapped', value: { value: -7 } } }),
    enc({ counts: { z: 1, a: 2 }, byId: { '7': { x: 7 } }, flags: { true: 2 }, names: ['more'], optColor: 1 }),
    enc({ maybeInt: 42, maybeText: '', extra: { k: [1, 'two', null, { deep: true }] }, value: { kind: { case: 'structValue', value: { fields: {} } } } }),
    enc({ choice: { case: 'choiceStruct', value: { a: [1, { b: null }], c: 'd' } }, optInner: { x: 1 }, optWrapped: -(2n ** 62n) }),
    enc({ optInner: {}, optWrapped: 0n }),
    enc({ scalars: { aDouble: Number.NaN, aFloat: -3.4028234663852886e38, anInt64: 2n ** 53n, aUint64: 2n ** 64n - 1n, aFixed64: 2n ** 53n + 1n, aString: '', someBytes: new Uint8Array(0) }, asString: '-9007199254740993' }),
  ];
}

describe('a synthetic proto3 schema with every field kind: protobufjs\' toObject, exactly', () => {
  const ours = protobufDecoder('synthetic.All', SET);
  const theirs = oracle('synthetic.All', SET);
  const full = fullByProtobufjs();
  const cases: [string, Uint8Array][] = [
    ['every field set (encoded by protobufjs)', full],
    ...byBufbuild().map((b, i): [string, Uint8Array] => [`encoded by @bufbuild/protobuf #${i}`, b]),
    // protobuf's merge: repeated fields and map entries appended, a later scalar wins (no singular
    // message field or oneof twice: see the tests of where protobufjs departed from the spec).
    ['messages concatenated', concat(full, byBufbuild()[4]!, byBufbuild()[0]!)],
    ['nothing (all defaults)', new Uint8Array(0)],
  ];
  for (const [name, bytes] of cases) {
    it(name, () => {
      expect(canonical(ours(bytes))).toBe(canonical(theirs(bytes)));
    });
  }

  it('defaults: 0, "", false, empty bytes, the first enum value, [] for repeated and maps, null for messages; oneofs and proto3 optional absent', () => {
    const m = ours(new Uint8Array(0));
    expect(m.scalars).toBeNull();
    expect(m.color).toBe(0);
    expect(m.counts).toEqual([]);
    expect(m.stamp).toBeNull();
    expect(m.maybe_int).toBeNull();
    expect(m.as_string).toBe(0);
    for (const absent of ['text', 'number', 'choice_inner', 'choice_wrapped', 'choice_struct', 'opt', 'opt_color', 'opt_inner', 'opt_wrapped']) expect(m).not.toHaveProperty(absent);
    const s = ours(toBinary(desc('synthetic.All'), create(desc('synthetic.All'), { scalars: {} }))).scalars as Record<string, unknown>;
    expect(s).toEqual({ a_double: 0, a_float: 0, an_int32: 0, an_int64: 0, a_uint32: 0, a_uint64: 0, a_sint32: 0, a_sint64: 0, a_fixed32: 0, a_fixed64: 0, an_sfixed32: 0, an_sfixed64: 0, a_bool: false, a_string: '', some_bytes: new Uint8Array(0) });
    expect(s.some_bytes).toBeInstanceOf(Uint8Array);
  });

  it('64-bit integers are numbers: exact up to 2^53, the nearest double past it (as protobufjs gave)', () => {
    const m = ours(full);
    const s = m.scalars as Record<string, number>;
    expect(s.an_int64).toBe(2 ** 63); // 2^63 - 1 has no double: the nearest is 2^63
    expect(s.a_uint64).toBe(2 ** 64);
    expect(s.a_sint64).toBe(-(2 ** 63));
    expect(s.a_fixed64).toBe(2 ** 53); // 2^53 + 1 has no double: 2^53
    expect(s.an_sfixed64).toBe(-(2 ** 53));
    expect(m.longs).toEqual([2 ** 63, -(2 ** 63), 2 ** 53, -1, 0]);
    expect(m.as_string).toBe(-(2 ** 63));
    expect(m.maybe_u64).toEqual({ value: 2 ** 64 });
    for (const x of [...Object.values(s), ...(m.longs as unknown[])]) expect(typeof x === 'number' || typeof x === 'string' || typeof x === 'boolean' || x instanceof Uint8Array).toBe(true);
  });

  it('maps are lists of {key, value} in wire order, every entry kept, keys of their type', () => {
    const m = ours(full);
    expect(m.counts).toEqual([{ key: '10', value: 1 }, { key: '2', value: 2 }, { key: 'b', value: 3 }, { key: 'b', value: 4 }]);
    expect(m.flags).toEqual([{ key: true, value: 1 }, { key: false, value: 2 }]);
    expect((m.by_id as { key: unknown }[]).map((e) => e.key)).toEqual([2 ** 63, -3, 5]);
    expect((m.by_id as { value: unknown }[])[2]!.value).toBeNull();
  });

  it('well-known types are plain messages: Timestamp {seconds, nanos}, wrappers {value}, Struct {fields: [{key, value}]}, Any {type_url, value}', () => {
    const m = ours(full);
    expect(m.stamp).toEqual({ seconds: 1_700_000_000, nanos: 123_456_789 });
    expect(m.span).toEqual({ seconds: -5, nanos: -500 });
    expect(m.maybe_int).toEqual({ value: 0 });
    expect(m.maybe_text).toEqual({ value: 'wrapped' });
    expect((m.extra as { fields: unknown[] }).fields[0]).toEqual({ key: 'n', value: { number_value: 1.5 } });
    expect(m.any).toEqual({ type_url: 'type.googleapis.com/google.protobuf.Duration', value: Uint8Array.of(8, 1) });
    expect(m.opt).toBe(0);
    expect(m.text).toBe('the text case');
  });
});

describe('where protobufjs departed from the protobuf spec', () => {
  it('a singular message field twice on the wire is merged (protobufjs kept the last one only)', () => {
    const d = desc('synthetic.All');
    const first = toBinary(d, create(d, { stamp: { seconds: 5n, nanos: 7 }, inner: { x: 1, label: 'kept' } }));
    const second = toBinary(d, create(d, { stamp: { seconds: 6n }, inner: { x: 2 } }));
    const m = protobufDecoder('synthetic.All', SET)(concat(first, second));
    expect([m.stamp, m.inner]).toEqual([{ seconds: 6, nanos: 7 }, { x: 2, children: [], label: 'kept' }]);
    const old = oracle('synthetic.All', SET)(concat(first, second)) as Record<string, unknown>;
    expect([old.stamp, old.inner]).toEqual([{ seconds: 6, nanos: 0 }, { children: [], x: 2, label: '' }]);
  });

  it('a oneof set twice on the wire holds the last case only (protobufjs kept every case it saw)', () => {
    const bytes = concat(fullByProtobufjs(), byBufbuild()[1]!);
    const m = protobufDecoder('synthetic.All', SET)(bytes);
    expect([m.text, m.number]).toEqual([undefined, -(2 ** 63)]);
    expect(m).not.toHaveProperty('text');
    const old = oracle('synthetic.All', SET)(bytes) as Record<string, unknown>;
    expect([old.text, old.number]).toEqual(['the text case', -(2 ** 63)]);
  });
});

describe('a proto2 schema', () => {
  const ours = protobufDecoder('legacy.Legacy', SET);
  const theirs = oracle('legacy.Legacy', SET);
  const t = protobufjsType('legacy.Legacy');
  const set = plain(t.encode(t.fromObject({ count: 0, label: '', level: 3, plain_level: 9, big: '1', needed: -3, unpacked: [1, 2], packed: [3, 4], flag: false, ratio: 2, plain: 0.5 })).finish());

  it('set fields, and required ones, as protobufjs', () => {
    expect(canonical(ours(set))).toBe(canonical(theirs(set)));
  });

  it('unset fields take the schema\'s [default = …] (protobufjs too, but for a fractional one, which it cut to an integer)', () => {
    const m = ours(Uint8Array.of(0x30, 0x05)); // needed = -3 (zigzag 5)
    expect(m).toEqual({ unpacked: [], packed: [], count: 7, label: 'hello', level: 9, plain_level: 3, big: 12345678901, needed: -3, flag: true, ratio: 1.5, plain: 0 });
    const old = theirs(Uint8Array.of(0x30, 0x05)) as Record<string, unknown>;
    expect(old.ratio).toBe(1);
    expect(canonical({ ...m, ratio: 1 })).toBe(canonical(old));
  });

  it('a closed enum\'s unknown number reads as the field\'s default (the protobuf spec; protobufjs kept the number)', () => {
    const bytes = Uint8Array.of(0x18, 0x05, 0x30, 0x00); // level = 5 (not a Level), needed = 0
    expect(ours(bytes).level).toBe(9);
    expect((theirs(bytes) as Record<string, unknown>).level).toBe(5);
  });
});

describe('errors', () => {
  const schema = (name: string, data: Uint8Array) => ({ name, encoding: 'protobuf', data });
  const code = (fn: () => unknown) => {
    try {
      fn();
    } catch (err) {
      // The message starts with the code too.
      return isRecordingError(err) ? err.message : `not a RecordingError: ${String(err)}`;
    }
    return 'no error';
  };

  it('a schema that is not a FileDescriptorSet, an empty one, one whose dependency is missing, a name it lacks: schema_invalid', () => {
    expect(code(() => decoderFor('/p', 'protobuf', schema('synthetic.All', new TextEncoder().encode('not a descriptor'))))).toMatch(/^schema_invalid: topic \/p/);
    expect(code(() => decoderFor('/p', 'protobuf', schema('synthetic.All', new Uint8Array(0))))).toMatch(/^schema_invalid: .*holds no file/);
    const lonely = toBinary(FileDescriptorSetSchema, create(FileDescriptorSetSchema, { file: [PROTO3] }));
    expect(code(() => decoderFor('/p', 'protobuf', schema('synthetic.All', lonely)))).toMatch(/^schema_invalid: .*google\/protobuf\/timestamp\.proto/);
    expect(code(() => decoderFor('/p', 'protobuf', schema('synthetic.Nope', SET)))).toMatch(/^schema_invalid: .*no message type synthetic\.Nope \(it has .*synthetic\.All/);
    // An enum is not a message type.
    expect(code(() => decoderFor('/p', 'protobuf', schema('synthetic.Color', SET)))).toMatch(/^schema_invalid: .*no message type synthetic\.Color/);
  });

  it('bytes that are not such a message: message_invalid', () => {
    const decode = decoderFor('/p', 'protobuf', schema('synthetic.All', SET));
    const full = fullByProtobufjs();
    expect(code(() => decode(full.subarray(0, full.byteLength - 1)))).toMatch(/^message_invalid: a message of topic \/p/);
    expect(code(() => decode(Uint8Array.of(0x0f)))).toMatch(/^message_invalid: /); // wire type 7
    expect(code(() => decode(Uint8Array.of(0x0a, 0x7f, 0x01)))).toMatch(/^message_invalid: /); // a length past the end
    // A proto3 string that is not UTF-8 (protobufjs replaced the bytes; the protobuf spec rejects it).
    expect(code(() => decode(Uint8Array.of(0x7a, 0x01, 0xff)))).toMatch(/^message_invalid: /);
  });
});
