import { describe, expect, it } from 'vitest';
import { isSourceError } from './errors.js';
import type { VectorPlan } from './mapping.js';
import { rawImage } from './fixtures.js';
import type { RecordingMessage } from './mcap.js';
import { decodeRawImage, gridTimeNs, makeGrid, nearestFrames, readVectorSamples, resampleVector, type Grid, type VectorSamples } from './resample.js';

const ms = (n: number) => BigInt(n) * 1_000_000n;

function samples(timesMs: number[], value: (t: number) => number[]): VectorSamples {
  const values = timesMs.flatMap(value);
  return { key: 'observation.state', topic: '/joint_states', label: 'feature observation.state', dim: value(0).length, names: [], timesNs: timesMs.map(ms), values };
}

async function* messagesOf(list: { t: number; data: unknown }[], topic = '/cam'): AsyncGenerator<RecordingMessage> {
  for (const m of list) yield { topic, logTimeNs: ms(m.t), data: m.data };
}

async function collect(it: AsyncIterable<Uint8Array>): Promise<Uint8Array[]> {
  const out: Uint8Array[] = [];
  for await (const f of it) out.push(f);
  return out;
}

describe('makeGrid', () => {
  it('starts when every stream has a sample and ends when the first stream ends', () => {
    const grid = makeGrid(10, [
      { topic: '/joint_states', kind: 'vector', firstNs: ms(5), lastNs: ms(1000) },
      { topic: '/joint_commands', kind: 'vector', firstNs: ms(12), lastNs: ms(990) },
      { topic: '/camera/image', kind: 'camera', firstNs: ms(200), lastNs: ms(812) },
    ]);
    // A camera bounds the start like a vector: no frame is read before its first image.
    expect(grid.startNs).toBe(ms(200));
    // floor((812 - 200) ms * 10 / s) + 1
    expect(grid.length).toBe(7);
    expect(gridTimeNs(grid, 6)).toBe(ms(800));
    // With the camera starting first, the latest vector start is the start.
    expect(makeGrid(10, [{ topic: '/joint_states', kind: 'vector', firstNs: ms(30), lastNs: ms(1000) }, { topic: '/camera/image', kind: 'camera', firstNs: ms(10), lastNs: ms(900) }]).startNs).toBe(ms(30));
  });

  it('streams that never overlap are too_short naming the stream that starts last and the one that ends first', () => {
    const disjoint = () =>
      makeGrid(10, [
        { topic: '/joint_states', kind: 'vector', firstNs: ms(0), lastNs: ms(2000) },
        { topic: '/camera/image', kind: 'camera', firstNs: ms(0), lastNs: ms(100) },
        { topic: '/gripper', kind: 'vector', firstNs: ms(350), lastNs: ms(2000) },
      ]);
    expect(disjoint).toThrow(expect.objectContaining({ code: 'too_short' }));
    expect(disjoint).toThrow('the streams do not overlap: vector topic /gripper starts at 350000000 ns, 250 ms after camera topic /camera/image ends (100000000 ns)');
  });

  it('is one frame when the streams overlap at one instant, too_short when they do not', () => {
    expect(makeGrid(10, [{ topic: '/a', kind: 'vector', firstNs: ms(50), lastNs: ms(50) }]).length).toBe(1);
    const disjoint = () =>
      makeGrid(10, [
        { topic: '/a', kind: 'vector', firstNs: ms(0), lastNs: ms(100) },
        { topic: '/b', kind: 'vector', firstNs: ms(101), lastNs: ms(500) },
      ]);
    expect(disjoint).toThrow(expect.objectContaining({ code: 'too_short' }));
    expect(() => makeGrid(10, [{ topic: '/a', kind: 'vector', firstNs: undefined, lastNs: undefined }])).toThrow(expect.objectContaining({ code: 'too_short' }));
  });

  it('rounds grid times to the nearest ns for an fps that does not divide a second', () => {
    const grid = { startNs: 0n, fps: 3, length: 4 };
    expect([0, 1, 2, 3].map((i) => gridTimeNs(grid, i))).toEqual([0n, 333_333_333n, 666_666_667n, 1_000_000_000n]);
  });
});

describe('resampleVector', () => {

  // Samples every 30 ms of a ramp (value = time in ms) and its double.
  const ramp = samples(
    Array.from({ length: 35 }, (_, i) => i * 30),
    (t) => [t, 2 * t],
  );
  const grid: Grid = { startNs: 0n, fps: 10, length: 10 };

  it('hold: the latest sample at or before each frame time i / fps', () => {
    const v = resampleVector(ramp, grid, 'hold');
    for (let i = 0; i < grid.length; i++) {
      const held = Math.floor((i * 100) / 30) * 30;
      expect([v[i * 2], v[i * 2 + 1]]).toEqual([held, 2 * held]);
    }
  });

  it('linear: interpolated, exact on a ramp', () => {
    const v = resampleVector(ramp, grid, 'linear');
    for (let i = 0; i < grid.length; i++) expect([v[i * 2], v[i * 2 + 1]]).toEqual([i * 100, i * 200]);
  });

  it('nearest: the sample nearest each frame time, a tie to the earlier one', () => {
    // Samples at 0, 70, 150, 260 ms; frames at 0, 100, 200, 300 ms.
    const s = samples([0, 70, 150, 260], (t) => [t]);
    const g: Grid = { startNs: 0n, fps: 10, length: 4 };
    // 100: 70 (30 ms) over 150 (50 ms); 200: 150 and 260 are 50 and 60 ms away; 300: past the last.
    expect([...resampleVector(s, g, 'nearest')]).toEqual([0, 70, 150, 260]);
    const tie = samples([50, 150], (t) => [t]);
    expect([...resampleVector(tie, { startNs: ms(100), fps: 10, length: 1 }, 'nearest')]).toEqual([50]);
  });

  it('the next state: frame i reads t_(i+1); the last frame has no next one and keeps its own', () => {
    const short = samples([0, 100, 200], (t) => [t]);
    const g: Grid = { startNs: 0n, fps: 10, length: 3 };
    expect([...resampleVector(short, g, 'hold', { offsetFrames: 1 })]).toEqual([100, 200, 200]);
    expect([...resampleVector(short, g, 'linear', { offsetFrames: 1 })]).toEqual([100, 200, 200]);
    // The stream goes on past the grid's last frame (another stream ended it): the last frame's
    // action is still its own state (200), not a sample from after the episode's end (250, 300).
    const longer = samples([0, 100, 200, 250, 300], (t) => [t]);
    expect([...resampleVector(longer, g, 'hold', { offsetFrames: 1 })]).toEqual([100, 200, 200]);
    expect([...resampleVector(longer, g, 'hold')].at(-1)).toBe(200);
  });

  it('the first frame takes the first sample when it is later than the grid start', () => {
    const late = samples([50, 150], (t) => [t]);
    expect([...resampleVector(late, { startNs: 0n, fps: 10, length: 2 }, 'hold')]).toEqual([50, 50]);
    expect([...resampleVector(late, { startNs: 0n, fps: 10, length: 2 }, 'linear')]).toEqual([50, 100]);
  });
});

describe('resampleVector: max staleness', () => {
  // Samples every 20 ms, with nothing between 200 and 400 ms (a dropped topic).
  const gappy = samples([0, 20, 40, 60, 80, 100, 120, 140, 160, 180, 200, 400, 420], (t) => [t]);
  const grid: Grid = { startNs: 0n, fps: 10, length: 5 }; // 0, 100, …, 400 ms
  const stale = (rule: 'hold' | 'nearest' | 'linear', maxMs: number) => () => resampleVector(gappy, grid, rule, { maxStalenessNs: ms(maxMs) });
  const message = (f: () => unknown): string => {
    try {
      f();
    } catch (err) {
      expect(err).toMatchObject({ code: 'stale_stream' });
      return (err as Error).message;
    }
    throw new Error('did not throw');
  };

  it('hold: the held sample\'s age; frame 3 (300 ms) holds the sample of 200 ms', () => {
    expect(message(stale('hold', 99))).toBe(
      'stale_stream: feature observation.state: topic /joint_states has its latest sample 100 ms from frame 3 (t = 300 ms into the episode, 300000000 ns), more than max_staleness_ms 99',
    );
    // Within the tolerance (inclusive): the values are those without one.
    expect([...resampleVector(gappy, grid, 'hold', { maxStalenessNs: ms(100) })]).toEqual([...resampleVector(gappy, grid, 'hold')]);
  });

  it('nearest: the distance to the nearest sample (frame 3 is 100 ms from 200 and from 400)', () => {
    expect(message(stale('nearest', 99))).toContain('has its nearest sample 100 ms from frame 3');
    expect(() => stale('nearest', 100)()).not.toThrow();
  });

  it('linear: the distance to the farther neighbour; past the last sample, to that one sample', () => {
    // Frame 3 (300 ms) interpolates 200 and 400: the farther is 100 ms away, though the gap is 200 ms wide.
    expect(message(stale('linear', 99))).toContain('has a sample it interpolates 100 ms from frame 3');
    expect(() => stale('linear', 100)()).not.toThrow();
    // Frame 2 (200 ms) is a sample's own time: no distance at all.
    const exact = samples([0, 200], (t) => [t]);
    expect(() => resampleVector(exact, { startNs: ms(200), fps: 10, length: 1 }, 'linear', { maxStalenessNs: 1n })).not.toThrow();
    // Clamped past the last sample (at 200 ms): frame 1 at 300 ms is 100 ms from it.
    expect(message(() => resampleVector(exact, { startNs: ms(200), fps: 10, length: 2 }, 'linear', { maxStalenessNs: ms(50) }))).toContain('100 ms from frame 1');
  });

  it('the next state measures from the time it is read at', () => {
    // Frame 2's action is read at 300 ms: the held sample (200 ms) is 100 ms old.
    expect(message(() => resampleVector(gappy, grid, 'hold', { offsetFrames: 1, maxStalenessNs: ms(60) }))).toContain("100 ms from frame 2 (t = 300 ms into the episode, 300000000 ns, read at frame 3's time)");
  });

  it('unset is no limit', () => {
    const sparse = samples([0, 10_000], (t) => [t]);
    expect(resampleVector(sparse, { startNs: 0n, fps: 10, length: 100 }, 'hold')).toHaveLength(100);
  });
});

describe('readVectorSamples', () => {
  const plan: VectorPlan = { key: 'observation.state', topic: '/joint_states', fields: ['position', 'velocity'], namesFrom: 'name', names: undefined, rule: 'hold', offsetFrames: 0 };

  it('a joined part is named with its part in messages', async () => {
    const part: VectorPlan = { ...plan, part: { index: 1, of: 2 } };
    const strings = messagesOf([{ t: 0, data: { name: ['a'], position: ['x'], velocity: [1] } }], '/joint_states');
    await expect(readVectorSamples(strings, [part])).rejects.toThrow('(feature observation.state, join part 2 of 2)');
  });

  it('concatenates the fields and names them <name>.<field>', async () => {
    const msgs = messagesOf(
      [
        { t: 0, data: { name: ['a', 'b'], position: [1, 2], velocity: [3, 4] } },
        { t: 10, data: { name: ['a', 'b'], position: [5, 6], velocity: [7, 8] } },
      ],
      '/joint_states',
    );
    const [s] = await readVectorSamples(msgs, [plan]);
    expect(s).toMatchObject({ dim: 4, names: ['a.position', 'b.position', 'a.velocity', 'b.velocity'], timesNs: [0n, ms(10)], values: [1, 2, 3, 4, 5, 6, 7, 8] });
  });

  it('a dimension that changes mid-episode is shape_changed; a field that is not numbers names the field and topic', async () => {
    const changed = messagesOf(
      [
        { t: 0, data: { name: ['a'], position: [1], velocity: [1] } },
        { t: 10, data: { name: ['a'], position: [1, 2], velocity: [1] } },
      ],
      '/joint_states',
    );
    await expect(readVectorSamples(changed, [plan])).rejects.toMatchObject({ code: 'shape_changed' });
    const strings = messagesOf([{ t: 0, data: { name: ['a'], position: ['x'], velocity: [1] } }], '/joint_states');
    const err: unknown = await readVectorSamples(strings, [plan]).catch((e: unknown) => e);
    expect(isSourceError(err, 'mapping_invalid')).toBe(true);
    expect((err as Error).message).toContain('field position of /joint_states is not a number or an array of numbers');
  });
});

describe('readVectorSamples: stamps', () => {
  it('uses each message time (the stamp rule), and a stream whose stamps go backwards is corrupt_recording', async () => {
    const plan: VectorPlan = { key: 'observation.state', topic: '/j', fields: ['position'], namesFrom: undefined, names: undefined, rule: 'hold', offsetFrames: 0 };
    async function* msgs(times: bigint[]) {
      for (const [i, t] of times.entries()) yield { topic: '/j', logTimeNs: BigInt(i), timeNs: t, data: { position: Float64Array.of(i) } };
    }
    const [s] = await readVectorSamples(msgs([10n, 20n]), [plan]);
    expect(s).toMatchObject({ timesNs: [10n, 20n], values: [0, 1], names: ['position.0'] });
    await expect(readVectorSamples(msgs([10n, 5n]), [plan])).rejects.toThrow(/corrupt_recording: the stamps of \/j go backwards/);
  });

  it('joints picked by name, in the mapping\'s order, from messages that order them differently', async () => {
    const plan: VectorPlan = { key: 'observation.state', topic: '/j', fields: ['position'], namesFrom: undefined, names: undefined, joints: ['b', 'a'], rule: 'hold', offsetFrames: 0 };
    async function* msgs() {
      yield { topic: '/j', logTimeNs: 0n, data: { name: ['a', 'b', 'c'], position: Float64Array.of(1, 2, 3) } };
      yield { topic: '/j', logTimeNs: 1n, data: { name: ['c', 'b', 'a'], position: Float64Array.of(6, 5, 4) } };
    }
    const [s] = await readVectorSamples(msgs(), [plan]);
    expect(s).toMatchObject({ names: ['b', 'a'], values: [2, 1, 5, 4] });
    async function* lacking() {
      yield { topic: '/j', logTimeNs: 0n, data: { name: ['a'], position: [1] } };
    }
    await expect(readVectorSamples(lacking(), [plan])).rejects.toMatchObject({ code: 'mapping_invalid' });
  });
});

describe('nearestFrames', () => {
  const size = { width: 2, height: 1 };
  const frame = (v: number) => rawImage(2, 1, v);

  it('takes the image nearest each frame time', async () => {
    const msgs = messagesOf([0, 150, 300, 450].map((t) => ({ t, data: frame(t / 10) })));
    const frames = await collect(nearestFrames(msgs, { startNs: 0n, fps: 10, length: 5 }, size, '/cam'));
    expect(frames.map((f) => f[0])).toEqual([0, 15, 15, 30, 45]);
    expect(frames.every((f) => f.length === 2 * 1 * 3)).toBe(true);
  });

  it('a tie goes to the earlier image', async () => {
    const msgs = messagesOf([
      { t: 0, data: frame(1) },
      { t: 200, data: frame(2) },
    ]);
    const frames = await collect(nearestFrames(msgs, { startNs: 0n, fps: 10, length: 3 }, size, '/cam'));
    expect(frames.map((f) => f[0])).toEqual([1, 1, 2]);
  });

  it('an image farther than max staleness from its frame time is stale_stream; within it, the same frames', async () => {
    // Images at 0, 100, 400 ms (the camera froze between); frames at 0 … 400 ms.
    const list = [0, 100, 400].map((t) => ({ t, data: frame(t / 10) }));
    const grid = { startNs: 0n, fps: 10, length: 5 };
    const err: unknown = await collect(nearestFrames(messagesOf(list), grid, size, '/cam', undefined, { key: 'observation.images.front', maxStalenessNs: ms(99) })).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'stale_stream' });
    // Frame 2 (200 ms) is 100 ms from both neighbours; it takes the earlier one.
    expect((err as Error).message).toBe(
      'stale_stream: feature observation.images.front: topic /cam has its nearest image 100 ms from frame 2 (t = 200 ms into the episode, 200000000 ns), more than max_staleness_ms 99',
    );
    const frames = await collect(nearestFrames(messagesOf(list), grid, size, '/cam', undefined, { maxStalenessNs: ms(100) }));
    expect(frames.map((f) => f[0])).toEqual([0, 10, 10, 40, 40]);
  });

  it('an image whose stamp goes backwards is corrupt_recording', async () => {
    const msgs = messagesOf([0, 200, 100].map((t) => ({ t, data: frame(1) })));
    await expect(collect(nearestFrames(msgs, { startNs: 0n, fps: 10, length: 3 }, size, '/cam'))).rejects.toThrow(/corrupt_recording: the stamps of \/cam go backwards/);
  });

  it('a frame of another size is shape_changed', async () => {
    const msgs = messagesOf([
      { t: 0, data: frame(1) },
      { t: 100, data: rawImage(3, 1, 2) },
    ]);
    await expect(collect(nearestFrames(msgs, { startNs: 0n, fps: 10, length: 2 }, size, '/cam'))).rejects.toMatchObject({ code: 'shape_changed' });
  });
});

describe('decodeRawImage', () => {
  const pixels = Uint8Array.from([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]); // 2 x 2

  it('drops the row padding of step', () => {
    const f = decodeRawImage(rawImage(2, 2, 0, { step: 8, pixels }), 'x');
    expect([...f.pixels]).toEqual([...pixels]);
  });

  it('swaps bgr8 to rgb', () => {
    const f = decodeRawImage(rawImage(2, 2, 0, { encoding: 'bgr8', pixels }), 'x');
    expect([...f.pixels]).toEqual([3, 2, 1, 6, 5, 4, 9, 8, 7, 12, 11, 10]);
  });

  it('refuses other encodings and short data with bad_image', () => {
    expect(() => decodeRawImage(rawImage(2, 2, 0, { encoding: 'mono16' }), 'x')).toThrow(expect.objectContaining({ code: 'bad_image' }));
    expect(() => decodeRawImage({ ...rawImage(2, 2, 0), data: 'AAAA' }, 'x')).toThrow(expect.objectContaining({ code: 'bad_image' }));
  });
});
