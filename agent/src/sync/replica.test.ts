import { describe, expect, it } from 'vitest';
import type { ReplicaRow } from '../store/types.js';
import { IllegalReplicaTransitionError } from '../errors.js';
import { checkReplicaTransition, oneLine, reached, replicaReportMessage } from './replica.js';

const row = (over: Partial<ReplicaRow> = {}): ReplicaRow => ({
  episodeId: 'ep_a',
  destinationId: 'dst_1',
  state: 'granted',
  grantId: 'g',
  objectKey: null,
  retention: null,
  attempts: 1,
  failures: 0,
  nextAttemptAt: 0,
  lastError: null,
  note: null,
  reports: 2,
  assignedAt: 0,
  updatedAt: 0,
  ...over,
});

describe('replica states', () => {
  it('move forward only, with a typed error otherwise', () => {
    expect(() => checkReplicaTransition('assigned', 'granted')).not.toThrow();
    expect(() => checkReplicaTransition('granted', 'synced')).not.toThrow();
    expect(() => checkReplicaTransition('synced', 'verified')).not.toThrow();
    expect(() => checkReplicaTransition('syncing', 'granted')).toThrow(IllegalReplicaTransitionError);
    expect(() => checkReplicaTransition('assigned', 'syncing')).toThrow(/cannot move from assigned to syncing \(only to granted\)/);
    expect(() => checkReplicaTransition('verified', 'synced')).toThrow(/only to nothing/);
    expect(reached('synced', 'granted')).toBe(true);
    expect(reached('granted', 'synced')).toBe(false);
  });

  it('each report is its own outbox message, numbered per replica', () => {
    const m = replicaReportMessage(row(), { grant_id: 'g', state: 'syncing', error: null, object_key: null, at: 5 });
    expect(m).toMatchObject({ msgId: 'replica:ep_a:dst_1:syncing:3', kind: 'replica.state', createdAt: 5 });
    expect(m.body).toEqual({ episode_id: 'ep_a', destination_id: 'dst_1', grant_id: 'g', state: 'syncing', error: null, object_key: null, at: 5 });
    const long = replicaReportMessage(row({ destinationId: 'd'.repeat(128) }), { grant_id: 'g', state: 'synced', error: null, object_key: null, at: 5 });
    expect(long.msgId).toMatch(/^replica:[0-9a-f]{40}:synced:3$/);
  });

  it('errors are one line', () => {
    expect(oneLine('network', 'a\nb\r\nc')).toBe('network: a b c');
    expect(oneLine('x', 'y'.repeat(2000)).length).toBe(1000);
  });
});
