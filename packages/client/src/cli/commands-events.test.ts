import { describe, expect, it } from 'vitest';
import { formatEventLine } from './commands-events.js';

const at = new Date('2026-11-23T12:05:01.431Z');

describe('fleet events tail lines', () => {
  it('say when the event arrived, its id and type, then what changed', () => {
    expect(formatEventLine({ id: 'evt_42', type: 'robot.status', data: { schema_version: 1, robot_id: 'rbt_1', online: false, recording_state: null, last_seen_at: null } }, at)).toBe(
      '2026-11-23T12:05:01.431Z  evt_42  robot.status       rbt_1  offline  -',
    );
    expect(
      formatEventLine(
        {
          id: 'evt_43',
          type: 'episode.failed',
          data: { schema_version: 1, episode_id: 'ep_1', robot_id: 'rbt_1', recording_session_id: 'rs', episode_seq: 1, destination_id: 'dst_1', grant_id: 'g', state: 'syncing', error: { code: 'timeout', message: 'upload stalled' } },
        },
        at,
      ),
    ).toBe('2026-11-23T12:05:01.431Z  evt_43  episode.failed     ep_1  robot rbt_1  state syncing  destination dst_1  error timeout: upload stalled');
  });

  it('print text from robots without control characters', () => {
    const line = formatEventLine(
      { id: 'evt_44', type: 'episode.failed', data: { schema_version: 1, episode_id: 'ep_1', robot_id: 'rbt_1', recording_session_id: 'rs', episode_seq: 1, state: 'syncing', error: { code: 'x', message: 'a\u001b[31mred\r\nb\u009b' } } },
      at,
    );
    expect(line).toContain('error x: a?[31mred??b?');
    expect([...line].filter((ch) => ch.charCodeAt(0) < 0x20 || (ch.charCodeAt(0) >= 0x7f && ch.charCodeAt(0) <= 0x9f))).toEqual([]);
  });
});
