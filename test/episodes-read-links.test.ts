import { createHash } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import { join } from 'node:path';
import { Agent as HttpAgent, request } from 'undici';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { READ_EVENT, ReadLinksSchema, ReadRequestEnvelopeSchema, type Episode, type ReadLinks, type ReadRequestEnvelope } from '@fleet/protocol';
import { createTestPki, startHttpsReceiver, type ReceivedRequest, type TestPki, type TestReceiver } from '../cloud/src/egress/test-https.js';
import { makeTempDir, runCloudCli, startCloud, type CloudProcess, type TempDir } from './support/cloud.js';
import { getEpisode, recordShortEpisode } from './support/episodes.js';
import { startGrantProvider, writeProviderTls, type GrantProviderProcess } from './support/grant-provider.js';
import { freePort, okJson } from './support/http.js';
import { startFleet, type FleetProcess } from './support/robots.js';
import { s3ImplementationOfRun, startS3Server, type S3ServerProcess } from './support/s3-server.js';
import { waitFor } from './support/wait.js';

/**
 * Read links end to end: the real cloud (with `--read-origin` for the bucket), a robot that
 * uploaded one episode to the S3 server through the reference grant provider (so the replica is
 * really verified), and a scripted provider in front of the real one: it passes grant requests
 * on, and answers read requests as each case says (links, a refusal, 501, 500, not JSON, too
 * slow, a URL off the read origins, wrong paths), or passes them on too for the real links. The
 * cloud never fetches a link, and its log never holds one.
 */

type Script = (env: ReadRequestEnvelope, res: ServerResponse, forward: () => Promise<void>) => void | Promise<void>;

let pki: TestPki;
let tmp: TempDir;
let s3: S3ServerProcess;
let cloud: CloudProcess;
let scripted: TestReceiver;
let provider: GrantProviderProcess;
let fleet: FleetProcess;
let dispatcher: HttpAgent;
let destinationId: string;
let episode: Episode;
let script: Script = (_env, _res, forward) => forward();
/** Every read request the scripted provider received. */
const reads: ReadRequestEnvelope[] = [];
/** Secrets of every link handed out: none may show in the cloud's log. */
const signatures = new Set<string>();
/** Whether the S3 server logs its requests (s3rver does; moto does not). */
const s3Log = s3ImplementationOfRun() === 's3rver';

const FAKE_SIG = 'X-Amz-Signature=5c2a1b0e9d8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b';
signatures.add(FAKE_SIG);
/** A provider answer's `expires_at` fifteen minutes from now. */
const soon = () => new Date(Date.now() + 900_000).toISOString();

function send(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(typeof body === 'string' ? body : JSON.stringify(body));
}

/** Links on the bucket's origin for every requested file (not signed: the cloud never checks that). */
function fakeLinks(env: ReadRequestEnvelope, origin = s3.endpoint): { files: { path: string; url: string; expires_at: string }[] } {
  return { files: env.request.files.map((f) => ({ path: f.path, url: `${origin}/${s3.bucket}/${env.request.object_key ?? ''}${f.path}?${FAKE_SIG}`, expires_at: soon() })) };
}

function readLinks(body?: unknown, init: { key?: string; idempotencyKey?: string } = {}): Promise<Response> {
  return cloud.fetch(`/v1/episodes/${episode.id}/read-links`, {
    method: 'POST',
    ...(body === undefined ? {} : { json: body }),
    ...(init.key ? { key: init.key } : {}),
    ...(init.idempotencyKey ? { headers: { 'idempotency-key': init.idempotencyKey } } : {}),
  });
}

async function errorOf(res: Response): Promise<{ status: number; code: string; message: string; details: Record<string, unknown> | undefined }> {
  const body = (await res.json()) as { error: { code: string; message: string; details?: Record<string, unknown> } };
  return { status: res.status, code: body.error.code, message: body.error.message, details: body.error.details };
}

/** The cloud's own log lines (every replica's). */
const cloudLog = () => cloud.processes.flatMap((p) => p.stderrLines).join('\n');

beforeAll(async () => {
  pki = createTestPki();
  tmp = await makeTempDir('fleet-reads-');
  const tls = writeProviderTls(pki, tmp.path);
  dispatcher = new HttpAgent({ connect: { ca: pki.caPem } });
  s3 = await startS3Server(s3Log ? { requestLog: true } : {});
  cloud = await startCloud({ args: ['--egress-allow-loopback', '--egress-ca-file', pki.caFile, '--read-origin', s3.endpoint] });

  // The scripted provider: grant requests and (when the case says so) read requests go on to the
  // real provider with the cloud's own headers, signature included.
  const port = await freePort();
  const forwardTo = async (req: ReceivedRequest, res: ServerResponse) => {
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(req.headers)) if (typeof v === 'string' && !['host', 'content-length', 'connection'].includes(k)) headers[k] = v;
    try {
      const answer = await request(`https://127.0.0.1:${port}/grant`, { method: 'POST', body: req.body, headers, dispatcher });
      send(res, answer.statusCode, await answer.body.text());
    } catch {
      send(res, 502, { error: 'provider unreachable' });
    }
  };
  scripted = await startHttpsReceiver(pki.issue(['localhost'], ['127.0.0.1']), (req, res) => {
    if (req.headers['x-service-event'] !== READ_EVENT) return void forwardTo(req, res);
    const env = ReadRequestEnvelopeSchema.parse(JSON.parse(req.body));
    reads.push(env);
    void Promise.resolve(script(env, res, () => forwardTo(req, res))).catch(() => res.destroy());
  });
  const destination = await okJson<{ id: string; secret: string }>(
    await cloud.fetch('/v1/destinations', { method: 'POST', json: { type: 'external', url: `https://127.0.0.1:${scripted.port}/grant` } }),
  );
  destinationId = destination.id;
  provider = await startGrantProvider({ s3, secret: destination.secret, tls, args: ['--port', String(port)] });

  fleet = await startFleet(cloud, { count: 1, args: ['--recording-format', 'json', '--allow-http-uploads'] });
  const id = await recordShortEpisode(fleet.robotDir(0));
  episode = await waitFor(
    async () => {
      const ep = await getEpisode(cloud, id);
      return ep?.replicas.some((r) => r.state === 'verified') ? ep : undefined;
    },
    { timeoutMs: 90_000, description: `episode ${id} verified at the destination` },
  );
  if (s3Log) await s3.clearRequests();
}, 180_000);

afterAll(async () => {
  await fleet?.[Symbol.asyncDispose]();
  await provider?.[Symbol.asyncDispose]();
  await scripted?.close();
  await cloud?.[Symbol.asyncDispose]();
  await s3?.[Symbol.asyncDispose]();
  await dispatcher?.close();
  await tmp?.[Symbol.asyncDispose]();
  pki?.cleanup();
});

describe('POST /v1/episodes/{id}/read-links against a scripted provider', () => {
  test('relays valid links on the read origin in the order asked, with the manifest facts; a retry with the same Idempotency-Key asks again', async () => {
    script = (env, res) => send(res, 200, fakeLinks(env));
    const paths = [...(await episodeFiles()).map((f) => f.path)].reverse();
    const res = await readLinks({ files: paths }, { idempotencyKey: 'links-1' });
    expect(res.status).toBe(200);
    const body: ReadLinks = ReadLinksSchema.parse(await res.json());
    expect(body.files.map((f) => f.path)).toEqual(paths);
    expect(body.files.every((f) => f.url.startsWith(`${s3.endpoint}/`) && f.url.endsWith(FAKE_SIG) && f.destination_id === destinationId)).toBe(true);
    const req = reads.at(-1)!;
    expect(req).toMatchObject({ episode_id: episode.id, request: { destination_id: destinationId, expires_in_s: 900, object_key: episode.replicas[0]!.object_key } });
    expect(req.request.files.map((f) => f.path)).toEqual(paths);

    const asked = reads.length;
    const again = await readLinks({ files: paths }, { idempotencyKey: 'links-1' });
    expect([again.status, again.headers.get('idempotent-replayed')]).toEqual([200, null]);
    expect(reads.length).toBe(asked + 1);
  });

  test.each<[string, Script, number, string, string | undefined]>([
    ['a refusal', (_e, res) => send(res, 200, { refused: { message: 'reads are paused for this bucket' } }), 403, 'read_links_refused', undefined],
    ['HTTP 501', (_e, res) => send(res, 501, { error: { code: 'not_implemented', message: 'no read links here' } }), 501, 'read_links_unsupported', undefined],
    ['HTTP 500', (_e, res) => send(res, 500, { error: 'boom' }), 502, 'provider_failed', 'http_error'],
    ['a body that is not JSON', (_e, res) => send(res, 200, '<html>oops</html>'), 502, 'provider_failed', 'invalid_json'],
    ['a path not asked for', (env, res) => send(res, 200, { files: [...fakeLinks(env).files, { path: 'other.bin', url: `${s3.endpoint}/x?${FAKE_SIG}`, expires_at: soon() }] }), 502, 'provider_failed', 'schema_invalid'],
    ['a path missing', (env, res) => send(res, 200, { files: fakeLinks(env).files.slice(1) }), 502, 'provider_failed', 'schema_invalid'],
    ['an expiry past the longest lifetime', (env, res) => send(res, 200, { files: fakeLinks(env).files.map((f) => ({ ...f, expires_at: new Date(Date.now() + 86_400_000).toISOString() })) }), 502, 'provider_failed', 'expired'],
    ['a URL outside the read origins', (env, res) => send(res, 200, fakeLinks(env, 'https://elsewhere.example')), 502, 'read_origin_not_allowed', undefined],
  ])('answers %s with %i %s', async (_name, s, status, code, failure) => {
    script = s;
    const res = await readLinks(undefined);
    const text = await res.clone().text();
    const e = await errorOf(res);
    expect([e.status, e.code, e.details?.failure], text).toEqual([status, code, failure]);
    expect(text).not.toContain(FAKE_SIG);
    if (code === 'read_origin_not_allowed') expect(e.details).toMatchObject({ origin: 'https://elsewhere.example', destination_id: destinationId });
    if (code === 'read_links_refused') expect(e.message).toContain('reads are paused for this bucket');
  });

  test('answers a provider slower than 10 s with 504 provider_timeout', async () => {
    let answer: (() => void) | undefined;
    script = (env, res) => {
      answer = () => send(res, 200, fakeLinks(env));
    };
    const e = await errorOf(await readLinks(undefined));
    answer?.();
    expect([e.status, e.code]).toEqual([504, 'provider_timeout']);
  }, 60_000);

  test('answers 409 replica_not_verified for a destination that holds no replica, naming the replicas', async () => {
    const other = await okJson<{ id: string }>(await cloud.fetch('/v1/destinations', { method: 'POST', json: { type: 'external', url: `https://127.0.0.1:${scripted.port}/other` } }));
    const e = await errorOf(await readLinks({ destination_id: other.id }));
    expect([e.status, e.code]).toEqual([409, 'replica_not_verified']);
    expect(e.details?.replicas).toEqual([{ destination_id: destinationId, state: 'verified', error: null }]);
  });
});

describe('with the reference grant provider', () => {
  test("issues presigned links whose GET returns the file's bytes", async () => {
    script = (_env, _res, forward) => forward();
    const res = await readLinks(undefined);
    expect(res.status, await res.clone().text()).toBe(200);
    const body = ReadLinksSchema.parse(await res.json());
    const files = await episodeFiles();
    expect(body.files.map((f) => f.path)).toEqual(files.map((f) => f.path));
    for (const link of body.files) {
      signatures.add(new URL(link.url).searchParams.get('X-Amz-Signature') ?? link.url);
      expect(new URL(link.url).origin).toBe(s3.endpoint);
      expect(Date.parse(link.expires_at)).toBeGreaterThan(Date.now());
      const got = await fetch(link.url);
      expect(got.status, link.path).toBe(200);
      const bytes = Buffer.from(await got.arrayBuffer());
      expect([bytes.length, createHash('sha256').update(bytes).digest('hex')], link.path).toEqual([link.size_bytes, link.sha256]);
    }
  });
});

describe('what the cloud keeps', () => {
  test('it fetched no link, and its log names the forwards without any link or signature', async () => {
    // Runs after the cases above (one file, in order).
    expect(reads.length).toBeGreaterThan(5);
    const log = cloudLog();
    expect(log).toContain('read links forwarded');
    expect(log).toContain(destinationId);
    for (const sig of signatures) expect(log).not.toContain(sig);
    expect(log).not.toContain('X-Amz-Signature');
    if (s3Log) {
      // Only this test's own GETs (the reference provider's links) reached the bucket after the upload.
      const gets = (await s3.requests()).filter((r) => r.method === 'GET');
      expect(gets.length).toBe((await episodeFiles()).length);
    }
  });

  test('a bad --read-origin stops the server at start with a clear message; FLEET_READ_ORIGINS makes the console CSP', async () => {
    const bad = await runCloudCli(['serve', '--data-dir', join(tmp.path, 'bad'), '--http-port', '0', '--mqtt-port', '0', '--read-origin', 'http://bucket.example']);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toMatch(/http is allowed only for a loopback host/);
    const wild = await runCloudCli(['serve', '--data-dir', join(tmp.path, 'bad'), '--http-port', '0', '--mqtt-port', '0'], { env: { FLEET_READ_ORIGINS: 'https://*.example.com' } });
    expect(wild.code).not.toBe(0);
    expect(wild.stderr).toMatch(/wildcards are not allowed/);

    await using other = await startCloud({ env: { FLEET_READ_ORIGINS: 'https://a.example, http://127.0.0.1:9000' } });
    const page = await fetch(`${other.http}/console/`);
    await page.body?.cancel();
    const csp = page.headers.get('content-security-policy') ?? '';
    expect(csp).toContain("connect-src 'self' https://a.example http://127.0.0.1:9000");
    expect(csp).toContain("img-src 'self' data: blob: https://a.example http://127.0.0.1:9000");
  });
});

async function episodeFiles(): Promise<{ path: string; size_bytes: number; sha256: string }[]> {
  return (await okJson<{ files: { path: string; size_bytes: number; sha256: string }[] }>(await cloud.fetch(`/v1/episodes/${episode.id}/files`))).files;
}
