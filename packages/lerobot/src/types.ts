/**
 * The contract between the parts of the LeRobot export: the source side (manifest, fetch, MCAP,
 * mapping, resampling) produces `GridEpisode`s; the writer stages each one and assembles the
 * LeRobot v3.0 layout; the validator reads that layout back.
 */

/** A LeRobot feature as `meta/info.json` describes it. */
export interface FeatureInfo {
  dtype: 'float32' | 'float64' | 'int64' | 'bool' | 'string' | 'video' | 'image';
  shape: number[];
  names: string[] | Record<string, string[]> | null;
  /** Video features: the encoding's `info` block (`video.height`, `video.codec`, …). */
  info?: Record<string, unknown>;
}

/** One camera of one episode on the fixed grid: exactly `length` rgb24 frames, in order. */
export interface CameraFrames {
  width: number;
  height: number;
  /** Each frame `width * height * 3` bytes, row-major RGB. Read once, in order. */
  frames: AsyncIterable<Uint8Array>;
}

/** One episode resampled onto the fixed grid: what the writer takes. Frame i is at `i / fps`. */
export interface GridEpisode {
  /** The platform's episode id (`ep_…`), recorded for provenance. */
  episodeId: string;
  /** The task in words; the writer assigns `task_index` in order of first appearance. */
  task: string;
  /** Frames on the grid (at least 1). */
  length: number;
  /**
   * Numeric features per frame, by feature key (e.g. `observation.state`, `action`): `length * dim`
   * values, row-major, where `dim` is the feature's `shape[0]`.
   */
  vectors: Record<string, Float32Array>;
  /** The episode's outcome was a success: `next.success` is true on its last frame. */
  success: boolean;
  /** By feature key (e.g. `observation.images.front`). */
  cameras: Record<string, CameraFrames>;
  /** Selected episode metadata, written as columns of `meta/episodes` (`meta/<key>`), strings. */
  metadata: Record<string, string>;
}

/** What the dataset is: fixed for a whole export. */
export interface DatasetShape {
  fps: number;
  robotType: string;
  /** The numeric features (`observation.state`, `action`, …) with their names. */
  vectors: Record<string, { shape: [number]; names: string[] }>;
  /** The cameras by feature key, each with its frame size. */
  cameras: Record<string, { width: number; height: number }>;
  /** The metadata keys every episode carries (columns `meta/<key>` of meta/episodes). */
  metadataKeys: string[];
}
