import { base64Bytes } from './base64.js';
import { RecordingError } from './errors.js';

/**
 * Camera messages to one of two shapes, whatever the schema:
 *
 * - `sensor_msgs/msg/Image` and `foxglove.RawImage`: `{kind: 'raw', width, height, rgb}`, packed
 *   RGB (3 bytes a pixel, row padding `step` dropped) from `rgb8`, `bgr8`, `rgba8`, `bgra8` (alpha
 *   dropped) and `mono8` (grey repeated). 16-bit and float encodings (`mono16`, `16UC1`, `32FC1`,
 *   `rgb16`, …: depth cameras) and Bayer or YUV encodings are `bad_image` "unsupported encoding":
 *   a documented limit, since an 8-bit video cannot hold them without a choice of scale.
 * - `sensor_msgs/msg/CompressedImage` and `foxglove.CompressedImage`: `{kind: 'compressed',
 *   format, data}` for JPEG and PNG (image_transport's `format` strings such as
 *   `rgb8; jpeg compressed bgr8` included). Turning those into pixels needs an image decoder, which
 *   is the caller's (the exporter's is libjpeg-turbo / libpng through sharp; a browser has its own).
 *
 * Messages come decoded (decoders.ts): `data` is a `Uint8Array` (CDR, protobuf, and JSON of the
 * foxglove image schemas) or a base64 string (other JSON).
 */

export type CameraImage =
  | { kind: 'raw'; width: number; height: number; rgb: Uint8Array }
  | { kind: 'compressed'; format: 'jpeg' | 'png'; data: Uint8Array };

export const RAW_IMAGE_SCHEMAS = ['sensor_msgs/msg/Image', 'foxglove.RawImage'] as const;
export const COMPRESSED_IMAGE_SCHEMAS = ['sensor_msgs/msg/CompressedImage', 'foxglove.CompressedImage'] as const;
/** Every schema `cameraImage` reads. */
export const IMAGE_SCHEMAS: readonly string[] = [...RAW_IMAGE_SCHEMAS, ...COMPRESSED_IMAGE_SCHEMAS];

/** Pixel encodings read, with their bytes per pixel. */
export const RAW_IMAGE_ENCODINGS: Readonly<Record<string, number>> = { rgb8: 3, bgr8: 3, rgba8: 4, bgra8: 4, mono8: 1 };

export function isImageSchema(schemaName: string): boolean {
  return IMAGE_SCHEMAS.includes(schemaName);
}

function bytesOf(v: unknown, where: string): Uint8Array {
  if (v instanceof Uint8Array) return v;
  if (typeof v === 'string') return base64Bytes(v);
  if (Array.isArray(v) && v.every((x) => typeof x === 'number')) return Uint8Array.from(v);
  throw new RecordingError('bad_image', `${where}: data is not bytes`);
}

/**
 * The image in `msg` (a decoded message of `schemaName`). A schema without `sensor_msgs` or
 * `foxglove` naming is read by its fields: `format` makes it compressed, `encoding` raw.
 * `where` names topic and time in errors.
 */
export function cameraImage(schemaName: string, msg: unknown, where: string): CameraImage {
  if (typeof msg !== 'object' || msg === null) throw new RecordingError('bad_image', `${where}: not an object`);
  const m = msg as Record<string, unknown>;
  const compressed = (COMPRESSED_IMAGE_SCHEMAS as readonly string[]).includes(schemaName) || (!(RAW_IMAGE_SCHEMAS as readonly string[]).includes(schemaName) && 'format' in m && !('encoding' in m));
  return compressed ? compressedImage(m, where) : rawImage(m, where);
}

/** image_transport writes `jpeg`, `png`, or `<encoding>; jpeg compressed <encoding>` (and `; png compressed`). */
export function compressedFormat(format: unknown): 'jpeg' | 'png' | undefined {
  if (typeof format !== 'string') return undefined;
  const f = format.toLowerCase();
  if (/\b(jpeg|jpg)\b/.test(f)) return 'jpeg';
  if (/\bpng\b/.test(f)) return 'png';
  return undefined;
}

function compressedImage(m: Record<string, unknown>, where: string): CameraImage {
  const format = compressedFormat(m.format);
  if (format === undefined) throw new RecordingError('bad_image', `${where}: unsupported format ${JSON.stringify(m.format)}; jpeg and png are read`);
  const data = bytesOf(m.data, where);
  if (data.byteLength === 0) throw new RecordingError('bad_image', `${where}: empty ${format} data`);
  return { kind: 'compressed', format, data };
}

function rawImage(m: Record<string, unknown>, where: string): CameraImage {
  const { width, height, encoding } = m;
  if (typeof width !== 'number' || typeof height !== 'number' || !Number.isInteger(width) || !Number.isInteger(height) || width <= 0 || height <= 0) {
    throw new RecordingError('bad_image', `${where}: width and height must be positive integers`);
  }
  const bpp = typeof encoding === 'string' && Object.hasOwn(RAW_IMAGE_ENCODINGS, encoding) ? RAW_IMAGE_ENCODINGS[encoding]! : undefined;
  if (bpp === undefined) {
    throw new RecordingError('bad_image', `${where}: unsupported encoding ${JSON.stringify(encoding)}; ${Object.keys(RAW_IMAGE_ENCODINGS).join(', ')} are read (16-bit and float images are not)`);
  }
  const row = width * bpp;
  const step = m.step === undefined || m.step === 0 ? row : m.step;
  if (typeof step !== 'number' || !Number.isInteger(step) || step < row) throw new RecordingError('bad_image', `${where}: step ${JSON.stringify(step)} is less than width * ${bpp} = ${row}`);
  const raw = bytesOf(m.data, where);
  if (raw.byteLength < step * (height - 1) + row) throw new RecordingError('bad_image', `${where}: ${raw.byteLength} bytes of data for ${width}x${height} ${encoding as string} with step ${step}`);
  if (encoding === 'rgb8' && step === row) return { kind: 'raw', width, height, rgb: raw.subarray(0, row * height) };
  const rgb = new Uint8Array(width * height * 3);
  const [r, g, b] = encoding === 'bgr8' || encoding === 'bgra8' ? [2, 1, 0] : encoding === 'mono8' ? [0, 0, 0] : [0, 1, 2];
  for (let y = 0; y < height; y++) {
    let i = y * step;
    let o = y * width * 3;
    if (encoding === 'rgb8') {
      rgb.set(raw.subarray(i, i + row), o);
      continue;
    }
    for (let x = 0; x < width; x++, i += bpp, o += 3) {
      rgb[o] = raw[i + r]!;
      rgb[o + 1] = raw[i + g]!;
      rgb[o + 2] = raw[i + b]!;
    }
  }
  return { kind: 'raw', width, height, rgb };
}
