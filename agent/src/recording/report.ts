import type { EpisodeReport } from '@fleet/protocol';
import type { EpisodeRow } from '../store/types.js';

/**
 * The body of the `episode.report` outbox message for a finished episode (protocol
 * `EpisodeReportSchema`): its recorded facts without `robot_id` (the cloud takes that from the
 * topic), plus the manifest and the interrupted flag.
 */
export function toEpisodeReport(episode: EpisodeRow): EpisodeReport {
  const { robot_id: _robotId, ...facts } = episode.facts;
  return { ...facts, manifest: episode.manifest, ...(episode.interrupted ? { interrupted: true } : {}) };
}
