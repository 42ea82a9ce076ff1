import type { ServerResponse } from 'node:http';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { beforeEach, afterEach, describe, expect, it } from 'vitest';
import { systemScheduler, DestinationCheckSchema, GrantRequestEnvelopeSchema, verifySignature, type GrantRequestEnvelope } from '@fleet/protocol';
import { EgressClient } from '../../egress/client.js';
import { startHttpsReceiver, type ReceivedRequest } from '../../egress/test-https.js';
import { sendJson, useProviderStandIn } from '../../egress/test-provider.js';
import { SecretBox } from '../../secret-box.js';
import { GrantRelay } from '../../sync/grant-relay.js';
import { errorCode, startTestCloud, type TestCloud, type TestTenant } from '../../test-support.js';

/** The destination check against a real HTTPS provider stand-in, through the app's own relay. */

const stand = useProviderStandIn();
let t: TestCloud;
let tenant: TestTenant;
beforeEach(async () => {
  t = await startTestCloud({ config: { egressAllowLoopback: true, egressCaFile: stand.pki.caFile } });
  tenant = await t.createTenant();
});
afterEach(async () => {
  await t.close();
});
const envOf = (req: ReceivedRequest): GrantRequestEnvelope => GrantRequestEnvelopeSchema.parse(JSON.parse(req.body));
const grant = (env: GrantRequestEnvelope, destinationId = env.request.destination_id) => ({
  grant_id: `g_${Math.random()}`,
  expires_at: new Date(Date.now() + 3600_000).toISOString(),
  retry_after: null,
  retention: { local: 'keep' },
  destinations: [{ destination_id: destinationId, protocol: 'http-put', files: env.request.manifest.files.map((f) => ({ path: f.path, put_url: 'https://s.example/x' })) }],
});

async function destination(url = `https://127.0.0.1:${stand.provider.port}/grant`): Promise<{ id: string; secret: string }> {
  const res = await t.app.inject({ method: 'POST', url: '/v1/destinations', headers: tenant.auth, payload: { type: 'external', url } });
  expect(res.statusCode, res.payload).toBe(201);
  return res.json<{ id: string; secret: string }>();
}

const check = (id: string) => t.app.inject({ method: 'POST', url: `/v1/destinations/${id}/check`, headers: tenant.auth });

describe('POST /v1/destinations/{id}/check', () => {
  it('passes a valid grant: a signed synthetic request marked check, and nothing persisted', async () => {
    const d = await destination();
    stand.answer = (req, res) => sendJson(res, 200, grant(envOf(req)));
    const res = await check(d.id);
    expect(res.statusCode, res.payload).toBe(200);
    const body = DestinationCheckSchema.parse(res.json());
    expect(body).toMatchObject({ result: 'pass', mode: 'granted', http_status: 200 });
    expect(body.latency_ms).toBeGreaterThanOrEqual(0);
    const got = stand.provider.requests.at(-1)!;
    expect(envOf(got).request).toMatchObject({ check: true, destination_id: d.id });
    expect(verifySignature({ body: got.body, header: got.headers['x-service-signature'] as string, secrets: [d.secret], nowS: Math.floor(t.clock.now() / 1000) }).ok).toBe(true);
    const list = await t.app.inject({ method: 'GET', url: '/v1/destinations', headers: tenant.auth });
    expect(list.json<{ destinations: { forwards_24h: number; last_forward_at: string | null }[] }>().destinations[0]).toMatchObject({ forwards_24h: 0, last_forward_at: null });
  });

  it('passes a deferral', async () => {
    const d = await destination();
    stand.answer = (_req, res) => sendJson(res, 200, { grant_id: null, destinations: [], retention: { local: 'keep' }, retry_after: 30 });
    expect((await check(d.id)).json()).toMatchObject({ result: 'pass', mode: 'deferred', http_status: 200 });
  });

  it.each<[string, (req: ReceivedRequest, res: ServerResponse) => void, string, number | null]>([
    ['http_error', (_q, res) => sendJson(res, 503, { error: 'down' }), 'http_error', 503],
    ['invalid_json', (_q, res) => sendJson(res, 200, 'not json'), 'invalid_json', 200],
    ['schema_invalid', (_q, res) => sendJson(res, 200, { grant_id: 'x' }), 'schema_invalid', 200],
    ['destination_mismatch', (q, res) => sendJson(res, 200, grant(envOf(q), 'dst_someone_else')), 'destination_mismatch', 200],
  ])('fails with %s', async (_name, handler, failure, status) => {
    const d = await destination();
    stand.answer = handler;
    const body = (await check(d.id)).json<Record<string, unknown>>();
    expect(body).toMatchObject({ result: 'fail', mode: 'deferred', failure, http_status: status });
    expect(typeof body.message).toBe('string');
  });

  it('fails with schema_invalid, as the relay defers it, when the grant reuses a grant_id the destination used before', async () => {
    const [d, other] = [await destination(), await destination()];
    // A grant the relay handed to a robot earlier, at this destination.
    expect(await t.store.sync.claimGrantId(d.id, 'g_used', t.clock.now())).toBe(true);
    stand.answer = (req, res) => sendJson(res, 200, { ...grant(envOf(req)), grant_id: 'g_used' });
    const res = await check(d.id);
    expect(res.statusCode, res.payload).toBe(200);
    expect(res.json()).toMatchObject({ result: 'fail', mode: 'deferred', failure: 'schema_invalid', http_status: 200, message: expect.stringContaining('reused a grant_id') as string });
    // Used at another destination only: a new id here, so it passes (and the check claims nothing).
    expect((await check(other.id)).json()).toMatchObject({ result: 'pass', mode: 'granted' });
    expect((await check(other.id)).json()).toMatchObject({ result: 'pass', mode: 'granted' });
  });

  it('fails with unreachable when nothing listens', async () => {
    const closed = await startHttpsReceiver(stand.pki.issue(['localhost'], ['127.0.0.1']), () => undefined);
    const url = `https://127.0.0.1:${closed.port}/grant`;
    await closed.close();
    const d = await destination(url);
    expect((await check(d.id)).json()).toMatchObject({ result: 'fail', mode: 'deferred', failure: 'unreachable', http_status: null });
  });

  it('answers 404 for another organization and 409 for a revoked destination', async () => {
    const d = await destination();
    const other = await t.createTenant();
    const res = await t.app.inject({ method: 'POST', url: `/v1/destinations/${d.id}/check`, headers: other.auth });
    expect([res.statusCode, errorCode(res)]).toEqual([404, 'not_found']);
    await t.app.inject({ method: 'DELETE', url: `/v1/destinations/${d.id}`, headers: tenant.auth });
    const revoked = await check(d.id);
    expect([revoked.statusCode, errorCode(revoked)]).toEqual([409, 'conflict']);
  });
});

describe('POST /v1/destinations/{id}/check, a provider address the cloud may not reach', () => {
  /** Host names the injected resolver knows; any other does not exist. */
  const dns: Record<string, string> = { 'localhost.grants.test': '127.0.0.1', 'internal.grants.test': '10.1.2.3' };

  it('says in words whether the name is forbidden or does not exist, without addresses or resolver text; the log has the detail', async () => {
    const logs: Record<string, unknown>[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        logs.push(JSON.parse(chunk.toString()) as Record<string, unknown>);
        done();
      },
    });
    const logger = pino({ level: 'info' }, sink);
    const secrets = SecretBox.random();
    const egress = new EgressClient({ scheduler: systemScheduler,
      resolve: async (hostname) => {
        const address = dns[hostname];
        if (address === undefined) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' });
        return [{ address, family: 4 }];
      },
    });
    // The real relay on a resolver the test controls (the app's own would ask the system's DNS).
    let relay: GrantRelay | undefined;
    const cloud = await startTestCloud({ deps: { logger, secrets, relay: { forward: (d, e) => relay!.forward(d, e) } } });
    try {
      relay = new GrantRelay({ store: cloud.store, egress, secrets, clock: cloud.clock, logger });
      const owner = await cloud.createTenant();
      const checkOf = async (url: string) => {
        const created = await cloud.app.inject({ method: 'POST', url: '/v1/destinations', headers: owner.auth, payload: { type: 'external', url } });
        expect(created.statusCode, created.payload).toBe(201);
        const res = await cloud.app.inject({ method: 'POST', url: `/v1/destinations/${created.json<{ id: string }>().id}/check`, headers: owner.auth });
        expect(res.statusCode, res.payload).toBe(200);
        return res.json<{ result: string; failure: string; message: string }>();
      };

      const loopback = await checkOf('https://localhost.grants.test/grant');
      const internal = await checkOf('https://internal.grants.test/grant');
      const missing = await checkOf('https://missing.grants.test/grant');
      // The spec's failure value stays `unreachable` for both kinds; the message tells them apart.
      for (const c of [loopback, internal, missing]) expect(c).toMatchObject({ result: 'fail', failure: 'unreachable' });
      expect(loopback.message).toBe('forbidden_address: localhost.grants.test resolves to an address that is not public');
      expect(internal.message).toBe('forbidden_address: internal.grants.test resolves to an address that is not public');
      expect(missing.message).toBe('unresolvable: missing.grants.test does not exist: no such host name');
      for (const c of [loopback, internal, missing]) expect(c.message).not.toMatch(/\d+\.\d+\.\d+\.\d+|ENOTFOUND|getaddrinfo/);

      // The operator's log keeps what the resolver said.
      const detail = logs.filter((l) => l.msg === 'grant provider not reachable').map((l) => l.error);
      expect(detail).toEqual([
        'localhost.grants.test resolves to 127.0.0.1 (loopback)',
        'internal.grants.test resolves to 10.1.2.3 (private)',
        'cannot resolve missing.grants.test: getaddrinfo ENOTFOUND missing.grants.test',
      ]);
    } finally {
      await cloud.close();
      await egress.close();
    }
  });
});
