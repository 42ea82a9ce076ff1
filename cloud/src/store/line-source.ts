/**
 * An optional capability of an episode or dataset store: export and manifest lines built straight
 * from the stored columns (no EpisodeRow per episode). Callers check for it and fall back to the
 * plain store interface when an engine does not offer it.
 */
export type { EpisodeLineBatch, EpisodeLineRow, EpisodeLineSource } from './sqlite-episodes.js';
export { isEpisodeLineSource } from './sqlite-episodes.js';
export { isMemberLineSource } from './sqlite-datasets.js';
