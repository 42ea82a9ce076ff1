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
    // start = 1.004 s (the commands' first sample), end = 2.000 s (the camera's last frame and the
    // states' last sample): floor(0.996 * 10) + 1 frames.
    expect(episode.length).toBe(10);
    expect(episode).toMatchObject({ episodeId: 'ep_0123456789abcdef', task: 'pick-cube', success: true, metadata: { site: 'lab-2', attempt: '3', absent: '' } });
    expect(shape).toEqual({
      fps: 10,
      robotType: 'fleet-sim-arm',
      vectors: { 'observation.state': { shape: [2], names: NAMES }, action: { shape: [2], names: NAMES } },
      cameras: { 'observation.images.front': { width: 4, height: 3 } },
      metadataKeys: ['site', 'attempt', 'absent'],
    });
    // Frame i at 1.004 + i/10 s: hold takes the state sampled at 1.000 + 20 * floor((4 + 100 i) / 20) ms.
    const state = episode.vectors['observation.state']!;
    const action = episode.vectors.action!;
    for (let i = 0; i < episode.length; i++) {
      const held = Math.floor((4 + 100 * i) / 20) * 20;
      expect([state[2 * i], state[2 * i + 1]]).toEqual([held, 1000 - held]);
      expect(action[2 * i]).toBe(100 * i + 4);
    }
    const cam = episode.cameras['observation.images.front']!;
    expect([cam.width, cam.height]).toEqual([4, 3]);
    const firsts: number[] = [];
    for await (const f of cam.frames) {
      expect(f.length).toBe(4 * 3 * 3);
      firsts.push(f[0]!);
    }
    // Frames at 1.2, 1.4, …, 2.0 s (pixel value t/100); frame i at 1.004 + i/10 takes the nearest.
    expect(firsts).toEqual([2, 2, 2, 4, 4, 6, 6, 8, 8, 10]);
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
