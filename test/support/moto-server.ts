/**
 * moto's S3 server (moto[server] 5.2.5, from the SDK's venv) as the second S3 implementation of
 * the tests: `startS3Server({ implementation: 'moto' })` in s3-server.ts, or every
 * `startS3Server()` of a run with FLEET_TEST_S3=moto (the `test:moto` pass). This file only
 * starts the process; s3-server.ts creates the bucket and gives the same `S3ServerProcess` as
 * for s3rver.
 *
 * From a Python test (the SDK's `datasets.download()` against a real bucket):
 *
 *   await using s3 = await startS3Server({ implementation: 'moto', bucket: 'customer-data' });
 *   // put the recordings there with the AWS SDK (s3.endpoint, s3.accessKeyId, …), then:
 *   const python = ensurePythonEnv(log, join(REPO_ROOT, 'python', 'requirements-dev.txt'));
 *   await runProcess(python, ['-m', 'pytest', …], { env: { ...s3.awsEnv() } });
 *
 * `s3.awsEnv()` is AWS_ENDPOINT_URL_S3, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
 * AWS_DEFAULT_REGION and AWS_REGION, so a plain `boto3.client('s3')` inside pytest reaches the
 * server (boto3 falls back to path-style addressing for an IP endpoint); `s3.bucket` is the
 * bucket, `s3.endpoint` the URL. moto keeps everything in memory: a `stop()`/`start()` gives an
 * empty bucket again, not the old objects.
 *
 * What moto 5.2.5 checks, read in its source (moto/s3/responses.py, moto/s3/models.py,
 * moto/iam/access_control.py) and pinned by test/s3-server.test.ts:
 * - CompleteMultipartUpload: every listed part must have been uploaded to that upload with the
 *   ETag the list gives (quotes ignored), else 400 `InvalidPart`; every part but the last must be
 *   at least 5 MiB (S3_UPLOAD_PART_MIN_SIZE, set explicitly below), else 400 `EntityTooSmall`; an
 *   empty list is `MalformedXML`; an unknown upload id is 404 `NoSuchUpload`. It does not check
 *   the order of the list (its InvalidPartOrder check never updates the previous number) nor
 *   that the parts cover anything (S3 does not either). The object's ETag is S3's
 *   `"<md5 of the part md5s>-<count>"` (s3rver gives the whole object's md5).
 * - SigV4: NOT checked as run here. With INITIAL_NO_AUTH_ACTION_COUNT=0 (its IAM mode, keys then
 *   created through its IAM API) it checks header signatures (403 SignatureDoesNotMatch), but
 *   it reads only the Authorization header: a presigned URL (every robot upload) is answered
 *   500 KeyError, tampered or not, and X-Amz-Expires is never looked at. So any credentials are
 *   accepted and an expired URL is not refused; signature and expiry checks stay with s3rver
 *   (@20minutes/s3rver, which checks both).
 * - Checksums: none verified. `x-amz-checksum-*` values are stored and echoed as sent (a
 *   TODO in moto says AWS would verify them), absent ones are computed; Content-MD5 is not
 *   checked. A presigned URL that names content-type/content-md5/… in its query must be sent with
 *   the same header (only when the key does not exist yet).
 * - ListMultipartUploads and ListParts are implemented (s3rver lacks both).
 */
import { join } from 'node:path';
import { cleanEnv, REPO_ROOT } from './cloud.js';
import { spawnProcess, type SpawnedProcess } from './process.js';
import { ensurePythonEnv } from './python.js';

/** moto accepts any credentials (see above); these only have to look like AWS's. */
export const MOTO_CREDENTIALS = { accessKeyId: 'AKIAFLEETTESTMOTO000', secretAccessKey: 'fleet-test-moto-secret' } as const;

/** The SDK's venv, which holds moto[server]. */
const pythonOfMoto = (): string => ensurePythonEnv(undefined, join(REPO_ROOT, 'python', 'requirements-dev.txt'));

/**
 * Starts `python -m moto.server` on 127.0.0.1:`port` (0: a free one) and resolves once it
 * listens: werkzeug prints `Running on http://127.0.0.1:PORT` after binding, with the port it got.
 */
export async function spawnMoto(port: number): Promise<{ proc: SpawnedProcess; endpoint: string }> {
  const python = pythonOfMoto();
  const env = cleanEnv({
    // Its IAM mode would check header signatures but answers every presigned URL 500 (see above).
    INITIAL_NO_AUTH_ACTION_COUNT: 'inf',
    // S3's own part minimum, whatever the developer's shell says.
    S3_UPLOAD_PART_MIN_SIZE: String(5 * 1024 * 1024),
    PYTHONUNBUFFERED: '1',
  });
  const proc = spawnProcess(python, ['-m', 'moto.server', '-H', '127.0.0.1', '-p', String(port)], { name: 'moto.server', cwd: REPO_ROOT, env });
  try {
    const line = await proc.waitForStderr((l) => /Running on http:\/\/127\.0\.0\.1:\d+/.test(l), { description: 'the "Running on http://127.0.0.1:PORT" line' });
    const got = /Running on (http:\/\/127\.0\.0\.1:\d+)/.exec(line)![1]!;
    return { proc, endpoint: got };
  } catch (err) {
    await proc.kill('SIGKILL');
    throw err;
  }
}
