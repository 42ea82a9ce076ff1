import type { Assignment, CommandReply, LocalReplicaState, OutboxMessage, RetentionDirective } from '@fleet/protocol';
import type { OperatorContext } from '../rules/operator-context.js';
import type { EpisodeFacts, EpisodeManifest, EpisodeOutcome, SubtaskStep } from '../rules/episode-facts.js';

/**
 * The agent's durable state, behind an async interface like the cloud's store so another
 * implementation is a module, not a rewrite. Times are ms since the epoch (robot clock).
 * Every function that changes the recording together with a command result does so in one
 * transaction: after a crash, either both happened or neither did.
 */
export interface AgentStore {
  readonly recording: RecordingStore;
  readonly episodes: EpisodeStore;
  readonly commandResults: CommandResultStore;
  readonly context: OperatorContextStore;
  readonly sessions: RecordingSessionStore;
  readonly outbox: OutboxStore;
  /** Cloud sync: assignments, replica states and upload progress. */
  readonly sync: SyncStore;
  /** Recordings the `import` recorder took from its folder. */
  readonly imports: ImportStore;
  close(): Promise<void>;
}

/** The one recording in progress (state `recording` or `finalizing`); absent when idle. */
export interface RecordingRow {
  state: 'recording' | 'finalizing';
  episodeId: string;
  recordingSessionId: string;
  sessionName: string | null;
  episodeSeq: number;
  startedAt: number;
  /** Last time the running agent noted the recording alive; bounds `ended_at` after a crash. */
  aliveAt: number;
  endedAt: number | null;
  outcome: EpisodeOutcome | null;
  /** The operator context when recording started. */
  context: OperatorContext;
  /** Episode directory relative to the data directory. */
  dir: string;
}

/** A command's answer, kept for the dedupe window so a repeated `cmd_id` gets it again. */
export interface StoredCommandResult {
  cmdId: string;
  command: string;
  reply: CommandReply;
  receivedAt: number;
}

/** A non-episode action about to run: noted before it acts, replaced by its answer afterwards. */
export interface CommandIntent {
  cmdId: string;
  command: string;
  receivedAt: number;
}

/**
 * What the agent remembers of a `cmd_id`: its answer, or (`running`) that it started and has no
 * answer yet. A `running` row that no live run owns means the agent stopped mid-action.
 */
export type RememberedCommand = ({ state: 'answered' } & StoredCommandResult) | ({ state: 'running' } & CommandIntent);

export interface RecordingSessionRow {
  id: string;
  name: string | null;
  /** The `episode_seq` the next episode of this session gets. */
  nextSeq: number;
  createdAt: number;
}

export interface RecordingStore {
  get(): Promise<RecordingRow | undefined>;
  steps(episodeId: string): Promise<SubtaskStep[]>;
  /**
   * Inserts the recording in state `recording`, makes `session` current and advances its
   * sequence past `recording.episodeSeq` (creating it when new), records `firstStep`, stores
   * `commandResult` and notes `importSource`; one transaction. Throws if a recording exists.
   */
  begin(args: { recording: RecordingRow; session: RecordingSessionRow; firstStep?: SubtaskStep; commandResult?: StoredCommandResult; importSource?: ImportSourceRow }): Promise<void>;
  /** Moves the recording to `finalizing` with its outcome and end, and stores `commandResult`; one transaction. */
  end(args: { episodeId: string; outcome: EpisodeOutcome; endedAt: number; commandResult?: StoredCommandResult }): Promise<void>;
  /** Notes the recording alive at `at`. */
  touch(episodeId: string, at: number): Promise<void>;
  /**
   * Inserts the finished episode, enqueues `report` (its outbox message) and removes the
   * recording and its steps; one transaction, so after a crash the episode and its report exist
   * both or neither.
   */
  complete(episode: EpisodeRow, report: NewOutboxMessage): Promise<void>;
}

/**
 * The recording in the import folder an episode was made from, noted in the same transaction as
 * the episode's begin and before the source is moved, so that neither a crash nor a restart makes
 * a second episode of it.
 */
export interface ImportSourceRow {
  episodeId: string;
  /** Its name in the import folder: a `*.mcap` file or a (rosbag2) directory. */
  name: string;
  kind: 'file' | 'directory';
  /** Its inode when the import began: the same name written again later is another recording. */
  ino: number;
  /** Bytes (a directory's files together) and mtime when the import began; it may still grow. */
  sizeAtBegin: number;
  mtimeMs: number;
  createdAt: number;
}

export interface ImportStore {
  byEpisode(episodeId: string): Promise<ImportSourceRow | undefined>;
  /** The import of the source `name` with inode `ino`, if any (the same recording seen again). */
  bySource(name: string, ino: number): Promise<ImportSourceRow | undefined>;
  /**
   * Imports whose finalized episode holds exactly `sizeBytes` (its manifest's total: the episode
   * directory holds the source alone), newest first: the recordings a new drop may duplicate.
   */
  withSize(sizeBytes: number): Promise<ImportSourceRow[]>;
}

/** A finished (finalized) episode. */
export interface EpisodeRow {
  id: string;
  recordingSessionId: string;
  episodeSeq: number;
  outcome: EpisodeOutcome;
  facts: EpisodeFacts;
  manifest: EpisodeManifest;
  finalizedAt: number;
  /** Finalized at start-up after the agent died mid-recording. */
  interrupted: boolean;
  /** Relative to the data directory. */
  dir: string;
}

export interface EpisodeStore {
  get(id: string): Promise<EpisodeRow | undefined>;
  /** In finalization order, oldest first. */
  list(opts?: { limit?: number; afterFinalizedAt?: number }): Promise<EpisodeRow[]>;
  ids(): Promise<string[]>;
}

export interface CommandResultStore {
  /** What is remembered of `cmdId` if it was received at or after `notBefore`. */
  get(cmdId: string, notBefore: number): Promise<RememberedCommand | undefined>;
  /**
   * Notes `intent` as `running` before its action runs and resolves undefined once that is
   * durable. When the id is already remembered (running or answered) at or after `notBefore`,
   * writes nothing and resolves with what is remembered; an expired row is replaced. One
   * transaction.
   */
  begin(intent: CommandIntent, notBefore: number): Promise<RememberedCommand | undefined>;
  /** Stores the answer in place of the intent (or of an expired result); one statement. */
  put(result: StoredCommandResult): Promise<void>;
  /** Deletes results received before `olderThan`; returns how many. */
  prune(olderThan: number): Promise<number>;
}

export interface OperatorContextStore {
  get(): Promise<OperatorContext>;
  /**
   * Replaces the context with `context`; appends `step` to the recording `step.episodeId`;
   * with `newSession` the next recording starts a new session. One transaction.
   */
  set(args: { context: OperatorContext; step?: { episodeId: string; step: SubtaskStep }; newSession: boolean }): Promise<void>;
}

export interface RecordingSessionStore {
  /** The session the next recording joins; undefined when it must start a new one. */
  current(): Promise<RecordingSessionRow | undefined>;
}

/** What an outbox message carries (`episode.report`, `replica.state`). */
export type OutboxKind = OutboxMessage['kind'];

/** A message to enqueue. `body` is serialized as JSON. */
export interface NewOutboxMessage {
  /** Unique; the cloud acknowledges by it. At most 128 characters, no double quote or backslash (see outbox.ts). */
  msgId: string;
  kind: OutboxKind;
  body: unknown;
  createdAt: number;
}

export type OutboxState = 'pending' | 'acked' | 'refused';

/** One durable outbox message. */
export interface OutboxRow {
  /** Creation order; never reused. */
  seq: number;
  msgId: string;
  kind: OutboxKind;
  /** The body as stored (JSON text). */
  bodyJson: string;
  createdAt: number;
  /** How many times it was published. */
  attempts: number;
  lastSentAt: number | null;
  state: OutboxState;
  /** Why the cloud refused it (state `refused`). */
  refusal: { code: string; message: string } | null;
  /** When it was acknowledged or refused. */
  settledAt: number | null;
}

export interface OutboxCounts {
  pending: number;
  acked: number;
  refused: number;
}

/**
 * The durable outbox (docs/architecture.md, The robot link): a message stays `pending` until the cloud
 * acknowledges it (`acked`) or refuses it for good (`refused`).
 */
export interface OutboxStore {
  /** Enqueues a message on its own; a msg_id already present is left as it is. */
  enqueue(msg: NewOutboxMessage): Promise<void>;
  get(msgId: string): Promise<OutboxRow | undefined>;
  /** Pending messages created after `afterSeq`, oldest first. */
  pending(opts: { afterSeq: number; limit: number }): Promise<OutboxRow[]>;
  /** Notes that these messages were published at `at` (attempts + 1); one transaction. */
  markSent(msgIds: readonly string[], at: number): Promise<void>;
  /**
   * Settles a pending message: acknowledged, or refused with the cloud's reason. Returns false
   * (and changes nothing) when no pending message has that id.
   */
  settle(msgId: string, outcome: { state: 'acked' } | { state: 'refused'; code: string; message: string }, at: number): Promise<boolean>;
  counts(): Promise<OutboxCounts>;
  /** Messages by kind and state (acknowledged ones until pruned), for `fleet-agent metrics`. */
  countsByKind(): Promise<{ kind: string; state: OutboxState; count: number }[]>;
  /** Deletes acknowledged messages settled before `olderThan` (refused ones are kept); returns how many. */
  prune(olderThan: number): Promise<number>;
}

// ---- cloud sync ----------------------------------------------------------------------------

/** A replica's local state: `assigned` (no grant yet), then the API's replica states in order. */
export type { LocalReplicaState } from '@fleet/protocol';

/** One (episode, destination) the cloud assigned this robot, and how far its upload got. */
export interface ReplicaRow {
  episodeId: string;
  destinationId: string;
  state: LocalReplicaState;
  grantId: string | null;
  objectKey: string | null;
  retention: RetentionDirective | null;
  /** Grant requests made (each answered, deferred or timed out counts one). */
  attempts: number;
  /** Failed transfer attempts since the last success (the step of the retry schedule). */
  failures: number;
  /** When to ask for a grant next; null when nothing more is to be done. */
  nextAttemptAt: number | null;
  /** `code: message` of the last failed attempt; cleared by the next state change. */
  lastError: string | null;
  /** Why the replica stays `synced`, or why nothing is uploaded. */
  note: string | null;
  /** Replica reports enqueued so far. */
  reports: number;
  assignedAt: number;
  updatedAt: number;
}

/** What the store answered for a file or a part: the proof checked for `verified`. */
export interface UploadReceipt {
  status: number;
  /** As received, quotes included; null when absent. */
  etag: string | null;
  /** `x-amz-checksum-sha256` (base64) when the store echoed one. */
  checksumSha256: string | null;
}

export interface UploadPartRow {
  partNumber: number;
  size: number;
  etag: string;
  /**
   * Hex MD5 of the bytes sent for this part, computed only when the store's ETag is an MD5 to
   * compare it with; null otherwise (the file's SHA-256 of the bytes sent is what verifies).
   */
  md5: string | null;
}

/** The upload progress of one file of a replica. */
export interface UploadFileRow {
  path: string;
  /** The multipart upload in progress (null for a single PUT). */
  uploadId: string | null;
  partSize: number | null;
  complete: boolean;
  bytesSent: number | null;
  /** Hex digests of every byte sent, whole file. */
  sha256Sent: string | null;
  md5Sent: string | null;
  /** The single PUT's receipt, or the complete request's for a multipart upload. */
  receipt: UploadReceipt | null;
  /** Parts of `uploadId` the store accepted, in part order. */
  parts: UploadPartRow[];
}

/** Replicas by situation: still to do (failing ones among them), finished as verified or synced with a note. */
export interface SyncCounts {
  /** Replicas with attempts ahead (not yet verified or parked). */
  open: number;
  /** Open replicas whose last attempt failed. */
  failing: number;
  verified: number;
  /** Finished without verification: synced with a note, parked after an error, or nothing to send. */
  settled: number;
}

/** A change to a replica row; absent fields stay as they are. */
export interface ReplicaPatch {
  state?: LocalReplicaState;
  grantId?: string | null;
  objectKey?: string | null;
  retention?: RetentionDirective | null;
  attempts?: number;
  failures?: number;
  nextAttemptAt?: number | null;
  lastError?: string | null;
  note?: string | null;
}

/**
 * The uploader's durable state (agent SQLite). Upload progress is written as it happens, each
 * call its own transaction, so a kill -9 at any point leaves what was done and nothing more.
 */
export interface SyncStore {
  /** Adds assignments not known yet (a push); returns how many were new. */
  add(assignments: readonly Assignment[], at: number): Promise<number>;
  /**
   * Makes the unfinished assignments equal to `complete` (the cloud's full list): adds the
   * missing ones, deletes unfinished ones it does not name (with their progress). Finished
   * replicas (next_attempt_at null) are kept. One transaction.
   */
  reconcile(complete: readonly Assignment[], at: number): Promise<{ added: number; removed: Assignment[] }>;
  get(episodeId: string, destinationId: string): Promise<ReplicaRow | undefined>;
  list(): Promise<ReplicaRow[]>;
  /** Replicas with something to do whose time has come, soonest first. */
  due(now: number, limit: number): Promise<ReplicaRow[]>;
  /** The earliest next_attempt_at of any replica, or null. */
  nextDueAt(): Promise<number | null>;
  /**
   * Applies `patch` and, when given, enqueues `report` (its replica report) and counts it; one
   * transaction, so a state change and its report exist both or neither.
   */
  update(episodeId: string, destinationId: string, patch: ReplicaPatch, at: number, report?: NewOutboxMessage): Promise<ReplicaRow>;
  files(episodeId: string, destinationId: string): Promise<UploadFileRow[]>;
  /**
   * Notes the multipart upload a grant named for a file. A different upload id than the one
   * stored starts over: the old parts and completion are forgotten.
   */
  beginMultipart(episodeId: string, destinationId: string, path: string, uploadId: string, partSize: number, at: number): Promise<void>;
  /** A part the store accepted (for the file's current upload id). */
  partDone(episodeId: string, destinationId: string, path: string, uploadId: string, part: UploadPartRow, at: number): Promise<void>;
  /** A file is complete at the destination: what was sent and the store's receipt. */
  fileDone(
    episodeId: string,
    destinationId: string,
    path: string,
    done: { uploadId: string | null; bytesSent: number; sha256Sent: string; md5Sent: string | null; receipt: UploadReceipt },
    at: number,
  ): Promise<void>;
  /** Forgets a file's progress (its upload must start over). */
  resetFile(episodeId: string, destinationId: string, path: string): Promise<void>;
  /** How many replicas are in each situation (for `fleet-agent status`). */
  counts(): Promise<SyncCounts>;
  /** How many replicas are in each local state (for `fleet-agent metrics`). */
  countsByState(): Promise<Record<LocalReplicaState, number>>;
  /** Bytes of finalized episodes with no verified replica (they cannot be pruned). */
  backlogBytes(): Promise<number>;
  /** Bytes of episodes finalized at or after `since`. */
  recordedBytesSince(since: number): Promise<number>;

  // ---- retention and missing files ----
  /** The episode's stored retention marks (undefined for an unknown episode). */
  localCopy(episodeId: string): Promise<LocalCopyRow | undefined>;
  /**
   * Episodes whose stored prune time has come (at or before `now`), not pruned yet, and still
   * verified at every destination assigned (checked again here: an unverified episode is never
   * pruned), soonest first.
   */
  pruneDue(now: number, limit: number): Promise<EpisodeRow[]>;
  /** The earliest stored prune time of an episode not pruned yet, or null. */
  nextPruneAt(): Promise<number | null>;
  /**
   * Notes that the episode's data files were deleted and enqueues `report` (its `episode.pruned`
   * message); one transaction. False (nothing written) when it was already pruned.
   */
  markPruned(episodeId: string, at: number, report: NewOutboxMessage): Promise<boolean>;
  /**
   * Notes that the episode's files went missing and enqueues `report` (its
   * `episode.local_missing` message), only the first time and only for an episode not pruned;
   * one transaction. False when nothing was written.
   */
  noteLocalMissing(episodeId: string, at: number, report: NewOutboxMessage): Promise<boolean>;
}

/** What retention stored about an episode's local copy. */
export interface LocalCopyRow {
  /** When retention deletes its files; null while not every destination verified it, or one says keep. */
  pruneDueAt: number | null;
  prunedAt: number | null;
  /** When missing files were first noticed (and reported). */
  localMissingAt: number | null;
}
