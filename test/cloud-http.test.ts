import { describe, expect, test } from 'vitest';
import { startCloud } from './support/cloud.js';

interface OpenApiDoc {
  openapi: string;
  info: { title: string; version: string };
  paths: Record<string, Record<string, { responses?: Record<string, unknown>; security?: unknown[]; parameters?: unknown[] }>>;
  components?: { schemas?: Record<string, unknown>; securitySchemes?: Record<string, { type: string; scheme?: string }> };
}

const METHODS = new Set(['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace']);

/** Every `$ref` in the document, as JSON pointers. */
function refsOf(node: unknown, out: string[] = []): string[] {
  if (Array.isArray(node)) for (const v of node) refsOf(v, out);
  else if (node && typeof node === 'object') {
    for (const [k, v] of Object.entries(node)) {
      if (k === '$ref' && typeof v === 'string') out.push(v);
      else refsOf(v, out);
    }
  }
  return out;
}

function resolvePointer(doc: unknown, ref: string): unknown {
  if (!ref.startsWith('#/')) return undefined;
  let node: unknown = doc;
  for (const raw of ref.slice(2).split('/')) {
    const part = decodeURIComponent(raw).replace(/~1/g, '/').replace(/~0/g, '~');
    if (!node || typeof node !== 'object') return undefined;
    node = (node as Record<string, unknown>)[part];
  }
  return node;
}

describe('the HTTP surface of a running server', () => {
  test('/healthz and /readyz answer without a key', async () => {
    await using cloud = await startCloud();
    const health = await cloud.fetch('/healthz', { key: null });
    expect(health.status).toBe(200);
    expect(await health.json()).toEqual({ status: 'ok' });
    expect(health.headers.get('x-request-id')).toMatch(/^req_/);
    const ready = await cloud.fetch('/readyz', { key: null });
    expect(ready.status).toBe(200);
    expect(await ready.json()).toEqual({ status: 'ready' });
  });

  test('/v1/openapi.json is an OpenAPI 3.1 document with the /v1/api-keys operations', async () => {
    await using cloud = await startCloud();
    const res = await cloud.fetch('/v1/openapi.json', { key: null });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    const doc = (await res.json()) as OpenApiDoc;

    expect(doc.openapi).toMatch(/^3\.1\.\d+$/);
    expect(doc.info.title).toBeTruthy();
    expect(doc.info.version).toBe('1.0.0');
    expect(doc.components?.securitySchemes?.apiKey).toMatchObject({ type: 'http', scheme: 'bearer' });

    expect(Object.keys(doc.paths['/v1/api-keys'] ?? {}).sort()).toEqual(['get', 'post']);
    expect(Object.keys(doc.paths['/v1/api-keys/{id}'] ?? {})).toEqual(['delete']);
    expect(doc.paths['/v1/api-keys']!.post!.responses).toHaveProperty('201');
    expect(doc.paths['/v1/api-keys/{id}']!.delete!.parameters).toEqual(
      expect.arrayContaining([expect.objectContaining({ name: 'id', in: 'path', required: true })]),
    );
    expect(doc.paths['/v1/entitlements']).toHaveProperty('get');

    for (const [method, path] of [['get', '/v1/api-keys'], ['post', '/v1/api-keys'], ['delete', '/v1/api-keys/{id}']] as const) {
      expect(doc.paths[path]![method]!.security, `${method} ${path}`).toEqual([{ apiKey: [] }]);
    }

    // Structural validity: every path is under /v1, every operation has responses and names
    // only declared security schemes, and every $ref resolves inside the document.
    const schemes = Object.keys(doc.components?.securitySchemes ?? {});
    for (const [path, item] of Object.entries(doc.paths)) {
      expect(path).toMatch(/^\/v1\//);
      for (const [method, op] of Object.entries(item)) {
        if (!METHODS.has(method)) continue;
        expect(Object.keys(op.responses ?? {}).length, `${method} ${path}`).toBeGreaterThan(0);
        expect(Array.isArray(op.security), `${method} ${path}`).toBe(true);
        for (const req of op.security as Record<string, unknown>[]) for (const name of Object.keys(req)) expect(schemes).toContain(name);
      }
    }
    const unresolved = [...new Set(refsOf(doc))].filter((r) => resolvePointer(doc, r) === undefined);
    expect(unresolved).toEqual([]);
    // Hidden routes stay hidden.
    expect(doc.paths).not.toHaveProperty('/healthz');
    expect(doc.paths).not.toHaveProperty('/v1/openapi.json');
  });

  test('/docs serves the HTML API browser pointing at /v1/openapi.json', async () => {
    await using cloud = await startCloud();
    const res = await cloud.fetch('/docs', { key: null });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/html/);
    const html = await res.text();
    expect(html).toMatch(/<html/i);
    expect(html).toContain('/docs/static/swagger-initializer.js');
    const init = await cloud.fetch('/docs/static/swagger-initializer.js', { key: null });
    expect(init.status).toBe(200);
    // The page loads ./json (relative to /docs/): the same document as /v1/openapi.json.
    const uiDoc = await cloud.fetch('/docs/json', { key: null });
    expect(uiDoc.status).toBe(200);
    expect(await uiDoc.json()).toEqual(await (await cloud.fetch('/v1/openapi.json', { key: null })).json());
  });

  test('unknown routes are 404 not_found in the error shape', async () => {
    await using cloud = await startCloud();
    const res = await cloud.fetch('/v1/nothing-here');
    expect(res.status).toBe(404);
    expect(res.headers.get('x-request-id')).toMatch(/^req_/);
    expect(await res.json()).toMatchObject({ error: { code: 'not_found', message: expect.any(String) as string } });
  });
});
