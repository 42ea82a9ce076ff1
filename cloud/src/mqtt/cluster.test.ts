import { ManualClock } from '@fleet/protocol';
import { describe, expect, test } from 'vitest';
import { NodeLiveness } from './cluster.js';

const HB = 1000;

describe('NodeLiveness', () => {
  test('a node silent for three of this node\'s own heartbeats is dead, reported once', () => {
    const clock = new ManualClock(0);
    const l = new NodeLiveness('a', clock, HB);
    for (let t = 0; t <= 5000; t += HB) {
      clock.set(t);
      l.saw('a');
      if (t <= 1000) l.saw('b');
      l.saw('c');
    }
    expect(l.alive('b')).toBe(false);
    expect(l.alive('c')).toBe(true);
    expect(l.takeDead()).toEqual(['b']);
    expect(l.takeDead()).toEqual([]);
    expect(l.leader()).toBe('a');
  });

  test('after a stall of this node (every heartbeat, its own too, heard late) no node is dead', () => {
    const clock = new ManualClock(0);
    const l = new NodeLiveness('b', clock, HB);
    clock.set(1000);
    l.saw('a');
    l.saw('b');
    l.saw('c');
    // Ten seconds without a turn of the event loop: the sweep runs before the queued heartbeats.
    clock.set(11_000);
    expect(l.takeDead()).toEqual([]);
    expect(l.alive('a')).toBe(true);
    expect(l.leader()).toBe('a');
    // Its own heartbeat comes back, the others' do not: they are silent now.
    clock.set(15_500);
    l.saw('b');
    expect(l.takeDead()).toEqual(['a', 'c']);
    expect(l.leader()).toBe('b');
  });

  test('before this node heard itself, silence is counted on the clock', () => {
    const clock = new ManualClock(0);
    const l = new NodeLiveness('a', clock, HB);
    l.saw('b');
    clock.set(3000);
    expect(l.alive('b')).toBe(true);
    clock.set(3001);
    expect(l.alive('b')).toBe(false);
  });
});
