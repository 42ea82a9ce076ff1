import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadGridEpisode } from './episode.js';
import { JOINT_STATE_JSON_SCHEMA, jointState, ms, RAW_IMAGE_JSON_SCHEMA, rawImage, writeMcap, type FixtureChannel } from './fixtures.js';
import type { ManifestEpisode } from './manifest.js';
import { DEFAULT_MAPPING, parseMapping } from './mapping.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'lerobot-episode-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const NAMES = ['shoulder', 'elbow'];
const line = (over: Partial<ManifestEpisode> = {}): ManifestEpisode => ({
  id: 'ep_0123456789abcdef',
  robot_id: 'rbt_1',
  task_id: 'pick-cube',
  outcome: 'success',
  metadata: { site: 'lab-2', attempt: 3 },
  started_at: '2026-01-01T00:00:00.000Z',
  ended_at: '2026-01-01T00:00:01.000Z',
  files: [],
  locations: [],
  ...over,
});

/** Like the simulator: joint states at 50 Hz from 1 s, commands at 50 Hz from 1.004 s, frames at 5 Hz from 1.2 s. */
function simulatorLike(until: number): FixtureChannel[] {
  const base = 1000;
  const joints = Array.from({ length: Math.floor(until / 20) + 1 }, (_, i) => i * 20);
  return [
    { topic: '/joint_states', schemaName: 'fleet.JointState', schema: JOINT_STATE_JSON_SCHEMA, messages: joints.map((t) => ({ logTimeNs: ms(base + t), data: jointState(NAMES, [t, 1000 - t], [1, 1]) })) },
    {
      topic: '/joint_commands',
      schemaName: 'fleet.JointCommand',
      messages: joints.map((t) => ({ logTimeNs: ms(base + t + 4), data: { timestamp: { sec: 0, nsec: 0 }, name: NAMES, position: [t + 4, 0] } })),
    },
    {
      topic: '/camera/image',
      schemaName: 'foxglove.RawImage',
      schema: RAW_IMAGE_JSON_SCHEMA,
      messages: Array.from({ length: Math.floor(until / 200) }, (_, i) => (i + 1) * 200).map((t) => ({ logTimeNs: ms(base + t), data: rawImage(4, 3, t / 100, { step: 16 }) })),
    },
  ];
}

describe('loadGridEpisode', () => {
  it('resamples the default mapping onto the grid and streams the frames', async () => {
    const path = join(dir, 'recording.mcap');
    await writeMcap(path, simulatorLike(1000));
    const mapping = parseMapping({ ...DEFAULT_MAPPING, metadata: ['site', 'attempt', 'absent'] });
    await using loaded = await loadGridEpisode(path, line(), mapping);
    const { episode, shape } = loaded;
    // start = 1.2 s (the camera's first frame: every stream bounds the start, the states from 1.0 s
    // and the commands from 1.004 s too), end = 2.000 s (the camera's last frame and the states'
    // last sample): floor(0.8 * 10) + 1 frames.
    expect(episode.length).toBe(9);
    expect(episode).toMatchObject({ episodeId: 'ep_0123456789abcdef', task: 'pick-cube', success: true, metadata: { site: 'lab-2', attempt: '3', absent: '' } });
    expect(shape).toEqual({
      fps: 10,
      robotType: 'fleet-sim-arm',
      vectors: { 'observation.state': { shape: [2], names: NAMES }, action: { shape: [2], names: NAMES } },
      cameras: { 'observation.images.front': { width: 4, height: 3 } },
      metadataKeys: ['site', 'attempt', 'absent'],
    });
    // Frame i at 1.2 + i/10 s: hold takes the state sampled then (every 20 ms), and the command
    // sent 16 ms before (commands are at 4 ms past the states' times).
    const state = episode.vectors['observation.state']!;
    const action = episode.vectors.action!;
    for (let i = 0; i < episode.length; i++) {
      const held = 200 + 100 * i;
      expect([state[2 * i], state[2 * i + 1]]).toEqual([held, 1000 - held]);
      expect(action[2 * i]).toBe(held - 16);
    }
    const cam = episode.cameras['observation.images.front']!;
    expect([cam.width, cam.height]).toEqual([4, 3]);
    const firsts: number[] = [];
    for await (const f of cam.frames) {
      expect(f.length).toBe(4 * 3 * 3);
      firsts.push(f[0]!);
    }
    // Frames at 1.2, 1.4, …, 2.0 s (pixel value t/100); frame i at 1.2 + i/10 takes the nearest
    // (1.3 s is as far from 1.2 as from 1.4: the earlier).
    expect(firsts).toEqual([2, 2, 4, 4, 6, 6, 8, 8, 10]);
  });

  it('action from the next state, linear, task from metadata', async () => {
    const path = join(dir, 'recording.mcap');
    await writeMcap(path, simulatorLike(400));
    const mapping = parseMapping({
      fps: 20,
      task: { from: 'metadata', key: 'site' },
      stateRule: 'linear',
      features: {
        'observation.state': { topic: '/joint_states', fields: ['position', 'velocity'], names_from: 'name' },
        action: { from_next_state: true, fields: ['position'] },
      },
    });
    await using loaded = await loadGridEpisode(path, line({ outcome: 'failure' }), mapping);
    const { episode, shape } = loaded;
    expect(episode.task).toBe('lab-2');
    expect(episode.success).toBe(false);
    // Only /joint_states is mapped: start 1.0 s, end 1.4 s, at 20 fps.
    expect(episode.length).toBe(9);
    expect(shape.vectors['observation.state']!.names).toEqual(['shoulder.position', 'elbow.position', 'shoulder.velocity', 'elbow.velocity']);
    expect(shape.vectors.action!.names).toEqual(NAMES);
    const state = episode.vectors['observation.state']!;
    const action = episode.vectors.action!;
    for (let i = 0; i < episode.length; i++) {
      expect([...state.subarray(4 * i, 4 * i + 4)]).toEqual([50 * i, 1000 - 50 * i, 1, 1]);
      expect(action[2 * i]).toBe(50 * Math.min(i + 1, 8));
    }
  });

  it('streams that never overlap are too_short', async () => {
    const path = join(dir, 'recording.mcap');
    const [states, , camera] = simulatorLike(1000);
    // The camera's only frame (1.2 s) ends before the states start (1.6 s).
    await writeMcap(path, [{ ...states!, messages: states!.messages.slice(30) }, { ...camera!, messages: camera!.messages.slice(0, 1) }]);
    const mapping = parseMapping({ features: { 'observation.state': DEFAULT_MAPPING.features['observation.state'], 'observation.images.front': { topic: '/camera/image' } } });
    await expect(loadGridEpisode(path, line(), mapping)).rejects.toMatchObject({ code: 'too_short' });
    await expect(loadGridEpisode(path, line(), mapping)).rejects.toThrow('vector topic /joint_states starts at 1600000000 ns, 400 ms after camera topic /camera/image ends (1200000000 ns)');
    // A mapped topic without a single message.
    await writeMcap(path, [states!, { ...camera!, messages: [] }]);
    await expect(loadGridEpisode(path, line(), mapping)).rejects.toMatchObject({ code: 'too_short' });
  });

  it('a mapping that does not fit and a missing task are refused before any frame', async () => {
    const path = join(dir, 'recording.mcap');
    await writeMcap(path, simulatorLike(400));
    await expect(loadGridEpisode(path, line(), parseMapping({ features: { 'observation.images.wrist': { topic: '/camera/wrist/image' } } }))).rejects.toThrow(
      'the recording has no topic /camera/wrist/image',
    );
    await expect(loadGridEpisode(path, line({ task_id: null }), DEFAULT_MAPPING)).rejects.toMatchObject({ code: 'task_missing' });
  });

  it('a last camera frame of another size (a recorder stopping between frames) ends the camera one frame earlier; a change mid-episode is shape_changed', async () => {
    const channels = simulatorLike(1400);
    const camera = channels[2]!;
    const lastTime = camera.messages.at(-1)!.logTimeNs;
    camera.messages.push({ logTimeNs: lastTime + ms(100), data: rawImage(4, 2, 9) });
    const path = join(dir, 'short-last.mcap');
    await writeMcap(path, channels);
    await using loaded = await loadGridEpisode(path, line(), DEFAULT_MAPPING);
    // The grid ends at the last full-size frame, as without the short one.
    const plainPath = join(dir, 'plain.mcap');
    await writeMcap(plainPath, simulatorLike(1400));
    await using plain = await loadGridEpisode(plainPath, line(), DEFAULT_MAPPING);
    expect(loaded.episode.length).toBe(plain.episode.length);
    let frames = 0;
    for await (const f of loaded.episode.cameras['observation.images.front']!.frames) {
      expect(f.length).toBe(4 * 3 * 3);
      frames++;
    }
    expect(frames).toBe(loaded.episode.length);

    const mid = simulatorLike(1400);
    mid[2]!.messages[2] = { logTimeNs: mid[2]!.messages[2]!.logTimeNs, data: rawImage(4, 2, 9) };
    const midPath = join(dir, 'mid.mcap');
    await writeMcap(midPath, mid);
    await using changed = await loadGridEpisode(midPath, line(), DEFAULT_MAPPING);
    const drain = async () => {
      for await (const f of changed.episode.cameras['observation.images.front']!.frames) void f;
    };
    await expect(drain()).rejects.toMatchObject({ code: 'shape_changed' });
  });
});

describe('loadGridEpisode: joined features, staleness, bad streams', () => {
  /** A JointState topic at `periodMs` from `fromMs` to `untilMs` (inclusive), position = [sign * t]. */
  const arm = (topic: string, joint: string, fromMs: number, untilMs: number, periodMs: number, sign = 1): FixtureChannel => ({
    topic,
    schemaName: 'fleet.JointState',
    schema: JOINT_STATE_JSON_SCHEMA,
    messages: Array.from({ length: Math.floor((untilMs - fromMs) / periodMs) + 1 }, (_, i) => fromMs + i * periodMs).map((t) => ({ logTimeNs: ms(t), data: jointState([joint], [sign * t]) })),
  });

  it('a joined feature: each part on the grid by itself, then concatenated with its names; every part bounds the grid', async () => {
    const path = join(dir, 'two-arms.mcap');
    // The left arm at 50 Hz from 1.0 s to 2.0 s, the right at 25 Hz from 1.1 s to 1.9 s.
    await writeMcap(path, [arm('/left/joint_states', 'l1', 1000, 2000, 20), arm('/right/joint_states', 'r1', 1100, 1900, 40, -1)]);
    const mapping = parseMapping({
      features: {
        'observation.state': { join: [{ topic: '/left/joint_states', fields: ['position'], names_from: 'name' }, { topic: '/right/joint_states', fields: ['position', 'velocity'], names_from: 'name' }] },
        action: { topic: '/left/joint_states', fields: ['position'] },
      },
    });
    await using loaded = await loadGridEpisode(path, line(), mapping);
    const { episode, shape } = loaded;
    // From 1.1 s (the right arm's first) to 1.9 s (its last).
    expect(episode.length).toBe(9);
    expect(shape.vectors['observation.state']).toEqual({ shape: [3], names: ['l1', 'r1.position', 'r1.velocity'] });
    const state = episode.vectors['observation.state']!;
    for (let i = 0; i < episode.length; i++) {
      const t = 1100 + 100 * i;
      // The right arm holds its sample of floor((t - 1100) / 40) * 40 + 1100 ms.
      const right = 1100 + Math.floor((t - 1100) / 40) * 40;
      expect([...state.subarray(3 * i, 3 * i + 3)]).toEqual([t, -right, 0]);
    }
  });

  it('a joined part missing from the recording is mapping_invalid naming the feature and the topic', async () => {
    const path = join(dir, 'one-arm.mcap');
    await writeMcap(path, [arm('/left/joint_states', 'l1', 1000, 2000, 20)]);
    const mapping = parseMapping({ features: { 'observation.state': { join: [{ topic: '/left/joint_states', fields: ['position'] }, { topic: '/right/joint_states', fields: ['position'] }] } } });
    const err: unknown = await loadGridEpisode(path, line(), mapping).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'mapping_invalid' });
    expect((err as Error).message).toBe('mapping_invalid: the recording has no topic /right/joint_states (feature observation.state, join part 2 of 2)');
  });

  it('a gap over max_staleness_ms skips with stale_stream naming feature, topic, frame and gap; without a tolerance it loads', async () => {
    const channels = simulatorLike(1000);
    // The states stop between 1.3 s and 1.7 s (a driver that hung).
    channels[0]!.messages = channels[0]!.messages.filter((m) => m.logTimeNs <= ms(1300) || m.logTimeNs >= ms(1700));
    const path = join(dir, 'gap.mcap');
    await writeMcap(path, channels);
    await using plain = await loadGridEpisode(path, line(), DEFAULT_MAPPING);
    expect(plain.episode.length).toBe(9);
    // Frames from 1.2 s: frame 2 (1.4 s) holds the 1.3 s sample at the tolerance, frame 3 (1.5 s) is 200 ms past it.
    const err: unknown = await loadGridEpisode(path, line(), parseMapping({ ...DEFAULT_MAPPING, max_staleness_ms: 100 })).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'stale_stream' });
    expect((err as Error).message).toBe(
      'stale_stream: feature observation.state: topic /joint_states has its latest sample 200 ms from frame 3 (t = 300 ms into the episode, 1500000000 ns), more than max_staleness_ms 100',
    );
    // The feature's own tolerance overrides the mapping's.
    const lenient = parseMapping({ ...DEFAULT_MAPPING, max_staleness_ms: 100, features: { ...DEFAULT_MAPPING.features, 'observation.state': { topic: '/joint_states', fields: ['position'], max_staleness_ms: 400 } } });
    await using loaded = await loadGridEpisode(path, line(), lenient);
    expect(loaded.episode.length).toBe(9);
  });

  it('header stamps that go backwards are corrupt_recording', async () => {
    const stamped = (t: number, stampMs: number) => ({ logTimeNs: ms(t), data: { header: { stamp: { sec: Math.floor(stampMs / 1000), nanosec: (stampMs % 1000) * 1_000_000 }, frame_id: '' }, name: ['a'], position: [t] } });
    const path = join(dir, 'backwards.mcap');
    await writeMcap(path, [{ topic: '/joint_states', schemaName: 'sensor_msgs/msg/JointState', messages: [stamped(1000, 1000), stamped(1020, 1020), stamped(1040, 1010)] }]);
    const err: unknown = await loadGridEpisode(path, line(), parseMapping({ features: { 'observation.state': { topic: '/joint_states', fields: ['position'] } } })).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'corrupt_recording' });
    expect((err as Error).message).toContain('the stamps of /joint_states go backwards: 1010000000 ns after 1020000000 ns');
  });
});
