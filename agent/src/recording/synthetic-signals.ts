import { randomBytes } from 'node:crypto';

/**
 * What the synthetic recorder records: an arm's joint states and a camera's raw frames, as
 * JSON messages with JSON Schemas, so Foxglove plots the joints and shows the images.
 */

export const JOINT_STATES_TOPIC = '/joint_states';
export const CAMERA_TOPIC = '/camera/image';

export const JOINT_NAMES = ['shoulder_pan', 'shoulder_lift', 'elbow', 'wrist_1', 'wrist_2', 'wrist_3', 'gripper'] as const;

const TIME_SCHEMA = {
  type: 'object',
  title: 'time',
  properties: { sec: { type: 'integer', minimum: 0 }, nsec: { type: 'integer', minimum: 0, maximum: 999_999_999 } },
} as const;

/** Joint states like ROS's `sensor_msgs/JointState`, with Foxglove's time object. */
export const JOINT_STATE_SCHEMA = {
  name: 'fleet.JointState',
  schema: {
    title: 'fleet.JointState',
    description: 'Joint positions (rad), velocities (rad/s) and efforts (N·m) of one arm, one entry per joint name',
    type: 'object',
    properties: {
      timestamp: { ...TIME_SCHEMA, description: 'Time of the sample' },
      name: { type: 'array', items: { type: 'string' } },
      position: { type: 'array', items: { type: 'number' } },
      velocity: { type: 'array', items: { type: 'number' } },
      effort: { type: 'array', items: { type: 'number' } },
    },
    required: ['timestamp', 'name', 'position', 'velocity', 'effort'],
  },
} as const;

/** Foxglove's `foxglove.RawImage` as its JSON Schema defines it (bytes are base64 in JSON). */
export const RAW_IMAGE_SCHEMA = {
  name: 'foxglove.RawImage',
  schema: {
    title: 'foxglove.RawImage',
    description: 'A raw image',
    type: 'object',
    properties: {
      timestamp: { ...TIME_SCHEMA, description: 'Timestamp of image' },
      frame_id: { type: 'string', description: 'Frame of reference for the image.' },
      width: { type: 'integer', minimum: 0, description: 'Image width' },
      height: { type: 'integer', minimum: 0, description: 'Image height' },
      encoding: { type: 'string', description: 'Encoding of the raw image data' },
      step: { type: 'integer', minimum: 0, description: 'Byte length of a single row' },
      data: { type: 'string', contentEncoding: 'base64', description: 'Raw image data' },
    },
  },
} as const;

export function schemaBytes(s: { schema: object }): Uint8Array {
  return new TextEncoder().encode(JSON.stringify(s.schema));
}

function time(ms: number): { sec: number; nsec: number } {
  const sec = Math.floor(ms / 1000);
  return { sec, nsec: Math.round(ms - sec * 1000) * 1_000_000 };
}

const round = (x: number) => Math.round(x * 10_000) / 10_000;

/** One joint-state sample at `ms` (robot clock), `t` seconds into the recording: slow sine motions. */
export function jointStateMessage(ms: number, t: number): Buffer {
  const position: number[] = [];
  const velocity: number[] = [];
  const effort: number[] = [];
  JOINT_NAMES.forEach((_, i) => {
    const amplitude = 0.4 + 0.1 * i;
    const w = 2 * Math.PI * (0.1 + 0.05 * i);
    position.push(round(amplitude * Math.sin(w * t + i)));
    velocity.push(round(amplitude * w * Math.cos(w * t + i)));
    effort.push(round(2 + Math.sin(w * t + i) * (5 - 0.5 * i)));
  });
  return Buffer.from(JSON.stringify({ timestamp: time(ms), name: JOINT_NAMES, position, velocity, effort }));
}

/** Bytes of a camera frame message besides its base64 pixels, about. */
const FRAME_OVERHEAD = 140;
/** The smallest frame worth sending (a few dozen pixels). */
export const MIN_FRAME_BYTES = 512;

/**
 * Raw `rgb8` frames of a fixed width and a height chosen per frame so a message has about the
 * size asked for: how the recorder keeps to its byte rate. Pixels come from one texture made at
 * start (a colour gradient with noise, repeating every `rows` rows) and scroll a little per frame,
 * so the picture moves at no cost per pixel.
 */
export class CameraFrames {
  readonly width: number;
  private readonly rows: number;
  private readonly texture: Buffer;

  /**
   * `nominalBytes`: the usual message size; `maxBytes`: the largest one. The texture holds frames
   * of up to twice the usual size (a frame catching up after a late tick): one texture per robot,
   * so a simulated fleet of hundreds stays small in memory.
   */
  constructor(nominalBytes: number, maxBytes: number) {
    const pixels = Math.max(64, Math.floor(((nominalBytes - FRAME_OVERHEAD) * 3) / 4 / 3));
    this.width = Math.max(8, Math.round(Math.sqrt((pixels * 4) / 3)));
    this.rows = Math.max(2, Math.ceil(((Math.min(maxBytes, 2 * nominalBytes) * 3) / 4 / 3 / this.width) * 1.05));
    const row = this.width * 3;
    const noise = randomBytes(row * this.rows);
    this.texture = Buffer.alloc(row * this.rows * 2);
    for (let y = 0; y < this.rows; y++) {
      for (let x = 0; x < this.width; x++) {
        const o = y * row + x * 3;
        this.texture[o] = Math.floor((x * 255) / this.width);
        this.texture[o + 1] = Math.floor((((y * 4) % this.rows) * 255) / this.rows);
        this.texture[o + 2] = noise[o]! & 0x7f;
      }
    }
    // Two copies one after the other: any window of up to `rows` rows is contiguous.
    this.texture.copy(this.texture, row * this.rows, 0, row * this.rows);
  }

  /**
   * Frame `seq` at `ms`, close to `targetBytes` as a message (never below two rows, never above
   * the texture: what a frame cannot carry, the next ones do).
   */
  message(ms: number, seq: number, targetBytes: number): Buffer {
    const row = this.width * 3;
    const fits = (height: number) => JSON.stringify({ timestamp: time(ms), frame_id: 'camera', width: this.width, height, encoding: 'rgb8', step: row });
    // Rows are a multiple of 3 bytes, so the base64 of the pixels is exactly 4/3 of them.
    const dataBytes = Math.floor(Math.max(0, targetBytes - fits(0).length - 12) / 4) * 3;
    const height = Math.min(this.rows, Math.max(2, Math.floor(dataBytes / row)));
    const start = ((seq * 3) % this.rows) * row;
    const data = this.texture.subarray(start, start + height * row).toString('base64');
    const head = fits(height);
    return Buffer.from(`${head.slice(0, -1)},"data":"${data}"}`);
  }
}
