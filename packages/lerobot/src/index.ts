/**
 * @fleet/lerobot: a snapshotted dataset's manifest to a LeRobot v3.0 dataset on disk, read from
 * the customer's own storage, and a validator of LeRobot's invariants.
 */
export { exportLeRobot, ExportError, EXPORT_ERROR_CODES, WORK_DIR, type ExportErrorCode, type ExportOptions, type ExportResult, type SkippedEpisode, type SkipReason } from './export.js';
export { progressLine, type ExportProgress, type ExportPhase, type EpisodeStep, type ProgressClock, type ProgressScheduler } from './progress.js';
export { resizeProblem } from './writer/index.js';
export { validateLeRobotDataset, INVARIANTS, type Invariant, type Problem, type ValidationResult, type DatasetSummary, type ValidateOptions } from './validate/index.js';
export { DEFAULT_MAPPING, parseMapping, type Mapping, type MappingInput } from './source/index.js';
export * from './types.js';
export { inspectRecording, InspectError, INSPECT_ERROR_CODES, type InspectErrorCode, type RecordingInspection, type InspectedRecording, type InspectedTopic, type InspectedField, type InspectedImage, type InspectedFile, type InspectOptions } from './inspect.js';
