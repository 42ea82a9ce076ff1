import { existsSync } from 'node:fs';
import { PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import { request } from 'undici';
import { describe, expect, test } from 'vitest';
import { startS3Server } from './support/s3-server.js';

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('startS3Server', () => {
  test('a real process with the bucket created; stop/start keeps the data and the port; dispose removes both', async () => {
    let pid = 0;
    let dataDir = '';
    {
      await using s3 = await startS3Server({ bucket: 'harness' });
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
    await using s3 = await startS3Server({ bucket: 'many' });
    const client = new S3Client({ endpoint: s3.endpoint, region: s3.region, forcePathStyle: true, credentials: { accessKeyId: s3.accessKeyId, secretAccessKey: s3.secretAccessKey } });
    const keys = Array.from({ length: 1100 }, (_, i) => `org/ep_${String(i).padStart(4, '0')}/recording.mcap`);
    for (let i = 0; i < keys.length; i += 100) {
      await Promise.all(keys.slice(i, i + 100).map((Key) => client.send(new PutObjectCommand({ Bucket: 'many', Key, Body: 'x' }))));
    }
    client.destroy();
    expect((await s3.listObjects()).map((o) => o.key)).toEqual(keys);
  });
});
