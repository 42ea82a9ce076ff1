// @fleet/simulator: simulated robots driving the real agent. The `fleet-sim` CLI (cli.ts),
// end-to-end tests and benchmarks use these exports.
export {
  FleetError,
  FleetOptionsSchema,
  agentAsOperatorRobot,
  operatorScript,
  parseFleetOptions,
  runFleet,
  type Fleet,
  type FleetDeps,
  type FleetOptions,
  type FleetOptionsInput,
  type SimulatedRobot,
} from './fleet.js';
export {
  DEFAULT_OUTCOME_WEIGHTS,
  ScriptedOperator,
  type OperatorCounters,
  type OperatorRobot,
  type OperatorScript,
  type OperatorState,
  type OperatorSubtask,
  type OperatorTask,
  type OutcomeWeights,
  type ScriptedOperatorOptions,
} from './operator.js';
export { seededRandom, weightedPick } from './random.js';
export { quotaFreeBytes, statfsFreeBytes, usedBytes, type FreeBytes } from './disk-quota.js';
export { GrantProviderConfigSchema, parseGrantProviderConfig, type GrantProviderConfig, type GrantProviderConfigInput } from './grant-provider/config.js';
export { answerGrantRequest, deferral } from './grant-provider/grants.js';
export { episodeKeyPrefix, planUploads, type FilePlan } from './grant-provider/layout.js';
export { runGrantProvider, type RunningGrantProvider } from './grant-provider/main.js';
export { answerReadRequest, readKeyPrefix, readLinkLifetimeS } from './grant-provider/reads.js';
export { createS3UploadStore, type InFlightUpload, type UploadStore } from './grant-provider/s3-store.js';
export { MAX_BODY_BYTES, PROVIDER_ERRORS, buildGrantProviderServer, type GrantProviderDeps } from './grant-provider/server.js';
export {
  createSyntheticRecorder,
  planRates,
  planRecording,
  ROS2_BAG_FILES,
  SYNTHETIC_FILE,
  SYNTHETIC_RECORDING_FORMATS,
  SyntheticRecorder,
  CAMERA_TOPIC,
  JOINT_COMMANDS_TOPIC,
  JOINT_STATES_TOPIC,
  WRIST_CAMERA_TOPIC,
  ROS2_FRONT_COMPRESSED_TOPIC,
  ROS2_FRONT_RAW_TOPIC,
  ROS2_JOINT_COMMANDS_TOPIC,
  ROS2_JOINT_STATES_TOPIC,
  ROS2_WRIST_COMPRESSED_TOPIC,
  type RatePlan,
  type RecordingPlan,
  type SyntheticRecorderOptions,
  type SyntheticRecordingFormat,
} from './recording/synthetic-recorder.js';
