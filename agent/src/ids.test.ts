import { describe, expect, it } from 'vitest';
import { EPISODE_ID_PATTERN, newEpisodeId, newRecordingSessionId } from './ids.js';

describe('robot-made ids', () => {
  it('are ep_/rs_ plus 26 characters of the robot-id alphabet', () => {
    expect(newEpisodeId(Date.parse('2026-03-01T00:00:00Z'))).toMatch(EPISODE_ID_PATTERN);
    expect(newRecordingSessionId(0)).toMatch(/^rs_[a-z2-7]{26}$/);
  });

  it('sort by time as plain strings, including across digit/letter boundaries', () => {
    const times = [0, 1, 31, 32, 1023, 1024, Date.parse('2026-01-01T00:00:00Z'), Date.parse('2026-01-01T00:00:00.001Z'), Date.parse('2099-12-31T00:00:00Z')];
    const ids = times.map((t) => newEpisodeId(t));
    expect([...ids].sort()).toEqual(ids);
  });

  it('differ within one millisecond', () => {
    const ids = new Set(Array.from({ length: 1000 }, () => newEpisodeId(42)));
    expect(ids.size).toBe(1000);
  });
});
