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
}

export interface RecordingInfo {
  robotId: string;
  episodeId: string;
  /** Robot clock, ms since the epoch. */
  startedAt: number;
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
}

export interface RecordingHandle {
  stats(): RecorderStats;
  /** Stops writing and closes every file; resolves once they are complete on disk. */
  stop(): Promise<RecordedFiles>;
  /** Stops writing and deletes every file it wrote (used by discard). */
  abort(): Promise<void>;
}

/** Names the agent itself writes into an episode directory; never recorded data. */
export const EPISODE_META_FILES = ['manifest.json', 'episode.json'] as const;
