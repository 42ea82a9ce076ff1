import { ManualClock } from '@fleet/protocol';
import { describe, expect, it } from 'vitest';
import { ManualScheduler } from './time.js';

describe('ManualScheduler', () => {
  it('fires due timers in time order with the clock at each due time, and not the others', () => {
    const clock = new ManualClock(1000);
    const s = new ManualScheduler(clock);
    const fired: [string, number][] = [];
    s.setTimeout(() => fired.push(['b', clock.now()]), 200);
    s.setTimeout(() => fired.push(['a', clock.now()]), 100);
    const c = s.setTimeout(() => fired.push(['c', clock.now()]), 150);
    s.setTimeout(() => fired.push(['late', clock.now()]), 5000);
    s.clearTimeout(c);
    s.advance(300);
    expect(fired).toEqual([
      ['a', 1100],
      ['b', 1200],
    ]);
    expect(clock.now()).toBe(1300);
    expect(s.pending).toBe(1);
  });

  it('runs timers set by timers when they fall within the advance', () => {
    const clock = new ManualClock(0);
    const s = new ManualScheduler(clock);
    let ticks = 0;
    const tick = () => {
      ticks += 1;
      s.setTimeout(tick, 100);
    };
    s.setTimeout(tick, 100);
    s.advance(1000);
    expect(ticks).toBe(10);
  });
});
