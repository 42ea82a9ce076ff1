import { parseRos2idl } from '@foxglove/ros2idl-parser';
import { parse as parseRosmsg } from '@foxglove/rosmsg';
import { MessageReader } from '@foxglove/rosmsg2-serialization';
import { base64Bytes } from './base64.js';
import { RecordingError, messageOf } from './errors.js';
import { protobufDecoder } from './protobuf.js';

type MessageDefinition = ConstructorParameters<typeof MessageReader>[0][number];

/**
 * Messages decoded by their channel's `message_encoding` and their schema's `encoding`, with
 * Foxglove's libraries (the switch of Foxglove's MCAP validate example):
 *
 * | message_encoding | schema encoding       | decoded by                                             |
 * | ---------------- | --------------------- | ------------------------------------------------------ |
 * | `cdr`            | `ros2msg`, `ros2idl`  | @foxglove/rosmsg / ros2idl-parser + rosmsg2-serialization |
 * | `protobuf`       | `protobuf`            | the schema's FileDescriptorSet by @bufbuild/protobuf   |
 * | `json`           | `jsonschema` or none  | `JSON.parse`                                           |
 *
 * CDR gives typed arrays for numeric arrays (`float64[]` is a `Float64Array`, `uint8[]` a
 * `Uint8Array`) and times as `{sec, nanosec}`. Protobuf gives plain objects with defaults filled in,
 * 64-bit integers as numbers and `bytes` as `Uint8Array`: protobufjs' `toObject` shape, decoded
 * without compiling code at run time, so the console's CSP allows it too (protobuf.ts).
 */

export interface SchemaInfo {
  name: string;
  encoding: string;
  data: Uint8Array;
}

export type MessageDecoder = (data: Uint8Array) => unknown;

const text = new TextDecoder();

/**
 * The decoder of one channel. Throws `schema_invalid` when the schema does not parse and
 * `unsupported_encoding` when the pair of encodings is not one of the above; the returned function
 * throws `message_invalid` for a message that does not decode. `topic` is for the messages.
 */
export function decoderFor(topic: string, messageEncoding: string, schema: SchemaInfo | undefined): MessageDecoder {
  const what = `topic ${topic} (schema ${schema?.name || '(none)'}, ${messageEncoding}${schema ? `/${schema.encoding}` : ''})`;
  const guard =
    (decode: MessageDecoder): MessageDecoder =>
    (data) => {
      try {
        return decode(data);
      } catch (err) {
        throw new RecordingError('message_invalid', `a message of ${what} does not decode: ${messageOf(err)}`, { cause: err });
      }
    };
  const parsed = <T>(parse: () => T): T => {
    try {
      return parse();
    } catch (err) {
      throw new RecordingError('schema_invalid', `${what}: ${messageOf(err)}`, { cause: err });
    }
  };

  switch (messageEncoding) {
    case 'json':
      if (schema !== undefined && schema.encoding !== 'jsonschema' && schema.encoding !== '') break;
      if (schema !== undefined && JSON_IMAGE_SCHEMAS.has(schema.name)) return guard(parseJsonImage);
      return guard((data) => JSON.parse(text.decode(data)) as unknown);
    case 'cdr': {
      if (schema === undefined || (schema.encoding !== 'ros2msg' && schema.encoding !== 'ros2idl')) break;
      const definitions = parsed(() => {
        const source = text.decode(schema.data);
        // ros2idl-parser builds on an older @foxglove/message-definition; the shapes are the same.
        const defs = schema.encoding === 'ros2msg' ? parseRosmsg(source, { ros2: true }) : (parseRos2idl(source) as unknown as MessageDefinition[]);
        if (defs.length === 0) throw new Error('the definition declares no type');
        return defs;
      });
      const reader = parsed(() => new MessageReader(definitions));
      return guard((data) => reader.readMessage(data));
    }
    case 'protobuf': {
      if (schema === undefined || schema.encoding !== 'protobuf') break;
      return guard(parsed(() => protobufDecoder(schema.name, schema.data)));
    }
    default:
      break;
  }
  throw new RecordingError('unsupported_encoding', `${what}: messages in ${messageEncoding}${schema ? ` with ${schema.encoding} schemas` : ' without a schema'} are not decoded (cdr with ros2msg or ros2idl, protobuf, json are)`);
}

const JSON_IMAGE_SCHEMAS = new Set(['foxglove.RawImage', 'foxglove.CompressedImage']);
const DATA_KEY = new TextEncoder().encode('"data":"');

function indexOf(haystack: Uint8Array, needle: Uint8Array, from = 0): number {
  const first = needle[0]!;
  for (let i = haystack.indexOf(first, from); i >= 0 && i + needle.length <= haystack.length; i = haystack.indexOf(first, i + 1)) {
    let j = 1;
    while (j < needle.length && haystack[i + j] === needle[j]) j++;
    if (j === needle.length) return i;
  }
  return -1;
}

/**
 * A Foxglove image in JSON with its base64 `data` turned into bytes without decoding the pixels as
 * UTF-8 text first: the `"data":"…"` string (hundreds of KiB of base64, which holds no quote or
 * backslash) is cut out as bytes, the rest parsed as JSON. Anything else is parsed whole.
 */
export function parseJsonImage(bytes: Uint8Array): unknown {
  const key = indexOf(bytes, DATA_KEY);
  const start = key + DATA_KEY.length;
  const end = key < 0 ? -1 : bytes.indexOf(0x22, start);
  const whole = () => {
    const m = JSON.parse(text.decode(bytes)) as Record<string, unknown>;
    if (typeof m === 'object' && m !== null && typeof m.data === 'string') m.data = base64Bytes(m.data);
    return m;
  };
  if (key < 0 || end < 0 || bytes.subarray(start, end).includes(0x5c)) return whole();
  const rest = JSON.parse(text.decode(bytes.subarray(0, start)) + text.decode(bytes.subarray(end))) as Record<string, unknown>;
  if (typeof rest !== 'object' || rest === null || rest.data !== '') return whole();
  rest.data = base64Bytes(bytes.subarray(start, end));
  return rest;
}
