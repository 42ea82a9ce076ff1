/**
 * The client and the OpenAPI document a running cloud serves must not drift:
 * - `packages/client/src/schema.ts` is what openapi-typescript generates from the served
 *   document (regenerate with `npm run client:generate`, which `npm run openapi` runs too);
 * - every operation of the document has a line in the client's OPERATIONS table naming a
 *   FleetClient method that exists, and the table names no operation the document lacks.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import openapiTS, { astToString, COMMENT_HEADER } from 'openapi-typescript';
import { describe, expect, test } from 'vitest';
import { FleetClient, OPERATIONS } from '@fleet/client';
import { REPO_ROOT, startCloud } from './support/cloud.js';

const SCHEMA_TS = join(REPO_ROOT, 'packages', 'client', 'src', 'schema.ts');
const METHODS = ['get', 'put', 'post', 'delete', 'patch', 'head', 'options', 'trace'];

describe('client drift against the served OpenAPI document', () => {
  test('schema.ts is generated from the document the cloud serves, and every operation has a client method', async () => {
    await using cloud = await startCloud();
    const res = await cloud.fetch('/v1/openapi.json', { key: null });
    expect(res.status).toBe(200);
    const doc = (await res.json()) as { paths: Record<string, Record<string, unknown>> };

    const generated = `${COMMENT_HEADER}${astToString(await openapiTS(doc as never))}`;
    expect(generated === readFileSync(SCHEMA_TS, 'utf8'), 'packages/client/src/schema.ts is stale: run `npm run client:generate` (after `npm run openapi`) and commit it').toBe(true);

    const served = Object.entries(doc.paths).flatMap(([path, ops]) => Object.keys(ops).filter((m) => METHODS.includes(m)).map((m) => `${m.toUpperCase()} ${path}`));
    const table = Object.keys(OPERATIONS);
    expect({ missingFromClient: served.filter((op) => !table.includes(op)) }, 'add a FleetClient method and an OPERATIONS line for each').toEqual({ missingFromClient: [] });
    expect({ notInDocument: table.filter((op) => !served.includes(op)) }).toEqual({ notInDocument: [] });

    const client = new FleetClient({ baseUrl: cloud.http, apiKey: 'ak_unused_0000000000000000' });
    const missingMethods = Object.values(OPERATIONS).filter((name) => {
      const fn = name.split('.').reduce<unknown>((obj, part) => (obj as Record<string, unknown> | undefined)?.[part], client);
      return typeof fn !== 'function';
    });
    expect(missingMethods).toEqual([]);
  });
});
