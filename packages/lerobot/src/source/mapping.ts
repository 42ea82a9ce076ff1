import { isImageSchema } from '@fleet/recordings';
import { z } from 'zod';
import { SourceError } from './errors.js';
import type { RecordingChannel, StampSource } from './mcap.js';

/**
 * The mapping file: how a recording's topics become LeRobot features. JSON, e.g.
 *
 * ```json
 * {
 *   "fps": 10,
 *   "robot_type": "my-arm",
 *   "task": { "from": "task_id" },
 *   "features": {
 *     "observation.state": { "topic": "/joint_states", "fields": ["position"], "joints": ["shoulder", "elbow", "wrist"] },
 *     "action": { "from_next_state": true, "fields": ["position"] },
 *     "observation.velocity": { "topic": "/cmd_vel", "fields": ["twist.linear.x", "twist.angular.z"], "stamp": "log", "rule": "nearest" },
 *     "observation.gripper": { "join": [{ "topic": "/left/gripper", "fields": ["position"] }, { "topic": "/right/gripper", "fields": ["position"] }] },
 *     "observation.images.front": { "topic": "/camera/front/image_raw/compressed" }
 *   },
 *   "metadata": ["operator_id"],
 *   "stateRule": "hold",
 *   "max_staleness_ms": 200
 * }
 * ```
 */

const Topic = z.string().min(1).max(256);
/** A topic, or a list of topics of which the first the recording has is read (one mapping for recorders that name a stream differently). */
const TopicChoice = z.union([Topic, z.array(Topic).min(1).max(16)]);
/** A field path: a top-level key (`position`) or a dotted path into nested messages (`twist.linear.x`). */
const Field = z.string().min(1).max(128).regex(/^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$/, 'a field path like position or twist.linear.x');
/** How a vector is read at a frame time; see resample.ts's `resampleVector`. */
const RuleSchema = z.enum(['hold', 'linear', 'nearest']);
/**
 * The staleness tolerance: how far (ms) from a frame's time the sample(s) it is made of may lie.
 * Bounded so a typo (seconds for ms, 1e9) is refused rather than meaning "no limit".
 */
const StalenessMs = z.number().positive().max(3_600_000);
const StampSchema = z.enum(['header', 'log']);
/** Joints chosen and ordered by name (from the `names_from` field, default `name`, of each message). */
const Joints = z.array(z.string().min(1).max(128)).min(1).max(1024);
export type StateRule = z.infer<typeof RuleSchema>;

/** A numeric feature read from a topic: the listed array fields of each message, concatenated. */
const TopicVectorSchema = z.strictObject({
  /** The topic whose messages carry the numbers (any encoding @fleet/recordings decodes). */
  topic: TopicChoice,
  /** Numeric fields of the message (arrays, typed arrays or single numbers, by dotted path), concatenated in this order. Their lengths are fixed by the first message and checked on every one. */
  fields: z.array(Field).min(1).max(16),
  /** Only these joints, in this order, picked by name from `names_from` (default `name`) of every message. */
  joints: Joints.optional(),
  /** This feature's stamp rule; default the mapping's `stamp`. */
  stamp: StampSchema.optional(),
  /** An array-of-string field naming the entries (e.g. joint names): the feature's `names` are `<name>` (one field) or `<name>.<field>` (several). Without it: `<field>.<i>`. */
  names_from: Field.optional(),
  /** Explicit names (overrides `names_from`); as many as the feature's dimension. */
  names: z.array(z.string().min(1).max(128)).max(4096).optional(),
  /** This feature's resampling rule; default the mapping's `stateRule`. */
  rule: RuleSchema.optional(),
  /** This feature's staleness tolerance; default the mapping's `max_staleness_ms`. */
  max_staleness_ms: StalenessMs.optional(),
});

/** One topic of a joined feature: what a one-topic vector feature has, less the rule and tolerance (the feature's). */
const JoinPartSchema = z.strictObject({
  topic: TopicChoice,
  fields: z.array(Field).min(1).max(16),
  joints: Joints.optional(),
  stamp: StampSchema.optional(),
  names_from: Field.optional(),
  names: z.array(z.string().min(1).max(128)).max(4096).optional(),
});

/**
 * A numeric feature made of several topics (two arms, an arm and a gripper driver): each part
 * is read and put on the grid on its own, then the values (and names) are concatenated in order.
 */
const JoinedVectorSchema = z.strictObject({
  join: z.array(JoinPartSchema).min(2).max(16),
  /** The parts' resampling rule; default the mapping's `stateRule`. */
  rule: RuleSchema.optional(),
  /** The parts' staleness tolerance; default the mapping's `max_staleness_ms`. */
  max_staleness_ms: StalenessMs.optional(),
});

/** A numeric feature that is another topic's fields one frame later (an action from recorded states). */
const NextStateVectorSchema = z.strictObject({
  from_next_state: z.literal(true),
  /** Array-of-number fields of the state topic, concatenated. */
  fields: z.array(Field).min(1).max(16),
  /** The state topic; default the topic of `observation.state`. */
  topic: TopicChoice.optional(),
  joints: Joints.optional(),
  stamp: StampSchema.optional(),
  names_from: Field.optional(),
  names: z.array(z.string().min(1).max(128)).max(4096).optional(),
  rule: RuleSchema.optional(),
  max_staleness_ms: StalenessMs.optional(),
});

/**
 * A camera: a topic of `sensor_msgs/msg/Image`, `sensor_msgs/msg/CompressedImage` (JPEG, PNG),
 * `foxglove.RawImage` or `foxglove.CompressedImage` messages, in any encoding.
 */
const CameraSchema = z.strictObject({
  topic: TopicChoice,
  stamp: StampSchema.optional(),
  /** How far (ms) the nearest image may be from a frame's time; default the mapping's `max_staleness_ms`. */
  max_staleness_ms: StalenessMs.optional(),
});

const FeatureSchema = z.union([TopicVectorSchema, NextStateVectorSchema, JoinedVectorSchema, CameraSchema]);
type Feature = z.output<typeof FeatureSchema>;
const isCamera = (f: Feature): f is z.output<typeof CameraSchema> => !('fields' in f) && !('join' in f);

const TaskSchema = z.union([
  /** The episode's `task_id` (or `task_name`); `default` when it is null. */
  z.strictObject({ from: z.enum(['task_id', 'task_name']), default: z.string().min(1).max(1024).optional() }),
  /** A key of the episode's recorded `metadata` (its string form); `default` when absent. */
  z.strictObject({ from: z.literal('metadata'), key: z.string().min(1).max(256), default: z.string().min(1).max(1024).optional() }),
  /** The same task text for every episode. */
  z.strictObject({ value: z.string().min(1).max(1024) }),
]);
export type TaskSource = z.infer<typeof TaskSchema>;

const FeatureKey = z
  .string()
  .min(1)
  .max(128)
  .regex(/^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$/, 'a dotted feature key like observation.state')
  .refine((k) => !['timestamp', 'frame_index', 'episode_index', 'index', 'task_index', 'next.done', 'next.success', 'next.reward'].includes(k), 'is a column LeRobot writes itself');

export const MappingSchema = z
  .strictObject({
    /** Frames per second of the grid (an integer, as LeRobot's `fps`). Default 10. */
    fps: z.number().int().min(1).max(1000).default(10),
    /** `robot_type` of `meta/info.json`. Default `fleet-sim-arm`. */
    robot_type: z.string().min(1).max(128).default('fleet-sim-arm'),
    /** Where each episode's task text comes from. Default `{from: 'task_id'}`. */
    task: TaskSchema.default({ from: 'task_id' }),
    /**
     * By LeRobot feature key: keys under `observation.images.` are cameras (`{topic}`), every
     * other key a float32 vector (`{topic, fields, ...}`, `{join: [{topic, fields, ...}, ...]}`
     * or `{from_next_state: true, fields}`).
     */
    features: z.record(FeatureKey, FeatureSchema).refine((f) => Object.keys(f).length > 0 && Object.keys(f).length <= 64, 'between 1 and 64 features'),
    /** Recorded `metadata` keys copied into `meta/episodes` as `meta/<key>` (string form; '' when absent). */
    metadata: z.array(z.string().min(1).max(256).regex(/^[A-Za-z0-9_.-]+$/)).max(64).default([]),
    /**
     * Vectors between samples: `hold` (latest sample at or before the frame), `nearest` (the
     * sample nearest in time, a tie to the earlier) or `linear` (interpolated). Default `hold`.
     */
    stateRule: RuleSchema.default('hold'),
    /**
     * The staleness tolerance of every stream (vectors and cameras) without its own: the sample(s)
     * a frame is made of lie within this many ms of its time, else the episode is skipped with
     * `stale_stream`. Unset: no limit (a good value depends on the robot's rates, so there is no
     * default; twice the slowest stream's period is a reasonable start).
     */
    max_staleness_ms: StalenessMs.optional(),
    /**
     * Which time places a message on the grid: `header` (its `header.stamp`, or a Foxglove
     * schema's `timestamp`) or `log` (when the recorder received it). Unset: the header stamp
     * of messages that have a header, the log time of the others.
     */
    stamp: StampSchema.optional(),
  })
  .superRefine((m, ctx) => {
    for (const [key, f] of Object.entries(m.features)) {
      const camera = isCamera(f);
      if (camera !== key.startsWith('observation.images.')) {
        ctx.addIssue({ code: 'custom', path: ['features', key], message: camera ? 'a camera ({topic}) must be under observation.images.' : 'keys under observation.images. are cameras: {topic} only' });
      }
      if ('from_next_state' in f && f.topic === undefined) {
        const state = m.features['observation.state'];
        if (state === undefined || !('topic' in state) || state.topic === undefined || !('fields' in state) || 'from_next_state' in state) {
          ctx.addIssue({ code: 'custom', path: ['features', key], message: 'from_next_state needs a topic, or an observation.state feature read from one topic (not a join)' });
        }
      }
    }
  });
export type Mapping = z.output<typeof MappingSchema>;
export type MappingInput = z.input<typeof MappingSchema>;

/** The simulator's cameras: the ROS 2 format's front JPEG stream, the JSON format's RawImage topic. */
export const SIM_ROS2_FRONT_CAMERA_TOPIC = '/camera/front/image_raw/compressed';
export const SIM_JSON_FRONT_CAMERA_TOPIC = '/camera/image';

/**
 * What fits the simulator's recorder in both its formats: 7 joint positions (`/joint_states`) as
 * state, the commanded positions (`/joint_commands`) as action, and the front camera: the ROS 2
 * format's JPEG stream `/camera/front/image_raw/compressed` (sensor_msgs/msg/CompressedImage) or,
 * in a JSON recording, `/camera/image` (foxglove.RawImage), whichever the recording has.
 */
export const DEFAULT_MAPPING: Mapping = Object.freeze({
  fps: 10,
  robot_type: 'fleet-sim-arm',
  task: { from: 'task_id' },
  features: {
    'observation.state': { topic: '/joint_states', fields: ['position'], names_from: 'name' },
    action: { topic: '/joint_commands', fields: ['position'], names_from: 'name' },
    'observation.images.front': { topic: [SIM_ROS2_FRONT_CAMERA_TOPIC, SIM_JSON_FRONT_CAMERA_TOPIC] },
  },
  metadata: [],
  stateRule: 'hold',
}) as Mapping;

/** A second camera the simulator may record (JSON format); add it as `features['observation.images.wrist']`. */
export const WRIST_CAMERA_TOPIC = '/camera/wrist/image';
/** The same in the ROS 2 format. */
export const ROS2_WRIST_CAMERA_TOPIC = '/camera/wrist/image_raw/compressed';

/** Parses a mapping file's JSON (defaults filled in); `mapping_invalid` naming the field. */
export function parseMapping(json: unknown): Mapping {
  const r = MappingSchema.safeParse(json);
  if (!r.success) {
    const what = r.error.issues
      .slice(0, 5)
      .map((i) => `${i.path.join('.') || '(mapping)'}: ${i.message}`)
      .join('; ');
    throw new SourceError('mapping_invalid', `the mapping file: ${what}`);
  }
  return r.data;
}

/** A vector feature resolved against its topic (a joined feature has one per part, in order). */
export interface VectorPlan {
  key: string;
  /** A joined feature's part: its index (0-based) among `of`; undefined for a one-topic feature. */
  part?: { index: number; of: number } | undefined;
  topic: string;
  fields: string[];
  namesFrom: string | undefined;
  names: string[] | undefined;
  /** Joints picked by name from `namesFrom` (default `name`) of each message; undefined: all, as recorded. */
  joints?: string[] | undefined;
  /** The stamp rule (undefined: header when the message has one, else log time). */
  stamp?: StampSource | undefined;
  rule: StateRule;
  /** Frames later than the grid time it is read at: 1 for `from_next_state`. */
  offsetFrames: 0 | 1;
  /** The staleness tolerance (ns); undefined: no limit. */
  maxStalenessNs?: bigint | undefined;
}

export interface CameraPlan {
  key: string;
  topic: string;
  stamp?: StampSource | undefined;
  /** The staleness tolerance (ns); undefined: no limit. */
  maxStalenessNs?: bigint | undefined;
}

/** How a plan is named in messages: `feature observation.state`, or with its part, `feature observation.state, join part 2 of 3`. */
export function featureLabel(plan: Pick<VectorPlan, 'key' | 'part'>): string {
  return plan.part === undefined ? `feature ${plan.key}` : `feature ${plan.key}, join part ${plan.part.index + 1} of ${plan.part.of}`;
}

const nsOfMs = (ms: number | undefined): bigint | undefined => (ms === undefined ? undefined : BigInt(Math.round(ms * 1e6)));

export interface MappingPlan {
  /** Every vector read; a joined feature's parts are consecutive, in their order. */
  vectors: VectorPlan[];
  cameras: CameraPlan[];
  /** Every topic with a vector feature. */
  vectorTopics: string[];
}

/**
 * The mapping with `from_next_state` resolved to its topic, vectors and cameras apart. A list of
 * topics becomes the first one `channels` has (without channels, the first listed).
 */
export function planMapping(mapping: Mapping, channels?: readonly RecordingChannel[]): MappingPlan {
  const has = new Set(channels?.map((c) => c.topic));
  const pick = (t: string | string[]): string => (typeof t === 'string' ? t : (t.find((x) => has.has(x)) ?? t[0]!));
  const vectors: VectorPlan[] = [];
  const cameras: CameraPlan[] = [];
  const state = mapping.features['observation.state'];
  const stateFields = state !== undefined && 'fields' in state && !('from_next_state' in state) ? state : undefined;
  for (const [key, f] of Object.entries(mapping.features)) {
    if (isCamera(f)) {
      cameras.push({ key, topic: pick(f.topic), stamp: f.stamp ?? mapping.stamp, maxStalenessNs: nsOfMs(f.max_staleness_ms ?? mapping.max_staleness_ms) });
      continue;
    }
    if ('join' in f) {
      f.join.forEach((p, index) => {
        vectors.push({
          key,
          part: { index, of: f.join.length },
          topic: pick(p.topic),
          fields: p.fields,
          namesFrom: p.names_from,
          names: p.names,
          joints: p.joints,
          stamp: p.stamp ?? mapping.stamp,
          rule: f.rule ?? mapping.stateRule,
          offsetFrames: 0,
          maxStalenessNs: nsOfMs(f.max_staleness_ms ?? mapping.max_staleness_ms),
        });
      });
      continue;
    }
    const next = 'from_next_state' in f;
    const stateTopic = stateFields !== undefined ? pick(stateFields.topic) : undefined;
    const topic = f.topic !== undefined ? pick(f.topic) : stateTopic;
    if (topic === undefined) throw new SourceError('mapping_invalid', `feature ${key}: from_next_state needs a topic`);
    const fromState = next && topic === stateTopic;
    vectors.push({
      key,
      topic,
      fields: f.fields,
      namesFrom: f.names_from ?? (fromState ? stateFields?.names_from : undefined),
      names: f.names,
      joints: f.joints ?? (fromState ? stateFields?.joints : undefined),
      stamp: f.stamp ?? (fromState ? stateFields?.stamp : undefined) ?? mapping.stamp,
      rule: f.rule ?? mapping.stateRule,
      offsetFrames: next ? 1 : 0,
      maxStalenessNs: nsOfMs(f.max_staleness_ms ?? mapping.max_staleness_ms),
    });
  }
  return { vectors, cameras, vectorTopics: [...new Set(vectors.map((v) => v.topic))] };
}

function schemaProperty(channel: RecordingChannel, field: string): unknown {
  const s = channel.jsonSchema as { properties?: Record<string, unknown> } | undefined;
  if (typeof s !== 'object' || s === null || typeof s.properties !== 'object' || s.properties === null) return undefined;
  return Object.hasOwn(s.properties, field) ? s.properties[field] : null;
}

function isArrayOf(prop: unknown, type: 'number' | 'string'): boolean | undefined {
  if (prop === undefined) return undefined; // no JSON Schema to tell
  if (typeof prop !== 'object' || prop === null || (prop as { type?: unknown }).type !== 'array') return false;
  const items = (prop as { items?: unknown }).items;
  const t = typeof items === 'object' && items !== null ? (items as { type?: unknown }).type : undefined;
  return type === 'number' ? t === 'number' || t === 'integer' : t === 'string';
}

/** Message encodings whose messages the export reads (through @fleet/recordings). */
const DECODED = new Set(['json', 'cdr', 'protobuf']);

/**
 * Checks the mapping against a recording's channels before reading any message: every topic
 * exists in an encoding that is decoded, a camera's topic has an image schema (or, in JSON, the
 * fields of one), and where the channel has a JSON Schema, every top-level field is an array of
 * numbers (names an array of strings). The same field checks run on the messages themselves
 * while reading, for schemas that cannot be checked up front.
 */
export function checkMapping(mapping: Mapping, channels: readonly RecordingChannel[]): MappingPlan {
  const plan = planMapping(mapping, channels);
  const byTopic = new Map(channels.map((c) => [c.topic, c]));
  const channelOf = (topic: string, label: string) => {
    const c = byTopic.get(topic);
    if (c === undefined) throw new SourceError('mapping_invalid', `the recording has no topic ${topic} (${label})`);
    if (!DECODED.has(c.messageEncoding)) throw new SourceError('mapping_invalid', `topic ${topic} (${label}) is ${c.messageEncoding}-encoded; cdr, protobuf and json messages are read`);
    return c;
  };
  for (const v of plan.vectors) {
    const c = channelOf(v.topic, featureLabel(v));
    for (const field of v.fields) {
      if (!field.includes('.') && isArrayOf(schemaProperty(c, field), 'number') === false) throw new SourceError('mapping_invalid', `field ${field} of ${v.topic} is not an array of numbers (${featureLabel(v)})`);
    }
    if (v.namesFrom !== undefined && isArrayOf(schemaProperty(c, v.namesFrom), 'string') === false) {
      throw new SourceError('mapping_invalid', `field ${v.namesFrom} of ${v.topic} is not an array of strings (names_from of ${featureLabel(v)})`);
    }
  }
  for (const cam of plan.cameras) {
    const c = channelOf(cam.topic, `feature ${cam.key}`);
    if (c.schemaName !== '' && c.messageEncoding !== 'json' && !isImageSchema(c.schemaName)) {
      throw new SourceError('mapping_invalid', `topic ${cam.topic} (feature ${cam.key}) is ${c.schemaName}, not an image (sensor_msgs/msg/Image, sensor_msgs/msg/CompressedImage, foxglove.RawImage, foxglove.CompressedImage)`);
    }
    if (!isImageSchema(c.schemaName)) {
      for (const field of ['data', 'width', 'height']) {
        if (schemaProperty(c, field) === null) throw new SourceError('mapping_invalid', `field ${field} of ${cam.topic} is missing: not a foxglove.RawImage (feature ${cam.key})`);
      }
    }
  }
  return plan;
}
