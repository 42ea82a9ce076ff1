/**
 * The playback engine's plot window, in Node (the engine is DOM-free, with an injected clock):
 * over a real MCAP read through a byte source that counts what it is asked for. The window
 * holds the plotted numbers of exactly the messages in its range, whether it was read whole or
 * grown from the previous one while playing; a window being read for a place the playhead left
 * is given up. (The player in chromium: player.test.ts.)
 */
import { describe, expect, test } from 'vitest';
import { bytesSource, openMcap, type ByteSource } from '@fleet/recordings';
import { writeMcap, T0, type WrittenMcap } from '../../packages/recordings/src/test-mcaps.js';
import { PlaybackEngine, WINDOW_NS, type EngineClock, type PlotWindow } from '../src/player/engine.js';
import { RecordingSet } from '../src/player/recording-set.js';

const TOPIC = '/a';
/** 60 s of one numeric topic at 10 ms, in zstd chunks of 16 KiB before compression (0.65 s each). */
const COUNT = 6000;
const mcap = () => writeMcap({ count: COUNT, topics: [TOPIC], compression: 'zstd', padBytes: 200, chunkSize: 16 * 1024 });

interface Counted extends ByteSource {
  bytes: number;
  /** While set, reads wait for it. */
  gate: Promise<void> | undefined;
}

function counted(bytes: Uint8Array): Counted {
  const inner = bytesSource(bytes);
  const src: Counted = {
    size: inner.size,
    bytes: 0,
    gate: undefined,
    read: async (offset, length) => {
      if (src.gate) await src.gate;
      src.bytes += Number(length);
      return inner.read(offset, length);
    },
  };
  return src;
}

/** A clock the test moves: `step(ms)` advances it and runs the frame the engine asked for. */
function manualClock() {
  let now = 0;
  let pending: (() => void) | undefined;
  const clock: EngineClock = {
    now: () => now,
    frame: (cb) => ((pending = cb), 1),
    cancel: () => (pending = undefined),
  };
  return {
    clock,
    step(ms: number) {
      now += ms;
      const cb = pending;
      pending = undefined;
      cb?.();
    },
  };
}

/** Yields to pending reads until `cond` holds (bounded by a generous count of turns, not a time). */
async function until(cond: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 200_000; i++) {
    if (cond()) return;
    await new Promise((r) => setImmediate(r));
  }
  throw new Error(`never: ${what}`);
}

/** What a window over [from, to] must hold: each message in it, its time in s from the start and its `i`. */
function expected(file: WrittenMcap, w: PlotWindow): { t: number[]; i: number[] } {
  const inIt = file.messages.filter((m) => m.logTime >= w.fromNs && m.logTime <= w.toNs);
  return { t: inIt.map((m) => Number(m.logTime - T0) / 1e9), i: inIt.map((m) => (JSON.parse(m.text) as { i: number }).i) };
}

function held(w: PlotWindow): { t: number[]; i: number[] } {
  const topic = w.topics.get(TOPIC)!;
  return { t: [...topic.t], i: [...topic.values.get('i')!] };
}

async function engineOver(file: WrittenMcap) {
  const src = counted(file.bytes);
  const rec = await openMcap(src, { name: 'test.mcap' });
  const clock = manualClock();
  const engine = new PlaybackEngine(new RecordingSet([rec]), clock.clock);
  return { src, engine, clock };
}

describe('the plot window', () => {
  test('holds exactly its range; playing on grows it from the previous one, reading only the new seconds', async () => {
    const file = await mcap();
    const { src, engine, clock } = await engineOver(file);
    await engine.start();
    expect([...engine.selectedSeries]).toEqual([`${TOPIC} i`]);
    await until(() => engine.snapshot().window !== undefined, 'the first window');
    const first = engine.snapshot().window!;
    expect([first.fromNs, first.toNs]).toEqual([T0, T0 + WINDOW_NS]);
    expect(first.capped).toBe(false);
    expect(held(first)).toEqual(expected(file, first));
    expect(first.topics.get(TOPIC)!.t.length).toBe(1001);

    // What a whole window costs to read, for comparison.
    const before = src.bytes;
    engine.seek(T0 + 30_000_000_000n);
    await until(() => engine.snapshot().window?.fromNs !== first.fromNs, 'the window at 30 s');
    const whole = src.bytes - before;
    const at30 = engine.snapshot().window!;
    expect(held(at30)).toEqual(expected(file, at30));

    // Past the window's last quarter (paused, as while playing): the next window keeps what it
    // shares with this one and reads only the seconds it moved ahead.
    const readBefore = src.bytes;
    engine.seek(at30.toNs - WINDOW_NS / 4n + 300_000_000n);
    await until(() => engine.snapshot().window!.fromNs !== at30.fromNs, 'the window moved on');
    const next = engine.snapshot().window!;
    expect(next.toNs - next.fromNs).toBe(WINDOW_NS);
    expect(next.fromNs).toBeGreaterThan(at30.fromNs);
    expect(next.fromNs).toBeLessThan(at30.toNs);
    expect(held(next)).toEqual(expected(file, next));
    // The same reverse read for the readout as the seek to 30 s, then the 4.5 s the window moved
    // (this source has no cache: the chunk across the old window's end is read again).
    expect(src.bytes - readBefore).toBeLessThan(whole * 0.7);

    // Playing on from there keeps the window exact as it moves.
    engine.play();
    const queue = engine as unknown as { queue: { logTimeNs: bigint }[]; pumpDone: boolean };
    for (let k = 0; k < 200; k++) {
      clock.step(50);
      await until(() => queue.pumpDone || (queue.queue.at(-1)?.logTimeNs ?? 0n) > engine.playheadNs + 100_000_000n, 'the forward read ahead of the playhead');
    }
    engine.pause();
    await until(() => !(engine as unknown as { windowLoading: boolean }).windowLoading, 'the window reads done');
    const played = engine.snapshot().window!;
    expect(played.fromNs).toBeGreaterThan(next.fromNs);
    expect(engine.playheadNs).toBeGreaterThanOrEqual(played.fromNs);
    expect(engine.playheadNs).toBeLessThanOrEqual(played.toNs);
    expect(held(played)).toEqual(expected(file, played));
    await engine.close();
  });

  test('a window being read for a place the playhead left is given up, and the window shown is the new place', async () => {
    const file = await mcap();
    const { src, engine } = await engineOver(file);
    // The first window's reads wait: the gate closes when the first readout is shown, just
    // before the engine asks for the window; the playhead moves to 40 s meanwhile.
    let release!: () => void;
    const shown: bigint[] = [];
    engine.subscribe((snap) => {
      if (snap.readout.size > 0 && release === undefined) src.gate = new Promise<void>((r) => (release = r));
      if (snap.window && shown.at(-1) !== snap.window.fromNs) shown.push(snap.window.fromNs);
    });
    await engine.start();
    await until(() => (engine as unknown as { windowRead?: unknown }).windowRead !== undefined && release !== undefined, 'the first window being read');
    engine.seek(T0 + 40_000_000_000n);
    src.gate = undefined;
    release();
    await until(() => engine.snapshot().window !== undefined, 'a window');
    const w = engine.snapshot().window!;
    // Only the window around 40 s was ever shown: the first one was dropped unfinished.
    expect(shown).toEqual([w.fromNs]);
    expect(w.fromNs).toBeLessThanOrEqual(T0 + 40_000_000_000n);
    expect(w.toNs).toBeGreaterThanOrEqual(T0 + 40_000_000_000n);
    expect(held(w)).toEqual(expected(file, w));
    const bytesAfter = src.bytes;
    // Nothing more is read once it is there.
    await until(() => !(engine as unknown as { windowLoading: boolean }).windowLoading, 'the window reads done');
    expect(src.bytes).toBe(bytesAfter);
    await engine.close();
  });

  test('a plotted leaf a message lacks is NaN in its column, not a shifted value', async () => {
    // Every message of writeMcap has `i`; the builder's gaps are checked directly.
    const { ColumnsBuilder } = await import('../src/player/series.js');
    const b = new ColumnsBuilder(['x', 'y']);
    for (let k = 0; k < 100; k++) b.push(k / 10, new Map(k % 3 === 0 ? [['x', k]] : [['x', k], ['y', -k]]));
    const done = b.done();
    expect(done.t.length).toBe(100);
    expect(Number.isNaN(done.values.get('y')![0]!)).toBe(true);
    expect(done.values.get('y')![1]).toBe(-1);
    const part = new ColumnsBuilder(['x', 'y']);
    part.pushRange(done, 2, 3);
    expect([...part.done().t]).toEqual(Array.from({ length: 11 }, (_, k) => (20 + k) / 10));
    expect([...part.done().values.get('x')!]).toEqual(Array.from({ length: 11 }, (_, k) => 20 + k));
  });
});
