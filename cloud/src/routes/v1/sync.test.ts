/** /v1/destinations, /v1/routing-rules and /v1/sync-health through the HTTP layer. */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DAY, HOUR, SyncHealthRowSchema, type CreatedDestination, type EpisodeReport, type RoutingRule } from '@fleet/protocol';
import { bearer, errorCode, errorDetails, startTestCloud, testReport, type TestCloud, type TestTenant } from '../../test-support.js';

let t: TestCloud;
let tenant: TestTenant;

beforeEach(async () => {
  t = await startTestCloud({ config: { egressAllowLoopback: true } });
  tenant = await t.createTenant();
});
afterEach(async () => {
  await t.close();
});

type Json = Record<string, unknown>;
const call = (method: 'GET' | 'POST' | 'PUT' | 'DELETE', url: string, payload?: unknown, auth = tenant.auth) =>
  t.app.inject({ method, url, headers: auth, ...(payload === undefined ? {} : { payload: payload as object }) });

async function createDestination(body: Json = {}, auth = tenant.auth): Promise<CreatedDestination> {
  const res = await call('POST', '/v1/destinations', { type: 'external', url: 'https://grants.example.com/v1/grant', ...body }, auth);
  expect(res.statusCode, res.payload).toBe(201);
  return res.json<CreatedDestination>();
}

async function createRule(destinationId: string, match: Json = {}): Promise<RoutingRule> {
  const res = await call('POST', '/v1/routing-rules', { destination_id: destinationId, match });
  expect(res.statusCode, res.payload).toBe(201);
  return res.json<RoutingRule>();
}

async function ingest(reports: EpisodeReport[], orgId = tenant.org.id, robotId = 'rbt_1'): Promise<void> {
  await t.store.episodes.ingest(reports.map((report) => ({ orgId, robotId, report, reportedAt: t.clock.now() })));
}

/** The robot's assignments (routes to live destinations, none verified here), in episode order. */
const routes = async () => (await t.store.sync.pendingAssignments('rbt_1')).map((r) => ({ episode: r.episodeId, dest: r.destinationId }));

describe('destinations', () => {
  it('shows the dsec_ secret once, seals it at rest, never lists it', async () => {
    const created = await createDestination({ retention: 'until_all_verified_plus_72h' });
    expect(created).toEqual<Json>({
      id: expect.stringMatching(/^dst_/) as unknown,
      type: 'external',
      url: 'https://grants.example.com/v1/grant',
      retention: 'until_all_verified_plus_72h',
      created_at: '2026-01-01T00:00:00.000Z',
      revoked_at: null,
      last_forward_at: null,
      forwards_24h: 0,
      deferrals_24h: 0,
      last_deferral: null,
      secret: expect.stringMatching(/^dsec_[A-Za-z0-9_-]{43}$/) as unknown,
    });
    const list = await call('GET', '/v1/destinations');
    expect(list.statusCode).toBe(200);
    const { secret, ...listed } = created;
    expect(list.json()).toEqual({ destinations: [listed] });
    expect(list.payload).not.toContain(secret);
    const stored = (await t.store.sync.getDestination(tenant.org.id, created.id))!.secretSealed;
    expect(stored).not.toContain(secret);
    expect((await createDestination()).retention).toBe('keep');
  });

  it.each([
    ['http:// url', { type: 'external', url: 'http://grants.example.com/x' }],
    ['not a url', { type: 'external', url: 'grants' }],
    ['type s3', { type: 's3', url: 'https://grants.example.com/x' }],
    ['missing type', { url: 'https://grants.example.com/x' }],
    ['unknown retention', { type: 'external', url: 'https://grants.example.com/x', retention: 'forever' }],
    ['unknown field', { type: 'external', url: 'https://grants.example.com/x', secret: 'dsec_x' }],
    ['credentials in the URL', { type: 'external', url: 'https://u:p@grants.example.com/x' }],
    ['private literal', { type: 'external', url: 'https://10.1.2.3/x' }],
    ['metadata literal', { type: 'external', url: 'https://169.254.169.254/x' }],
  ])('%s -> 400 validation_failed with the issue', async (_name, body) => {
    const res = await call('POST', '/v1/destinations', body);
    expect(res.statusCode, res.payload).toBe(400);
    expect(errorCode(res)).toBe('validation_failed');
    expect((errorDetails(res)!.issues as { location: string }[])[0]!.location).toBe('body');
    expect((await call('GET', '/v1/destinations')).json()).toEqual({ destinations: [] });
  });

  it('health fields count the recorded forwards of the last 24 hours on the clock', async () => {
    const d = (await createDestination()).id;
    await t.store.sync.recordForward(tenant.org.id, d, t.clock.now(), { kind: 'granted', grantId: 'g1' });
    t.clock.advance(HOUR);
    await t.store.sync.recordForward(tenant.org.id, d, t.clock.now(), { kind: 'deferred', reason: 'timeout' });
    const listed = async () => ((await call('GET', '/v1/destinations')).json<{ destinations: Json[] }>()).destinations[0];
    expect(await listed()).toMatchObject({ last_forward_at: '2026-01-01T01:00:00.000Z', forwards_24h: 2, deferrals_24h: 1 });
    t.clock.advance(DAY - HOUR);
    expect(await listed()).toMatchObject({ forwards_24h: 1, deferrals_24h: 1 });
    t.clock.advance(HOUR);
    expect(await listed()).toMatchObject({ last_forward_at: '2026-01-01T01:00:00.000Z', forwards_24h: 0, deferrals_24h: 0 });
  });

  it('revokes (204, twice too); an unknown id or another org\'s is 404', async () => {
    const d = (await createDestination()).id;
    const other = await t.createTenant();
    expect((await call('DELETE', `/v1/destinations/${d}`, undefined, other.auth)).statusCode).toBe(404);
    expect(errorCode(await call('DELETE', '/v1/destinations/dst_nope'))).toBe('not_found');
    t.clock.advance(1000);
    expect((await call('DELETE', `/v1/destinations/${d}`)).statusCode).toBe(204);
    t.clock.advance(1000);
    expect((await call('DELETE', `/v1/destinations/${d}`)).statusCode).toBe(204);
    expect(((await call('GET', '/v1/destinations')).json<{ destinations: Json[] }>()).destinations[0]!.revoked_at).toBe('2026-01-01T00:00:01.000Z');
    expect((await call('GET', '/v1/destinations', undefined, other.auth)).json()).toEqual({ destinations: [] });
  });

  it('needs the admin scope', async () => {
    const { key } = await t.createKey(tenant.org, ['data:read', 'data:write']);
    expect(errorCode(await call('GET', '/v1/destinations', undefined, bearer(key)))).toBe('insufficient_scope');
    expect(errorCode(await call('GET', '/v1/routing-rules', undefined, bearer(key)))).toBe('insufficient_scope');
  });
});

describe('routing rules', () => {
  it('creates (string values as one-element arrays), lists in order, deletes, reorders', async () => {
    const d = (await createDestination()).id;
    const r1 = await createRule(d, { robot_id: 'rbt_1', has_autonomous: 'true' });
    expect(r1).toEqual<Json>({ id: expect.stringMatching(/^rr_/) as unknown, destination_id: d, match: { robot_id: ['rbt_1'], has_autonomous: ['true'] }, position: 1, created_at: '2026-01-01T00:00:00.000Z' });
    const r2 = await createRule(d, { episode_seq: ['1', '2'], outcome: 'failure' });
    const r3 = await createRule(d, {});
    const ids = async () => ((await call('GET', '/v1/routing-rules')).json<{ routing_rules: Json[] }>()).routing_rules.map((r) => `${r.id as string}@${r.position as number}`);
    expect(await ids()).toEqual([`${r1.id}@1`, `${r2.id}@2`, `${r3.id}@3`]);

    const order = await call('PUT', '/v1/routing-rules/order', { rule_ids: [r3.id, r1.id, r2.id] });
    expect(order.statusCode, order.payload).toBe(200);
    expect(order.json<{ routing_rules: Json[] }>().routing_rules.map((r) => r.id)).toEqual([r3.id, r1.id, r2.id]);

    for (const bad of [[r3.id, r1.id], [r3.id, r1.id, r2.id, r2.id], [r3.id, r1.id, 'rr_other'], []]) {
      const res = await call('PUT', '/v1/routing-rules/order', { rule_ids: bad });
      expect(res.statusCode).toBe(400);
      expect(errorDetails(res)!.issues).toEqual([expect.objectContaining({ location: 'body', path: '/rule_ids', code: 'not_a_permutation' })]);
    }
    expect((await call('DELETE', `/v1/routing-rules/${r1.id}`)).statusCode).toBe(204);
    expect(errorCode(await call('DELETE', `/v1/routing-rules/${r1.id}`))).toBe('not_found');
    expect(await ids()).toEqual([`${r3.id}@1`, `${r2.id}@2`]);
  });

  it.each([
    ['unknown match field', { match: { colour: 'red' } }, '/match'],
    ['number value', { match: { episode_seq: 3 } }, '/match/episode_seq'],
    ['boolean value', { match: { has_autonomous: true } }, '/match/has_autonomous'],
    ['empty array', { match: { robot_id: [] } }, '/match/robot_id'],
    ['empty string', { match: { robot_id: '' } }, '/match/robot_id'],
    ['has_autonomous not true/false', { match: { has_autonomous: 'yes' } }, '/match/has_autonomous'],
    ['episode_seq not a number', { match: { episode_seq: 'seven' } }, '/match/episode_seq'],
    ['unknown outcome', { match: { outcome: 'maybe' } }, '/match/outcome'],
    ['too many values', { match: { robot_id: Array.from({ length: 101 }, (_v, i) => `r${i}`) } }, '/match/robot_id'],
    ['match not an object', { match: 'all' }, '/match'],
    ['missing match', {}, ''],
  ])('%s -> 400 validation_failed', async (_name, body, path) => {
    const d = (await createDestination()).id;
    const res = await call('POST', '/v1/routing-rules', { destination_id: d, ...body });
    expect(res.statusCode, res.payload).toBe(400);
    expect(errorCode(res)).toBe('validation_failed');
    const issues = errorDetails(res)!.issues as { path: string }[];
    expect(issues.some((i) => i.path.startsWith(path)), JSON.stringify(issues)).toBe(true);
  });

  it('an unknown or another org\'s destination is 404; a revoked one is 400', async () => {
    const other = await t.createTenant();
    const foreign = (await createDestination({}, other.auth)).id;
    expect(errorCode(await call('POST', '/v1/routing-rules', { destination_id: foreign, match: {} }))).toBe('not_found');
    expect(errorCode(await call('POST', '/v1/routing-rules', { destination_id: 'dst_nope', match: {} }))).toBe('not_found');
    const d = (await createDestination()).id;
    await call('DELETE', `/v1/destinations/${d}`);
    const res = await call('POST', '/v1/routing-rules', { destination_id: d, match: {} });
    expect(res.statusCode).toBe(400);
    expect(errorDetails(res)!.issues).toEqual([expect.objectContaining({ path: '/destination_id', code: 'destination_revoked' })]);
    // Another org's rules are invisible and cannot be deleted.
    const mine = await createRule((await createDestination()).id);
    expect((await call('DELETE', `/v1/routing-rules/${mine.id}`, undefined, other.auth)).statusCode).toBe(404);
    expect((await call('GET', '/v1/routing-rules', undefined, other.auth)).json()).toEqual({ routing_rules: [] });
  });

  it('route the backlog: a destination alone takes everything; a second one stops new routing until a rule; a rule routes the rest', async () => {
    const [a, b] = [testReport({ task_id: 'pick' }), testReport({ task_id: 'place' })];
    await ingest([a, b]);
    const d1 = (await createDestination()).id;
    await t.cloud.sync.idle();
    expect(await routes()).toEqual([{ episode: a.id, dest: d1 }, { episode: b.id, dest: d1 }]);

    const d2 = (await createDestination()).id;
    const [c, x] = [testReport({ task_id: 'place' }), testReport({ outcome: 'discarded' })];
    await ingest([c, x]);
    await t.cloud.sync.idle();
    expect(await routes()).toHaveLength(2);

    await createRule(d2, { task_id: ['place'] });
    await t.cloud.sync.idle();
    expect(await routes()).toEqual([{ episode: a.id, dest: d1 }, { episode: b.id, dest: d1 }, { episode: c.id, dest: d2 }]);

    // Revoking d2 drops its pending route; its rule stops matching, so c stays local.
    await call('DELETE', `/v1/destinations/${d2}`);
    await t.cloud.sync.idle();
    expect(await routes()).toEqual([{ episode: a.id, dest: d1 }, { episode: b.id, dest: d1 }]);
    // A rule for d1 takes it again.
    await createRule(d1, {});
    await t.cloud.sync.idle();
    expect(await routes()).toEqual([{ episode: a.id, dest: d1 }, { episode: b.id, dest: d1 }, { episode: c.id, dest: d1 }]);
  });
});

describe('GET /v1/sync-health/robots', () => {
  it('one row per robot with the counts; 72 h on the clock; pressure once reported; data:read suffices', async () => {
    const d = (await createDestination()).id;
    const [a, b] = [testReport({ manifest: { files: [], total_bytes: 40 } }), testReport({ manifest: { files: [], total_bytes: 2 } })];
    await ingest([a, b]);
    await t.store.sync.applyReplicaReport('rbt_1', { episode_id: a.id, destination_id: d, grant_id: 'g', state: 'verified', error: null, object_key: null, at: 1 }, t.clock.now());
    await t.store.sync.notePressure('rbt_1', { free_bytes: 5, backlog_bytes: 2, hours_to_full: null }, t.clock.now());
    const { key } = await t.createKey(tenant.org, ['data:read']);
    const get = async () => (await call('GET', '/v1/sync-health/robots', undefined, bearer(key))).json<{ robots: Json[] }>();
    const body = await get();
    expect(body).toEqual({
      robots: [
        {
          robot_id: 'rbt_1',
          episodes_reported: 2,
          unverified: 1,
          unverified_over_72h: 0,
          bytes_unverified: 2,
          local_missing: 0,
          pressure: { free_bytes: 5, backlog_bytes: 2, hours_to_full: null, reported_at: '2026-01-01T00:00:00.000Z' },
        },
      ],
    });
    expect(SyncHealthRowSchema.safeParse(body.robots[0]).success).toBe(true);
    t.clock.advance(72 * HOUR + 1);
    expect((await get()).robots[0]).toMatchObject({ unverified_over_72h: 1 });
    const other = await t.createTenant();
    expect((await call('GET', '/v1/sync-health/robots', undefined, other.auth)).json()).toEqual({ robots: [] });
  });
});
