import { describe, expect, it } from 'vitest';
import { topSelfTime, type CpuProfile } from './cpu-profile.js';

describe('topSelfTime', () => {
  it('sums each function over its nodes, by sample time, largest first, with its share of all samples', () => {
    const frame = (functionName: string, url: string, lineNumber: number) => ({ functionName, url, lineNumber });
    const profile: CpuProfile = {
      nodes: [
        { id: 1, callFrame: frame('(root)', '', -1) },
        { id: 2, callFrame: frame('copy', 'file:///x/node_modules/@mcap/core/dist/Reader.js', 107) },
        { id: 3, callFrame: frame('copy', 'file:///x/node_modules/@mcap/core/dist/Reader.js', 107) },
        { id: 4, callFrame: frame('', 'file:///x/packages/lerobot/dist/a.js', 9) },
      ],
      samples: [2, 4, 3, 1],
      timeDeltas: [1000, 3000, 2000, 4000],
    };
    expect(topSelfTime(profile, 2)).toEqual([
      { name: 'copy', where: '@mcap/core/dist/Reader.js:108', selfMs: 3, percent: 30 },
      { name: '(root)', where: '', selfMs: 4, percent: 40 },
    ].sort((a, b) => b.selfMs - a.selfMs));
    expect(topSelfTime(profile, 5).map((t) => t.where)).toContain('packages/lerobot/dist/a.js:10');
  });
});
