import type { Episode, FleetClient } from '@fleet/client';

/**
 * The episode player's props, as the episode page and the review queue use them. `keyboard`
 * (default true) listens to the player's keys on the whole page (Space, arrows, Home/End, `[`
 * and `]`), never while the user types in a field; `onState` hears every change of what the
 * player shows (the review queue follows it).
 */
export interface PlayerProps {
  episode: Episode;
  client: FleetClient;
  autoplay?: boolean;
  keyboard?: boolean;
  onState?: (state: PlayerState) => void;
}

/** Why the player shows no recording, or what stopped it: each said in words on the player. */
export type PlayerProblem =
  | 'robot_only'
  | 'syncing'
  | 'replica_error'
  | 'no_mcap'
  | 'not_found'
  | 'forbidden'
  | 'unsupported'
  | 'refused'
  | 'provider_failed'
  | 'origin_not_allowed'
  | 'provider_timeout'
  | 'fetch_failed'
  | 'object_not_found'
  | 'object_forbidden'
  | 'size_mismatch'
  | 'range_unsupported'
  | 'unreadable'
  | 'empty'
  | 'error';

export type PlayerStatus = 'loading' | 'unavailable' | 'ready' | 'playing' | 'buffering' | 'paused' | 'ended';

/** What `onState` reports: times are log times in ns (as decimal strings: bigint does not cross JSON). */
export interface PlayerState {
  status: PlayerStatus;
  problem?: PlayerProblem;
  /** The message shown, when there is a problem. */
  message?: string;
  playheadNs?: string;
  startNs?: string;
  endNs?: string;
  speed: number;
  truncated?: boolean;
}
