/** /v1/webhooks validation and the shape of what is listed (no delivery; see delivery.test.ts). */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { errorCode, startTestCloud, type TestCloud, type TestTenant } from '../test-support.js';

let t: TestCloud;
let tenant: TestTenant;

beforeEach(async () => {
  t = await startTestCloud({ config: { egressAllowLoopback: true } });
  tenant = await t.createTenant();
});
afterEach(async () => {
  await t.close();
});

const create = (payload: unknown, auth = tenant.auth) => t.app.inject({ method: 'POST', url: '/v1/webhooks', headers: auth, payload: payload as object });

describe('POST /v1/webhooks validation', () => {
  it.each([
    ['http:// url', { url: 'http://hooks.example.com/x', events: ['episode.finalized'] }],
    ['not a url', { url: 'hooks.example.com', events: ['episode.finalized'] }],
    ['unknown event', { url: 'https://hooks.example.com/x', events: ['episode.exploded'] }],
    ['duplicate events', { url: 'https://hooks.example.com/x', events: ['episode.finalized', 'episode.finalized'] }],
    ['no events', { url: 'https://hooks.example.com/x', events: [] }],
    ['missing events', { url: 'https://hooks.example.com/x' }],
    ['unknown field', { url: 'https://hooks.example.com/x', events: ['episode.finalized'], secret: 'x' }],
    ['credentials in the URL', { url: 'https://user:pw@hooks.example.com/x', events: ['episode.finalized'] }],
    ['user only in the URL', { url: 'https://user@hooks.example.com/x', events: ['episode.finalized'] }],
    ['private IPv4 literal', { url: 'https://10.0.0.1/x', events: ['episode.finalized'] }],
    ['192.168 literal', { url: 'https://192.168.1.10:8443/x', events: ['episode.finalized'] }],
    ['link-local metadata literal', { url: 'https://169.254.169.254/latest', events: ['episode.finalized'] }],
    ['IPv6 unique-local literal', { url: 'https://[fd00::1]/x', events: ['episode.finalized'] }],
    ['IPv4-mapped private literal', { url: 'https://[::ffff:10.0.0.1]/x', events: ['episode.finalized'] }],
    ['decimal private literal', { url: 'https://167772161/x', events: ['episode.finalized'] }],
    ['unspecified address', { url: 'https://0.0.0.0/x', events: ['episode.finalized'] }],
  ])('%s -> 400 validation_failed', async (_name, payload) => {
    const res = await create(payload);
    expect(res.statusCode, res.payload).toBe(400);
    expect(errorCode(res)).toBe('validation_failed');
    const list = await t.app.inject({ method: 'GET', url: '/v1/webhooks', headers: tenant.auth });
    expect(list.json()).toEqual({ webhooks: [] });
  });

  it('accepts a public literal and, with loopback allowed, 127.0.0.1', async () => {
    expect((await create({ url: 'https://93.184.216.34/x', events: ['episode.finalized'] })).statusCode).toBe(201);
    expect((await create({ url: 'https://127.0.0.1:8443/x', events: ['episode.finalized'] })).statusCode).toBe(201);
  });

  it('refuses a loopback literal when loopback is not allowed', async () => {
    const strict = await startTestCloud();
    try {
      const other = await strict.createTenant();
      const res = await strict.app.inject({
        method: 'POST',
        url: '/v1/webhooks',
        headers: other.auth,
        payload: { url: 'https://127.0.0.1/x', events: ['episode.finalized'] },
      });
      expect(res.statusCode).toBe(400);
    } finally {
      await strict.close();
    }
  });

  it('requires the admin scope', async () => {
    const { key } = await t.createKey(tenant.org, ['data:read']);
    const res = await create({ url: 'https://hooks.example.com/x', events: ['episode.finalized'] }, { authorization: `Bearer ${key}` });
    expect([401, 403]).toContain(res.statusCode);
    expect((await t.app.inject({ method: 'GET', url: '/v1/webhooks' })).statusCode).toBe(401);
  });
});

describe('secret and listing', () => {
  it('shows the whsec_ secret once, never in the list; lists the spec fields', async () => {
    const res = await create({ url: 'https://hooks.example.com/path?q=1', events: ['episode.finalized', 'episode.synced'] });
    expect(res.statusCode).toBe(201);
    const created = res.json<Record<string, unknown>>();
    expect(created.secret).toMatch(/^whsec_[A-Za-z0-9_-]{20,}$/);
    expect(created).toMatchObject({
      url: 'https://hooks.example.com/path?q=1',
      events: ['episode.finalized', 'episode.synced'],
      status: 'active',
      disabled_reason: null,
      pending_deliveries: 0,
      last_delivered_at: null,
      last_delivery_error: null,
    });
    expect(created.id).toEqual(expect.any(String));
    expect(created.created_at).toBe(new Date(t.clock.now()).toISOString());

    const list = await t.app.inject({ method: 'GET', url: '/v1/webhooks', headers: tenant.auth });
    expect(list.statusCode).toBe(200);
    expect(list.payload).not.toContain(String(created.secret));
    const rows = list.json<{ webhooks: Record<string, unknown>[] }>().webhooks;
    expect(rows).toHaveLength(1);
    expect(Object.keys(rows[0]!).sort()).toEqual(
      ['id', 'url', 'events', 'status', 'disabled_reason', 'pending_deliveries', 'last_delivered_at', 'last_delivery_error', 'created_at'].sort(),
    );
    const { secret: _secret, ...rest } = created;
    expect(rows[0]).toEqual(rest);

    // Rotation returns a new secret that is not listed either.
    const rot = await t.app.inject({ method: 'POST', url: `/v1/webhooks/${String(created.id)}/rotate-secret`, headers: tenant.auth });
    expect(rot.statusCode).toBe(200);
    const again = await t.app.inject({ method: 'GET', url: '/v1/webhooks', headers: tenant.auth });
    expect(again.payload).not.toContain(rot.json<{ secret: string }>().secret);
  });

  it('lists a disabled subscription with its reason, and dead-letters of an unknown id is 404', async () => {
    const res = await create({ url: 'https://hooks.example.com/x', events: ['episode.finalized'] });
    const { id } = res.json<{ id: string }>();
    await t.store.webhooks.disable(id, 'unresolvable: hooks.example.com does not exist');
    const list = await t.app.inject({ method: 'GET', url: '/v1/webhooks', headers: tenant.auth });
    expect(list.json<{ webhooks: unknown[] }>().webhooks[0]).toMatchObject({ status: 'disabled', disabled_reason: 'unresolvable: hooks.example.com does not exist' });
    expect((await t.app.inject({ method: 'GET', url: '/v1/webhooks/wh_nope/dead-letters', headers: tenant.auth })).statusCode).toBe(404);
    const dl = await t.app.inject({ method: 'GET', url: `/v1/webhooks/${id}/dead-letters`, headers: tenant.auth });
    expect(dl.json()).toEqual({ dead_letters: [] });
  });
});
