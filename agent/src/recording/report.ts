import type { EpisodeReport } from '@fleet/protocol';
import type { EpisodeRow, NewOutboxMessage } from '../store/types.js';

/**
 * The body of the `episode.report` outbox message for a finished episode (protocol
 * `EpisodeReportSchema`): its recorded facts without `robot_id` (the cloud takes that from the
 * topic), plus the manifest and the interrupted flag.
 */
export function toEpisodeReport(episode: EpisodeRow): EpisodeReport {
  const { robot_id: _robotId, ...facts } = episode.facts;
  return { ...facts, manifest: episode.manifest, ...(episode.interrupted ? { interrupted: true } : {}) };
}

/** The outbox message id of an episode's report: one per episode, so a resend is the same message. */
export function episodeReportMsgId(episodeId: string): string {
  return `episode.report:${episodeId}`;
}

/** The outbox message that reports `episode`, enqueued in the transaction that records it finalized. */
export function episodeReportMessage(episode: EpisodeRow): NewOutboxMessage {
  return { msgId: episodeReportMsgId(episode.id), kind: 'episode.report', body: toEpisodeReport(episode), createdAt: episode.finalizedAt };
}
