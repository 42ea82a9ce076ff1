import { randomBytes } from 'node:crypto';

// The 32 characters of [a-z2-7] (the alphabet of robot ids) in ASCII order, so that ids whose
// leading characters encode time sort by time as plain strings.
const SORTABLE_BASE32 = '234567abcdefghijklmnopqrstuvwxyz';

function encodeTime(ms: number, chars: number): string {
  let out = '';
  let v = Math.max(0, Math.floor(ms));
  for (let i = 0; i < chars; i++) {
    out = SORTABLE_BASE32[v % 32]! + out;
    v = Math.floor(v / 32);
  }
  return out;
}

function encodeRandom(chars: number): string {
  const bytes = randomBytes(chars);
  let out = '';
  for (const b of bytes) out += SORTABLE_BASE32[b & 31]!;
  return out;
}

/**
 * A time-ordered id: `prefix_` + 26 characters of [a-z2-7], 10 encoding the millisecond time
 * (good until the year 10889) and 16 random (80 bits), like a ULID in the robot-id alphabet.
 */
export function newTimeOrderedId(prefix: string, nowMs: number): string {
  return `${prefix}_${encodeTime(nowMs, 10)}${encodeRandom(16)}`;
}

/** Episode ids are made on the robot, so a robot can record offline. */
export const newEpisodeId = (nowMs: number): string => newTimeOrderedId('ep', nowMs);
/** Groups the episodes of one recording session. */
export const newRecordingSessionId = (nowMs: number): string => newTimeOrderedId('rs', nowMs);

export const EPISODE_ID_PATTERN = /^ep_[a-z2-7]{26}$/;
