import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import {
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  PutObjectCommand,
  S3Client,
  UploadPartCommand,
  type CompletedPart,
} from '@aws-sdk/client-s3';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import { request } from 'undici';
import { describe, expect, test } from 'vitest';
import { REPO_ROOT } from './support/cloud.js';
import { runProcess } from './support/process.js';
import { ensurePythonEnv } from './support/python.js';
import { startS3Server, type S3ServerProcess } from './support/s3-server.js';

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('startS3Server (s3rver)', () => {
  test('a real process with the bucket created; stop/start keeps the data and the port; dispose removes both', async () => {
    let pid = 0;
    let dataDir = '';
    {
      await using s3 = await startS3Server({ bucket: 'harness', implementation: 's3rver' });
      pid = s3.process.pid;
      dataDir = s3.dataDir;
      expect(s3.endpoint).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
      const client = new S3Client({ endpoint: s3.endpoint, region: s3.region, forcePathStyle: true, credentials: { accessKeyId: s3.accessKeyId, secretAccessKey: s3.secretAccessKey } });
      await client.send(new PutObjectCommand({ Bucket: 'harness', Key: 'a/b.txt', Body: 'hello' }));
      expect(await s3.listObjects()).toEqual([{ key: 'a/b.txt', size: 5, etag: '"5d41402abc4b2a76b9719d911017c592"' }]);

      await s3.stop();
      expect(alive(pid)).toBe(false);
      await expect(request(s3.endpoint)).rejects.toThrow();
      await s3.start();
      pid = s3.process.pid;
      expect((await s3.getObject('a/b.txt'))?.body.toString()).toBe('hello');
      expect(await s3.getObject('missing')).toBeNull();

      // An expired presigned URL is refused (403 AccessDenied), as S3 does.
      const expired = await getSignedUrl(client, new PutObjectCommand({ Bucket: 'harness', Key: 'late.txt' }), {
        expiresIn: 60,
        signingDate: new Date(Date.now() - 3600_000),
      });
      const res = await request(expired, { method: 'PUT', body: 'late' });
      expect(res.statusCode).toBe(403);
      expect(await res.body.text()).toMatch(/<Code>AccessDenied<\/Code>/);
      client.destroy();
    }
    expect(alive(pid)).toBe(false);
    expect(existsSync(dataDir)).toBe(false);
  });

  test('lists a bucket of more than one page (s3rver cannot make a v2 continuation token on Node 20)', async () => {
    await using s3 = await startS3Server({ bucket: 'many', implementation: 's3rver' });
    const client = new S3Client({ endpoint: s3.endpoint, region: s3.region, forcePathStyle: true, credentials: { accessKeyId: s3.accessKeyId, secretAccessKey: s3.secretAccessKey } });
    const keys = Array.from({ length: 1100 }, (_, i) => `org/ep_${String(i).padStart(4, '0')}/recording.mcap`);
    for (let i = 0; i < keys.length; i += 100) {
      await Promise.all(keys.slice(i, i + 100).map((Key) => client.send(new PutObjectCommand({ Bucket: 'many', Key, Body: 'x' }))));
    }
    client.destroy();
    expect((await s3.listObjects()).map((o) => o.key)).toEqual(keys);
  });
});

const md5 = (b: Buffer | string) => createHash('md5').update(b).digest('hex');
/** A client of the test's own: no SDK checksums (as the grant provider), one attempt. */
const clientOf = (s3: S3ServerProcess) =>
  new S3Client({
    endpoint: s3.endpoint,
    region: s3.region,
    forcePathStyle: true,
    credentials: { accessKeyId: s3.accessKeyId, secretAccessKey: s3.secretAccessKey },
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
    maxAttempts: 1,
  });

describe('startS3Server (moto)', () => {
  test('a real moto.server process with the bucket made through the SDK; boto3 reaches it from awsEnv(); stop/start keeps the port but not the data; dispose ends it', async () => {
    let pid = 0;
    {
      await using s3 = await startS3Server({ bucket: 'harness', implementation: 'moto' });
      pid = s3.process.pid;
      expect(s3.implementation).toBe('moto');
      expect(s3.endpoint).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
      const client = clientOf(s3);
      await client.send(new PutObjectCommand({ Bucket: 'harness', Key: 'a/b.txt', Body: 'hello' }));
      expect(await s3.listObjects()).toEqual([{ key: 'a/b.txt', size: 5, etag: `"${md5('hello')}"` }]);
      expect((await s3.getObject('a/b.txt'))?.body.toString()).toBe('hello');
      expect(await s3.getObject('missing')).toBeNull();

      // What a Python test (the SDK's download()) does: a plain boto3 client configured by the environment only.
      const python = ensurePythonEnv(undefined, join(REPO_ROOT, 'python', 'requirements-dev.txt'));
      const script = "import boto3, sys; print(boto3.client('s3').get_object(Bucket=sys.argv[1], Key='a/b.txt')['Body'].read().decode())";
      const py = await runProcess(python, ['-c', script, s3.bucket], { env: s3.awsEnv(), timeoutMs: 60_000 });
      expect(py.code, py.stderr).toBe(0);
      expect(py.stdout.trim()).toBe('hello');

      await s3.stop();
      expect(alive(pid)).toBe(false);
      await expect(request(s3.endpoint)).rejects.toThrow();
      await s3.start();
      pid = s3.process.pid;
      // The new process listens on the port of the first (the endpoint given out stays right).
      expect(s3.process.stderrLines.some((l) => l.includes(`Running on ${s3.endpoint}`))).toBe(true);
      // In memory: the bucket is there again, empty.
      expect(await s3.listObjects()).toEqual([]);
      client.destroy();
    }
    expect(alive(pid)).toBe(false);
  });

  test('CompleteMultipartUpload is checked as S3 does: unknown or mismatched part ETags are InvalidPart, a non-last part under 5 MiB is EntityTooSmall; the ETag is the md5 of the part md5s', async () => {
    await using s3 = await startS3Server({ bucket: 'parts', implementation: 'moto' });
    const client = clientOf(s3);
    try {
      const part1 = Buffer.alloc(5 * 1024 * 1024, 1);
      const part2 = Buffer.from('the tail');
      const upload = async (parts: Buffer[]) => {
        const { UploadId } = await client.send(new CreateMultipartUploadCommand({ Bucket: 'parts', Key: 'big.bin' }));
        const done: CompletedPart[] = [];
        for (const [i, body] of parts.entries()) {
          const { ETag } = await client.send(new UploadPartCommand({ Bucket: 'parts', Key: 'big.bin', UploadId, PartNumber: i + 1, Body: body }));
          done.push({ PartNumber: i + 1, ETag });
        }
        return { UploadId: UploadId!, done };
      };
      const complete = (UploadId: string, Parts: CompletedPart[]) =>
        client.send(new CompleteMultipartUploadCommand({ Bucket: 'parts', Key: 'big.bin', UploadId, MultipartUpload: { Parts } })).then(
          (r) => ({ ok: true as const, etag: r.ETag }),
          (err: { name?: string }) => ({ ok: false as const, code: err.name }),
        );

      const a = await upload([part1, part2]);
      expect(a.done.map((p) => p.ETag)).toEqual([`"${md5(part1)}"`, `"${md5(part2)}"`]);
      expect(await complete(a.UploadId, [a.done[0]!, { PartNumber: 2, ETag: `"${md5('other bytes')}"` }])).toEqual({ ok: false, code: 'InvalidPart' });
      expect(await complete(a.UploadId, [...a.done, { PartNumber: 3, ETag: `"${md5(part2)}"` }])).toEqual({ ok: false, code: 'InvalidPart' });
      const whole = `"${md5(Buffer.concat([Buffer.from(md5(part1), 'hex'), Buffer.from(md5(part2), 'hex')]))}-2"`;
      expect(await complete(a.UploadId, a.done)).toEqual({ ok: true, etag: whole });
      const obj = await s3.getObject('big.bin');
      expect(obj!.etag).toBe(whole);
      expect(obj!.body.equals(Buffer.concat([part1, part2]))).toBe(true);

      const b = await upload([part2, part1]);
      expect(await complete(b.UploadId, b.done)).toEqual({ ok: false, code: 'EntityTooSmall' });
    } finally {
      client.destroy();
    }
  });

  test('what moto does not check, pinned so that moto-server.ts stays true: signatures, expiry and checksums', async () => {
    await using s3 = await startS3Server({ bucket: 'lenient', implementation: 'moto' });
    const client = clientOf(s3);
    try {
      // An expired presigned URL with a tampered signature still stores the object.
      const expired = await getSignedUrl(client, new PutObjectCommand({ Bucket: 'lenient', Key: 'late.txt' }), { expiresIn: 60, signingDate: new Date(Date.now() - 3600_000) });
      const tampered = expired.replace(/X-Amz-Signature=[0-9a-f]{4}/, 'X-Amz-Signature=0000');
      expect(tampered).not.toBe(expired);
      const res = await request(tampered, { method: 'PUT', body: 'late' });
      await res.body.text();
      expect(res.statusCode).toBe(200);
      // A wrong secret on a header-signed request is accepted too.
      const wrong = new S3Client({ endpoint: s3.endpoint, region: s3.region, forcePathStyle: true, credentials: { accessKeyId: s3.accessKeyId, secretAccessKey: 'not-the-secret' }, maxAttempts: 1 });
      await wrong.send(new PutObjectCommand({ Bucket: 'lenient', Key: 'wrong-secret.txt', Body: 'x' }));
      wrong.destroy();
      // A SHA-256 checksum that is not the body's is stored and echoed, not refused (S3: BadDigest).
      const put = await client.send(new PutObjectCommand({ Bucket: 'lenient', Key: 'bad-sum.txt', Body: 'abc', ChecksumAlgorithm: 'SHA256', ChecksumSHA256: createHash('sha256').update('other').digest('base64') }));
      expect(put.ChecksumSHA256).toBe(createHash('sha256').update('other').digest('base64'));
      expect((await s3.listObjects()).map((o) => o.key).sort()).toEqual(['bad-sum.txt', 'late.txt', 'wrong-secret.txt']);
    } finally {
      client.destroy();
    }
  });
});
