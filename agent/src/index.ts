// @fleet/agent: the on-robot agent. The simulator and end-to-end tests use these exports; the
// `fleet-agent` CLI (cli.ts) is built from the same parts.
export { Agent, type AgentDeps, type AgentStatus } from './daemon.js';
export {
  AGENT_RUNTIME_VERSION,
  LEGACY_RUNTIME_VERSION,
  AgentConfigSchema,
  parseAgentConfig,
  runtimeVersionOf,
  type AgentConfig,
  type AgentConfigInput,
} from './config.js';
export {
  CREDENTIALS_FILE,
  CredentialsSchema,
  credentialsPath,
  readCredentials,
  storeRotatedPassword,
  writeCredentials,
  type Credentials,
} from './credentials.js';
export { enroll, type EnrollOptions } from './enroll.js';
export {
  OPERATOR_CONTEXT_KEYS,
  OperatorContextPatchSchema,
  emptyOperatorContext,
  type OperatorContext,
  type OperatorContextKey,
  type OperatorContextPatch,
} from './rules/operator-context.js';
export { ACTION_COMMANDS, SimulatedRobotActions, type ActionCommand, type ActionRequest, type RobotActions, type SimulatedRobotState, type SimulatedPose } from './actions.js';
export { CommandHandler, type CommandHandlerOptions } from './commands.js';
export {
  AGENT_ERRORS,
  ConfigFileError,
  ControlError,
  CredentialsError,
  EnrollError,
  FileHashError,
  IllegalReplicaTransitionError,
  IllegalTransitionError,
  NotEnrolledError,
  NotFoundError,
  RefusalError,
  UploadError,
  type AgentErrorCode,
} from './errors.js';
export { newEpisodeId, newRecordingSessionId, EPISODE_ID_PATTERN } from './ids.js';
export { systemScheduler, ManualScheduler, type Scheduler, type TimerHandle } from './time.js';
export {
  EPISODE_META_FILES,
  type Recorder,
  type RecordingHandle,
  type RecordingInfo,
  type RecordedFiles,
  type RecorderStats,
} from './recording/recorder.js';
export {
  RecordingStateMachine,
  type RecordingState,
  type RecordingEvent,
  type EpisodeTransitionResult,
  type EndVerb,
  type StateChange,
  type TransitionCause,
  type RecordingStatus,
} from './recording/state-machine.js';
export type { EpisodeFacts, EpisodeManifest, ManifestFile, EpisodeSegment, EpisodeOutcome, SubtaskStep } from './rules/episode-facts.js';
export { segmentsFromSteps } from './recording/segments.js';
export { toEpisodeReport, episodeReportMessage, episodeReportMsgId } from './recording/report.js';
export {
  OutboxSender,
  outboxPayload,
  DEFAULT_OUTBOX_ACK_TIMEOUT_MS,
  DEFAULT_OUTBOX_MAX_IN_FLIGHT,
  type OutboxSenderOptions,
  type OutboxStatus,
  type OutboxTransport,
} from './outbox.js';
export { sha256File } from './recording/finalize.js';
export { MqttLink, type MqttLinkOptions } from './link/mqtt-link.js';
export { ControlClient, controlCall, controlSocketPath, CONTROL_SOCKET_FILE } from './control/client.js';
export { CONTROL_OPS, type ControlOp, type ControlRequest, type ControlResponse, type ControlErrorCode } from './control/protocol.js';
export {
  openAgentStore,
  AGENT_DATABASE_FILE,
  type AgentStore,
  type EpisodeRow,
  type RecordingRow,
  type StoredCommandResult,
  type OutboxStore,
  type OutboxRow,
  type OutboxCounts,
  type NewOutboxMessage,
} from './store/index.js';
export { Uploader, DEFAULT_SYNC_RETRY_SCHEDULE_MS, type UploaderOptions } from './sync/uploader.js';
export { SyncChannel, type SyncTransport } from './sync/channel.js';
export { uploadDispatcher } from './sync/trust.js';
export { completeMultipartXml, etagMd5 } from './sync/transfer.js';
export { replicaReportMessage, type ReplicaLocalState } from './sync/replica.js';
