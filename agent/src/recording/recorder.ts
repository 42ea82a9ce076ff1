import type { ImportSourceRow } from '../store/types.js';

/**
 * What writes an episode's files. The agent owns the episode directory and the state machine;
 * a recorder only writes data files into the directory it is given (never `manifest.json` or
 * `episode.json`, which the agent writes at finalize).
 */
export interface Recorder {
  /** Starts writing into `dir` (which exists and is empty). */
  start(dir: string, info: RecordingInfo): Promise<RecordingHandle>;
  /**
   * Called at start-up for a recording whose agent died: closes what can be closed in `dir` and
   * reports what is there. Without it the agent takes every data file in `dir` as it is.
   */
  recover?(dir: string): Promise<RecordedFiles>;
  /**
   * Called at start-up, before `recover`, for a recording left in `recording` by a previous
   * process: a handle when the recording goes on as the same episode (the import recorder's
   * source still being written, or closed and not yet taken), undefined to end it as interrupted.
   */
  resume?(dir: string, info: RecordingInfo): Promise<RecordingHandle | undefined>;
}

export interface RecordingInfo {
  robotId: string;
  episodeId: string;
  /** Robot clock, ms since the epoch. */
  startedAt: number;
  /**
   * The operator context's task id when the episode started (null: none). Optional so that a
   * recorder written before it existed, or a caller that has no context, still fits.
   */
  taskId?: string | null;
}

export interface RecorderStats {
  messageCount: number;
  /** Bytes written to disk so far. */
  bytes: number;
}

export interface RecordedFiles {
  /** Paths relative to the episode directory, `/`-separated. */
  files: string[];
  /** null when the recorder cannot tell (e.g. after a crash). */
  messageCount: number | null;
  /**
   * When the recording itself says it started and ended (ms since the epoch, e.g. an imported
   * MCAP's statistics); the episode's times then come from here instead of the verbs' clock.
   */
  startedAt?: number;
  endedAt?: number;
}

export interface RecordingHandle {
  stats(): RecorderStats;
  /** Stops writing and closes every file; resolves once they are complete on disk. */
  stop(): Promise<RecordedFiles>;
  /** Stops writing and deletes every file it wrote (used by discard). */
  abort(): Promise<void>;
  /**
   * The agent stops cleanly while the recording goes on without it (the import recorder's source
   * is the robot's own): lets go without taking anything, so the next start resumes it. Without
   * it `close()` stops the recording.
   */
  detach?(): Promise<void>;
  /** The import folder's recording this one is made from, noted with the episode's begin. */
  readonly importSource?: Omit<ImportSourceRow, 'episodeId'>;
  /**
   * Registers the one listener told when the recording ended by itself (a recorder program that
   * died), never after `stop()` or `abort()`. A recording that already ended calls it at once.
   * The state machine ends such an episode as a `failure` with `metadata.recorder_exit`.
   */
  onUnexpectedEnd?(listener: (exit: RecorderExit) => void): void;
}

/** How a recorder's program ended on its own (`metadata.recorder_exit` of the failed episode). */
export interface RecorderExit {
  /** Its exit code; null when a signal ended it. */
  code: number | null;
  /** The signal that ended it (`SIGSEGV`, ...); null when it exited. */
  signal: string | null;
  /** The last output it printed (stdout and stderr as they arrived), at most about 1 KiB. */
  output_tail: string;
}

/** Names the agent itself writes into an episode directory; never recorded data. */
export const EPISODE_META_FILES = ['manifest.json', 'episode.json'] as const;
