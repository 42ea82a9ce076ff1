import { describe, expect, it } from 'vitest';
import { WebhookPayloadSchema, type ReplicaReport, type ReplicaState } from '@fleet/protocol';
import type { EpisodeRef } from './events.js';
import { replicaTransition, type ReplicaNow } from './replica-transition.js';
import { REPLICA_TRANSITIONS } from './replica-transitions.fixture.js';

const EPISODE: EpisodeRef = { episode_id: 'ep_1', robot_id: 'rbt_1', recording_session_id: 'rs_1', episode_seq: 3 };

function report(state: ReplicaState, at: number, over: Partial<ReplicaReport> = {}): ReplicaReport {
  return { episode_id: 'ep_1', destination_id: 'dst_1', grant_id: 'gr_new', state, error: null, object_key: 'k/new', at, ...over };
}

/** The replica rule alone, without a database: the same table the store suite runs on both engines. */
describe('replicaTransition', () => {
  it.each(REPLICA_TRANSITIONS.map((t) => [`${t[0] ?? 'none'} -> ${t[1]} (${t[2]})`, ...t] as const))('%s', (_name, from, to, when, result, appended, after) => {
    const now: ReplicaNow | undefined = from === null ? undefined : { state: from, objectKey: 'k/old', reportedAt: 100 };
    const at = { newer: 200, repeat: 100, older: 50 }[when];
    const write = replicaTransition(now, report(to, at), EPISODE);
    expect(write === undefined ? 'unchanged' : 'applied').toBe(result);
    expect(write?.state ?? now?.state).toBe(after);
    expect((write?.events ?? []).map((e) => e.type)).toEqual(appended);
    for (const e of write?.events ?? []) expect(WebhookPayloadSchema.safeParse(e.payload).success).toBe(true);
  });

  it('an error is announced as episode.failed after the transition events, with the state the replica keeps', () => {
    const write = replicaTransition({ state: 'syncing', objectKey: null, reportedAt: 1 }, report('synced', 2, { error: 'receipt_mismatch: part 2 differs' }), EPISODE)!;
    expect(write.events.map((e) => e.type)).toEqual(['episode.synced', 'episode.failed']);
    expect(write.events[1]!.payload).toMatchObject({ state: 'synced', error: { code: 'receipt_mismatch', message: 'part 2 differs' } });
    expect(write.error).toBe('receipt_mismatch: part 2 differs');
    // A failed attempt of the same state, newer: written (the error is news), announced once.
    expect(replicaTransition({ state: 'syncing', objectKey: null, reportedAt: 1 }, report('syncing', 2, { error: 'timeout: no answer' }), EPISODE)!.events.map((e) => e.type)).toEqual(['episode.failed']);
    // The same failure resent (not newer): nothing.
    expect(replicaTransition({ state: 'syncing', objectKey: null, reportedAt: 2 }, report('syncing', 2, { error: 'timeout: no answer' }), EPISODE)).toBeUndefined();
  });

  it('keeps the object key it had when a report names none; a row from before reports carried a time takes any same-state report', () => {
    expect(replicaTransition({ state: 'synced', objectKey: 'k/old', reportedAt: 1 }, report('verified', 2, { object_key: null }), EPISODE)).toMatchObject({ objectKey: 'k/old' });
    expect(replicaTransition({ state: 'synced', objectKey: 'k/old', reportedAt: null }, report('synced', 0), EPISODE)).toMatchObject({ state: 'synced', events: [] });
  });
});
