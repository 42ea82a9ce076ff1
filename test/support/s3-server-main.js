/* global process, console, Buffer */
// The S3-compatible server of the end-to-end tests, run as its own process by `startS3Server()`
// (s3-server.ts): @20minutes/s3rver with SigV4 signature checking on, plus the one call it
// lacks that the grant provider needs (ListMultipartUploads, answered from s3rver's own upload
// directory after s3rver's own signature check). Prints `{"endpoint":"http://127.0.0.1:PORT"}`.
//
// Usage: node s3-server-main.js <dataDir> <bucket> [port]
import { createHash } from 'node:crypto';
import { readdir, readFile, stat } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { join } from 'node:path';

const require = createRequire(import.meta.url);

// S3 stores an object whole or not at all. s3rver writes its files in place, so a stop that
// cuts a write short (the soak stops this process while robots upload) leaves a truncated object
// or a half-written metadata file that fails every later listing of the bucket. Every file it
// writes goes to a temporary name first and is renamed over the real one once complete, so a
// stop at any point leaves the old file or the new one. (Temporary names end in `.tmp-…`, which
// s3rver's listing does not take for objects.)
const fsp = require('node:fs').promises;
const writeFileInPlace = fsp.writeFile.bind(fsp);
let tmpSeq = 0;
const tmpName = (file) => `${file}.tmp-${process.pid}-${++tmpSeq}`;
fsp.writeFile = async (file, data, options) => {
  if (typeof file !== 'string') return writeFileInPlace(file, data, options);
  const tmp = tmpName(file);
  await writeFileInPlace(tmp, data, options);
  await fsp.rename(tmp, file);
};
const FilesystemStore = require('@20minutes/s3rver/lib/stores/filesystem');
const putContentInPlace = FilesystemStore.prototype.putContent;
FilesystemStore.prototype.putContent = async function putContent(objectPath, content) {
  const tmp = tmpName(objectPath);
  let result;
  if (Buffer.isBuffer(content)) {
    // s3rver answers a buffer before its stream has written it; write it whole here instead.
    await writeFileInPlace(tmp, content);
    result = [content.length, createHash('md5').update(content).digest('hex')];
  } else {
    result = await putContentInPlace.call(this, tmp, content);
  }
  await fsp.rename(tmp, objectPath);
  return result;
};

const S3rver = require('@20minutes/s3rver');
const authentication = require('@20minutes/s3rver/lib/middleware/authentication');
const S3Error = require('@20minutes/s3rver/lib/models/error');

const [dataDir, bucket, portArg, optionsArg] = process.argv.slice(2);
if (!dataDir || !bucket) {
  console.error('usage: s3-server-main.js <dataDir> <bucket> [port] [options JSON]');
  process.exit(2);
}
const options = optionsArg ? JSON.parse(optionsArg) : {};

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

// The request log: one entry per request once its response closed (finished or cut short), in
// the order they closed. Bounded: past LOG_MAX entries the oldest go (`seq` keeps counting, so
// a reader sees the gap). Runs first, before s3rver's own middleware, so it sees every answer,
// errors and CORS preflights included.
const LOG_PATH = '/_fleet-test/requests';
const LOG_MAX = 100_000;
const requestLog = [];
let requestSeq = 0;
const byteLength = (chunk, encoding) => (typeof chunk === 'string' ? Buffer.byteLength(chunk, typeof encoding === 'string' ? encoding : 'utf8') : (chunk?.length ?? 0));
server.middleware.unshift(async (ctx, next) => {
  if (ctx.path === LOG_PATH) {
    if (!options.requestLog) {
      ctx.status = 404;
      ctx.body = 'the request log is off (start with {"requestLog": true})';
      return;
    }
    const since = Number(ctx.query.since ?? 0);
    ctx.type = 'application/json';
    ctx.body = JSON.stringify({ last: requestSeq, requests: requestLog.filter((r) => r.seq > since) });
    return;
  }
  if (!options.requestLog) return next();
  const res = ctx.res;
  let bytes = 0;
  const write = res.write;
  const end = res.end;
  res.write = function (chunk, encoding, cb) {
    bytes += byteLength(chunk, encoding);
    return write.call(this, chunk, encoding, cb);
  };
  res.end = function (chunk, encoding, cb) {
    if (chunk !== undefined && chunk !== null && typeof chunk !== 'function') bytes += byteLength(chunk, encoding);
    return end.call(this, chunk, encoding, cb);
  };
  const entry = { method: ctx.method, path: ctx.path, range: ctx.get('range') || null, origin: ctx.get('origin') || null };
  res.once('close', () => {
    requestLog.push({ seq: ++requestSeq, ...entry, status: res.statusCode, bytes, complete: res.writableFinished });
    if (requestLog.length > LOG_MAX) requestLog.splice(0, requestLog.length - LOG_MAX);
  });
  return next();
});

// An internal error's cause goes to stderr (the answer only says InternalError): whoever runs
// this process (a test, the soak) can show why a request failed.
server.on('error', (err) => {
  if ((err?.status ?? 500) >= 500) console.error(`s3rver internal error: ${err?.stack ?? String(err)}`);
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
