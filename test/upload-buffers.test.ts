import { createHash, randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { CompleteMultipartUploadCommand, CreateMultipartUploadCommand, S3Client, UploadPartCommand } from '@aws-sdk/client-s3';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import { describe, expect, test } from 'vitest';
import { multipartUpload, partCount } from '../agent/src/sync/transfer.js';
import { uploadDispatcher } from '../agent/src/sync/trust.js';
import { makeTempDir } from './support/cloud.js';
import { startS3Server } from './support/s3-server.js';

const MiB = 1024 * 1024;

describe('upload read buffers', () => {
  // The agent reuses a body's read buffers once their bytes have left (agent/src/sync/piece-body.ts):
  // reused too early, a part would carry another piece's bytes while its CRCs say otherwise.
  test('a multipart upload of parts in parallel to a real S3 server stores exactly the file', async () => {
    await using s3 = await startS3Server({ bucket: 'buffers' });
    await using dir = await makeTempDir('fleet-upload-buffers-');
    const client = new S3Client({ endpoint: s3.endpoint, region: s3.region, forcePathStyle: true, credentials: { accessKeyId: s3.accessKeyId, secretAccessKey: s3.secretAccessKey } });
    const dispatcher = uploadDispatcher({ connections: 3 });
    try {
      // Five parts of 5 MiB (S3's minimum) and a short one, each read in 1 MiB pieces plus a short piece.
      const partSize = 5 * MiB;
      const bytes = randomBytes(5 * partSize + 3 * MiB + 7);
      const file = join(dir.path, 'episode.bin');
      await writeFile(file, bytes);
      const key = 'ep_1/episode.bin';
      const { UploadId } = await client.send(new CreateMultipartUploadCommand({ Bucket: s3.bucket, Key: key }));
      const count = partCount(bytes.length, partSize);
      expect(count).toBe(6);
      const partUrls = await Promise.all(
        Array.from({ length: count }, (_, i) => getSignedUrl(client, new UploadPartCommand({ Bucket: s3.bucket, Key: key, UploadId, PartNumber: i + 1 }), { expiresIn: 600 })),
      );
      const completeUrl = await getSignedUrl(client, new CompleteMultipartUploadCommand({ Bucket: s3.bucket, Key: key, UploadId }), { expiresIn: 600 });
      const result = await multipartUpload({
        http: { dispatcher, allowHttp: true, timeoutMs: 60_000 },
        job: {
          file,
          label: 'episode.bin',
          size: bytes.length,
          expectedSha256: createHash('sha256').update(bytes).digest('hex'),
          uploadId: UploadId!,
          partSize,
          partUrls,
          completeUrl,
          done: new Map(),
        },
        parallel: 3,
        signal: new AbortController().signal,
        onFirstByte: () => undefined,
        onPart: async () => undefined,
      });
      // s3rver's part ETags are MD5s: the agent compared each with the part read again from the file.
      expect(result.parts.map((p) => p.md5)).toEqual(Array.from({ length: count }, (_, i) => createHash('md5').update(bytes.subarray(i * partSize, (i + 1) * partSize)).digest('hex')));
      expect((await s3.getObject(key))?.body.equals(bytes)).toBe(true);
    } finally {
      client.destroy();
      await dispatcher.close();
    }
  });
});
