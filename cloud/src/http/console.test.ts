import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_CONSOLE_DIR } from '../config.js';
import { errorCode, startTestCloud, type TestCloud, type TestTenant } from '../test-support.js';
import { CONSOLE_SECURITY_HEADERS, IMMUTABLE, REVALIDATE } from './console.js';

const INDEX = '<!doctype html><html><head><script type="module" src="/console/assets/app-abc123.js"></script></head><body></body></html>';
const SCRIPT = 'console.log("console");';

let fixture: string;
let t: TestCloud;
let tenant: TestTenant;

beforeAll(async () => {
  fixture = mkdtempSync(join(tmpdir(), 'fleet-console-'));
  mkdirSync(join(fixture, 'assets'));
  writeFileSync(join(fixture, 'index.html'), INDEX);
  writeFileSync(join(fixture, 'assets', 'app-abc123.js'), SCRIPT);
  writeFileSync(join(fixture, '.secret'), 'not served');
  t = await startTestCloud({ config: { consoleDir: fixture } });
  tenant = await t.createTenant();
});

afterAll(async () => {
  await t?.close();
  rmSync(fixture, { recursive: true, force: true });
});

const get = (url: string, headers: Record<string, string> = {}) => t.app.inject({ method: 'GET', url, headers });

function expectSecurityHeaders(res: LightMyRequestResponse): void {
  for (const [name, value] of Object.entries(CONSOLE_SECURITY_HEADERS)) expect(res.headers[name], name).toBe(value);
}

function expectIndex(res: LightMyRequestResponse): void {
  expect(res.statusCode).toBe(200);
  expect(res.headers['content-type']).toMatch(/^text\/html/);
  expect(res.headers['cache-control']).toBe(REVALIDATE);
  expect(res.payload).toBe(INDEX);
  expectSecurityHeaders(res);
}

describe('the console at /console/', () => {
  it('redirects / and /console to /console/ (302), keeping the query', async () => {
    for (const [url, location] of [
      ['/', '/console/'],
      ['/console', '/console/'],
      ['/console?robot_id=rbt_x', '/console/?robot_id=rbt_x'],
    ] as const) {
      const res = await get(url);
      expect(res.statusCode, url).toBe(302);
      expect(res.headers.location, url).toBe(location);
    }
  });

  it('serves index.html with the security headers, revalidated every time', async () => {
    const res = await get('/console/');
    expectIndex(res);
    // no-cache means "ask again": the ETag makes the answer a 304 when nothing changed.
    expect(res.headers.etag).toBeDefined();
    const again = await get('/console/', { 'if-none-match': String(res.headers.etag) });
    expect(again.statusCode).toBe(304);
    expect((await t.app.inject({ method: 'HEAD', url: '/console/' })).statusCode).toBe(200);
  });

  it('serves hashed assets as immutable for a year', async () => {
    const res = await get('/console/assets/app-abc123.js');
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toMatch(/javascript/);
    expect(res.headers['cache-control']).toBe(IMMUTABLE);
    expect(res.payload).toBe(SCRIPT);
    expectSecurityHeaders(res);
  });

  it('answers index.html for deep links without a file extension (single-page app)', async () => {
    for (const url of ['/console/robots/rbt_x', '/console/episodes?robot_id=rbt_x&cursor=abc', '/console/fleet', '/console/assets']) {
      expectIndex(await get(url));
    }
  });

  it('answers 404 for a missing file with an extension, and for dotfiles', async () => {
    for (const url of ['/console/assets/app-missing.js', '/console/favicon.ico', '/console/robots/rbt_x/data.json', '/console/.secret']) {
      const res = await get(url);
      expect(res.statusCode, url).toBe(404);
      expect(res.headers['content-type'], url).toMatch(/^text\/html/);
      expectSecurityHeaders(res);
    }
  });

  it('refuses paths that climb out of the directory', async () => {
    for (const url of ['/console/../package.json', '/console/%2e%2e/package.json', '/console/assets/..%2f..%2fpackage.json']) {
      const res = await get(url);
      expect([400, 403, 404], url).toContain(res.statusCode);
      expect(res.payload, url).not.toContain('"name"');
    }
  });

  it('answers 405 to other methods under /console/', async () => {
    const res = await t.app.inject({ method: 'POST', url: '/console/robots', payload: {} });
    expect(res.statusCode).toBe(405);
    expect(res.headers.allow).toBe('GET, HEAD');
  });

  it('adds nothing to /v1 answers, which keep their API key and JSON errors', async () => {
    const ok = await t.app.inject({ method: 'GET', url: '/v1/entitlements', headers: tenant.auth });
    expect(ok.statusCode).toBe(200);
    const unauthenticated = await get('/v1/entitlements');
    expect(errorCode(unauthenticated)).toBe('unauthenticated');
    const missing = await get('/v1/console/');
    expect(errorCode(missing)).toBe('not_found');
    for (const res of [ok, unauthenticated, missing, await get('/healthz')]) {
      for (const name of Object.keys(CONSOLE_SECURITY_HEADERS)) expect(res.headers[name], name).toBeUndefined();
    }
  });

  it('leaves other unknown paths to the JSON 404', async () => {
    for (const url of ['/nope', '/consoles', '/console.html']) {
      const res = await get(url);
      expect(res.statusCode, url).toBe(404);
      expect(errorCode(res), url).toBe('not_found');
    }
  });

  it('is not in the OpenAPI document', async () => {
    const doc = (await get('/v1/openapi.json')).json<{ paths: Record<string, unknown> }>();
    expect(Object.keys(doc.paths).filter((p) => !p.startsWith('/v1/'))).toEqual([]);
  });
});

describe('a console that is not built', () => {
  it('starts, and answers /console/ and deep links with a page that says to build it', async () => {
    const empty = mkdtempSync(join(tmpdir(), 'fleet-console-empty-'));
    try {
      for (const dir of [empty, join(empty, 'missing')]) {
        await using c = await startTestCloud({ config: { consoleDir: dir } });
        for (const url of ['/console/', '/console/robots/rbt_x']) {
          const res = await c.app.inject({ method: 'GET', url });
          expect(res.statusCode, url).toBe(503);
          expect(res.headers['content-type']).toMatch(/^text\/html/);
          expect(res.payload).toContain('npm run build');
          expectSecurityHeaders(res);
        }
        expect((await c.app.inject({ method: 'GET', url: '/console/assets/app.js' })).statusCode).toBe(404);
        expect((await c.app.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(200);
      }
    } finally {
      rmSync(empty, { recursive: true, force: true });
    }
  });

  it('defaults to the workspace console/dist', () => {
    expect(DEFAULT_CONSOLE_DIR.replace(/\\/g, '/')).toMatch(/\/console\/dist\/?$/);
    expect(t.config.consoleDir).toBe(fixture);
  });
});
