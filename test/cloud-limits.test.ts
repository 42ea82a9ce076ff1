/**
 * Load protection of a real `fleet-cloud serve`: request rates per API key, per organization
 * (from its entitlements, changed with `orgs set-limit`) and per address on enrollment, and the
 * request timeout that cuts off a client stalling its body.
 */
import { connect } from 'node:net';
import { describe, expect, test } from 'vitest';
import { startCloud, type CloudProcess } from './support/cloud.js';

async function ok(cloud: CloudProcess, args: string[]): Promise<string> {
  const res = await cloud.cli(args);
  expect(res.code, `fleet-cloud ${args.join(' ')}\n${res.stderr}`).toBe(0);
  return res.stdout.trim();
}

interface Outcome {
  status: number;
  code: string | null;
  retryAfter: string | null;
  details: Record<string, unknown> | null;
}

async function get(cloud: CloudProcess, path: string, key: string | null, init: RequestInit & { json?: unknown } = {}): Promise<Outcome> {
  const res = await cloud.fetch(path, { key, ...init });
  const body = (await res.json()) as { error?: { code: string; details?: Record<string, unknown> } };
  return { status: res.status, code: body.error?.code ?? null, retryAfter: res.headers.get('retry-after'), details: body.error?.details ?? null };
}

describe('request rate limits', () => {
  test('per key and per organization, from the entitlements, answered 429 rate_limited with Retry-After', async () => {
    await using cloud = await startCloud();
    const org = await ok(cloud, ['orgs', 'create', '--name', 'Limited', '--tier', 'free']);
    const a = await ok(cloud, ['keys', 'create', '--org', org, '--name', 'a', '--scopes', 'admin']);
    const b = await ok(cloud, ['keys', 'create', '--org', org, '--name', 'b', '--scopes', 'admin']);
    expect((await cloud.client(a).entitlements()).limits).toMatchObject({ requests_per_minute_per_key: 600, requests_per_minute_per_org: 1200 });

    await ok(cloud, ['orgs', 'set-limit', org, 'requests_per_minute_per_key=3']);
    await ok(cloud, ['orgs', 'set-limit', org, 'requests_per_minute_per_org=5']);
    // Key a: three requests pass (counting started with the entitlements call above, in the
    // window before the limit was lowered, so allow for it), then it is refused.
    const fromA: Outcome[] = [];
    for (let i = 0; i < 5; i++) fromA.push(await get(cloud, '/v1/api-keys', a));
    const firstRefused = fromA.findIndex((o) => o.status !== 200);
    expect(firstRefused).toBeGreaterThanOrEqual(2);
    expect(firstRefused).toBeLessThanOrEqual(3);
    for (const o of fromA.slice(firstRefused)) {
      expect(o).toMatchObject({ status: 429, code: 'rate_limited', details: { limit: 'requests_per_minute_per_key', max: 3 } });
      expect(Number(o.retryAfter)).toBeGreaterThanOrEqual(1);
      expect(Number(o.retryAfter)).toBeLessThanOrEqual(60);
    }
    // Key b has its own window, but shares the organization's: 5 in all, the refused included.
    const fromB: Outcome[] = [];
    for (let i = 0; i < 3; i++) fromB.push(await get(cloud, '/v1/api-keys', b));
    expect(fromB.some((o) => o.status === 200)).toBe(true);
    const orgRefusal = fromB.find((o) => o.status === 429);
    expect(orgRefusal).toMatchObject({ code: 'rate_limited', details: { limit: 'requests_per_minute_per_org', max: 5 } });
    expect(orgRefusal!.retryAfter).toMatch(/^\d+$/);

    // Other organizations are not affected.
    expect((await get(cloud, '/v1/api-keys', cloud.adminKey)).status).toBe(200);
    // Raising the limit applies to the very next request.
    await ok(cloud, ['orgs', 'set-limit', org, 'requests_per_minute_per_key=default']);
    await ok(cloud, ['orgs', 'set-limit', org, 'requests_per_minute_per_org=default']);
    expect((await get(cloud, '/v1/api-keys', a)).status).toBe(200);
  });

  test('routes without a key (enrollment) are limited per client address', async () => {
    // Set through its FLEET_ variable (the timeout below uses the flag).
    await using cloud = await startCloud({ env: { FLEET_IP_REQUESTS_PER_MINUTE: '3' } });
    const outcomes: Outcome[] = [];
    for (let i = 0; i < 5; i++) {
      outcomes.push(await get(cloud, '/v1/robots/enroll', null, { method: 'POST', json: { token: 'ret_not_a_real_token_0000000000000000000000', name: `r${i}` } }));
    }
    expect(outcomes.slice(0, 3).map((o) => o.code)).toEqual(['unauthenticated', 'unauthenticated', 'unauthenticated']);
    expect(outcomes[3]).toMatchObject({ status: 429, code: 'rate_limited', details: { limit: 'requests_per_minute_per_ip', max: 3 } });
    expect(outcomes[4]).toMatchObject({ status: 429, code: 'rate_limited' });
    expect(outcomes[3]!.retryAfter).toMatch(/^\d+$/);
    // Authenticated routes count per key, not per address.
    expect((await get(cloud, '/v1/api-keys', cloud.adminKey)).status).toBe(200);
  });
});

describe('request timeout', () => {
  test('a client that sends its headers and stalls its body is answered 408 and cut off', async () => {
    await using cloud = await startCloud({ args: ['--request-timeout-ms', '1000'] });
    const { hostname, port } = new URL(cloud.http);
    const socket = connect(Number(port), hostname);
    let received = '';
    socket.on('data', (chunk: Buffer) => (received += chunk.toString('latin1')));
    const closed = new Promise<'closed'>((resolve) => socket.once('close', () => resolve('closed')));
    socket.on('error', () => undefined);
    await new Promise<void>((resolve) => socket.once('connect', resolve));
    // An authenticated POST whose body never comes: the server waits for the body.
    socket.write(
      'POST /v1/api-keys HTTP/1.1\r\n' +
        `Host: ${hostname}\r\n` +
        `Authorization: Bearer ${cloud.adminKey}\r\n` +
        'Content-Type: application/json\r\n' +
        'Content-Length: 1000\r\n' +
        '\r\n' +
        '{"name": "sl',
    );
    // A generous failure bound: without a request timeout the server holds the connection.
    let bound: NodeJS.Timeout | undefined;
    const outcome = await Promise.race([closed, new Promise<'still open'>((resolve) => (bound = setTimeout(() => resolve('still open'), 30_000)))]);
    clearTimeout(bound);
    socket.destroy();
    expect(outcome).toBe('closed');
    expect(received).toMatch(/^HTTP\/1\.1 408 /);
    // In the API's own error body, with the request id.
    const body = JSON.parse(received.slice(received.indexOf('\r\n\r\n') + 4)) as { error: { code: string; request_id: string } };
    expect(body.error.code).toBe('request_timeout');
    expect(received).toContain(`X-Request-Id: ${body.error.request_id}`);
    // The server is fine afterwards.
    expect((await cloud.fetch('/v1/api-keys')).status).toBe(200);
  });
});
