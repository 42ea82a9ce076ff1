export { validateLeRobotDataset, type ValidateOptions } from './validate.js';
export { INVARIANTS, type DatasetSummary, type Invariant, type Problem, type ValidationResult } from './problems.js';
