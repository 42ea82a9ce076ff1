import { ScalarType, createFileRegistry, fromBinary, type DescField, type DescMessage } from '@bufbuild/protobuf';
import { FileDescriptorSetSchema, isWrapperDesc, type DescriptorProto, type FileDescriptorSet } from '@bufbuild/protobuf/wkt';

/**
 * Protobuf messages decoded by their schema's FileDescriptorSet (MCAP's `protobuf` schema
 * encoding) with @bufbuild/protobuf, which decodes by walking the descriptor and never
 * compiles code at run time (protobufjs does, with `new Function`, which the console's
 * Content-Security-Policy forbids). The result is the plain object protobufjs gave for a type
 * loaded from the same descriptor with `toObject(message, {defaults: true, longs: Number})`, the
 * shape decoders.ts has always returned:
 *
 * - keys are the descriptor's field names (`frame_id`, not `frameId`);
 * - a field that is not on the wire has its default: 0, '', false, an empty `Uint8Array`, the
 *   enum's first value, the proto2 `[default = …]`; `[]` for a repeated field; `null` for a
 *   message field;
 * - a member of a oneof, or a proto3 `optional` field, is there only when it is set;
 * - 64-bit integers are numbers (the nearest double past 2^53, as protobufjs' `longs: Number`);
 *   enums are numbers; `bytes` are `Uint8Array`s (views of the message's bytes);
 * - a map is what protobufjs makes of a descriptor's map (it does not see `map_entry`): a list of
 *   `{key, value}` entries in the order of the wire, every entry kept;
 * - well-known types are plain messages: a `google.protobuf.Timestamp` is `{seconds, nanos}`, an
 *   `Int32Value` `{value}`, a `Struct` `{fields: [{key, value: {number_value: …}}]}`.
 *
 * Key order is protobufjs' too: repeated fields, then singular ones, then the set members of
 * oneofs, each by field number. It differs where protobufjs departs from the protobuf spec, on
 * input no standard encoder writes for one message: a singular message field twice on the wire
 * is merged (protobufjs kept the last), a oneof set twice holds the last case (protobufjs kept
 * both), a proto3 `string` that is not UTF-8 makes the message invalid (protobufjs replaced the
 * bytes), a proto2 closed enum's unknown number reads as the default (protobufjs kept it), a
 * missing proto2 `required` field is no error (protobufjs threw); and a proto2 default is the
 * schema's (protobufjs read `[default = 1.5]` as 1). A Struct's keys come in JSON object order
 * (integer-like keys first), one entry per key. proto2 groups decode as messages (protobufjs
 * failed on them); extension fields are skipped.
 */

export type ProtobufDecoder = (data: Uint8Array) => Record<string, unknown>;

/**
 * The decoder of messages of type `name` (a full name, `foxglove.CompressedImage`) described by
 * the serialized FileDescriptorSet `descriptorSet`. Throws when the set does not parse or does not
 * resolve, or holds no such message type; the decoder throws for bytes that are not such a message.
 */
export function protobufDecoder(name: string, descriptorSet: Uint8Array): ProtobufDecoder {
  const set = fromBinary(FileDescriptorSetSchema, descriptorSet);
  if (set.file.length === 0) throw new Error('the FileDescriptorSet holds no file');
  readMapsAsEntries(set);
  const registry = createFileRegistry(set);
  const desc = registry.getMessage(name.replace(/^\./, ''));
  if (desc === undefined) {
    // The schema's own types before the well-known ones it imports.
    const known = [...registry].filter((t) => t.kind === 'message').map((t) => t.typeName);
    known.sort((x, y) => Number(x.startsWith('google.protobuf.')) - Number(y.startsWith('google.protobuf.')));
    throw new Error(`the FileDescriptorSet has no message type ${name} (it has ${known.length ? known.slice(0, 8).join(', ') + (known.length > 8 ? ', …' : '') : 'none'})`);
  }
  stepsOf(desc);
  return (data) => plainMessage(desc, fromBinary(desc, data, { readUnknownFields: false }));
}

/**
 * Clears `map_entry` on every map entry type but google.protobuf.Struct's, so that a map field is
 * read as protobufjs reads it from a descriptor: a repeated field of `{key, value}` messages
 * (wire order, duplicate keys kept, keys of their own type). @bufbuild/protobuf keeps its own
 * representation of Struct, whose `fields` map it needs as a map.
 */
function readMapsAsEntries(set: FileDescriptorSet): void {
  const visit = (m: DescriptorProto, fullName: string) => {
    for (const nested of m.nestedType) {
      if (nested.options?.mapEntry && fullName !== 'google.protobuf.Struct') nested.options.mapEntry = false;
      visit(nested, `${fullName}.${nested.name}`);
    }
  };
  for (const file of set.file) for (const m of file.messageType) visit(m, file.package ? `${file.package}.${m.name}` : m.name);
}

const LONGS = new Set([ScalarType.INT64, ScalarType.UINT64, ScalarType.SINT64, ScalarType.FIXED64, ScalarType.SFIXED64]);

/**
 * The walk reads @bufbuild/protobuf's messages as they are (its "local" representation: fields by
 * `localName`, a oneof as `{case, value}`, 64-bit integers as bigints or, with `jstype =
 * JS_STRING`, strings), twice as fast as through its reflection API. Two types are stored in
 * another form: a singular wrapper field outside a oneof (`google.protobuf.Int32Value` …) holds
 * the bare value, and a `google.protobuf.Struct` (except Value's `struct_value`) a JSON object.
 */
type Local = Record<string, unknown>;
type Plain = Record<string, unknown>;
type Convert = (local: unknown) => unknown;
/** Writes one field of a message into its plain object, or nothing when protobufjs left it out. */
type Step = (message: Local, out: Plain) => void;

const compiled = new WeakMap<DescMessage, Step[]>();

function plainMessage(desc: DescMessage, message: Local): Plain {
  const out: Plain = {};
  for (const step of stepsOf(desc)) step(message, out);
  return out;
}

/** The message's steps in protobufjs' order of keys: repeated fields, singular ones, then oneof members and proto3 `optional`s (its `partOf` fields, written only when set), each by number. */
function stepsOf(desc: DescMessage): Step[] {
  let steps = compiled.get(desc);
  if (steps) return steps;
  const byNumber = [...desc.fields].sort((a, b) => a.number - b.number);
  const partOf = (f: DescField) => f.oneof !== undefined || f.proto.proto3Optional;
  const repeated = byNumber.filter((f) => (f.fieldKind === 'list' || f.fieldKind === 'map') && !partOf(f));
  const singular = byNumber.filter((f) => f.fieldKind !== 'list' && f.fieldKind !== 'map' && !partOf(f));
  // A field of a message type compiles that type's steps on its first message, so recursive types end.
  steps = [...repeated, ...singular, ...byNumber.filter(partOf)].map(stepOf);
  compiled.set(desc, steps);
  return steps;
}

function stepOf(field: DescField): Step {
  const name = field.name;
  const local = field.localName;
  // A field named like an Object.prototype member (`__proto__`) stays a field of its own.
  const put =
    name === '__proto__'
      ? (out: Plain, value: unknown) => void Object.defineProperty(out, name, { value, enumerable: true, writable: true, configurable: true })
      : (out: Plain, value: unknown) => void (out[name] = value);
  const convert = converterOf(field);
  if (field.oneof) {
    const group = field.oneof.localName;
    return (m, out) => {
      const set = m[group] as { case: string | undefined; value: unknown };
      if (set.case === local) put(out, convert(set.value));
    };
  }
  if (field.proto.proto3Optional) {
    return (m, out) => {
      if (Object.prototype.hasOwnProperty.call(m, local) && m[local] !== undefined) put(out, convert(m[local]));
    };
  }
  return (m, out) => put(out, convert(m[local]));
}

/** Local value of the field → protobufjs' value. */
function converterOf(field: DescField): Convert {
  const long = (field.fieldKind === 'scalar' || (field.fieldKind === 'list' && field.listKind === 'scalar')) && LONGS.has(field.scalar);
  switch (field.fieldKind) {
    case 'scalar':
      return long ? Number : same;
    case 'enum':
      return same;
    case 'message': {
      const message = messageConverter(field.message, isStruct(field));
      if (!field.oneof && isWrapperDesc(field.message)) {
        // The bare value; a wrapper message's toObject is {value}, with its default filled in.
        const inner = field.message.fields[0];
        const value = inner.fieldKind === 'scalar' && LONGS.has(inner.scalar) ? Number : same;
        return (v) => (v === undefined ? null : { value: value(v) });
      }
      return (v) => (v === undefined ? null : message(v));
    }
    case 'list': {
      const item = field.listKind === 'message' ? messageConverter(field.message, isStruct(field)) : long ? Number : same;
      return (v) => (v as unknown[]).map((x) => item(x));
    }
    case 'map': {
      // Only google.protobuf.Struct's `fields` (map<string, Value>) is still a map (readMapsAsEntries).
      const value = field.mapKind === 'message' ? messageConverter(field.message, isStruct(field)) : same;
      return (v) => Object.entries(v as Record<string, unknown>).map(([key, x]) => ({ key, value: value(x) }));
    }
  }
}

const same: Convert = (v) => v;

function messageConverter(desc: DescMessage, json: boolean): Convert {
  return json ? (v) => structFromJson(v as Record<string, unknown>) : (v) => plainMessage(desc, v as Local);
}

/** A Struct stored as a JSON object: every field of that type except google.protobuf.Value's own. */
function isStruct(field: DescField): boolean {
  return field.message?.typeName === 'google.protobuf.Struct' && field.parent.typeName !== 'google.protobuf.Value';
}

/** A Struct's JSON object as protobufjs gave the message: `{fields: [{key, value: {number_value: 1}}]}`. */
function structFromJson(json: Record<string, unknown>): Plain {
  return { fields: Object.entries(json).map(([key, v]) => ({ key, value: valueFromJson(v) })) };
}

function valueFromJson(v: unknown): Plain {
  if (v === null) return { null_value: 0 };
  if (typeof v === 'number') return { number_value: v };
  if (typeof v === 'string') return { string_value: v };
  if (typeof v === 'boolean') return { bool_value: v };
  if (Array.isArray(v)) return { list_value: { values: v.map(valueFromJson) } };
  return { struct_value: structFromJson(v as Record<string, unknown>) };
}
