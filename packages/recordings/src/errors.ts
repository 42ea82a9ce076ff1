/**
 * The recordings package's one error table. Every failure to read a recording or to decode one
 * of its messages carries a stable `code`; the message names the file, topic and schema.
 */
export const RECORDING_ERROR_CODES = {
  /**
   * The MCAP cannot be opened by its index (no summary after a crash, a bad magic; with `recover`,
   * not even by a scan: no whole header) or a chunk fails its CRC or does not decompress.
   */
  unreadable: 'the recording cannot be read',
  /** A channel's schema does not parse (a ros2msg definition with a syntax error, a FileDescriptorSet that is not one, a type it does not hold). */
  schema_invalid: "a channel's schema cannot be parsed",
  /** A message does not decode with its channel's schema (truncated CDR, bad protobuf, text that is not JSON). */
  message_invalid: 'a message cannot be decoded',
  /** A message or schema encoding this package does not decode (e.g. `ros1`, `flatbuffer`), or a compression it cannot undo. */
  unsupported_encoding: 'an encoding is not supported',
  /** An image message in a pixel encoding or format that is not read, or whose data does not fit its size. */
  bad_image: 'an image cannot be read',
  /**
   * Reading over HTTP (`httpRangeSource`): the request got no answer (a network error; in a browser
   * most often a bucket without a CORS rule for the page's origin), or an answer that is not one
   * of the cases below (another status, a body shorter than asked), after the retries.
   */
  fetch_failed: 'the recording could not be fetched',
  /** Reading over HTTP: the storage answered 404, no object at the link. */
  not_found: 'the recording is not at its link',
  /** Reading over HTTP: the storage refused the link (403, or an expired signature) even after renewing it once. */
  forbidden: 'the storage refused the link',
  /** Reading over HTTP: the object's size (the total of the answer's Content-Range) is not the size the source was given (the manifest's). */
  size_mismatch: "the object's size is not the expected one",
  /** Reading over HTTP: the storage answered a Range request with the whole object (200), another range, or no readable Content-Range. */
  range_unsupported: 'the storage does not answer range requests',
} as const;

export type RecordingErrorCode = keyof typeof RECORDING_ERROR_CODES;

export class RecordingError extends Error {
  override readonly name = 'RecordingError';
  constructor(
    readonly code: RecordingErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(`${code}: ${message}`, options);
  }
}

export function isRecordingError(err: unknown, code?: RecordingErrorCode): err is RecordingError {
  return err instanceof RecordingError && (code === undefined || err.code === code);
}

export function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
