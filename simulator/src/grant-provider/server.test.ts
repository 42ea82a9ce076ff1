import type { AddressInfo } from 'node:net';
import { request as httpRequest } from 'node:http';
import { ManualClock, signPayload } from '@fleet/protocol';
import { pino } from 'pino';
import { afterEach, describe, expect, test } from 'vitest';
import { parseGrantProviderConfig } from './config.js';
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

const servers: { close(): unknown }[] = [];
afterEach(() => {
  for (const s of servers.splice(0)) s.close();
});

async function start(store: UploadStore): Promise<number> {
  const server = buildGrantProviderServer(config, { store, clock, logger: pino({ level: 'silent' }) });
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
});
