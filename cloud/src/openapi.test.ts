import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestCloud, type TestCloud } from './test-support.js';

/**
 * The committed cloud/openapi.json is what the code generates (Svix `generate-openapi --check`):
 * a route, schema or policy change without regenerating the document fails here.
 */

const COMMITTED = fileURLToPath(new URL('../openapi.json', import.meta.url));
const REGENERATE = 'cloud/openapi.json differs from what the code generates: run `npm run openapi` and commit the result';

// Operations that take no API key (decisions.md, Robots: the enrollment token authenticates).
const PUBLIC_OPERATIONS = ['post /v1/robots/enroll'];

interface Operation {
  security?: Record<string, string[]>[];
  responses?: Record<string, { content?: Record<string, { schema?: { $ref?: string } }> }>;
  parameters?: { in: string; name: string }[];
}
interface OpenApiDocument {
  openapi: string;
  info: { version: string };
  paths: Record<string, Record<string, Operation>>;
  components: { securitySchemes: Record<string, unknown>; schemas: Record<string, unknown> };
}

let t: TestCloud;
let generated: OpenApiDocument;

beforeAll(async () => {
  t = await startTestCloud();
  generated = JSON.parse(JSON.stringify(t.app.swagger())) as OpenApiDocument;
});
afterAll(async () => {
  await t.close();
});

function operations(doc: OpenApiDocument): [string, Operation][] {
  return Object.entries(doc.paths).flatMap(([path, ops]) => Object.entries(ops).map(([method, op]) => [`${method} ${path}`, op] as [string, Operation]));
}

describe('OpenAPI document', () => {
  it('matches the committed cloud/openapi.json', () => {
    expect(existsSync(COMMITTED), `cloud/openapi.json is missing: run \`npm run openapi\``).toBe(true);
    const committed = JSON.parse(readFileSync(COMMITTED, 'utf8')) as unknown;
    expect(generated, REGENERATE).toEqual(committed);
  });

  it('is served at /v1/openapi.json without a key, identical to app.swagger()', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/v1/openapi.json' });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual(generated);
  });

  it('describes OpenAPI 3.1 with the bearer scheme', () => {
    expect(generated.openapi).toBe('3.1.0');
    expect(generated.components.securitySchemes).toHaveProperty('apiKey');
    expect(generated.components.schemas).toHaveProperty('Error');
  });

  it('gives every /v1 operation a security entry and a default error response', () => {
    const ops = operations(generated).filter(([name]) => name.split(' ')[1]!.startsWith('/v1/'));
    expect(ops.length).toBeGreaterThanOrEqual(5);
    for (const [name, op] of ops) {
      expect(Array.isArray(op.security), `${name} has no security entry`).toBe(true);
      if (PUBLIC_OPERATIONS.includes(name)) {
        expect(op.security, name).toEqual([]);
      } else {
        expect(op.security, `${name} must require the API key`).toEqual([{ apiKey: [] }]);
      }
      const fallback = op.responses?.default;
      expect(fallback, `${name} has no default error response`).toBeDefined();
      expect(fallback?.content?.['application/json']?.schema?.$ref, name).toBe('#/components/schemas/Error');
    }
  });

  it('documents the Idempotency-Key header on every POST', () => {
    for (const [name, op] of operations(generated).filter(([n]) => n.startsWith('post '))) {
      const header = op.parameters?.find((p) => p.in === 'header' && p.name.toLowerCase() === 'idempotency-key');
      expect(header, `${name} does not document Idempotency-Key`).toBeDefined();
    }
  });

  it('lists exactly the catalog routes that are not hidden', () => {
    const fromCatalog = t.cloud.catalog
      .filter((r) => r.url !== '/v1/openapi.json')
      .map((r) => `${r.method.toLowerCase()} ${r.url.replace(/:([A-Za-z0-9_]+)/g, '{$1}')}`)
      .sort();
    expect(operations(generated).map(([name]) => name).sort()).toEqual(fromCatalog);
  });
});
