import {
  COMPRESSED_IMAGE_SCHEMAS,
  RAW_IMAGE_ENCODINGS,
  RAW_IMAGE_SCHEMAS,
  cameraImage,
  compressedFormat,
  timeNs,
} from '@fleet/recordings';
import sharp from 'sharp';

/**
 * What the first message of a topic tells `inspect-recording`: an image's kind, size and encoding
 * (a JPEG or PNG by its own header, through sharp), or the numeric fields a mapping can name.
 */

/** Joint names and other string arrays are listed up to this many entries. */
const MAX_LISTED_VALUES = 64;
/** Numeric fields listed per topic (a deep message lists its first ones). */
const MAX_FIELDS = 32;

export interface InspectedField {
  /** A field path as the mapping's `fields` takes it (`position`, `twist.linear.x`). */
  path: string;
  /** `float64[]` (a typed array's element type), `number[]`, `string[]`, `number`. */
  type: string;
  length: number;
  /** A string array's entries (joint names). */
  values?: string[];
}

export interface InspectedImage {
  kind: 'raw' | 'compressed';
  /** Raw: the pixel encoding (`rgb8`, `16UC1`, …); compressed: the message's `format` string. */
  encoding: string;
  /** Compressed: what the bytes are (`jpeg`, `png`), from the image's own header. */
  format?: string;
  width?: number;
  height?: number;
  /** Whether the export reads frames of this kind. */
  supported: boolean;
  problem?: string;
}
/** One topic as inspect-recording describes it. */
export interface InspectedTopic {
  topic: string;
  type: string;
  message_encoding: string;
  schema_encoding: string;
  message_count: number;
  /** (count - 1) over the span between the first and last log time; null under two messages. */
  rate_hz: number | null;
  first_ns: string | null;
  last_ns: string | null;
  /** Which stamp the messages carry (`header.stamp`, or a Foxglove schema's `timestamp`), null without one. */
  stamp: string | null;
  /** Median of stamp - log time over the first messages, ms (negative: stamped before it was logged). */
  stamp_offset_ms: number | null;
  fields: InspectedField[];
  image: InspectedImage | null;
  /** The feature the proposed mapping reads it as. */
  mapped_as: string | null;
  /** Why it is not in the mapping, or anything else worth knowing. */
  note: string | null;
  /** A schema that does not parse, a message that does not decode. */
  error: { code: string; message: string } | null;
}

/** A schema-less (JSON) message with the fields of a raw or compressed image. */
export function looksLikeImage(data: unknown): boolean {
  if (typeof data !== 'object' || data === null) return false;
  const m = data as Record<string, unknown>;
  return 'data' in m && (('format' in m && !('encoding' in m)) || ('encoding' in m && 'width' in m && 'height' in m));
}

export async function describeImage(schemaName: string, data: unknown, where: string): Promise<InspectedImage> {
  const m = data as Record<string, unknown>;
  const compressed = (COMPRESSED_IMAGE_SCHEMAS as readonly string[]).includes(schemaName) || (!(RAW_IMAGE_SCHEMAS as readonly string[]).includes(schemaName) && 'format' in m && !('encoding' in m));
  if (!compressed) {
    const encoding = typeof m.encoding === 'string' ? m.encoding : String(m.encoding);
    const supported = Object.hasOwn(RAW_IMAGE_ENCODINGS, encoding);
    return {
      kind: 'raw',
      encoding,
      ...(typeof m.width === 'number' ? { width: m.width } : {}),
      ...(typeof m.height === 'number' ? { height: m.height } : {}),
      supported,
      ...(supported ? {} : { problem: `${encoding} frames are not read (${Object.keys(RAW_IMAGE_ENCODINGS).join(', ')} are)` }),
    };
  }
  const encoding = typeof m.format === 'string' ? m.format : String(m.format);
  if (compressedFormat(m.format) === undefined) return { kind: 'compressed', encoding, supported: false, problem: `format ${JSON.stringify(encoding)} is not read (jpeg and png are)` };
  try {
    const im = cameraImage(schemaName, data, where);
    if (im.kind !== 'compressed') throw new Error('not a compressed image');
    // The image's own header says its size and what it really is (a `format` string can lie).
    const meta = await sharp(im.data).metadata();
    if (!meta.width || !meta.height) throw new Error('no size in its header');
    return { kind: 'compressed', encoding, format: meta.format, width: meta.width, height: meta.height, supported: meta.format === 'jpeg' || meta.format === 'png' };
  } catch (err) {
    return { kind: 'compressed', encoding, supported: false, problem: `the first frame does not decode: ${messageOf(err).replace(/^[a-z_]+: /, '')}` };
  }
}

const TYPED_NAMES: [new (...a: never[]) => ArrayBufferView, string][] = [
  [Float64Array, 'float64[]'],
  [Float32Array, 'float32[]'],
  [Int8Array, 'int8[]'],
  [Uint8Array, 'uint8[]'],
  [Int16Array, 'int16[]'],
  [Uint16Array, 'uint16[]'],
  [Int32Array, 'int32[]'],
  [Uint32Array, 'uint32[]'],
  [BigInt64Array, 'int64[]'],
  [BigUint64Array, 'uint64[]'],
];

/**
 * The numeric fields of a decoded message (and string arrays such as joint names), by the dotted
 * path a mapping's `fields` takes; `header` and arrays of messages are left out.
 */
export function numericFields(data: unknown): InspectedField[] {
  const out: InspectedField[] = [];
  const walk = (v: unknown, path: string, depth: number) => {
    if (out.length >= MAX_FIELDS) return;
    if (typeof v === 'number' || typeof v === 'bigint') {
      if (path !== '') out.push({ path, type: 'number', length: 1 });
      return;
    }
    if (ArrayBuffer.isView(v)) {
      const named = TYPED_NAMES.find(([ctor]) => v instanceof ctor);
      if (named !== undefined) out.push({ path, type: named[1], length: (v as unknown as { length: number }).length });
      return;
    }
    if (Array.isArray(v)) {
      if (v.every((x) => typeof x === 'number' || typeof x === 'bigint')) out.push({ path, type: 'number[]', length: v.length });
      else if (v.every((x) => typeof x === 'string')) out.push({ path, type: 'string[]', length: v.length, values: v.slice(0, MAX_LISTED_VALUES) });
      return;
    }
    if (typeof v === 'object' && v !== null && depth < 5) {
      for (const [k, x] of Object.entries(v)) {
        // Stamps are reported apart (header.stamp, a Foxglove schema's timestamp), not as fields.
        if (depth === 0 && (k === 'header' || (k === 'timestamp' && timeNs(x) !== undefined))) continue;
        if (!/^[A-Za-z0-9_]+$/.test(k)) continue;
        walk(x, path === '' ? k : `${path}.${k}`, depth + 1);
      }
    }
  };
  walk(data, '', 0);
  return out;
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
