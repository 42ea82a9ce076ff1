import type { GrantRequestEnvelope, ManifestFile } from '@fleet/protocol';
import { describe, expect, test } from 'vitest';
import { episodeKeyPrefix, planUploads } from './layout.js';

const MiB = 1024 * 1024;
const file = (path: string, size: number): ManifestFile => ({ path, size_bytes: size, sha256: '0'.repeat(64) });
const env = (org: string, robot: string, episode: string): GrantRequestEnvelope => ({
  episode_id: episode,
  org_id: org,
  request: { destination_id: 'dst_1', episode: { robot_id: robot, recording_session_id: 'rs', episode_seq: 1 }, manifest: { files: [], total_bytes: 0 } },
});

describe('episodeKeyPrefix', () => {
  test('<prefix><org>/<robot>/<episode>/', () => {
    expect(episodeKeyPrefix('fleet/', env('org_1', 'rob_2', 'ep_3'))).toBe('fleet/org_1/rob_2/ep_3/');
    expect(episodeKeyPrefix('', env('org_1', 'rob_2', 'ep_3'))).toBe('org_1/rob_2/ep_3/');
  });

  test('an id cannot add or climb out of a segment', () => {
    expect(episodeKeyPrefix('', env('org/x', '..', 'ep\\3'))).toBe('org%2Fx/_../ep%5C3/');
    expect(episodeKeyPrefix('', env('', '.', 'e'))).toBe('_/_./e/');
  });
});

describe('planUploads', () => {
  const limits = { multipartThresholdBytes: 64 * MiB, partSizeBytes: 16 * MiB };

  test('PUT below the threshold, parts at or above it; empty files are a PUT', () => {
    const plans = planUploads('p/', [file('a', 64 * MiB - 1), file('b', 64 * MiB), file('c', 100 * MiB + 1), file('d', 0)], limits)!;
    expect(plans.map((p) => [p.key, p.kind, p.kind === 'multipart' ? [p.partSize, p.partCount] : null])).toEqual([
      ['p/a', 'put', null],
      ['p/b', 'multipart', [16 * MiB, 4]],
      ['p/c', 'multipart', [16 * MiB, 7]],
      ['p/d', 'put', null],
    ]);
  });

  test('a file that would need more than 10,000 parts gets larger parts', () => {
    const size = 60 * 1024 * MiB;
    const [plan] = planUploads('', [file('huge', size)], { multipartThresholdBytes: MiB, partSizeBytes: 5 * MiB })!;
    expect(plan).toMatchObject({ kind: 'multipart' });
    if (plan?.kind !== 'multipart') throw new Error('multipart expected');
    expect(plan.partCount).toBeLessThanOrEqual(10_000);
    expect(plan.partCount * plan.partSize).toBeGreaterThanOrEqual(size);
    expect((plan.partCount - 1) * plan.partSize).toBeLessThan(size);
  });

  test('part sizes double until the part URLs fit in a 1 MiB answer, the same way every time', () => {
    const files = [file('a', 40 * 1024 * MiB), file('b', 20 * 1024 * MiB)];
    const plans = planUploads('', files, limits)!;
    const parts = plans.reduce((n, p) => n + (p.kind === 'multipart' ? p.partCount : 0), 0);
    expect(parts * 600).toBeLessThanOrEqual(800 * 1024);
    expect(plans[0]).toMatchObject({ partSize: 64 * MiB });
    expect(planUploads('', files, limits)).toEqual(plans);
  });

  test('null when a file cannot fit in 10,000 parts of 5 GiB', () => {
    expect(planUploads('', [file('x', 10_000 * 5 * 1024 * MiB + 1)], limits)).toBeNull();
  });
});
