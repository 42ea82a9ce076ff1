import type { InspectedTopic } from './inspect-messages.js';
import type { MappingInput } from './source/mapping.js';

/**
 * The mapping `inspect-recording` proposes from what it found: a ROS 2 arm's usual topics made
 * into features the way docs/training.md describes them, for a person to read and edit rather
 * than a guess the export would act on by itself.
 *
 * - `observation.state`: the JointState topic (`/joint_states` first), positions with joint names;
 * - `action`: a JointState or `*MultiArray` topic named like a command (command, cmd, target,
 *   goal), else the next state's positions;
 * - `observation.images.<camera>`: every camera the export reads, its compressed stream when it
 *   has both, named after the topic (`/camera/front/image_raw/compressed` is `front`);
 * - `fps`: the slowest camera's rate rounded down (at most 30), else the state's (at most 30).
 */

const JOINT_STATE = 'sensor_msgs/msg/JointState';
const MULTI_ARRAY = /^std_msgs\/(msg\/)?[A-Za-z0-9]*MultiArray$/;
const COMMAND_NAME = /command|cmd|target|goal/i;
/** Encodings the export decodes. */
const DECODED = new Set(['cdr', 'protobuf', 'json']);
/** image_transport's and drivers' trailing segments, which name the stream, not the camera. */
const STREAM_SEGMENTS = new Set(['compressed', 'compresseddepth', 'theora', 'image_raw', 'image_rect', 'image_rect_color', 'image_color', 'image_mono', 'image']);
const MAX_FPS = 30;

export interface TopicNote {
  mappedAs?: string;
  note?: string;
}

function fieldLength(t: InspectedTopic, path: string): number | undefined {
  return t.fields.find((f) => f.path === path)?.length;
}

/** Where a camera's stream is (its topic without image_transport's suffixes), and the feature name that follows. */
export function cameraOf(topic: string): { base: string; name: string } {
  const segments = topic.split('/').filter((s) => s !== '');
  while (segments.length > 0 && STREAM_SEGMENTS.has(segments.at(-1)!.toLowerCase())) segments.pop();
  let name = segments.at(-1) ?? 'camera';
  // `/front/camera/image_raw` is the front camera.
  if ((name === 'camera' || name === 'cam') && segments.length > 1) name = segments.at(-2)!;
  return { base: segments.join('/'), name: name.replace(/[^A-Za-z0-9_]/g, '_') };
}

export function proposeMapping(topics: readonly InspectedTopic[]): { mapping: MappingInput | null; notes: Map<string, TopicNote> } {
  const notes = new Map<string, TopicNote>();
  const note = (t: InspectedTopic, n: TopicNote) => notes.set(t.topic, { ...notes.get(t.topic), ...n });
  const usable = topics.filter((t) => t.error === null && t.message_count > 0 && DECODED.has(t.message_encoding));
  for (const t of topics) if (t.error === null && t.message_count > 0 && !DECODED.has(t.message_encoding)) note(t, { note: `${t.message_encoding} messages are not read` });

  const features: NonNullable<MappingInput['features']> = {};
  const jointStates = usable.filter((t) => t.type === JOINT_STATE);
  const stateCandidates = jointStates.filter((t) => !COMMAND_NAME.test(t.topic));
  const withPositions = stateCandidates.filter((t) => (fieldLength(t, 'position') ?? 0) > 0);
  for (const t of stateCandidates) if (!withPositions.includes(t)) note(t, { note: 'its first message has no positions' });
  const state = withPositions.find((t) => t.topic === '/joint_states') ?? withPositions.find((t) => t.topic.endsWith('/joint_states')) ?? withPositions[0];
  if (state !== undefined) {
    features['observation.state'] = { topic: state.topic, fields: ['position'], ...(fieldLength(state, 'name') ? { names_from: 'name' } : {}) };
    note(state, { mappedAs: 'observation.state' });
    for (const t of withPositions) if (t !== state) note(t, { note: `another JointState topic: the state is read from ${state.topic}` });
  }

  const commands = usable
    .filter((t) => COMMAND_NAME.test(t.topic) && (t.type === JOINT_STATE ? (fieldLength(t, 'position') ?? 0) > 0 : MULTI_ARRAY.test(t.type) && (fieldLength(t, 'data') ?? 0) > 0))
    // A JointState command carries joint names, which keeps the action's order explicit.
    .sort((a, b) => Number(b.type === JOINT_STATE) - Number(a.type === JOINT_STATE));
  const command = commands[0];
  if (command !== undefined) {
    features.action =
      command.type === JOINT_STATE
        ? { topic: command.topic, fields: ['position'], ...(fieldLength(command, 'name') ? { names_from: 'name' } : {}) }
        : { topic: command.topic, fields: ['data'] };
    note(command, { mappedAs: 'action' });
    for (const t of commands.slice(1)) note(t, { note: `another command topic: the action is read from ${command.topic}` });
  } else if (state !== undefined) {
    features.action = { from_next_state: true, fields: ['position'] };
  }

  // Cameras: one stream each, compressed preferred (smaller to read, and decoded once either way).
  const cameras = new Map<string, InspectedTopic[]>();
  for (const t of usable) {
    if (t.image === null) continue;
    if (!t.image.supported) {
      note(t, { note: t.image.problem ?? 'frames of this kind are not read' });
      continue;
    }
    const { base } = cameraOf(t.topic);
    cameras.set(base, [...(cameras.get(base) ?? []), t]);
  }
  const used = new Set<string>();
  const chosen: InspectedTopic[] = [];
  for (const [base, streams] of cameras) {
    const pick = streams.find((t) => t.image?.kind === 'compressed') ?? streams[0]!;
    let name = cameraOf(pick.topic).name;
    if (used.has(name)) name = base.replace(/[^A-Za-z0-9_]/g, '_') || 'camera';
    for (let i = 2; used.has(name); i++) name = `${cameraOf(pick.topic).name}_${i}`;
    used.add(name);
    const key = `observation.images.${name}`;
    features[key] = { topic: pick.topic };
    chosen.push(pick);
    note(pick, { mappedAs: key });
    for (const t of streams) if (t !== pick) note(t, { note: `the same camera as ${pick.topic}, which the mapping reads` });
  }

  if (Object.keys(features).length === 0) return { mapping: null, notes };
  const cameraRates = chosen.flatMap((t) => (t.rate_hz !== null ? [t.rate_hz] : []));
  const rate = cameraRates.length > 0 ? Math.min(...cameraRates) : (state?.rate_hz ?? null);
  const fps = rate === null ? 10 : Math.max(1, Math.min(MAX_FPS, Math.floor(rate)));
  return { mapping: { fps, task: { from: 'task_id' }, features }, notes };
}
