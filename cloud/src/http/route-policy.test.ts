import { randomBytes } from 'node:crypto';
import type { LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MINUTE, SCOPES, type Scope } from '@fleet/protocol';
import { bearer, errorCode, errorDetails, fillPath, injectAny, startTestCloud, type TestCloud, type TestTenant } from '../test-support.js';
import type { CatalogEntry } from './policy.js';

/**
 * Walks every route the app registers, so a route added later is checked without touching this
 * file: a route that forgets auth, scope or entitlement fails here.
 */

// The only /v1 routes callable without an API key. Adding one is a deliberate act: extend this.
const PUBLIC_ROUTES = [
  'GET /v1/openapi.json',
  // decisions.md, Robots: the enrollment token in the body is the credential.
  'POST /v1/robots/enroll',
];

// The catalog is read once at collection time so that each route gets its own named tests.
const catalog: readonly CatalogEntry[] = await (async () => {
  const probe = await startTestCloud();
  try {
    return [...probe.cloud.catalog];
  } finally {
    await probe.close();
  }
})();

type KeyRoute = CatalogEntry & { policy: Extract<CatalogEntry['policy'], { auth: 'key' }> };
const keyRoutes = catalog.filter((r): r is KeyRoute => r.policy.auth === 'key');
const label = (r: CatalogEntry) => `${r.method} ${r.url}`;

let t: TestCloud;
let tenant: TestTenant;

beforeAll(async () => {
  t = await startTestCloud();
  tenant = await t.createTenant();
});
afterAll(async () => {
  await t.close();
});

/**
 * Calls a route without a body; the policy hooks run before body parsing and validation. An
 * event stream that opens is cut after its head.
 */
async function call(route: CatalogEntry, headers: Record<string, string> = {}): Promise<LightMyRequestResponse> {
  const res = await injectAny(t.app, { method: route.method, url: fillPath(route.url), headers });
  expect(res.headers['x-request-id'], `${label(route)} answered without X-Request-Id`).toMatch(/^req_/);
  return res;
}

describe('route catalog', () => {
  it('lists the known /v1 routes (the walk below is not vacuous)', () => {
    const names = catalog.map(label);
    expect(names).toEqual(expect.arrayContaining(['POST /v1/api-keys', 'GET /v1/api-keys', 'DELETE /v1/api-keys/:id', 'GET /v1/entitlements', 'GET /v1/usage']));
    expect(keyRoutes.length).toBeGreaterThanOrEqual(5);
  });

  it('has no route without an API key beyond the allow-list', () => {
    const open = catalog.filter((r) => r.policy.auth !== 'key').map(label).sort();
    expect(open).toEqual([...PUBLIC_ROUTES].sort());
  });

  it('answers the public routes without a key', async () => {
    for (const route of catalog.filter((r) => r.policy.auth === 'none')) {
      const res = await call(route);
      expect([401, 403], label(route)).not.toContain(res.statusCode);
    }
    const doc = await t.app.inject({ method: 'GET', url: '/v1/openapi.json' });
    expect(doc.statusCode).toBe(200);
  });
});

describe.each(keyRoutes.map((r) => [label(r), r] as const))('%s', (_name, route) => {
  const { scope, feature } = route.policy;
  // A route may accept one of several scopes; `null` means any valid key.
  const required: readonly Scope[] = scope === null ? [] : typeof scope === 'string' ? [scope] : scope;
  const lacking = SCOPES.filter((s) => !required.includes(s) && s !== 'admin');

  it('answers 401 unauthenticated without Authorization', async () => {
    const res = await call(route);
    expect(res.statusCode).toBe(401);
    expect(errorCode(res)).toBe('unauthenticated');
  });

  it('answers 401 to malformed Authorization headers', async () => {
    const malformed = [
      '',
      'Bearer',
      'Bearer ',
      `Basic ${Buffer.from('user:pass').toString('base64')}`,
      `Token ${tenant.adminKey}`,
      `Bearer${tenant.adminKey}`,
      `Bearer ${tenant.adminKey} extra`,
      `Bearer ${tenant.adminKey.slice(3)}`,
      'Bearer ak_short',
      `Bearer ak_${'x'.repeat(200)}`,
      `Bearer ak_${'!'.repeat(40)}`,
    ];
    for (const header of malformed) {
      const res = await call(route, { authorization: header });
      expect([res.statusCode, errorCode(res)], JSON.stringify(header)).toEqual([401, 'unauthenticated']);
    }
  });

  it('takes the Bearer scheme name in any case (RFC 9110), never a changed key', async () => {
    for (const scheme of ['bearer', 'BEARER', 'BeArEr']) {
      const res = await call(route, { authorization: `${scheme} ${tenant.adminKey}` });
      expect(res.statusCode, scheme).not.toBe(401);
    }
    const res = await call(route, { authorization: `Bearer ${tenant.adminKey.toUpperCase()}` });
    expect(res.statusCode).toBe(401);
  });

  it('answers 401 to an unknown ak_ key', async () => {
    const res = await call(route, bearer(`ak_${randomBytes(32).toString('base64url')}`));
    expect(res.statusCode).toBe(401);
    expect(errorCode(res)).toBe('unauthenticated');
  });

  it('answers 401 once the key has expired', async () => {
    const { key } = await t.createKey(tenant.org, ['admin'], { expiresAt: t.clock.now() + MINUTE });
    const before = await call(route, bearer(key));
    expect(before.statusCode).not.toBe(401);
    t.clock.advance(MINUTE);
    const after = await call(route, bearer(key));
    expect(after.statusCode).toBe(401);
    expect(errorCode(after)).toBe('unauthenticated');
  });

  it('answers 401 once the key is revoked', async () => {
    const created = await t.createKey(tenant.org, ['admin']);
    const before = await call(route, bearer(created.key));
    expect(before.statusCode).not.toBe(401);
    expect(await t.store.apiKeys.revoke(tenant.org.id, created.id, t.clock.now())).toBe(true);
    const after = await call(route, bearer(created.key));
    expect(after.statusCode).toBe(401);
    expect(errorCode(after)).toBe('unauthenticated');
  });

  it('lets an admin key through the scope and entitlement checks', async () => {
    const res = await call(route, tenant.auth);
    expect(res.statusCode).not.toBe(401);
    expect(res.statusCode).not.toBe(403);
  });

  if (required.length > 0) {
    it(`answers 403 insufficient_scope to a key without ${required.join(' or ')}`, async () => {
      for (const other of lacking) {
        const { key } = await t.createKey(tenant.org, [other]);
        const res = await call(route, bearer(key));
        expect([res.statusCode, errorCode(res)], `key with ${other}`).toEqual([403, 'insufficient_scope']);
        const named = [errorDetails(res)?.required_scope].flat();
        expect([...named].sort()).toEqual([...required].sort());
      }
      // All the other scopes together still do not make up a missing one.
      const { key } = await t.createKey(tenant.org, lacking);
      const res = await call(route, bearer(key));
      expect(errorCode(res)).toBe('insufficient_scope');
    });

    it(`lets a key holding exactly ${required.join(' or ')} through`, async () => {
      for (const s of required) {
        const { key } = await t.createKey(tenant.org, [s]);
        const res = await call(route, bearer(key));
        expect([401, 403], `key with ${s}`).not.toContain(res.statusCode);
      }
    });
  } else {
    it('lets a key with any single scope through', async () => {
      for (const s of SCOPES) {
        const { key } = await t.createKey(tenant.org, [s]);
        const res = await call(route, bearer(key));
        expect([401, 403], `key with ${s}`).not.toContain(res.statusCode);
      }
    });
  }

  if (feature !== null) {
    it(`answers 403 entitlement_required when the organization lacks ${feature}`, async () => {
      const other = await t.createTenant();
      expect(await t.store.orgs.setFeature(other.org.id, feature, false)).toBe(true);
      const res = await call(route, other.auth);
      expect(res.statusCode).toBe(403);
      expect(errorCode(res)).toBe('entitlement_required');
      expect(errorDetails(res)?.feature).toBe(feature);

      // Clearing the override gives the tier's answer back (enterprise includes every feature).
      await t.store.orgs.setFeature(other.org.id, feature, null);
      const again = await call(route, other.auth);
      expect([401, 403]).not.toContain(again.statusCode);
    });

    if (required.length > 0) {
      it('checks the scope before the entitlement', async () => {
        const other = await t.createTenant();
        await t.store.orgs.setFeature(other.org.id, feature, false);
        const { key } = await t.createKey(other.org, [lacking[0]!]);
        const res = await call(route, bearer(key));
        expect(errorCode(res)).toBe('insufficient_scope');
      });
    }
  }
});

describe('X-Request-Id', () => {
  it('is on every answer, unique per request, including unknown routes and health probes', async () => {
    const seen = new Set<string>();
    for (const url of ['/healthz', '/readyz', '/v1/nope', '/nope', '/v1/entitlements']) {
      const res = await t.app.inject({ method: 'GET', url });
      const id = res.headers['x-request-id'];
      expect(id, url).toMatch(/^req_/);
      seen.add(String(id));
    }
    expect(seen.size).toBe(5);
  });

  it('ignores a caller-sent X-Request-Id', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/healthz', headers: { 'x-request-id': 'mine' } });
    expect(res.headers['x-request-id']).not.toBe('mine');
  });
});
