/**
 * @fleet/lerobot: a snapshotted dataset's manifest to a LeRobot v3.0 dataset on disk, read from
 * the customer's own storage, and a validator of LeRobot's invariants.
 */
export { exportLeRobot, ExportError, WORK_DIR, type ExportOptions, type ExportResult, type SkippedEpisode, type SkipReason } from './export.js';
export { progressLine, type ExportProgress } from './progress.js';
export { validateLeRobotDataset, INVARIANTS, type Invariant, type Problem, type ValidationResult, type DatasetSummary, type ValidateOptions } from './validate/index.js';
export { DEFAULT_MAPPING, parseMapping, type Mapping, type MappingInput } from './source/index.js';
export * from './types.js';
