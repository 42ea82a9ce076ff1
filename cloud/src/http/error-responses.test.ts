import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApiErrorBodySchema } from '@fleet/protocol';
import { startTestCloud, type TestCloud } from '../test-support.js';
import { addSharedErrors, errorResponses } from './error-responses.js';

const descriptions = (response: Record<string, unknown>): Record<string, string> =>
  Object.fromEntries(Object.entries(response).map(([status, entry]) => [status, (entry as { description: string }).description]));

describe('errorResponses', () => {
  it('groups codes by their status, with the shared error body', () => {
    const response = errorResponses('not_found', 'robot_deenrolled', 'conflict', { status: 422, code: 'validation_failed' });
    expect(descriptions(response)).toEqual({
      404: 'Error: `not_found`',
      409: 'Error: `conflict`, `robot_deenrolled`',
      422: 'Error: `validation_failed`',
    });
    expect(response[404].content['application/json'].schema).toBe(ApiErrorBodySchema);
  });
});

describe('addSharedErrors', () => {
  const admin = { auth: 'key', scope: 'admin', feature: 'api.access', meter: null } as const;

  it("merges the policy's errors into the route's own, and adds a default", () => {
    const response: Record<string, unknown> = { 201: 'the created thing', ...errorResponses('conflict') };
    addSharedErrors(response, admin, ['POST']);
    expect(descriptions(response)).toMatchObject({
      400: 'Error: `validation_failed`',
      401: 'Error: `unauthenticated`',
      403: 'Error: `insufficient_scope`, `entitlement_required`',
      409: 'Error: `conflict`, `idempotency_key_in_use`',
      413: 'Error: `payload_too_large`',
      415: 'Error: `unsupported_media_type`',
      422: 'Error: `idempotency_key_reused`',
      429: 'Error: `rate_limited`',
      500: 'Error: `internal`',
      default: 'Any other error, with the same body',
    });
    expect(response[201]).toBe('the created thing');
  });

  it('gives a keyless GET neither 401, 403 nor the body errors, and is idempotent (the HEAD twin)', () => {
    const response: Record<string, unknown> = {};
    addSharedErrors(response, { auth: 'none' }, ['GET']);
    const once = descriptions(response);
    addSharedErrors(response, { auth: 'none' }, ['GET']);
    expect(descriptions(response)).toEqual(once);
    expect(Object.keys(once)).toEqual(['400', '429', '500', '503', 'default']);
  });

  it('leaves a status the route answers with its own body alone', () => {
    const response: Record<string, unknown> = { 409: 'a documented non-error body' };
    addSharedErrors(response, admin, ['POST']);
    expect(response[409]).toBe('a documented non-error body');
  });
});

describe('error bodies on documented error statuses', () => {
  let t: TestCloud;
  beforeAll(async () => {
    t = await startTestCloud();
  });
  afterAll(async () => {
    await t.close();
  });

  // The 4xx response schemas are documentation: the error edge writes the body as text, and
  // no serializer may drop or reorder a field of it (details above all).
  it('sends 403 and 400 bodies with every field, exactly as the error edge writes them', async () => {
    const org = await t.createOrg();
    const { key } = await t.createKey(org, ['data:read']);
    const refused = await t.app.inject({ method: 'GET', url: '/v1/api-keys', headers: { authorization: `Bearer ${key}` } });
    expect(refused.statusCode).toBe(403);
    const body = refused.json<{ error: { code: string; message: string; details: Record<string, unknown>; request_id: string } }>();
    expect(Object.keys(body.error)).toEqual(['code', 'message', 'details', 'request_id']);
    expect(body.error.code).toBe('insufficient_scope');
    expect(body.error.details).toMatchObject({ key_scopes: ['data:read'] });
    expect(body.error.request_id).toBe(refused.headers['x-request-id']);
    expect(refused.payload).toBe(JSON.stringify(body));

    const admin = await t.createKey(org, ['admin']);
    const invalid = await t.app.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: { authorization: `Bearer ${admin.key}` },
      payload: { name: 'k', scopes: ['admin'], bogus: 1 },
    });
    expect(invalid.statusCode).toBe(400);
    const issues = invalid.json<{ error: { code: string; details: { issues: { code: string; keys?: string[] }[] } } }>();
    expect(issues.error.code).toBe('validation_failed');
    expect(issues.error.details.issues).toContainEqual(expect.objectContaining({ code: 'unrecognized_keys', keys: ['bogus'] }));
    expect(invalid.payload).toBe(JSON.stringify(invalid.json()));
  });
});
