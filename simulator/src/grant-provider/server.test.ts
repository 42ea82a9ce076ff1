import type { AddressInfo } from 'node:net';
import { request as httpRequest } from 'node:http';
import { GRANT_EVENT, ManualClock, READ_EVENT, signPayload } from '@fleet/protocol';
import { pino } from 'pino';
import { afterEach, describe, expect, test } from 'vitest';
import { parseGrantProviderConfig, type GrantProviderConfig } from './config.js';
import type { UploadStore } from './s3-store.js';
import { buildGrantProviderServer } from './server.js';

const SECRET = 'dsec_0123456789abcdef0123';
const config = parseGrantProviderConfig({ secrets: [SECRET], insecureHttp: true, s3Bucket: 'bucket' });
const clock = new ManualClock(Date.parse('2026-06-01T00:00:00Z'));
const nowS = () => Math.floor(clock.now() / 1000);

/** Records every call: nothing may reach the store for a refused request. */
function spyStore(): UploadStore & { calls: string[] } {
  const calls: string[] = [];
  return {
    calls,
    listUploads: async () => (calls.push('list'), []),
    createUpload: async () => (calls.push('create'), 'up'),
    presignPut: async () => (calls.push('presign'), 'https://s3/put'),
    presignPart: async () => 'https://s3/part',
    presignComplete: async () => 'https://s3/complete',
    presignGet: async (key) => (calls.push(`get ${key}`), `https://s3/${key}?X-Amz-Signature=sig`),
    close: () => undefined,
  };
}

const envelope = {
  episode_id: 'ep_1',
  org_id: 'org_1',
  request: {
    destination_id: 'dst_1',
    episode: { robot_id: 'rob_1', recording_session_id: 'rs', episode_seq: 1 },
    manifest: { files: [{ path: 'a.txt', size_bytes: 1, sha256: 'a'.repeat(64) }], total_bytes: 1 },
  },
};

const readEnvelope = {
  episode_id: 'ep_1',
  org_id: 'org_1',
  request: {
    destination_id: 'dst_1',
    episode: { robot_id: 'rob_1', recording_session_id: 'rs', episode_seq: 1 },
    object_key: null,
    files: [{ path: 'a.txt', size_bytes: 1, sha256: 'a'.repeat(64) }],
    expires_in_s: 900,
  },
};

const servers: { close(): unknown }[] = [];
afterEach(() => {
  for (const s of servers.splice(0)) s.close();
});

async function start(store: UploadStore, c: GrantProviderConfig = config): Promise<number> {
  const server = buildGrantProviderServer(c, { store, clock, logger: pino({ level: 'silent' }) });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as AddressInfo).port;
}

/** A raw POST; `chunks` are written one by one without a Content-Length (chunked). */
function post(port: number, body: string | string[], headers: Record<string, string>): Promise<{ status: number; body: { error?: { code: string } } & Record<string, unknown> }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, method: 'POST', path: '/', headers: { 'content-type': 'application/json', ...headers } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) as never }));
    });
    req.on('error', reject);
    for (const c of Array.isArray(body) ? body : [body]) req.write(c);
    req.end();
  });
}

const signed = (body: string, secrets = [SECRET], t = nowS()) => ({ 'x-service-signature': signPayload(body, secrets, t) });

describe('grant provider HTTP server', () => {
  test('a valid request reaches the store once verified', async () => {
    const store = spyStore();
    const port = await start(store);
    const body = JSON.stringify(envelope);
    const res = await post(port, body, signed(body));
    expect(res.status).toBe(200);
    expect(res.body.grant_id).toMatch(/^grt_/);
    expect(store.calls).toEqual(['list', 'presign']);
  });

  test('refused requests never reach the store', async () => {
    const store = spyStore();
    const port = await start(store);
    const body = JSON.stringify(envelope);
    const invalid = JSON.stringify({ ...envelope, org_id: 7 });
    const results = [
      await post(port, body, {}),
      await post(port, body, signed(body, ['dsec_another_secret_000'])),
      await post(port, body, signed(body, [SECRET], nowS() - 301)),
      await post(port, `${body} `, signed(body)),
      await post(port, invalid, signed(invalid)),
    ];
    expect(results.map((r) => [r.status, r.body.error?.code])).toEqual([
      [401, 'unauthenticated'],
      [401, 'unauthenticated'],
      [401, 'unauthenticated'],
      [401, 'unauthenticated'],
      [400, 'validation_failed'],
    ]);
    expect(store.calls).toEqual([]);
  });

  test('a chunked body over 1 MiB is 413 without a Content-Length to go by', async () => {
    const port = await start(spyStore());
    const chunk = ' '.repeat(64 * 1024);
    const res = await post(port, Array.from({ length: 17 }, () => chunk), { 'x-service-signature': `t=${nowS()},v1=${'0'.repeat(64)}` });
    expect(res.status).toBe(413);
    expect(res.body.error?.code).toBe('payload_too_large');
  });

  test('a read request: one presigned GET per file once verified; nothing else reaches the store', async () => {
    const store = spyStore();
    const port = await start(store);
    const body = JSON.stringify(readEnvelope);
    const res = await post(port, body, { ...signed(body), 'x-service-event': READ_EVENT, 'x-service-destination-id': 'dst_1' });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ files: [{ path: 'a.txt', url: 'https://s3/org_1/rob_1/ep_1/a.txt?X-Amz-Signature=sig', expires_at: '2026-06-01T00:15:00.000Z' }] });
    expect(store.calls).toEqual(['get org_1/rob_1/ep_1/a.txt']);
  });

  test('read requests are checked in the order of grants: signature, then body, then envelope', async () => {
    const store = spyStore();
    const port = await start(store);
    const read = { 'x-service-event': READ_EVENT };
    const body = JSON.stringify(readEnvelope);
    const invalid = JSON.stringify({ ...readEnvelope, request: { ...readEnvelope.request, expires_in_s: 3601 } });
    // A grant request sent as a read request is not a read request.
    const grantBody = JSON.stringify(envelope);
    const results = [
      await post(port, body, read),
      await post(port, body, { ...read, ...signed(body, ['dsec_another_secret_000']) }),
      await post(port, invalid, { ...read, ...signed(invalid) }),
      await post(port, grantBody, { ...read, ...signed(grantBody) }),
      await post(port, body, { ...read, ...signed(body), 'x-service-destination-id': 'dst_2' }),
      await post(port, body, { ...read, ...signed(body), 'content-type': 'text/plain' }),
    ];
    expect(results.map((r) => [r.status, r.body.error?.code])).toEqual([
      [401, 'unauthenticated'],
      [401, 'unauthenticated'],
      [400, 'validation_failed'],
      [400, 'validation_failed'],
      [400, 'validation_failed'],
      [415, 'unsupported_media_type'],
    ]);
    expect(store.calls).toEqual([]);
  });

  test('a read envelope sent as a grant request, or an unknown event, is 400', async () => {
    const store = spyStore();
    const port = await start(store);
    const body = JSON.stringify(readEnvelope);
    const asGrant = await post(port, body, { ...signed(body), 'x-service-event': GRANT_EVENT });
    const unknown = await post(port, body, { ...signed(body), 'x-service-event': 'delete.everything' });
    expect([asGrant.status, unknown.status]).toEqual([400, 400]);
    expect(unknown.body.error).toEqual({ code: 'validation_failed', message: `X-Service-Event must be ${GRANT_EVENT} or ${READ_EVENT}` });
    expect(store.calls).toEqual([]);
  });

  test('reads off: a verified read request is 501 not_implemented; an unsigned one still 401; grants unchanged', async () => {
    const store = spyStore();
    const port = await start(store, parseGrantProviderConfig({ secrets: [SECRET], insecureHttp: true, s3Bucket: 'bucket', reads: false }));
    const body = JSON.stringify(readEnvelope);
    const off = await post(port, body, { ...signed(body), 'x-service-event': READ_EVENT });
    expect(off.status).toBe(501);
    expect(off.body.error).toEqual({ code: 'not_implemented', message: 'this provider does not issue read links' });
    expect((await post(port, body, { 'x-service-event': READ_EVENT })).status).toBe(401);
    expect(store.calls).toEqual([]);
    const grant = JSON.stringify(envelope);
    expect((await post(port, grant, { ...signed(grant), 'x-service-event': GRANT_EVENT })).status).toBe(200);
  });
});
