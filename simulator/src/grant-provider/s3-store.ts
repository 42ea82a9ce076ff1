import {
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  GetObjectCommand,
  ListMultipartUploadsCommand,
  PutObjectCommand,
  S3Client,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import type { GrantProviderConfig } from './config.js';

/** One multipart upload the store has in flight. */
export interface InFlightUpload {
  key: string;
  uploadId: string;
  /** ISO time, for a stable choice when a key has several. */
  initiated: string;
}

/**
 * The object store as the grant and read builders need it: list and create multipart uploads
 * (the only calls that reach the store), and presign URLs (computed locally, nothing is sent).
 */
export interface UploadStore {
  listUploads(prefix: string, signal: AbortSignal): Promise<InFlightUpload[]>;
  createUpload(key: string, signal: AbortSignal): Promise<string>;
  presignPut(key: string, at: Date): Promise<string>;
  presignPart(key: string, uploadId: string, partNumber: number, at: Date): Promise<string>;
  presignComplete(key: string, uploadId: string, at: Date): Promise<string>;
  /** A GET of `key` (Range requests included) valid `expiresInS` seconds from `at`. */
  presignGet(key: string, at: Date, expiresInS: number): Promise<string>;
  close(): void;
}

/** Pages of ListMultipartUploads read for one episode before giving up (1,000 uploads each). */
const MAX_LIST_PAGES = 10;

export function createS3UploadStore(config: GrantProviderConfig): UploadStore {
  const client = new S3Client({
    region: config.s3Region,
    ...(config.s3Endpoint ? { endpoint: config.s3Endpoint } : {}),
    forcePathStyle: config.s3ForcePathStyle,
    ...(config.s3AccessKeyId && config.s3SecretAccessKey
      ? { credentials: { accessKeyId: config.s3AccessKeyId, secretAccessKey: config.s3SecretAccessKey } }
      : {}),
    // Checksums on by default would put x-amz-checksum-* parameters in the presigned URLs, and
    // the store would then refuse a robot's upload that does not send that exact checksum.
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
    // A grant must be answered within 10 s: one retry, short timeouts, then a deferral.
    maxAttempts: 2,
    requestHandler: { connectionTimeout: 2000, requestTimeout: config.storeTimeoutMs },
  });
  const Bucket = config.s3Bucket;
  const expiresIn = config.urlLifetimeS;

  return {
    async listUploads(prefix, signal) {
      const out: InFlightUpload[] = [];
      let keyMarker: string | undefined;
      let uploadIdMarker: string | undefined;
      for (let page = 0; page < MAX_LIST_PAGES; page++) {
        const res = await client.send(new ListMultipartUploadsCommand({ Bucket, Prefix: prefix, KeyMarker: keyMarker, UploadIdMarker: uploadIdMarker }), {
          abortSignal: signal,
        });
        for (const u of res.Uploads ?? []) {
          if (u.Key && u.UploadId) out.push({ key: u.Key, uploadId: u.UploadId, initiated: u.Initiated?.toISOString() ?? '' });
        }
        if (!res.IsTruncated) return out;
        keyMarker = res.NextKeyMarker;
        uploadIdMarker = res.NextUploadIdMarker;
      }
      throw new Error(`more than ${MAX_LIST_PAGES * 1000} multipart uploads in flight under one episode`);
    },
    async createUpload(key, signal) {
      const res = await client.send(new CreateMultipartUploadCommand({ Bucket, Key: key }), { abortSignal: signal });
      if (!res.UploadId) throw new Error('CreateMultipartUpload answered no UploadId');
      return res.UploadId;
    },
    presignPut: (key, at) => getSignedUrl(client, new PutObjectCommand({ Bucket, Key: key }), { expiresIn, signingDate: at }),
    presignPart: (key, uploadId, partNumber, at) =>
      getSignedUrl(client, new UploadPartCommand({ Bucket, Key: key, UploadId: uploadId, PartNumber: partNumber }), { expiresIn, signingDate: at }),
    presignComplete: (key, uploadId, at) =>
      getSignedUrl(client, new CompleteMultipartUploadCommand({ Bucket, Key: key, UploadId: uploadId }), { expiresIn, signingDate: at }),
    presignGet: (key, at, expiresInS) => getSignedUrl(client, new GetObjectCommand({ Bucket, Key: key }), { expiresIn: expiresInS, signingDate: at }),
    close: () => client.destroy(),
  };
}

/** What is worth logging of an SDK or network error: never a URL with a signature in it. */
export function describeStoreError(err: unknown): { name: string; code?: string; status?: number } {
  const e = err as { name?: string; code?: string; Code?: string; $metadata?: { httpStatusCode?: number } };
  return { name: e.name ?? 'Error', code: e.code ?? e.Code, status: e.$metadata?.httpStatusCode };
}
