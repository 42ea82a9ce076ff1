import { describe, expect, it } from 'vitest';
import { WebhookPayloadSchema } from '@fleet/protocol';
import { finalizedEvent, replicaFailedEvent, replicaReachedEvent, splitReplicaError, testFinalizedEvent } from './events.js';

const ep = { episode_id: 'ep_000000000001', robot_id: 'rbt_1', recording_session_id: 'rs_1', episode_seq: 3 };
const replica = { destination_id: 'dst_1', grant_id: 'gr_1', object_key: null, state: 'syncing' };

describe('webhook payloads', () => {
  it('episode.finalized carries no destination, grant or object key', () => {
    expect(finalizedEvent(ep)).toEqual({ type: 'episode.finalized', episodeId: ep.episode_id, payload: { schema_version: 1, ...ep, state: 'reported' } });
  });

  it('the test event is a finalized event with test: true', () => {
    const e = testFinalizedEvent();
    expect(e.type).toBe('episode.finalized');
    expect(e.payload).toMatchObject({ state: 'reported', test: true, schema_version: 1 });
  });

  it('replica events carry the destination and grant, and the object key only when known', () => {
    expect(replicaReachedEvent('episode.verified', ep, replica).payload).toEqual({ schema_version: 1, ...ep, destination_id: 'dst_1', grant_id: 'gr_1', state: 'verified' });
    expect(replicaReachedEvent('episode.synced', ep, { ...replica, object_key: 'k/1' }).payload).toMatchObject({ state: 'synced', object_key: 'k/1' });
    expect(replicaFailedEvent(ep, replica, 'timeout: part 3').payload).toMatchObject({ state: 'syncing', error: { code: 'timeout', message: 'part 3' } });
  });

  it('the schema refuses what no event carries', () => {
    expect(WebhookPayloadSchema.safeParse({ ...finalizedEvent(ep).payload, extra: 1 }).success).toBe(false);
    expect(WebhookPayloadSchema.safeParse({ ...finalizedEvent(ep).payload, test: false }).success).toBe(false);
    expect(() => replicaFailedEvent({ ...ep, episode_id: '' }, replica, 'x: y')).toThrow();
  });

  it('splits a replica error at the first colon after a code; otherwise the code is `failed`', () => {
    expect(splitReplicaError('checksum_mismatch: recording.mcap: sha256 differs')).toEqual({ code: 'checksum_mismatch', message: 'recording.mcap: sha256 differs' });
    expect(splitReplicaError('http_error:503')).toEqual({ code: 'http_error', message: '503' });
    expect(splitReplicaError('disk full')).toEqual({ code: 'failed', message: 'disk full' });
    expect(splitReplicaError('')).toEqual({ code: 'failed', message: '' });
  });
});
