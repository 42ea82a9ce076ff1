import { ManualClock } from '@fleet/protocol';
import { describe, expect, it } from 'vitest';
import type { EpisodeRow, UploadFileRow } from '../store/types.js';
import { RATE_WINDOW_MS, ReplicaProgress } from './progress.js';
import { bytesAtDestination } from './uploader.js';

describe('ReplicaProgress', () => {
  it('counts bytes on top of what the destination had, and the rate over the last few seconds', () => {
    const clock = new ManualClock(0);
    const p = new ReplicaProgress(clock, 10_000_000, 1_000_000);
    expect(p.bytesSent).toBe(1_000_000);
    expect(p.rate()).toBe(0);
    // 100 kB every 100 ms for 3 s: 1 MB/s.
    for (let i = 0; i < 30; i++) {
      clock.advance(100);
      p.add(100_000);
    }
    expect(p.bytesSent).toBe(4_000_000);
    expect(p.rate()).toBeCloseTo(1_000_000, -4);
    // Twice as fast for 10 s: the window forgets the slow start.
    for (let i = 0; i < 100; i++) {
      clock.advance(100);
      p.add(200_000);
    }
    expect(p.bytesSent).toBe(10_000_000); // capped at the total
    expect(Math.abs(p.rate() - 2_000_000)).toBeLessThan(2_000_000 * 0.06);
    // Nothing sent for a whole window: the rate falls to zero.
    clock.advance(RATE_WINDOW_MS + 250);
    expect(p.rate()).toBe(0);
  });
});

describe('bytesAtDestination', () => {
  const episode = {
    manifest: {
      files: [
        { path: 'a.mcap', size_bytes: 100, sha256: 'aa' },
        { path: 'b.mcap', size_bytes: 1000, sha256: 'bb' },
        { path: 'c.mcap', size_bytes: 50, sha256: 'cc' },
      ],
      total_bytes: 1150,
    },
  } as unknown as EpisodeRow;
  const file = (f: Partial<UploadFileRow> & { path: string }): UploadFileRow => ({
    uploadId: null,
    partSize: null,
    complete: false,
    bytesSent: null,
    sha256Sent: null,
    md5Sent: null,
    receipt: null,
    parts: [],
    ...f,
  });

  it('complete files of the manifest content and accepted parts of unfinished ones', () => {
    expect(
      bytesAtDestination(
        [
          file({ path: 'a.mcap', complete: true, bytesSent: 100, sha256Sent: 'aa' }),
          file({ path: 'b.mcap', uploadId: 'u', partSize: 400, parts: [{ partNumber: 1, size: 400, etag: 'e', md5: 'm' }] }),
          // Sent with other content: it will be sent again, so it does not count.
          file({ path: 'c.mcap', complete: true, bytesSent: 50, sha256Sent: 'old' }),
        ],
        episode,
      ),
    ).toBe(500);
    expect(bytesAtDestination([], episode)).toBe(0);
  });
});
