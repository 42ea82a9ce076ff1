/** Why a stage or an assembly failed; tests check the code, not the message. */
export type WriterErrorCode =
  /** The episode does not match the dataset shape (lengths, vector sizes, cameras, metadata keys). */
  | 'invalid_episode'
  /** The dataset shape or the options cannot be written as LeRobot v3.0 (e.g. AV1 under 64 px). */
  | 'invalid_shape'
  /** A camera yielded more or fewer frames than the episode's length, or a frame of the wrong size. */
  | 'frame_mismatch'
  /** A camera's frames are larger than the codec encodes (SVT-AV1: 16384x8704, x264: 16384x16384). */
  | 'frame_too_large'
  /** ffmpeg or ffprobe failed or could not be started. */
  | 'ffmpeg_failed'
  /** assembleDataset found an episode that is not staged, or staged for another shape. */
  | 'not_staged';

export class WriterError extends Error {
  override readonly name = 'WriterError';
  constructor(
    readonly code: WriterErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}
