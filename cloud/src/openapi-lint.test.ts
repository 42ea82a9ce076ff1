import { fileURLToPath } from 'node:url';
import { createConfig, lintFromString, loadConfig, type NormalizedProblem } from '@redocly/openapi-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestCloud, type TestCloud } from './test-support.js';

/**
 * The generated OpenAPI document passes Redocly's recommended rules (what teams run before
 * generating Python and Go clients from it), through the same config as `npm run openapi:lint`:
 * cloud/redocly.yaml, whose ignore file lists the only problems allowed, each justified in
 * docs/decisions.md (OpenAPI document).
 */

const CONFIG = fileURLToPath(new URL('../redocly.yaml', import.meta.url));
// The ignore file names the committed document; the generated one is linted under its path.
const DOCUMENT = fileURLToPath(new URL('../openapi.json', import.meta.url));
const METHODS = ['get', 'put', 'post', 'delete', 'patch', 'head', 'options', 'trace'];

interface Operation {
  operationId?: string;
  responses: Record<string, { content?: Record<string, { schema?: { $ref?: string } }> }>;
}

let t: TestCloud;
let doc: { paths: Record<string, Record<string, Operation>> };

beforeAll(async () => {
  t = await startTestCloud();
  doc = JSON.parse(JSON.stringify(t.app.swagger())) as typeof doc;
});
afterAll(async () => {
  await t.close();
});

function operations(): [string, Operation][] {
  return Object.entries(doc.paths).flatMap(([path, ops]) =>
    Object.entries(ops)
      .filter(([method]) => METHODS.includes(method))
      .map(([method, op]) => [`${method.toUpperCase()} ${path}`, op] as [string, Operation]),
  );
}

const where = (p: NormalizedProblem): string => `${p.ruleId} ${p.location[0]?.pointer ?? ''}`;

describe('OpenAPI document lint', () => {
  it("has no problem under Redocly's recommended rules but the justified ignores", async () => {
    const config = await loadConfig({ configPath: CONFIG });
    // The config may ignore listed problems, never turn a rule down.
    const recommended = await createConfig({ extends: ['recommended'] });
    expect(config.styleguide.rules).toEqual(recommended.styleguide.rules);

    const problems = await lintFromString({ source: JSON.stringify(doc, null, 2), absoluteRef: DOCUMENT, config });
    const unexpected = problems.filter((p) => !p.ignored).map((p) => `${p.severity} ${where(p)}: ${p.message}`);
    expect(unexpected).toEqual([]);

    // An ignore entry that matches nothing any more goes too, so the list stays the justified one.
    const listed = Object.entries(config.styleguide.ignore[DOCUMENT] ?? {}).flatMap(([rule, pointers]) => [...pointers].map((p) => `${rule} ${p}`));
    expect(problems.filter((p) => p.ignored).map(where).sort()).toEqual(listed.sort());
  });

  it('gives every operation a unique camelCase operationId', () => {
    const ops = operations();
    expect(ops.length).toBeGreaterThanOrEqual(50);
    const missing = ops.filter(([, op]) => typeof op.operationId !== 'string').map(([name]) => name);
    expect(missing).toEqual([]);
    const ids = ops.map(([, op]) => op.operationId!);
    expect(ids.filter((id) => !/^[a-z][a-zA-Z0-9]*$/.test(id))).toEqual([]);
    expect(ids.filter((id, i) => ids.indexOf(id) !== i)).toEqual([]);
  });

  it('documents the 4xx errors of every operation with the shared error body', () => {
    for (const [name, op] of operations()) {
      const errors = Object.entries(op.responses).filter(([status]) => status === 'default' || Number(status) >= 400);
      expect(errors.map(([status]) => status), name).toEqual(expect.arrayContaining(['400', '429', '500', 'default']));
      for (const [status, response] of errors) {
        expect(response.content?.['application/json']?.schema?.$ref, `${name} ${status}`).toBe('#/components/schemas/Error');
      }
    }
  });
});
