export { SOURCE_ERROR_CODES, SourceError, isSourceError, type SourceErrorCode } from './errors.js';
export {
  MAX_MANIFEST_LINE_CHARS,
  ManifestEpisodeSchema,
  ManifestFileSchema,
  ManifestHeaderSchema,
  ManifestLocationSchema,
  parseManifest,
  parseManifestLine,
  type ManifestEpisode,
  type ManifestFile,
  type ManifestHeader,
  type ManifestLine,
  type ManifestLocation,
} from './manifest.js';
export {
  EpisodeFetcher,
  objectAddress,
  parseSourceUrl,
  resolveLocation,
  storeErrorCode,
  type EpisodeFetcherOptions,
  type FetchedEpisode,
  type FetchedFile,
  type ResolvedLocation,
  type S3SourceOptions,
  type SourceUrl,
} from './fetch.js';
export { Recording, openRecording, type ReadOptions, type RecordingChannel, type RecordingMessage } from './mcap.js';
export {
  DEFAULT_MAPPING,
  MappingSchema,
  WRIST_CAMERA_TOPIC,
  checkMapping,
  parseMapping,
  planMapping,
  type CameraPlan,
  type Mapping,
  type MappingInput,
  type MappingPlan,
  type StateRule,
  type TaskSource,
  type VectorPlan,
} from './mapping.js';
export { decodeRawImage, gridTimeNs, makeGrid, nearestFrames, readVectorSamples, resampleVector, type Grid, type RgbFrame, type StreamSpan, type VectorSamples } from './resample.js';
export { loadGridEpisode, metadataString, taskOf, type LoadedEpisode } from './episode.js';
