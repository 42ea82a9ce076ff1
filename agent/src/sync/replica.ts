import { createHash } from 'node:crypto';
import { LOCAL_REPLICA_STATES, type LocalReplicaState, type ReplicaReport } from '@fleet/protocol';
import type { NewOutboxMessage, ReplicaRow } from '../store/types.js';
import { IllegalReplicaTransitionError } from '../errors.js';

/**
 * A replica's state on the robot (spec, Replica sync). The API's states plus the one before
 * them; a replica never moves backwards, and a failed attempt keeps the state it reached.
 */
export type ReplicaLocalState =
  /** Assigned by the cloud; no grant has arrived yet (nothing is reported). */
  | 'assigned'
  /** A grant with upload URLs arrived for the destination. */
  | 'granted'
  /** The first byte went out. */
  | 'syncing'
  /** Every file is complete at the destination. */
  | 'synced'
  /** Every file's SHA-256 of the bytes sent equals the manifest and every receipt matched. */
  | 'verified';

// These are the protocol's states on the robot (LOCAL_REPLICA_STATES), documented one by one.
const sameAsProtocol: [ReplicaLocalState, LocalReplicaState] extends [LocalReplicaState, ReplicaLocalState] ? true : never = true;
void sameAsProtocol;

const ORDER: readonly ReplicaLocalState[] = LOCAL_REPLICA_STATES;

/** Which states each state may move to: forward only; a step may be skipped (a resumed upload that had already sent every byte goes from granted to synced). */
const NEXT: Record<ReplicaLocalState, readonly ReplicaLocalState[]> = {
  assigned: ['granted'],
  granted: ['syncing', 'synced'],
  syncing: ['synced'],
  synced: ['verified'],
  verified: [],
};

/** Throws {@link IllegalReplicaTransitionError} unless `from -> to` is legal. */
export function checkReplicaTransition(from: ReplicaLocalState, to: ReplicaLocalState): void {
  if (!NEXT[from].includes(to)) throw new IllegalReplicaTransitionError(from, to, NEXT[from]);
}

/** True when `state` is at least `than` in the replica order. */
export function reached(state: ReplicaLocalState, than: ReplicaLocalState): boolean {
  return ORDER.indexOf(state) >= ORDER.indexOf(than);
}

/**
 * The outbox message of a replica report: `replica:<episode>:<destination>:<state>:<n>` where n
 * counts the replica's reports, so every report (each error too) is its own message. An id
 * that would pass the outbox's 128 characters uses a hash of the pair instead.
 */
export function replicaReportMessage(row: ReplicaRow, report: Omit<ReplicaReport, 'episode_id' | 'destination_id'>): NewOutboxMessage {
  const body: ReplicaReport = { episode_id: row.episodeId, destination_id: row.destinationId, ...report };
  const n = row.reports + 1;
  let msgId = `replica:${row.episodeId}:${row.destinationId}:${report.state}:${n}`;
  if (msgId.length > 128 || /["\\]/.test(msgId)) {
    const pair = createHash('sha256').update(`${row.episodeId}\u0000${row.destinationId}`).digest('hex').slice(0, 40);
    msgId = `replica:${pair}:${report.state}:${n}`;
  }
  return { msgId, kind: 'replica.state', body, createdAt: report.at };
}

/** One line, at most `max` characters: a replica error is `code: message`. */
export function oneLine(code: string, message: string, max = 1000): string {
  const text = `${code}: ${message}`.replace(/[\r\n\t]+/g, ' ');
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}
