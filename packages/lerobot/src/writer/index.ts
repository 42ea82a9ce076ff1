/**
 * The LeRobot v3.0 writer: `stageEpisode` turns one `GridEpisode` into a self-contained staged
 * directory (resumable: `isStaged`), `assembleDataset` lays the staged episodes out as LeRobot's
 * reader expects them.
 */
export { stageEpisode, isStaged, readStagedEpisode, stagedDir, type StageOptions, type StagedEpisode, type StageProgress } from './stage.js';
export { assembleDataset, DATA_PATH, VIDEO_PATH, type AssembleOptions, type AssembleResult } from './assemble.js';
export { videoEncoding, SCALE_FLAGS, type VideoCodec, type VideoEncoding } from './ffmpeg.js';
export { datasetFeatures, videoInfo, resizeProblem, MAX_VIDEO_SIZE, MIN_VIDEO_SIDE, type DatasetFeature } from './features.js';
export { WriterError, type WriterErrorCode } from './errors.js';
export {
  vectorStats,
  constantStats,
  ImageStatsAccumulator,
  sampleIndices,
  estimateNumSamples,
  aggregateFeatureStats,
  aggregateInto,
  statsToJson,
  QUANTILES,
  QUANTILE_KEYS,
  STAT_KEYS,
  type FeatureStats,
  type StatsByFeature,
  type StatKey,
} from './stats.js';
