/* global process, console */
// The S3-compatible server of the end-to-end tests, run as its own process by `startS3Server()`
// (s3-server.ts): @20minutes/s3rver with SigV4 signature checking on, plus the one call it
// lacks that the grant provider needs (ListMultipartUploads, answered from s3rver's own upload
// directory after s3rver's own signature check). Prints `{"endpoint":"http://127.0.0.1:PORT"}`.
//
// Usage: node s3-server-main.js <dataDir> <bucket> [port]
import { readdir, readFile, stat } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { join } from 'node:path';

const require = createRequire(import.meta.url);
const S3rver = require('@20minutes/s3rver');
const authentication = require('@20minutes/s3rver/lib/middleware/authentication');
const S3Error = require('@20minutes/s3rver/lib/models/error');

const [dataDir, bucket, portArg] = process.argv.slice(2);
if (!dataDir || !bucket) {
  console.error('usage: s3-server-main.js <dataDir> <bucket> [port]');
  process.exit(2);
}

const server = new S3rver({
  address: '127.0.0.1',
  port: Number(portArg ?? 0),
  directory: dataDir,
  silent: true,
  vhostBuckets: false,
  allowMismatchedSignatures: false,
  configureBuckets: [{ name: bucket, configs: [] }],
});

async function listUploads(ctx) {
  const prefix = typeof ctx.query.prefix === 'string' ? ctx.query.prefix : '';
  const dir = server.store.getResourcePath(ctx.params.bucket, undefined, 'uploads');
  let ids = [];
  try {
    ids = await readdir(dir);
  } catch (err) {
    if (err.code !== 'ENOENT') throw err;
  }
  const uploads = [];
  for (const id of ids) {
    try {
      const key = (await readFile(join(dir, id, 'key'))).toString();
      const initiated = (await stat(join(dir, id, 'key'))).mtime.toISOString();
      if (key.startsWith(prefix)) uploads.push({ Key: key, UploadId: id, Initiated: initiated, StorageClass: 'STANDARD' });
    } catch {
      // completed or aborted while we listed
    }
  }
  uploads.sort((a, b) => (a.Key === b.Key ? a.Initiated.localeCompare(b.Initiated) : a.Key.localeCompare(b.Key)));
  ctx.body = {
    ListMultipartUploadsResult: {
      '@': { xmlns: 'http://s3.amazonaws.com/doc/2006-03-01/' },
      Bucket: ctx.params.bucket,
      Prefix: prefix,
      MaxUploads: 1000,
      IsTruncated: false,
      ...(uploads.length > 0 ? { Upload: uploads } : {}),
    },
  };
}

// Runs just before s3rver's router. s3rver signs bucket-level requests over `/<bucket>`, but
// the AWS SDK sends (and signs) `/<bucket>/`: the vhost form below makes s3rver's canonical
// path `/<bucket>/` too, so those requests pass its SigV4 check. GET /<bucket>/?uploads goes
// through s3rver's own authentication, then is answered here; everything else passes on.
const checkSignature = authentication();
server.middleware.splice(server.middleware.length - 1, 0, async (ctx, next) => {
  const m = /^\/([^/]+)\/$/.exec(ctx.path);
  if (m) {
    ctx.mountPath = '/';
    ctx.state.vhost = true;
  }
  const bucketOnly = m ?? /^\/([^/]+)$/.exec(ctx.path);
  if (ctx.method !== 'GET' || !bucketOnly || !('uploads' in ctx.query)) return next();
  ctx.params = { bucket: decodeURIComponent(bucketOnly[1]) };
  if (!(await server.store.getBucket(ctx.params.bucket))) {
    throw new S3Error('NoSuchBucket', 'The specified bucket does not exist', { BucketName: ctx.params.bucket });
  }
  await checkSignature(ctx, () => listUploads(ctx));
});

const { port } = await server.run();
console.log(JSON.stringify({ endpoint: `http://127.0.0.1:${port}` }));

const stop = () => {
  server.close().then(
    () => process.exit(0),
    () => process.exit(1),
  );
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
