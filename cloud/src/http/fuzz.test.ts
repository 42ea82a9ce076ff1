import fc from 'fast-check';
import type { LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { API_ERROR_CODES, SCOPES } from '@fleet/protocol';
import { injectAny, startTestCloud, type TestCloud, type TestTenant } from '../test-support.js';
import type { CatalogEntry } from './policy.js';

/**
 * Whatever a caller with a valid admin key sends to any route that takes a body, the answer is
 * never a 5xx and an error is always `{error: {code}}` JSON. Routes come from the catalog, so a
 * route added later is fuzzed without touching this file.
 */

const NUM_RUNS = 200;

const catalog: readonly CatalogEntry[] = await (async () => {
  const probe = await startTestCloud();
  try {
    return [...probe.cloud.catalog];
  } finally {
    await probe.close();
  }
})();
const mutating = catalog.filter((r) => ['POST', 'PATCH', 'PUT', 'DELETE'].includes(r.method));
const reading = catalog.filter((r) => r.method === 'GET');

let t: TestCloud;
let tenant: TestTenant;

beforeAll(async () => {
  t = await startTestCloud({ config: { bodyLimitBytes: 4096 } });
  tenant = await t.createTenant();
});
afterAll(async () => {
  await t.close();
});

/** Header values a real HTTP client can send: printable Latin-1 and tab, no CR/LF/NUL. */
const headerValue = fc.oneof(
  fc.string({ maxLength: 300 }),
  fc.stringMatching(/^[\t\x20-\x7e\xa0-\xff]{0,80}$/),
  fc.constantFrom('', ' ', 'null', 'undefined', '0', '-1', 'true', '{}', '[]', 'Bearer x', 'gzip', '*/*', '1.0.0'),
);

const pathParam = fc.oneof(
  fc.constant('dummy_id'),
  fc.string({ unit: 'grapheme', maxLength: 40 }).map(encodeURIComponent),
  fc.string({ minLength: 120, maxLength: 320 }).map(encodeURIComponent),
  fc.constantFrom('%', '%00', '%2F', '%ZZ', '%E0%A4%A', '..', '.', '%2e%2e', 'a;b', 'key_'.padEnd(129, 'x')),
);

const queryString = fc.option(
  fc
    .array(fc.tuple(fc.string({ unit: 'grapheme', maxLength: 12 }), fc.string({ unit: 'grapheme', maxLength: 24 })), { maxLength: 3 })
    .map((pairs) => `?${pairs.map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`).join('&')}`),
  { nil: '' },
);

const contentType = fc.option(
  fc.constantFrom(
    'application/json',
    'application/json; charset=utf-8',
    'APPLICATION/JSON',
    'application/json; charset=latin1',
    'text/plain',
    'text/plain; charset=utf-8',
    'application/x-www-form-urlencoded',
    'application/octet-stream',
    'multipart/form-data; boundary=x',
    'application/merge-patch+json',
    '*/*',
    'json',
  ),
  { nil: undefined },
);

/** Bodies shaped like the API's own, so that handlers (not only validators) run. */
const nearValid = fc.record(
  {
    name: fc.oneof(fc.string({ maxLength: 140 }), fc.integer()),
    scopes: fc.oneof(fc.array(fc.constantFrom(...SCOPES, 'root', ''), { maxLength: 4 }), fc.string()),
    expires_at: fc.oneof(
      fc.date({ noInvalidDate: true }).map((d) => d.toISOString()),
      fc.constantFrom('2030-01-01T00:00:00Z', '2030-01-01T00:00:00+23:59', '9999-12-31T23:59:59.999-23:59', '0000-01-01T00:00:00Z'),
      fc.string(),
    ),
    name_prefix: fc.string({ maxLength: 80 }),
    max_uses: fc.oneof(fc.integer(), fc.double()),
    token: fc.string({ maxLength: 80 }),
    platform: fc.string({ maxLength: 80 }),
    runtime_version: fc.string({ maxLength: 80 }),
    task_id: fc.string({ maxLength: 80 }),
    subtask_id: fc.string({ maxLength: 80 }),
    metadata: fc.oneof(fc.dictionary(fc.string(), fc.jsonValue(), { maxKeys: 4 }), fc.jsonValue()),
  },
  { requiredKeys: [] },
);

/** JSON nested far past the bounds (a few levels to thousands) around a near-valid body. */
const deep = fc
  .tuple(fc.integer({ min: 20, max: 6000 }), fc.constantFrom('[', '{"a":'), fc.constantFrom('metadata', 'annotations', 'filter', 'name', 'root'))
  .map(([depth, open, field]) => {
    const close = open === '[' ? ']' : '}';
    const nested = `${open.repeat(depth)}1${close.repeat(depth)}`;
    return field === 'root' ? nested : `{"name":"k","scopes":["admin"],"${field}":${nested}}`;
  });

/** Objects with more keys, and arrays with more items, than the bounds allow. */
const wide = fc.tuple(fc.integer({ min: 900, max: 12_000 }), fc.boolean(), fc.constantFrom('metadata', 'annotations', 'filter', 'scopes')).map(([n, asArray, field]) => {
  const inner = asArray ? `[${Array.from({ length: n }, () => '0').join(',')}]` : `{${Array.from({ length: n }, (_, i) => `"k${i}":0`).join(',')}}`;
  return `{"name":"k","${field}":${inner}}`;
});

const body = fc.oneof(
  fc.constant<string | undefined>(undefined),
  deep,
  wide,
  fc.json({ maxDepth: 3 }),
  fc.jsonValue({ maxDepth: 3 }).map((v) => JSON.stringify(v)),
  fc.object({ maxDepth: 2 }).map((v) => JSON.stringify(v) ?? 'null'),
  nearValid.map((v) => JSON.stringify(v)),
  fc.string({ maxLength: 200 }),
  fc.string({ unit: 'grapheme', maxLength: 200 }),
  fc.constantFrom('', ' ', '{', '[]', 'null', '"x"', '{"__proto__":{"x":1}}', '{"constructor":{"prototype":{}}}', '\u0000', 'x'.repeat(5000)),
);

const extraHeaders = fc.dictionary(
  fc.oneof(
    fc.stringMatching(/^x-[a-z0-9-]{1,16}$/),
    fc.constantFrom('accept', 'accept-version', 'accept-encoding', 'content-encoding', 'x-request-id', 'x-forwarded-for', 'origin', 'cookie', 'if-match'),
  ),
  headerValue,
  { maxKeys: 4 },
);

/** The same header twice: Node joins some, keeps others as arrays; none may confuse a route. */
const duplicateHeaders = fc.subarray(['authorization', 'idempotency-key', 'content-type', 'x-request-id', 'content-length'] as const);

const idempotencyKey = fc.option(
  fc.oneof(fc.constantFrom('a', 'b', 'c'), fc.stringMatching(/^[\x21-\x7e]{1,300}$/), headerValue),
  { nil: undefined },
);

function checkAnswer(res: LightMyRequestResponse, what: string): void {
  expect(res.statusCode, `${what} -> ${res.payload.slice(0, 300)}`).toBeLessThan(500);
  expect(res.headers['x-request-id'], what).toBeDefined();
  if (res.statusCode >= 400) {
    const parsed = JSON.parse(res.payload) as { error?: { code?: unknown; message?: unknown } };
    expect(API_ERROR_CODES, `${what} -> ${res.payload.slice(0, 300)}`).toContain(parsed.error?.code);
    expect(typeof parsed.error?.message).toBe('string');
  } else if (res.payload !== '') {
    expect(() => JSON.parse(res.payload) as unknown, what).not.toThrow();
  }
}

describe.each(mutating.map((r) => [`${r.method} ${r.url}`, r] as const))('fuzz %s', (_name, route) => {
  it('never answers 5xx, and errors are {error: {code}} JSON', async () => {
    await fc.assert(
      fc.asyncProperty(pathParam, queryString, body, contentType, idempotencyKey, extraHeaders, duplicateHeaders, async (param, query, payload, ct, idem, extra, dups) => {
        const headers: Record<string, string | string[]> = { ...extra, ...tenant.auth };
        if (ct !== undefined) headers['content-type'] = ct;
        if (idem !== undefined) headers['idempotency-key'] = idem;
        for (const name of dups) {
          const v = headers[name];
          if (name === 'content-length') {
            if (payload !== undefined) headers[name] = [String(Buffer.byteLength(payload)), String(Buffer.byteLength(payload))];
          } else headers[name] = [typeof v === 'string' ? v : 'x', typeof v === 'string' ? v : 'y'];
        }
        const url = `${route.url.replace(/:[A-Za-z0-9_]+/g, param)}${query}`;
        const res = await t.app.inject({
          method: route.method as 'POST',
          url,
          headers,
          ...(payload === undefined ? {} : { payload }),
        });
        checkAnswer(res, `${route.method} ${url} ${JSON.stringify(headers)} ${JSON.stringify(payload)?.slice(0, 200)}`);
      }),
      { numRuns: NUM_RUNS },
    );
  });
});

describe('fuzz GET routes', () => {
  it('never answers 5xx to random path parameters, query strings and headers', async () => {
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...reading), pathParam, queryString, extraHeaders, async (route, param, query, extra) => {
        const url = `${route.url.replace(/:[A-Za-z0-9_]+/g, param)}${query}`;
        // An event stream that opens is cut after its head.
        const res = await injectAny(t.app, { method: 'GET', url, headers: { ...extra, ...tenant.auth } });
        checkAnswer(res, `GET ${url} ${JSON.stringify(extra)}`);
      }),
      { numRuns: NUM_RUNS },
    );
  });
});
