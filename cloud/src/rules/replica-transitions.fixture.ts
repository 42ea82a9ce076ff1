import type { ReplicaState } from '@fleet/protocol';

/**
 * Every (current state, reported state) pair: what the report returns, the events it appends
 * and the replica it leaves. `at` is the report's robot clock against the current one's.
 * Events follow the transition only: reaching a state a second time announces nothing.
 */
export const REPLICA_TRANSITIONS: readonly [ReplicaState | null, ReplicaState, 'newer' | 'repeat' | 'older', 'applied' | 'unchanged', string[], ReplicaState][] = [
  [null, 'granted', 'newer', 'applied', [], 'granted'],
  [null, 'syncing', 'newer', 'applied', [], 'syncing'],
  [null, 'synced', 'newer', 'applied', ['episode.synced'], 'synced'],
  [null, 'verified', 'newer', 'applied', ['episode.synced', 'episode.verified'], 'verified'],
  ['granted', 'granted', 'newer', 'applied', [], 'granted'],
  ['granted', 'granted', 'repeat', 'unchanged', [], 'granted'],
  ['granted', 'syncing', 'newer', 'applied', [], 'syncing'],
  ['granted', 'synced', 'newer', 'applied', ['episode.synced'], 'synced'],
  ['granted', 'verified', 'newer', 'applied', ['episode.synced', 'episode.verified'], 'verified'],
  ['syncing', 'granted', 'newer', 'unchanged', [], 'syncing'],
  ['syncing', 'syncing', 'newer', 'applied', [], 'syncing'],
  ['syncing', 'syncing', 'repeat', 'unchanged', [], 'syncing'],
  ['syncing', 'synced', 'newer', 'applied', ['episode.synced'], 'synced'],
  ['syncing', 'verified', 'newer', 'applied', ['episode.synced', 'episode.verified'], 'verified'],
  ['synced', 'granted', 'newer', 'unchanged', [], 'synced'],
  ['synced', 'syncing', 'newer', 'unchanged', [], 'synced'],
  ['synced', 'synced', 'newer', 'applied', [], 'synced'],
  ['synced', 'synced', 'repeat', 'unchanged', [], 'synced'],
  ['synced', 'synced', 'older', 'unchanged', [], 'synced'],
  ['synced', 'verified', 'newer', 'applied', ['episode.verified'], 'verified'],
  ['verified', 'granted', 'newer', 'unchanged', [], 'verified'],
  ['verified', 'syncing', 'newer', 'unchanged', [], 'verified'],
  ['verified', 'synced', 'newer', 'unchanged', [], 'verified'],
  ['verified', 'verified', 'newer', 'applied', [], 'verified'],
  ['verified', 'verified', 'repeat', 'unchanged', [], 'verified'],
  ['verified', 'verified', 'older', 'unchanged', [], 'verified'],
];
