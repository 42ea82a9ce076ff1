import { connect } from 'node:net';
import type { LightMyRequestResponse } from 'fastify';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { JSON_LIMITS, type Episode } from '@fleet/protocol';
import { errorCode, errorDetails, fillPath, startTestCloud, testReport, type TestCloud, type TestTenant } from '../test-support.js';

/**
 * The error contract and the input bounds, route by route: deep and wide JSON, framework errors,
 * 405, request ids, unknown and malformed query parameters, and text fields.
 */

let t: TestCloud;
let tenant: TestTenant;

beforeEach(async () => {
  t = await startTestCloud();
  tenant = await t.createTenant();
});
afterEach(async () => {
  await t.close();
});

const deepArray = (depth: number, leaf = '1') => `${'['.repeat(depth)}${leaf}${']'.repeat(depth)}`;

function issues(res: LightMyRequestResponse): { location: string; path: string; code: string; message: string; keys?: string[] }[] {
  return (errorDetails(res)?.issues ?? []) as never;
}

function expectEnvelope(res: LightMyRequestResponse, status: number, code: string): void {
  expect([res.statusCode, errorCode(res)], res.payload.slice(0, 300)).toEqual([status, code]);
  const body = res.json<{ error: { request_id: string; message: string } }>();
  expect(body.error.request_id).toBe(res.headers['x-request-id']);
  expect(res.payload).not.toMatch(/FST_|"statusCode"/);
}

async function ingestOne(): Promise<string> {
  const r = testReport();
  await t.store.episodes.ingest([{ orgId: tenant.org.id, robotId: 'rbt_one', report: r, reportedAt: t.clock.now() }]);
  return r.id;
}

describe('bounded JSON', () => {
  it('refuses annotations nested past the bound, and the episode list stays readable (the stored DoS)', async () => {
    const id = await ingestOne();
    const payload = `{"annotations":{"a":${deepArray(4100)}}}`;
    expect(payload.length).toBeLessThan(8300);
    const res = await t.app.inject({ method: 'PATCH', url: `/v1/episodes/${id}`, headers: { ...tenant.auth, 'content-type': 'application/json' }, payload });
    expectEnvelope(res, 400, 'validation_failed');
    expect(issues(res)[0]).toMatchObject({ location: 'body', code: 'json_depth' });
    expect(res.json<{ error: { message: string } }>().error.message).toContain(String(JSON_LIMITS.maxDepth));
    const list = await t.app.inject({ method: 'GET', url: '/v1/episodes', headers: tenant.auth });
    expect(list.statusCode, list.payload.slice(0, 200)).toBe(200);
    expect(list.json<{ episodes: Episode[] }>().episodes[0]!.annotations).toEqual({});
  });

  it('accepts annotations at exactly the bound', async () => {
    const id = await ingestOne();
    // The body itself is depth 1, annotations 2, "a" 3: 29 more levels reach 32.
    const payload = `{"annotations":{"a":${deepArray(JSON_LIMITS.maxDepth - 2)}}}`;
    const res = await t.app.inject({ method: 'PATCH', url: `/v1/episodes/${id}`, headers: { ...tenant.auth, 'content-type': 'application/json' }, payload });
    expect(res.statusCode, res.payload.slice(0, 300)).toBe(200);
    const over = `{"annotations":{"a":${deepArray(JSON_LIMITS.maxDepth - 1)}}}`;
    const refused = await t.app.inject({ method: 'PATCH', url: `/v1/episodes/${id}`, headers: { ...tenant.auth, 'content-type': 'application/json' }, payload: over });
    expectEnvelope(refused, 400, 'validation_failed');
  });

  it('keeps a value stored before the bounds existed readable everywhere it is served', async () => {
    const id = await ingestOne();
    // As an older version would have stored it: straight into the store, 5,000 levels deep.
    let deep: unknown = 1;
    for (let i = 0; i < 5000; i++) deep = [deep];
    await t.store.episodes.patchAnnotations(tenant.org.id, id, { deep });
    for (const url of ['/v1/episodes', `/v1/episodes/${id}`, '/v1/episodes/export']) {
      const res = await t.app.inject({ method: 'GET', url, headers: tenant.auth });
      expect(res.statusCode, `${url}: ${res.payload.slice(0, 200)}`).toBe(200);
      expect(res.payload.length).toBeGreaterThan(10_000);
    }
    // A later PATCH of another key still works and keeps the old value.
    const patched = await t.app.inject({ method: 'PATCH', url: `/v1/episodes/${id}`, headers: tenant.auth, payload: { annotations: { qa: 'pass' } } });
    expect(patched.statusCode, patched.payload.slice(0, 200)).toBe(200);
    expect(Object.keys(patched.json<Episode>().annotations ?? {}).sort()).toEqual(['deep', 'qa']);
  });

  it('refuses a deep body before the Idempotency-Key fingerprint reads it', async () => {
    const res = await t.app.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: { ...tenant.auth, 'content-type': 'application/json', 'idempotency-key': 'deep-1' },
      payload: `{"name":"k","scopes":["admin"],"x":${deepArray(20_000)}}`,
    });
    expectEnvelope(res, 400, 'validation_failed');
  });

  it('refuses objects with too many keys and arrays with too many items', async () => {
    const id = await ingestOne();
    const keys = Object.fromEntries(Array.from({ length: JSON_LIMITS.maxObjectKeys + 1 }, (_, i) => [`k${i}`, 1]));
    const res = await t.app.inject({ method: 'PATCH', url: `/v1/episodes/${id}`, headers: tenant.auth, payload: { annotations: { wide: keys } } });
    expectEnvelope(res, 400, 'validation_failed');
    expect(issues(res)[0]).toMatchObject({ code: 'json_keys', path: '/annotations/wide' });
    const arr = await t.app.inject({
      method: 'PATCH',
      url: `/v1/episodes/${id}`,
      headers: tenant.auth,
      payload: { annotations: { list: new Array(JSON_LIMITS.maxArrayLength + 1).fill(0) } },
    });
    expectEnvelope(arr, 400, 'validation_failed');
    expect(issues(arr)[0]).toMatchObject({ code: 'json_array_length', path: '/annotations/list' });
  });

  it('answers every route that takes a body with 4xx, never 5xx, to a deep body', async () => {
    for (const route of t.cloud.catalog.filter((r) => r.method !== 'GET')) {
      for (const payload of [deepArray(5000), `{"metadata":${deepArray(5000)},"filter":${deepArray(5000)}}`]) {
        const res = await t.app.inject({
          method: route.method as 'POST',
          url: fillPath(route.url),
          headers: { ...tenant.auth, 'content-type': 'application/json', 'idempotency-key': `k-${route.url}` },
          payload,
        });
        expect(res.statusCode, `${route.method} ${route.url}: ${res.payload.slice(0, 200)}`).toBeLessThan(500);
      }
    }
  });
});

describe('one error contract', () => {
  it('answers invalid JSON and __proto__ bodies in the envelope, without quoting the body', async () => {
    const secretish = `ak_${'z'.repeat(300)}`;
    const bad = await t.app.inject({ method: 'POST', url: '/v1/api-keys', headers: { ...tenant.auth, 'content-type': 'application/json' }, payload: `{"name": ${secretish}` });
    expectEnvelope(bad, 400, 'validation_failed');
    expect(bad.payload).not.toContain('zzzz');
    expect(issues(bad)[0]).toMatchObject({ location: 'body', path: '', code: 'invalid_json' });
    const proto = await t.app.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: { ...tenant.auth, 'content-type': 'application/json' },
      payload: '{"name":"k","scopes":["admin"],"__proto__":{"admin":true}}',
    });
    expectEnvelope(proto, 400, 'validation_failed');
    expect(issues(proto)[0]).toMatchObject({ code: 'forbidden_key', path: '/__proto__' });
  });

  it('answers a bad URL and an over-long path parameter in the envelope, quoting at most a little', async () => {
    const longId = 'x'.repeat(5000);
    for (const url of ['/v1/api-keys/%zz', `/v1/api-keys/${longId}`]) {
      const res = await t.app.inject({ method: 'DELETE', url, headers: tenant.auth });
      expectEnvelope(res, 400, 'validation_failed');
      expect(res.payload.length, res.payload).toBeLessThan(600);
    }
    const nf = await t.app.inject({ method: 'GET', url: `/v1/${'y'.repeat(5000)}`, headers: tenant.auth });
    expectEnvelope(nf, 404, 'not_found');
    expect(nf.payload.length).toBeLessThan(600);
  });

  it('decides authentication before parameters: no key is 401 even with a bad parameter or body', async () => {
    for (const [method, url, payload] of [
      ['DELETE', `/v1/api-keys/${'x'.repeat(300)}`, undefined],
      ['DELETE', '/v1/api-keys/%zz', undefined],
      ['GET', '/v1/episodes?limit=0x10&bogus=1', undefined],
      ['POST', '/v1/api-keys', '{"name":'],
      ['POST', '/v1/api-keys', deepArray(5000)],
      ['PATCH', '/v1/episodes/ep_x', '{"annotations":1}'],
    ] as const) {
      const res = await t.app.inject({ method, url, ...(payload ? { payload, headers: { 'content-type': 'application/json' } } : {}) });
      expectEnvelope(res, 401, 'unauthenticated');
    }
  });

  it('answers a wrong method with 405 and Allow', async () => {
    const res = await t.app.inject({ method: 'PUT', url: '/v1/api-keys', headers: tenant.auth });
    expectEnvelope(res, 405, 'method_not_allowed');
    expect(String(res.headers.allow).split(', ').sort()).toEqual(['GET', 'HEAD', 'POST']);
    const del = await t.app.inject({ method: 'GET', url: '/v1/api-keys/key_1', headers: tenant.auth });
    expectEnvelope(del, 405, 'method_not_allowed');
    expect(del.headers.allow).toBe('DELETE');
    const post = await t.app.inject({ method: 'GET', url: '/v1/robots/rbt_1/go-home', headers: tenant.auth });
    expect(post.headers.allow).toBe('POST');
  });

  it('keeps a well-formed client X-Request-Id and replaces a malformed one', async () => {
    const kept = await t.app.inject({ method: 'GET', url: '/v1/nope', headers: { 'x-request-id': 'client-trace-0001' } });
    expect(kept.headers['x-request-id']).toBe('client-trace-0001');
    expect(kept.json<{ error: { request_id: string } }>().error.request_id).toBe('client-trace-0001');
    for (const bad of ['a b c d e f g', 'x'.repeat(200), 'short', '<script>']) {
      const res = await t.app.inject({ method: 'GET', url: '/v1/nope', headers: { 'x-request-id': bad } });
      expect(res.headers['x-request-id']).toMatch(/^req_/);
    }
  });

  it('answers 431 for headers over the limit, in the envelope, over a real socket', async () => {
    await t.app.listen({ host: '127.0.0.1', port: 0 });
    const { port } = t.app.server.address() as { port: number };
    const raw = await new Promise<string>((resolve, reject) => {
      const socket = connect(port, '127.0.0.1');
      let data = '';
      socket.on('data', (c: Buffer) => (data += c.toString('utf8')));
      socket.on('end', () => resolve(data));
      socket.on('close', () => resolve(data));
      socket.on('error', reject);
      socket.write(`GET /v1/api-keys HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(64 * 1024)}\r\n\r\n`);
    });
    expect(raw).toMatch(/^HTTP\/1\.1 431 /);
    const body = JSON.parse(raw.slice(raw.indexOf('\r\n\r\n') + 4)) as { error: { code: string; request_id: string } };
    expect(body.error.code).toBe('headers_too_large');
    expect(raw).toContain(`X-Request-Id: ${body.error.request_id}`);
  });
});

describe('query parameters', () => {
  it('refuses an unknown parameter the same way on every GET route', async () => {
    for (const route of t.cloud.catalog.filter((r) => r.method === 'GET' && r.policy.auth === 'key')) {
      const url = `${fillPath(route.url)}?bogus_param=1`;
      const res = await t.app.inject({ method: 'GET', url, headers: tenant.auth });
      expectEnvelope(res, 400, 'validation_failed');
      expect(issues(res), url).toEqual([{ location: 'querystring', path: '', code: 'unrecognized_keys', message: 'unknown key', keys: ['bogus_param'] }]);
    }
  });

  it('refuses an unknown parameter on routes that take none, and on mutating routes', async () => {
    const res = await t.app.inject({ method: 'POST', url: '/v1/api-keys?x=1', headers: tenant.auth, payload: { name: 'k', scopes: ['admin'] } });
    expectEnvelope(res, 400, 'validation_failed');
    expect(issues(res)[0]).toMatchObject({ code: 'unrecognized_keys', keys: ['x'] });
  });

  it.each(['1e2', '0x10', '%205', '5.0', '+5', '-1', '05%20', '', '1&limit=2', '99999999999999999999'])('refuses limit=%s', async (v) => {
    for (const path of ['/v1/episodes', '/v1/episodes/export', '/v1/datasets', '/v1/robots']) {
      const res = await t.app.inject({ method: 'GET', url: `${path}?limit=${v}`, headers: tenant.auth });
      expectEnvelope(res, 400, 'validation_failed');
      expect(issues(res)[0]?.path, `${path}?limit=${v}`).toBe('/limit');
    }
  });

  it('accepts plain decimal limits, with leading zeros', async () => {
    for (const v of ['1', '007', '100']) {
      expect((await t.app.inject({ method: 'GET', url: `/v1/episodes?limit=${v}`, headers: tenant.auth })).statusCode).toBe(200);
    }
  });

  it('refuses a repeated filter parameter', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/v1/episodes?robot_id=a&robot_id=b', headers: tenant.auth });
    expectEnvelope(res, 400, 'validation_failed');
  });
});

describe('text fields', () => {
  const badTexts = ['a\u0000b', 'x\uD800y', '\uDC00', '   ', '\t\n'];

  it.each(badTexts.map((s) => [JSON.stringify(s), s]))('refuses the name %s for api keys and datasets', async (_label, s) => {
    const key = await t.app.inject({ method: 'POST', url: '/v1/api-keys', headers: tenant.auth, payload: { name: s, scopes: ['admin'] } });
    expectEnvelope(key, 400, 'validation_failed');
    expect(issues(key)[0]?.path).toBe('/name');
    const ds = await t.app.inject({ method: 'POST', url: '/v1/datasets', headers: tenant.auth, payload: { name: s, filter: {} } });
    expectEnvelope(ds, 400, 'validation_failed');
    const desc = await t.app.inject({ method: 'POST', url: '/v1/datasets', headers: tenant.auth, payload: { name: 'ok', description: s, filter: {} } });
    expectEnvelope(desc, 400, 'validation_failed');
    expect(issues(desc)[0]?.path).toBe('/description');
  });

  it('refuses such an outcome reason, and accepts names with emoji and inner spaces', async () => {
    const id = await ingestOne();
    for (const s of badTexts) {
      const res = await t.app.inject({ method: 'PATCH', url: `/v1/episodes/${id}/outcome`, headers: tenant.auth, payload: { outcome: 'failure', reason: s } });
      expectEnvelope(res, 400, 'validation_failed');
    }
    const ok = await t.app.inject({ method: 'POST', url: '/v1/api-keys', headers: tenant.auth, payload: { name: ' ingest 🤖 key ', scopes: ['admin'] } });
    expect(ok.statusCode).toBe(201);
  });
});
