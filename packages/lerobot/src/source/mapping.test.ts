import { describe, expect, it } from 'vitest';
import { JOINT_STATE_JSON_SCHEMA, RAW_IMAGE_JSON_SCHEMA } from './fixtures.js';
import { checkMapping, DEFAULT_MAPPING, parseMapping } from './mapping.js';
import type { RecordingChannel } from './mcap.js';

const channel = (topic: string, schemaName: string, jsonSchema: unknown, messageEncoding = 'json'): RecordingChannel => ({
  id: 0,
  metadata: new Map(),
  topic,
  schemaName,
  schemaEncoding: 'jsonschema',
  jsonSchema,
  messageEncoding,
  messageCount: 1n,
});
const sim = [
  channel('/joint_states', 'fleet.JointState', JOINT_STATE_JSON_SCHEMA),
  channel('/joint_commands', 'fleet.JointCommand', { type: 'object', properties: { name: { type: 'array', items: { type: 'string' } }, position: { type: 'array', items: { type: 'number' } } } }),
  channel('/camera/image', 'foxglove.RawImage', RAW_IMAGE_JSON_SCHEMA),
];

describe('parseMapping', () => {
  it('fills in the defaults', () => {
    const m = parseMapping({ features: { 'observation.state': { topic: '/joint_states', fields: ['position'] } } });
    expect(m).toMatchObject({ fps: 10, robot_type: 'fleet-sim-arm', task: { from: 'task_id' }, metadata: [], stateRule: 'hold' });
  });

  it('the default mapping parses as itself and fits the simulator', () => {
    expect(parseMapping(JSON.parse(JSON.stringify(DEFAULT_MAPPING)))).toEqual(DEFAULT_MAPPING);
    const plan = checkMapping(DEFAULT_MAPPING, sim);
    expect(plan.vectors.map((v) => [v.key, v.topic])).toEqual([
      ['observation.state', '/joint_states'],
      ['action', '/joint_commands'],
    ]);
    expect(plan.cameras).toEqual([{ key: 'observation.images.front', topic: '/camera/image' }]);
  });

  it('names the wrong field', () => {
    expect(() => parseMapping({ fps: 0, features: { a: { topic: '/x', fields: ['p'] } } })).toThrow(/mapping_invalid: .*fps/);
    expect(() => parseMapping({ features: { 'observation.images.front': { topic: '/x', fields: ['p'] } } })).toThrow(/observation\.images\.front/);
    expect(() => parseMapping({ features: { 'observation.cam': { topic: '/x' } } })).toThrow(/observation\.cam.*observation\.images\./);
    expect(() => parseMapping({ features: { action: { from_next_state: true, fields: ['position'] } } })).toThrow(/from_next_state needs a topic/);
    expect(() => parseMapping({ features: { timestamp: { topic: '/x', fields: ['p'] } } })).toThrow(/timestamp/);
  });

  it('from_next_state takes the topic and names of observation.state', () => {
    const m = parseMapping({
      features: {
        'observation.state': { topic: '/joint_states', fields: ['position', 'velocity'], names_from: 'name' },
        action: { from_next_state: true, fields: ['position'] },
      },
    });
    expect(checkMapping(m, sim).vectors[1]).toMatchObject({ key: 'action', topic: '/joint_states', namesFrom: 'name', offsetFrames: 1 });
  });
});

describe('checkMapping', () => {
  const mapping = (features: object) => parseMapping({ features });

  it('names a missing topic', () => {
    expect(() => checkMapping(mapping({ 'observation.state': { topic: '/x', fields: ['position'] } }), sim)).toThrow('the recording has no topic /x (feature observation.state)');
  });

  it('names a field that is not an array of numbers', () => {
    expect(() => checkMapping(mapping({ 'observation.state': { topic: '/joint_states', fields: ['name'] } }), sim)).toThrow(
      'field name of /joint_states is not an array of numbers',
    );
    expect(() => checkMapping(mapping({ 'observation.state': { topic: '/joint_states', fields: ['torque'] } }), sim)).toThrow(
      'field torque of /joint_states is not an array of numbers',
    );
    expect(() => checkMapping(mapping({ 'observation.state': { topic: '/joint_states', fields: ['position'], names_from: 'velocity' } }), sim)).toThrow(
      'field velocity of /joint_states is not an array of strings',
    );
  });

  it('refuses a camera topic that is not an image and a topic in an encoding that is not decoded', () => {
    expect(() => checkMapping(mapping({ 'observation.images.front': { topic: '/joint_states' } }), sim)).toThrow('field data of /joint_states is missing');
    const cdr = [channel('/joint_states', 'sensor_msgs/msg/JointState', undefined, 'cdr'), channel('/img', 'sensor_msgs/msg/CompressedImage', undefined, 'cdr')];
    expect(() => checkMapping(mapping({ 'observation.images.front': { topic: '/joint_states' } }), cdr)).toThrow(/is sensor_msgs\/msg\/JointState, not an image/);
    expect(checkMapping(mapping({ 'observation.state': { topic: '/joint_states', fields: ['position'] }, 'observation.images.front': { topic: '/img' } }), cdr).cameras).toEqual([{ key: 'observation.images.front', topic: '/img', stamp: undefined }]);
    const ros1 = [channel('/joint_states', 'sensor_msgs/JointState', undefined, 'ros1')];
    expect(() => checkMapping(mapping({ 'observation.state': { topic: '/joint_states', fields: ['position'] } }), ros1)).toThrow(/ros1-encoded/);
  });

  it('a list of topics reads the first the recording has (the default mapping fits both simulator formats)', () => {
    const ros2 = [
      channel('/joint_states', 'sensor_msgs/msg/JointState', undefined, 'cdr'),
      channel('/joint_commands', 'sensor_msgs/msg/JointState', undefined, 'cdr'),
      channel('/camera/front/image_raw/compressed', 'sensor_msgs/msg/CompressedImage', undefined, 'cdr'),
      channel('/camera/front/image_raw', 'sensor_msgs/msg/Image', undefined, 'cdr'),
    ];
    expect(checkMapping(DEFAULT_MAPPING, ros2).cameras.map((c) => c.topic)).toEqual(['/camera/front/image_raw/compressed']);
    expect(checkMapping(DEFAULT_MAPPING, sim).cameras.map((c) => c.topic)).toEqual(['/camera/image']);
  });

  it('field paths, joints and stamps parse; a field that is not a path is refused', () => {
    const m = parseMapping({ stamp: 'log', features: { 'observation.state': { topic: '/joint_states', fields: ['position'], joints: ['b', 'a'], stamp: 'header' }, 'observation.vel': { topic: '/cmd_vel', fields: ['twist.linear.x'] }, action: { from_next_state: true, fields: ['position'] } } });
    const plan = checkMapping(m, [channel('/joint_states', 'sensor_msgs/msg/JointState', undefined, 'cdr'), channel('/cmd_vel', 'geometry_msgs/msg/TwistStamped', undefined, 'cdr')]);
    expect(plan.vectors.map((v) => [v.key, v.topic, v.joints, v.stamp])).toEqual([
      ['observation.state', '/joint_states', ['b', 'a'], 'header'],
      ['observation.vel', '/cmd_vel', undefined, 'log'],
      ['action', '/joint_states', ['b', 'a'], 'header'],
    ]);
    expect(() => parseMapping({ features: { 'observation.state': { topic: '/j', fields: ['twist..x'] } } })).toThrow(/mapping_invalid/);
  });
});

describe('resampling rules, staleness and joined features', () => {
  const arms = [
    channel('/left/joint_states', 'sensor_msgs/msg/JointState', undefined, 'cdr'),
    channel('/right/joint_states', 'sensor_msgs/msg/JointState', undefined, 'cdr'),
    channel('/gripper', 'control_msgs/msg/GripperCommand', undefined, 'cdr'),
    channel('/img', 'sensor_msgs/msg/CompressedImage', undefined, 'cdr'),
  ];

  it('nearest is a rule; max_staleness_ms is inherited from the mapping unless a feature sets its own', () => {
    const m = parseMapping({
      stateRule: 'nearest',
      max_staleness_ms: 50,
      features: {
        'observation.state': { topic: '/left/joint_states', fields: ['position'] },
        action: { from_next_state: true, fields: ['position'], rule: 'linear', max_staleness_ms: 12.5 },
        'observation.images.front': { topic: '/img', max_staleness_ms: 100 },
        'observation.images.side': { topic: '/img' },
      },
    });
    const plan = checkMapping(m, arms);
    expect(plan.vectors.map((v) => [v.key, v.rule, v.maxStalenessNs])).toEqual([
      ['observation.state', 'nearest', 50_000_000n],
      ['action', 'linear', 12_500_000n],
    ]);
    expect(plan.cameras.map((c) => [c.key, c.maxStalenessNs])).toEqual([
      ['observation.images.front', 100_000_000n],
      ['observation.images.side', 50_000_000n],
    ]);
    // Unset: no limit.
    expect(checkMapping(parseMapping({ features: { 'observation.state': { topic: '/gripper', fields: ['position'] } } }), arms).vectors[0]!.maxStalenessNs).toBeUndefined();
  });

  it('a joined feature plans one read per part, in order, with the feature\'s rule and tolerance', () => {
    const m = parseMapping({
      max_staleness_ms: 40,
      features: {
        'observation.state': {
          join: [
            { topic: '/left/joint_states', fields: ['position'], joints: ['l1', 'l2'] },
            { topic: ['/right/arm', '/right/joint_states'], fields: ['position'], stamp: 'log' },
            { topic: '/gripper', fields: ['command.position'], names: ['gripper'] },
          ],
          rule: 'linear',
        },
      },
    });
    const plan = checkMapping(m, arms);
    expect(plan.vectors.map((v) => [v.key, v.part, v.topic, v.joints, v.stamp, v.rule, v.maxStalenessNs, v.offsetFrames])).toEqual([
      ['observation.state', { index: 0, of: 3 }, '/left/joint_states', ['l1', 'l2'], undefined, 'linear', 40_000_000n, 0],
      ['observation.state', { index: 1, of: 3 }, '/right/joint_states', undefined, 'log', 'linear', 40_000_000n, 0],
      ['observation.state', { index: 2, of: 3 }, '/gripper', undefined, undefined, 'linear', 40_000_000n, 0],
    ]);
    expect(plan.vectorTopics).toEqual(['/left/joint_states', '/right/joint_states', '/gripper']);
  });

  it('a joined part missing from the recording is mapping_invalid naming the feature, the part and the topic', () => {
    const m = parseMapping({ features: { 'observation.state': { join: [{ topic: '/left/joint_states', fields: ['position'] }, { topic: '/right/arm', fields: ['position'] }] } } });
    expect(() => checkMapping(m, arms)).toThrow(expect.objectContaining({ code: 'mapping_invalid' }));
    expect(() => checkMapping(m, arms)).toThrow('the recording has no topic /right/arm (feature observation.state, join part 2 of 2)');
  });

  it('the schema stays strict and bounded', () => {
    const part = { topic: '/a', fields: ['position'] };
    const bad: unknown[] = [
      { features: { s: { join: [part] } } }, // one part is not a join
      { features: { s: { join: Array.from({ length: 17 }, () => part) } } },
      { features: { s: { join: [part, { ...part, rule: 'hold' }] } } }, // the rule is the feature's
      { features: { s: { join: [part, part], topic: '/b', fields: ['p'] } } },
      { features: { 'observation.images.front': { join: [part, part] } } },
      { features: { s: { ...part, rule: 'cubic' } } },
      { features: { s: { ...part, max_staleness_ms: 0 } } },
      { features: { s: { ...part, max_staleness_ms: -5 } } },
      { max_staleness_ms: 3_600_001, features: { s: part } },
      { max_staleness_ms: '50', features: { s: part } },
      { features: { 'observation.images.front': { topic: '/img', max_staleness_ms: 1e12 } } },
    ];
    for (const b of bad) expect(() => parseMapping(b), JSON.stringify(b)).toThrow(/mapping_invalid/);
    expect(parseMapping({ features: { s: { join: Array.from({ length: 16 }, () => part) } } }).features.s).toMatchObject({ join: { length: 16 } });
  });

  it('from_next_state cannot take a joined observation.state without a topic of its own', () => {
    const join = { join: [{ topic: '/left/joint_states', fields: ['position'] }, { topic: '/right/joint_states', fields: ['position'] }] };
    expect(() => parseMapping({ features: { 'observation.state': join, action: { from_next_state: true, fields: ['position'] } } })).toThrow(/from_next_state needs a topic/);
    const m = parseMapping({ features: { 'observation.state': join, action: { from_next_state: true, topic: '/left/joint_states', fields: ['position'] } } });
    expect(checkMapping(m, arms).vectors.at(-1)).toMatchObject({ key: 'action', topic: '/left/joint_states', offsetFrames: 1 });
  });
});
