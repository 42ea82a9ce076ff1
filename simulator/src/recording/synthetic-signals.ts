import type { JointSample } from './synthetic-motion.js';

/**
 * What the synthetic recorder records: an arm's joint states, the joint targets its controller
 * commands, and one or two cameras' raw frames, as JSON messages with JSON Schemas, so Foxglove
 * plots the joints and shows the images.
 */

export const JOINT_STATES_TOPIC = '/joint_states';
export const JOINT_COMMANDS_TOPIC = '/joint_commands';
/** The front camera. */
export const CAMERA_TOPIC = '/camera/image';
/** The second camera, close to the gripper. */
export const WRIST_CAMERA_TOPIC = '/camera/wrist/image';

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

/** The joint targets of the arm's position controller: what a policy trained on the recording outputs. */
export const JOINT_COMMAND_SCHEMA = {
  name: 'fleet.JointCommand',
  schema: {
    title: 'fleet.JointCommand',
    description: 'Commanded joint positions (rad) of one arm, one entry per joint name',
    type: 'object',
    properties: {
      timestamp: { ...TIME_SCHEMA, description: 'Time of the command' },
      name: { type: 'array', items: { type: 'string' } },
      position: { type: 'array', items: { type: 'number' } },
    },
    required: ['timestamp', 'name', 'position'],
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

/** The measured joints of `sample` at `ms` (robot clock). */
export function jointStateMessage(ms: number, sample: JointSample): Buffer {
  const { position, velocity, effort } = sample;
  return Buffer.from(JSON.stringify({ timestamp: time(ms), name: JOINT_NAMES, position: position.map(round), velocity: velocity.map(round), effort: effort.map(round) }));
}

/** The commanded joints of `sample` at `ms` (robot clock). */
export function jointCommandMessage(ms: number, sample: JointSample): Buffer {
  return Buffer.from(JSON.stringify({ timestamp: time(ms), name: JOINT_NAMES, position: sample.command.map(round) }));
}

/** The smallest frame message worth sending (a few dozen pixels). */
export const MIN_FRAME_BYTES = 512;

/**
 * A `foxglove.RawImage` message of `rgb8` pixels (`width * height * 3` bytes, rows `width * 3`).
 * The pixels are base64 in JSON: a message is about 4/3 of them plus {@link frameOverhead}.
 */
export function rawImageMessage(ms: number, frameId: string, width: number, height: number, pixels: Uint8Array): Buffer {
  const data = Buffer.from(pixels.buffer, pixels.byteOffset, width * height * 3).toString('base64');
  return Buffer.from(`${imageHead(ms, frameId, width, height)}${data}"}`);
}

function imageHead(ms: number, frameId: string, width: number, height: number): string {
  const head = JSON.stringify({ timestamp: time(ms), frame_id: frameId, width, height, encoding: 'rgb8', step: width * 3 });
  return `${head.slice(0, -1)},"data":"`;
}

/** Bytes of a frame message besides its base64 pixels (a typical timestamp). */
export function frameOverhead(frameId: string, width: number, height: number): number {
  return imageHead(Date.UTC(2026, 0, 1, 0, 0, 0, 500), frameId, width, height).length + 2;
}

/**
 * A frame size whose message is close to `frameBytes`: about 4:3, with the pixel count nearest
 * the budget (every pixel is 4 base64 bytes in JSON; the ros2 format passes its own cost), so
 * frames of a fixed size keep the byte rate.
 */
export function frameSize(frameBytes: number, frameId: string, bytesPerPixel = 4, overhead = frameOverhead(frameId, 100, 100)): { width: number; height: number } {
  const pixels = Math.max(48, (frameBytes - overhead) / bytesPerPixel);
  const h0 = Math.sqrt((pixels * 3) / 4);
  let best = { width: 8, height: 6, score: Infinity };
  for (let height = Math.max(2, Math.floor(h0 * 0.85)); height <= Math.ceil(h0 * 1.15); height++) {
    const width = Math.max(2, Math.round(pixels / height));
    // Nearest the budget first; among near misses, nearest 4:3.
    const score = Math.abs(width * height - pixels) / pixels + 0.1 * Math.abs((width * 3) / (height * 4) - 1);
    if (score < best.score) best = { width, height, score };
  }
  return { width: best.width, height: best.height };
}
