/**
 * The source side's one error table: every failure to turn a manifest line into a `GridEpisode`
 * carries a stable `code`, which the export report records per episode (tests check codes, not
 * messages). The message says what and where (line, file, topic, field) in one sentence.
 */
export const SOURCE_ERROR_CODES = {
  /** A manifest line is not JSON or not the shape the manifest documents. */
  manifest_invalid: 'a manifest line is malformed',
  /** No location of the episode is at a destination the user gave a source for (verified or synced). */
  no_location: 'no usable location for the episode',
  /** The object is not there (404, NoSuchKey, ENOENT). */
  missing: 'a file of the episode is missing at its location',
  /** The store refused to read it (403, AccessDenied). */
  denied: 'reading a file of the episode was denied',
  /** The bytes read do not hash to the manifest's sha256. */
  checksum_mismatch: "a file's SHA-256 differs from the manifest",
  /** The bytes read are not as many as the manifest says. */
  size_mismatch: "a file's size differs from the manifest",
  /** Any other failure while reading or writing bytes (network, disk, a bad source URL). */
  io: 'an I/O error',
  /** The MCAP cannot be opened with its index (no summary after a crash, a bad CRC, …), a schema does not parse, a message does not decode, or a stream's stamps go backwards. */
  corrupt_recording: 'the recording cannot be read',
  /** The mapping file is malformed, or does not fit the recording (missing topic, wrong field). */
  mapping_invalid: 'the mapping does not fit',
  /** The mapped streams do not overlap for even one frame (or one has no message at all). */
  too_short: 'the episode is shorter than one frame',
  /**
   * A stream has no sample within the mapping's `max_staleness_ms` of a frame time (a dropped
   * topic, a camera that froze): the frame would carry data older, or farther away, than allowed.
   */
  stale_stream: 'a stream has a gap longer than the staleness tolerance',
  /** A message broke the shape fixed by the first one: a vector's dimension or a frame's size changed. */
  shape_changed: 'a stream changed shape mid-episode',
  /** A camera frame is in an encoding the export cannot convert to rgb24, or its data is too short. */
  bad_image: 'a camera frame cannot be decoded',
  /** The mapping's task source has no value for this episode (and no default). */
  task_missing: 'the episode has no task',
} as const;

export type SourceErrorCode = keyof typeof SOURCE_ERROR_CODES;

export class SourceError extends Error {
  override readonly name = 'SourceError';
  constructor(
    readonly code: SourceErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(`${code}: ${message}`, options);
  }
}

export function isSourceError(err: unknown, code?: SourceErrorCode): err is SourceError {
  return err instanceof SourceError && (code === undefined || err.code === code);
}

/** A thrown value's message, for wrapping a library's error in ours. */
export function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
