import { createHash, randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ListMultipartUploadsCommand, S3Client } from '@aws-sdk/client-s3';
import { GrantAnswerSchema, ReadAnswerSchema, isMultipartFile, type GrantAnswer, type GrantRequestEnvelope, type MultipartGrantFile, type ReadRequestEnvelope } from '@fleet/protocol';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createTestPki, type TestPki } from '../cloud/src/egress/test-https.js';
import { cleanEnv, makeTempDir, REPO_ROOT, type TempDir } from './support/cloud.js';
import { SIM_CLI, startGrantProvider, type GrantProviderProcess } from './support/grant-provider.js';
import { runProcess } from './support/process.js';
import { startS3Server, type S3ServerProcess } from './support/s3-server.js';

const MiB = 1024 * 1024;
const SECRET = `dsec_${'a'.repeat(40)}`;
const OLD_SECRET = `dsec_${'b'.repeat(40)}`;
// Parts of 5 MiB (S3's minimum) from 6 MiB on: an 11 MiB file is 5 + 5 + 1.
const SIZES = ['--multipart-threshold-bytes', String(6 * MiB), '--part-size-bytes', String(5 * MiB)];

const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const md5 = (b: Buffer) => createHash('md5').update(b).digest('hex');

let seq = 0;
function envelope(files: Record<string, Buffer>, extra: Partial<GrantRequestEnvelope['request']> = {}): GrantRequestEnvelope {
  seq += 1;
  const manifest = Object.entries(files).map(([path, b]) => ({ path, size_bytes: b.length, sha256: sha256(b) }));
  return {
    episode_id: `ep_${seq}_${randomBytes(4).toString('hex')}`,
    org_id: 'org_acme',
    request: {
      destination_id: 'dst_1',
      episode: { robot_id: 'rob_7', recording_session_id: 'rs_1', episode_seq: seq },
      manifest: { files: manifest, total_bytes: manifest.reduce((n, f) => n + f.size_bytes, 0) },
      ...extra,
    },
  };
}

function grantOf(body: unknown): Extract<GrantAnswer, { grant_id: string }> {
  const answer = GrantAnswerSchema.parse(body);
  if (answer.grant_id === null) throw new Error(`expected a grant, got a deferral: ${JSON.stringify(body)}`);
  return answer;
}

async function put(url: string, body: Buffer): Promise<{ status: number; etag: string | undefined; text: string }> {
  const res = await request(url, { method: 'PUT', body });
  const text = await res.body.text();
  return { status: res.statusCode, etag: res.headers.etag as string | undefined, text };
}

async function uploadMultipart(file: MultipartGrantFile, data: Buffer): Promise<{ partEtags: string[]; complete: { status: number; text: string; etag: unknown } }> {
  const partEtags: string[] = [];
  for (const [i, url] of file.part_urls.entries()) {
    const res = await put(url, data.subarray(i * file.part_size, (i + 1) * file.part_size));
    expect(res.status).toBe(200);
    partEtags.push(res.etag!);
  }
  const xml = `<CompleteMultipartUpload>${partEtags.map((e, i) => `<Part><PartNumber>${i + 1}</PartNumber><ETag>${e}</ETag></Part>`).join('')}</CompleteMultipartUpload>`;
  const res = await request(file.complete_url, { method: 'POST', body: xml, headers: { 'content-type': 'application/xml' } });
  return { partEtags, complete: { status: res.statusCode, text: await res.body.text(), etag: res.headers.etag } };
}

let pki: TestPki;
let tmp: TempDir;
let tls: { certFile: string; keyFile: string; ca: string };
let s3: S3ServerProcess;
let provider: GrantProviderProcess;
let s3client: S3Client;

async function inFlightUploads(): Promise<{ key: string; uploadId: string }[]> {
  const res = await s3client.send(new ListMultipartUploadsCommand({ Bucket: s3.bucket }));
  return (res.Uploads ?? []).map((u) => ({ key: u.Key!, uploadId: u.UploadId! }));
}

beforeAll(async () => {
  pki = createTestPki();
  tmp = await makeTempDir('fleet-provider-');
  const pair = pki.issue(['localhost'], ['127.0.0.1']);
  tls = { certFile: join(tmp.path, 'cert.pem'), keyFile: join(tmp.path, 'key.pem'), ca: pki.caPem };
  writeFileSync(tls.certFile, pair.cert);
  writeFileSync(tls.keyFile, pair.key, { mode: 0o600 });
  s3 = await startS3Server();
  s3client = new S3Client({
    endpoint: s3.endpoint,
    region: s3.region,
    forcePathStyle: true,
    maxAttempts: 1,
    credentials: { accessKeyId: s3.accessKeyId, secretAccessKey: s3.secretAccessKey },
  });
  provider = await startGrantProvider({ s3, secret: SECRET, previousSecret: OLD_SECRET, tls, args: SIZES });
});

afterAll(async () => {
  s3client?.destroy();
  await provider?.[Symbol.asyncDispose]();
  await s3?.close();
  await tmp?.[Symbol.asyncDispose]();
  pki?.cleanup();
});

describe('fleet-sim grant-provider: signature before anything', () => {
  test('serves HTTPS and prints its address', () => {
    expect(provider.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
  });

  test('wrong secret, stale timestamp, missing or malformed header: 401, and nothing in the store', async () => {
    const env = envelope({ 'big.mcap': randomBytes(7 * MiB) });
    const nowS = Math.floor(Date.now() / 1000);
    const refused = [
      await provider.ask(env, { secrets: [`dsec_${'c'.repeat(40)}`] }),
      await provider.ask(env, { timestampS: nowS - 600 }),
      await provider.ask(env, { timestampS: nowS + 600 }),
      await provider.ask(env, { secrets: [] }),
      await provider.ask(env, { headers: { 'x-service-signature': 't=1,v1=zz' } }),
    ];
    for (const r of refused) {
      expect(r.status).toBe(401);
      expect(r.body).toMatchObject({ error: { code: 'unauthenticated' } });
    }
    // An invalid body with a bad signature is still 401: nothing is read before the signature.
    expect((await provider.ask(null, { rawBody: '{not json', secrets: ['dsec_wrongwrongwrongwrong'] })).status).toBe(401);
    expect(await inFlightUploads()).toEqual([]);
    expect(await s3.listObjects()).toEqual([]);
  });

  test('rotation: the previous secret alone, and both entries as the cloud sends them, are accepted', async () => {
    const env = envelope({ 'a.json': Buffer.from('{}') });
    expect((await provider.ask(env, { secrets: [OLD_SECRET] })).status).toBe(200);
    expect((await provider.ask(env, { secrets: [SECRET, OLD_SECRET] })).status).toBe(200);
    expect((await provider.ask(env, { secrets: [`dsec_${'d'.repeat(40)}`, OLD_SECRET] })).status).toBe(200);
  });

  test('invalid envelope: 400; invalid JSON: 400; wrong content type: 415; over 1 MiB: 413', async () => {
    const bad = await provider.ask({ episode_id: 'ep_x', org_id: 'org', request: { destination_id: 'dst_1' } });
    expect(bad.status).toBe(400);
    expect(bad.body).toMatchObject({ error: { code: 'validation_failed' } });
    expect((await provider.ask(null, { rawBody: '{"episode_id": ' })).body).toMatchObject({ error: { code: 'validation_failed' } });
    const deep = await provider.ask(null, { rawBody: `${'['.repeat(100)}${']'.repeat(100)}` });
    expect(deep.status).toBe(400);
    const typed = await provider.ask(envelope({ 'a.txt': Buffer.from('x') }), { headers: { 'content-type': 'text/plain' } });
    expect(typed.status).toBe(415);
    const huge = await provider.ask(null, { rawBody: Buffer.alloc(MiB + 1, 0x20) });
    expect(huge.status).toBe(413);
    expect(huge.body).toMatchObject({ error: { code: 'payload_too_large' } });
  });

  test('a destination header that differs from the envelope is refused', async () => {
    const r = await provider.ask(envelope({ 'a.txt': Buffer.from('x') }), { headers: { 'x-service-destination-id': 'dst_other' } });
    expect(r.status).toBe(400);
  });
});

describe('fleet-sim grant-provider: grants against a real S3 server', () => {
  test('http-put: one presigned PUT per file, object_key is the episode prefix, bytes arrive identical', async () => {
    const files = { 'episode.mcap': randomBytes(300_000), 'meta/info.json': Buffer.from('{"ok":true}'), 'empty.bin': Buffer.alloc(0) };
    const env = envelope(files);
    const res = await provider.ask(env);
    expect(res.status).toBe(200);
    const grant = grantOf(res.body);
    expect(grant.grant_id).toMatch(/^grt_/);
    expect(Date.parse(grant.expires_at) - Date.now()).toBeGreaterThan(55 * 60_000);
    expect(Date.parse(grant.expires_at) - Date.now()).toBeLessThanOrEqual(3600_000);
    expect(grant.retention).toEqual({ local: 'keep' });
    const dest = grant.destinations[0]!;
    const prefix = `org_acme/rob_7/${env.episode_id}/`;
    expect(dest).toMatchObject({ destination_id: 'dst_1', protocol: 'http-put', object_key: prefix });
    expect(dest.files.map((f) => f.path)).toEqual(Object.keys(files));
    for (const f of dest.files) {
      if (isMultipartFile(f)) throw new Error('expected put_url');
      const r = await put(f.put_url, files[f.path as keyof typeof files]);
      expect(r.status).toBe(200);
      // s3rver: ETag of a PUT is the quoted md5 of the bytes, as S3 answers it.
      expect(r.etag).toBe(`"${md5(files[f.path as keyof typeof files])}"`);
    }
    for (const [path, bytes] of Object.entries(files)) {
      const obj = await s3.getObject(`${prefix}${path}`);
      expect(obj?.body.equals(bytes)).toBe(true);
    }
  });

  test('s3-multipart: parts and complete through presigned URLs; the object is byte-identical', async () => {
    const big = randomBytes(11 * MiB);
    const small = Buffer.from('small file next to a big one');
    const env = envelope({ 'cam/front.mcap': big, 'small.txt': small });
    const grant = grantOf((await provider.ask(env)).body);
    const dest = grant.destinations[0]!;
    expect(dest.protocol).toBe('s3-multipart');
    const [mp, sm] = dest.files;
    if (!mp || !isMultipartFile(mp) || !sm || isMultipartFile(sm)) throw new Error('expected a multipart file and a put file');
    expect(mp.part_size).toBe(5 * MiB);
    expect(mp.part_urls).toHaveLength(3);
    // Created once: the store has exactly this upload in flight.
    expect(await inFlightUploads()).toEqual([{ key: `${dest.object_key}cam/front.mcap`, uploadId: mp.upload_id }]);

    const { partEtags, complete } = await uploadMultipart(mp, big);
    // s3rver: every part's ETag is the quoted md5 of the part.
    expect(partEtags).toEqual([0, 1, 2].map((i) => `"${md5(big.subarray(i * 5 * MiB, (i + 1) * 5 * MiB))}"`));
    expect(complete.status).toBe(200);
    // s3rver: no ETag header on complete; the XML's <ETag> is the md5 of the whole object with
    // XML-escaped quotes (real S3: "<md5 of the part md5s>-3").
    expect(complete.etag).toBeUndefined();
    expect(complete.text).toContain(`<ETag>&quot;${md5(big)}&quot;</ETag>`);
    expect((await put(sm.put_url, small)).status).toBe(200);

    const obj = await s3.getObject(`${dest.object_key}cam/front.mcap`);
    expect(obj?.body.equals(big)).toBe(true);
    expect(obj?.etag).toBe(`"${md5(big)}"`);
    expect(await inFlightUploads()).toEqual([]);
  });

  test('re-ask: same objects and upload_id, a new grant_id; also after a provider restart and with a resume block', async () => {
    const big = randomBytes(7 * MiB);
    const env = envelope({ 'lidar.bin': big });
    const first = grantOf((await provider.ask(env)).body);
    const f1 = first.destinations[0]!.files[0] as MultipartGrantFile;
    // The first part goes up under the first grant.
    expect((await put(f1.part_urls[0]!, big.subarray(0, 5 * MiB))).status).toBe(200);

    const second = grantOf((await provider.ask(env)).body);
    const f2 = second.destinations[0]!.files[0] as MultipartGrantFile;
    expect(second.grant_id).not.toBe(first.grant_id);
    expect(f2.upload_id).toBe(f1.upload_id);
    expect(second.destinations[0]!.object_key).toBe(first.destinations[0]!.object_key);

    await provider.kill();
    provider = await startGrantProvider({ s3, secret: SECRET, previousSecret: OLD_SECRET, tls, args: SIZES });
    const resumed = envelope({}, {});
    resumed.episode_id = env.episode_id;
    resumed.request = { ...env.request, resume: [{ destination_id: 'dst_1', uploads: [{ path: 'lidar.bin', upload_id: f1.upload_id, parts_done: [1] }] }] };
    const third = grantOf((await provider.ask(resumed)).body);
    const f3 = third.destinations[0]!.files[0] as MultipartGrantFile;
    expect(f3.upload_id).toBe(f1.upload_id);
    expect(new Set([first.grant_id, second.grant_id, third.grant_id]).size).toBe(3);
    expect(await inFlightUploads()).toEqual([{ key: `${first.destinations[0]!.object_key}lidar.bin`, uploadId: f1.upload_id }]);

    // The rest goes up with the fresh URLs; the object is whole.
    expect((await put(f3.part_urls[1]!, big.subarray(5 * MiB))).status).toBe(200);
    const xml = `<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>"${md5(big.subarray(0, 5 * MiB))}"</ETag></Part><Part><PartNumber>2</PartNumber><ETag>"${md5(big.subarray(5 * MiB))}"</ETag></Part></CompleteMultipartUpload>`;
    expect((await request(f3.complete_url, { method: 'POST', body: xml })).statusCode).toBe(200);
    expect((await s3.getObject(`${first.destinations[0]!.object_key}lidar.bin`))?.body.equals(big)).toBe(true);
  });

  test('a tampered or expired-key presigned URL is refused by the store', async () => {
    const data = randomBytes(6 * MiB);
    const env = envelope({ 'x.bin': data, 'y.txt': Buffer.from('y') });
    const grant = grantOf((await provider.ask(env)).body);
    const [mp, sm] = grant.destinations[0]!.files as [MultipartGrantFile, { path: string; put_url: string }];
    const flip = (url: string) => url.replace(/(X-Amz-Signature=[0-9a-f]*)([0-9a-f])/, (_m, a: string, c: string) => `${a}${c === '0' ? '1' : '0'}`);
    const refused = [
      await put(flip(sm.put_url), Buffer.from('evil')),
      await put(sm.put_url.replace('/y.txt?', '/z.txt?'), Buffer.from('evil')),
      await put(mp.part_urls[0]!.replace('partNumber=1', 'partNumber=2'), data.subarray(0, 10)),
    ];
    for (const r of refused) {
      expect(r.status).toBe(403);
      expect(r.text).toMatch(/<Error><Code>SignatureDoesNotMatch<\/Code>/);
    }
    expect((await s3.listObjects()).filter((o) => o.key.startsWith(grant.destinations[0]!.object_key!))).toEqual([]);
  });

  test('a check request is answered with a grant and creates nothing in the bucket', async () => {
    const before = await inFlightUploads();
    const env = envelope({ 'huge.mcap': randomBytes(8 * MiB), 'a.json': Buffer.from('{}') }, { check: true });
    const grant = grantOf((await provider.ask(env)).body);
    expect(grant.destinations[0]!.files.map((f) => f.path)).toEqual(['huge.mcap', 'a.json']);
    expect(await inFlightUploads()).toEqual(before);
    expect((await s3.listObjects()).filter((o) => o.key.includes(env.episode_id))).toEqual([]);
  });

  test('S3 down: a deferral with retry_after, never a 500; a grant again once it is back', async () => {
    const env = envelope({ 'a.mcap': randomBytes(7 * MiB) });
    await s3.stop();
    try {
      const res = await provider.ask(env);
      expect(res.status).toBe(200);
      expect(res.body).toEqual({ grant_id: null, destinations: [], retention: { local: 'keep' }, retry_after: 30 });
      const small = await provider.ask(envelope({ 'a.txt': Buffer.from('a') }));
      expect((small.body as { grant_id: unknown }).grant_id).toBeNull();
    } finally {
      await s3.start();
    }
    const grant = grantOf((await provider.ask(env)).body);
    expect(isMultipartFile(grant.destinations[0]!.files[0]!)).toBe(true);
    expect(provider.process.stderrLines.join('\n')).not.toMatch(/X-Amz-Signature|dsec_/);
  });
});

/** A read request for `env`'s files (all of them unless `paths`), as the cloud sends it. */
function readEnvelope(env: GrantRequestEnvelope, extra: Partial<ReadRequestEnvelope['request']> = {}, paths?: string[]): ReadRequestEnvelope {
  const manifest = env.request.manifest.files;
  const files = paths ? paths.map((p) => manifest.find((f) => f.path === p)!) : manifest;
  return {
    episode_id: env.episode_id,
    org_id: env.org_id,
    request: { destination_id: env.request.destination_id, episode: env.request.episode, object_key: null, files, expires_in_s: 900, ...extra },
  };
}

function linksOf(body: unknown): { path: string; url: string; expires_at: string }[] {
  const answer = ReadAnswerSchema.parse(body);
  if (!('files' in answer) || !Array.isArray(answer.files)) throw new Error(`expected read links, got ${JSON.stringify(body)}`);
  return answer.files as { path: string; url: string; expires_at: string }[];
}

/** Uploads `files` through a grant of the provider; resolves with the grant's object_key. */
async function uploaded(env: GrantRequestEnvelope, files: Record<string, Buffer>): Promise<string> {
  const dest = grantOf((await provider.ask(env)).body).destinations[0]!;
  for (const f of dest.files) {
    if (isMultipartFile(f)) throw new Error('expected put_url');
    expect((await put(f.put_url, files[f.path]!)).status).toBe(200);
  }
  return dest.object_key!;
}

describe('fleet-sim grant-provider: read links against a real S3 server', () => {
  test('a presigned GET per file reads the uploaded bytes; a Range GET is 206 with exactly those bytes', async () => {
    const files = { 'recording.mcap': randomBytes(200_000), 'meta/episode.json': Buffer.from('{"ok":true}') };
    const env = envelope(files);
    const objectKey = await uploaded(env, files);
    const before = Date.now();
    const res = await provider.askRead(readEnvelope(env, { object_key: objectKey }));
    expect(res.status).toBe(200);
    const links = linksOf(res.body);
    expect(links.map((l) => l.path)).toEqual(Object.keys(files));
    for (const link of links) {
      // 900 s asked, 900 s given (the provider's clock is this machine's).
      expect(Date.parse(link.expires_at) - before).toBeGreaterThan(890_000);
      expect(Date.parse(link.expires_at) - Date.now()).toBeLessThanOrEqual(900_000);
      const whole = await request(link.url);
      expect(whole.statusCode).toBe(200);
      expect(Buffer.from(await whole.body.arrayBuffer()).equals(files[link.path as keyof typeof files])).toBe(true);
    }
    const mcap = files['recording.mcap'];
    const ranged = await request(links[0]!.url, { headers: { range: 'bytes=0-99' } });
    expect(ranged.statusCode).toBe(206);
    expect(ranged.headers['content-range']).toBe(`bytes 0-99/${mcap.length}`);
    expect(Buffer.from(await ranged.body.arrayBuffer()).equals(mcap.subarray(0, 100))).toBe(true);
    expect(provider.process.stderrLines.join('\n')).not.toMatch(/X-Amz-Signature|dsec_/);
  });

  test('without an object_key the layout names the keys; the files asked, in the order asked', async () => {
    const files = { 'a.bin': randomBytes(1000), 'b.bin': randomBytes(2000), 'c.bin': randomBytes(10) };
    const env = envelope(files);
    await uploaded(env, files);
    const links = linksOf((await provider.askRead(readEnvelope(env, {}, ['c.bin', 'a.bin']))).body);
    expect(links.map((l) => l.path)).toEqual(['c.bin', 'a.bin']);
    const got = await request(links[0]!.url);
    expect(Buffer.from(await got.body.arrayBuffer()).equals(files['c.bin'])).toBe(true);
  });

  test('a link is for its object only: another key or a changed signature is refused by the store; a link to a missing object is 404', async () => {
    const files = { 'x.bin': randomBytes(500) };
    const env = envelope(files);
    const objectKey = await uploaded(env, files);
    const [link] = linksOf((await provider.askRead(readEnvelope(env, { object_key: objectKey }))).body);
    const flip = (url: string) => url.replace(/(X-Amz-Signature=[0-9a-f]*)([0-9a-f])/, (_m, a: string, c: string) => `${a}${c === '0' ? '1' : '0'}`);
    for (const url of [flip(link!.url), link!.url.replace('/x.bin?', '/y.bin?')]) {
      const r = await request(url);
      expect(r.statusCode).toBe(403);
      expect(await r.body.text()).toMatch(/<Code>SignatureDoesNotMatch<\/Code>/);
    }
    // Nothing is checked in the store before presigning: the GET says the object is not there.
    const missing = readEnvelope(envelope({ 'never.bin': Buffer.from('n') }));
    const [none] = linksOf((await provider.askRead(missing)).body);
    expect((await request(none!.url)).statusCode).toBe(404);
  });

  test("an object_key outside the provider's prefix is refused in words; the signature comes first", async () => {
    const env = envelope({ 'a.bin': Buffer.from('a') });
    const refused = await provider.askRead(readEnvelope(env, { object_key: '../other-bucket/' }));
    expect(refused).toEqual({ status: 200, body: { refused: { message: "the replica's object key is outside this provider's key prefix" } } });
    expect((await provider.askRead(readEnvelope(env), { secrets: [`dsec_${'c'.repeat(40)}`] })).status).toBe(401);
    const bad = await provider.askRead({ ...readEnvelope(env), request: { ...readEnvelope(env).request, files: [] } });
    expect(bad).toMatchObject({ status: 400, body: { error: { code: 'validation_failed' } } });
  });

  test('a provider without read support (--no-read-links) answers 501 not_implemented, and grants as before', async () => {
    await using off = await startGrantProvider({ s3, secret: SECRET, reads: false });
    const env = envelope({ 'a.txt': Buffer.from('a') });
    const res = await off.askRead(readEnvelope(env));
    expect(res).toEqual({ status: 501, body: { error: { code: 'not_implemented', message: 'this provider does not issue read links' } } });
    expect((await off.ask(env)).status).toBe(200);
  });
});

describe('fleet-sim grant-provider: configuration', () => {
  const run = (args: string[], env: Record<string, string | undefined>) =>
    runProcess(process.execPath, [SIM_CLI, 'grant-provider', '--port', '0', ...args], { cwd: REPO_ROOT, env: cleanEnv(env) });

  test('no secret in the environment: exit 2 and say which variable', async () => {
    const res = await run(['--insecure-http', '--s3-bucket', 'episodes'], {});
    expect(res.code).toBe(2);
    expect(res.stderr).toContain('FLEET_PROVIDER_SECRET');
  });

  test('HTTPS without a certificate: exit 2; the secret is never echoed', async () => {
    const res = await run(['--s3-bucket', 'episodes'], { FLEET_PROVIDER_SECRET: SECRET });
    expect(res.code).toBe(2);
    expect(res.stderr).toMatch(/tlsCertFile/);
    expect(res.stdout + res.stderr).not.toContain(SECRET);
  });

  test('FLEET_PROVIDER_INSECURE_HTTP=0 means off (HTTPS, so a certificate is needed); a value that is no boolean is refused', async () => {
    const off = await run(['--s3-bucket', 'episodes'], { FLEET_PROVIDER_SECRET: SECRET, FLEET_PROVIDER_INSECURE_HTTP: '0' });
    expect(off.code).toBe(2);
    expect(off.stderr).toMatch(/HTTPS needs a certificate/);
    const odd = await run(['--s3-bucket', 'episodes'], { FLEET_PROVIDER_SECRET: SECRET, FLEET_PROVIDER_INSECURE_HTTP: 'maybe' });
    expect(odd.code).toBe(2);
    expect(odd.stderr).toContain('FLEET_PROVIDER_INSECURE_HTTP must be true or false');
  });

  test('FLEET_PROVIDER_READ_LINKS must be a boolean', async () => {
    const res = await run(['--insecure-http', '--s3-bucket', 'episodes'], { FLEET_PROVIDER_SECRET: SECRET, FLEET_PROVIDER_READ_LINKS: 'sometimes' });
    expect(res.code).toBe(2);
    expect(res.stderr).toContain('FLEET_PROVIDER_READ_LINKS must be true or false');
  });

  test('a port already taken: exit 1', async () => {
    const port = new URL(provider.url).port;
    const res = await run(['--insecure-http', '--s3-bucket', 'episodes', '--port', port], { FLEET_PROVIDER_SECRET: SECRET });
    expect(res.code).toBe(1);
    expect(res.stderr).toMatch(/EADDRINUSE/);
  });
});
