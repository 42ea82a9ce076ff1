import type { ServerResponse } from 'node:http';
import type { LightMyRequestResponse } from 'fastify';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ReadLinksSchema, ReadRequestEnvelopeSchema, type EpisodeReport, type ReadRequestEnvelope, type ReplicaState, type Usage } from '@fleet/protocol';
import type { ReceivedRequest } from '../../egress/test-https.js';
import { sendJson, useProviderStandIn } from '../../egress/test-provider.js';
import { bearer, dayOf, errorCode, errorDetails, startTestCloud, testReport, type TestCloud, type TestTenant } from '../../test-support.js';
import { READ_LINKS_LIMIT } from './read-links.js';

/**
 * POST /v1/episodes/{id}/read-links through the whole pipeline (key, scope, validation,
 * Idempotency-Key, meter, rate limit) on the real store, with an HTTPS provider stand-in.
 */

const BUCKET = 'https://bucket.example';
const SIG = 'X-Amz-Signature=feedfacefeedfacefeedface';
/** The route's own bucket here: more calls than any other test makes. */
const LIMIT = 12;

const stand = useProviderStandIn();
let t: TestCloud;
let tenant: TestTenant;
let served = 0;
beforeEach(async () => {
  t = await startTestCloud({ config: { egressAllowLoopback: true, egressCaFile: stand.pki.caFile, readOrigins: [BUCKET], readLinksPerMinutePerOrg: LIMIT } });
  tenant = await t.createTenant();
  // Fresh links each time: a serial number in every URL.
  stand.answer = (req, res) => sendJson(res, 200, linksFor(envOf(req)));
});
afterEach(async () => {
  await t.close();
});
const envOf = (req: ReceivedRequest): ReadRequestEnvelope => ReadRequestEnvelopeSchema.parse(JSON.parse(req.body));
const linksFor = (env: ReadRequestEnvelope) => {
  served += 1;
  return {
    files: env.request.files.map((f) => ({ path: f.path, url: `${BUCKET}/${env.request.object_key ?? ''}${f.path}?n=${served}&${SIG}`, expires_at: new Date(t.clock.now() + 900_000).toISOString() })),
  };
};

const FILES = [
  { path: 'episode.mcap', size_bytes: 4096, sha256: 'a'.repeat(64) },
  { path: 'meta/episode.json', size_bytes: 120, sha256: 'b'.repeat(64) },
];

async function episode(over: Partial<EpisodeReport> = {}, orgId = tenant.org.id): Promise<EpisodeReport> {
  const report = testReport({ manifest: { files: FILES, total_bytes: 4216 }, ...over });
  expect(await t.store.episodes.ingest([{ orgId, robotId: 'rbt_1', report, reportedAt: t.clock.now() }])).toEqual(['inserted']);
  return report;
}

/** A destination of `orgId` on the provider stand-in. */
async function destination(auth = tenant.auth): Promise<string> {
  const res = await t.app.inject({ method: 'POST', url: '/v1/destinations', headers: auth, payload: { type: 'external', url: `https://127.0.0.1:${stand.provider.port}/grant` } });
  expect(res.statusCode, res.payload).toBe(201);
  return res.json<{ id: string }>().id;
}

/** A replica as the robot reports it, through the sync store. */
async function replica(episodeId: string, destinationId: string, state: ReplicaState, error: string | null = null): Promise<void> {
  const report = { episode_id: episodeId, destination_id: destinationId, grant_id: `grt_${destinationId}`, state, error, object_key: `org/${episodeId}/`, at: t.clock.now() };
  expect(await t.store.sync.applyReplicaReport('rbt_1', report, t.clock.now())).toBe('applied');
}

function readLinks(id: string, body?: unknown, headers: Record<string, string> = tenant.auth): Promise<LightMyRequestResponse> {
  return t.app.inject({ method: 'POST', url: `/v1/episodes/${id}/read-links`, headers, ...(body === undefined ? {} : { payload: body as object }) });
}

async function meter(): Promise<number> {
  const res = await t.app.inject({ method: 'GET', url: '/v1/usage', headers: tenant.auth });
  return res.json<Usage>().usage.find((u) => u.day === dayOf(t.clock) && u.meter === 'episodes.read_links')?.count ?? 0;
}

describe('POST /v1/episodes/{id}/read-links', () => {
  it('answers the links of a verified replica, with or without a body, and meters each call', async () => {
    const ep = await episode();
    const d = await destination();
    await replica(ep.id, d, 'verified');
    const res = await readLinks(ep.id);
    expect(res.statusCode, res.payload).toBe(200);
    const body = ReadLinksSchema.parse(res.json());
    expect(body.episode_id).toBe(ep.id);
    expect(body.destination_id).toBe(d);
    expect(body.files.map((f) => [f.path, f.size_bytes, f.sha256, f.destination_id])).toEqual(FILES.map((f) => [f.path, f.size_bytes, f.sha256, d]));
    expect(body.files[0]!.url).toMatch(new RegExp(`^${BUCKET}/org/${ep.id}/episode\\.mcap\\?`));
    expect(envOf(stand.provider.requests.at(-1)!).request).toMatchObject({ destination_id: d, object_key: `org/${ep.id}/`, expires_in_s: 900 });

    const named = await readLinks(ep.id, { destination_id: d, files: ['meta/episode.json'] });
    expect(named.statusCode, named.payload).toBe(200);
    expect(named.json<{ files: { path: string }[] }>().files.map((f) => f.path)).toEqual(['meta/episode.json']);
    expect(await meter()).toBe(2);
    // A refused call is not metered.
    stand.answer = (_req, res) => sendJson(res, 200, { refused: { message: 'no' } });
    expect((await readLinks(ep.id)).statusCode).toBe(403);
    expect(await meter()).toBe(2);
  });

  it('never replays an answer for an Idempotency-Key: a retry gets fresh links from the provider', async () => {
    const ep = await episode();
    const d = await destination();
    await replica(ep.id, d, 'verified');
    const headers = { ...tenant.auth, 'idempotency-key': 'renew-1' };
    const before = stand.provider.requests.length;
    const first = await readLinks(ep.id, {}, headers);
    const second = await readLinks(ep.id, {}, headers);
    expect([first.statusCode, second.statusCode]).toEqual([200, 200]);
    expect(second.headers['idempotent-replayed']).toBeUndefined();
    expect(stand.provider.requests.length).toBe(before + 2);
    const url = (r: LightMyRequestResponse) => r.json<{ files: { url: string }[] }>().files[0]!.url;
    expect(url(second)).not.toBe(url(first));
    // Nor an error: a provider fault now, links again once it recovers, on the same key.
    stand.answer = (_req, res) => sendJson(res, 500, {});
    expect([(await readLinks(ep.id, {}, headers)).statusCode]).toEqual([502]);
    stand.answer = (req, res) => sendJson(res, 200, linksFor(envOf(req)));
    expect((await readLinks(ep.id, {}, headers)).statusCode).toBe(200);
    // The key may still name another request body (nothing was stored to compare against).
    expect((await readLinks(ep.id, { files: ['episode.mcap'] }, headers)).statusCode).toBe(200);
  });

  it("answers 404 for another organization's episode or destination, without asking any provider", async () => {
    const ep = await episode();
    const d = await destination();
    await replica(ep.id, d, 'verified');
    const other = await t.createTenant();
    const otherDestination = await destination(other.auth);
    const before = stand.provider.requests.length;
    const foreign = await readLinks(ep.id, undefined, other.auth);
    expect([foreign.statusCode, errorCode(foreign)]).toEqual([404, 'not_found']);
    const missing = await readLinks('ep_nope');
    expect([missing.statusCode, errorCode(missing)]).toEqual([404, 'not_found']);
    const foreignDestination = await readLinks(ep.id, { destination_id: otherDestination });
    expect([foreignDestination.statusCode, errorCode(foreignDestination)]).toEqual([404, 'not_found']);
    expect(stand.provider.requests.length).toBe(before);
  });

  it('answers 409 replica_not_verified with the replicas, so a caller can say where the episode is', async () => {
    const onRobot = await episode();
    const none = await readLinks(onRobot.id);
    expect([none.statusCode, errorCode(none), errorDetails(none)]).toEqual([409, 'replica_not_verified', { replicas: [] }]);

    const [a, b] = [await destination(), await destination()];
    const syncing = await episode();
    await replica(syncing.id, a, 'syncing');
    await replica(syncing.id, b, 'synced', 'checksum_mismatch: episode.mcap differs');
    const res = await readLinks(syncing.id);
    expect([res.statusCode, errorCode(res)]).toEqual([409, 'replica_not_verified']);
    expect(errorDetails(res)?.replicas).toEqual(
      expect.arrayContaining([
        { destination_id: a, state: 'syncing', error: null },
        { destination_id: b, state: 'synced', error: 'checksum_mismatch: episode.mcap differs' },
      ]),
    );

    // Verified at one destination, not at the one named.
    await replica(syncing.id, a, 'verified');
    expect((await readLinks(syncing.id)).statusCode).toBe(200);
    const named = await readLinks(syncing.id, { destination_id: b });
    expect([named.statusCode, errorCode(named)]).toEqual([409, 'replica_not_verified']);
    // A revoked destination is not read from.
    expect((await t.app.inject({ method: 'DELETE', url: `/v1/destinations/${a}`, headers: tenant.auth })).statusCode).toBe(204);
    expect(errorCode(await readLinks(syncing.id))).toBe('replica_not_verified');
    const revoked = await readLinks(syncing.id, { destination_id: a });
    expect([revoked.statusCode, errorCode(revoked)]).toEqual([409, 'conflict']);
  });

  it('needs data:read and the data.metadata entitlement', async () => {
    const ep = await episode();
    const d = await destination();
    await replica(ep.id, d, 'verified');
    const fleetOnly = await t.createKey(tenant.org, ['fleet:read']);
    const refused = await readLinks(ep.id, undefined, bearer(fleetOnly.key));
    expect([refused.statusCode, errorCode(refused)]).toEqual([403, 'insufficient_scope']);
    const reader = await t.createKey(tenant.org, ['data:read']);
    expect((await readLinks(ep.id, undefined, bearer(reader.key))).statusCode).toBe(200);
    expect((await readLinks(ep.id, undefined, {})).statusCode).toBe(401);
  });

  it.each<[string, unknown, string, string]>([
    ['an unknown field', { destination: 'x' }, '', 'unrecognized_keys'],
    ['an empty files list', { files: [] }, '/files', 'too_small'],
    ['65 files', { files: Array.from({ length: 65 }, (_, i) => `f${i}`) }, '/files', 'too_big'],
    ['a path outside the episode', { files: ['../secret'] }, '/files/0', 'custom'],
    ['a path not in the manifest', { files: ['episode.mcap', 'other.bin'] }, '/files/1', 'unknown_file'],
    ['a path twice', { files: ['episode.mcap', 'episode.mcap'] }, '/files/1', 'duplicate_file'],
    ['a body that is not an object', ['episode.mcap'], '', 'invalid_type'],
  ])('refuses %s with 400 validation_failed, before the provider', async (_name, body, path, code) => {
    const ep = await episode();
    const d = await destination();
    await replica(ep.id, d, 'verified');
    const before = stand.provider.requests.length;
    const res = await readLinks(ep.id, body);
    expect([res.statusCode, errorCode(res)], res.payload).toEqual([400, 'validation_failed']);
    expect((errorDetails(res)?.issues as { path: string; code: string }[])[0]).toMatchObject({ location: 'body', path, code });
    expect(stand.provider.requests.length).toBe(before);
  });

  it('answers every provider fault with its documented code, never 500', async () => {
    const ep = await episode();
    const d = await destination();
    await replica(ep.id, d, 'verified');
    const cases: [(req: ReceivedRequest, res: ServerResponse) => void, number, string, string | undefined][] = [
      [(_q, res) => sendJson(res, 501, { error: { code: 'not_implemented' } }), 501, 'read_links_unsupported', undefined],
      [(_q, res) => sendJson(res, 404, 'not found'), 501, 'read_links_unsupported', undefined],
      [(_q, res) => sendJson(res, 200, { refused: { message: 'this bucket is archived' } }), 403, 'read_links_refused', undefined],
      [(_q, res) => sendJson(res, 500, { error: 'boom' }), 502, 'provider_failed', 'http_error'],
      [(_q, res) => sendJson(res, 200, 'not json'), 502, 'provider_failed', 'invalid_json'],
      [(_q, res) => sendJson(res, 200, { files: [{ path: 'episode.mcap', url: `${BUCKET}/x`, expires_at: new Date(t.clock.now() + 1000).toISOString() }] }), 502, 'provider_failed', 'schema_invalid'],
      [(q, res) => sendJson(res, 200, { files: envOf(q).request.files.map((f) => ({ path: f.path, url: `https://elsewhere.example/x?${SIG}`, expires_at: new Date(t.clock.now() + 1000).toISOString() })) }), 502, 'read_origin_not_allowed', undefined],
    ];
    for (const [handler, status, code, failure] of cases) {
      stand.answer = handler;
      const res = await readLinks(ep.id);
      expect([res.statusCode, errorCode(res), errorDetails(res)?.failure], res.payload).toEqual([status, code, failure]);
      expect(res.payload).not.toContain(SIG);
    }
  });

  it(`has a bucket of its own per organization: past it, 429 rate_limited naming ${READ_LINKS_LIMIT}`, async () => {
    const ep = await episode();
    const d = await destination();
    await replica(ep.id, d, 'verified');
    for (let i = 0; i < LIMIT; i++) expect((await readLinks(ep.id)).statusCode).toBe(200);
    const limited = await readLinks(ep.id);
    expect([limited.statusCode, errorCode(limited)]).toEqual([429, 'rate_limited']);
    expect(errorDetails(limited)).toMatchObject({ limit: READ_LINKS_LIMIT, max: LIMIT });
    // Another organization has its own; other routes of this one are not limited by it.
    expect((await t.app.inject({ method: 'GET', url: `/v1/episodes/${ep.id}`, headers: tenant.auth })).statusCode).toBe(200);
    const other = await t.createTenant();
    const otherEp = await episode({}, other.org.id);
    expect(errorCode(await readLinks(otherEp.id, undefined, other.auth))).toBe('replica_not_verified');
  });

  it('lets the console page read from the read origins (its CSP)', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/console/' });
    const csp = String(res.headers['content-security-policy']);
    expect(csp).toContain(`connect-src 'self' ${BUCKET}`);
    expect(csp).toContain(`img-src 'self' data: blob: ${BUCKET}`);
    expect(csp).toContain("script-src 'self' 'wasm-unsafe-eval'");
  });
});
