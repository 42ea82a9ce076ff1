export { bytesSource, type ByteSource } from './byte-source.js';
export {
  DEFAULT_BLOCK_SIZE,
  DEFAULT_CACHE_BYTES,
  httpRangeSource,
  type HttpRangeRequestInfo,
  type HttpRangeSource,
  type HttpRangeSourceOptions,
  type HttpRangeStats,
} from './http-source.js';
export { RECORDING_ERROR_CODES, RecordingError, isRecordingError, type RecordingErrorCode } from './errors.js';
export { decoderFor, type MessageDecoder, type SchemaInfo } from './decoders.js';
export { McapRecording, openMcap, type DecodedMessage, type OpenOptions, type ReadOptions, type RecordingChannel } from './recording.js';
export type { ScanOutcome } from './recover.js';
export {
  COMPRESSED_IMAGE_SCHEMAS,
  IMAGE_SCHEMAS,
  RAW_IMAGE_ENCODINGS,
  RAW_IMAGE_SCHEMAS,
  cameraImage,
  compressedFormat,
  isImageSchema,
  type CameraImage,
} from './images.js';
export { headerStampNs, timeNs, timestampNs } from './stamps.js';
export { base64Bytes } from './base64.js';
