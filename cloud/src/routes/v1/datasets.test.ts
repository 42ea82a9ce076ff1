import type { LightMyRequestResponse } from 'fastify';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { iso, type Dataset, type Episode, type EpisodeReport, type EpisodeWithLocations, type ReplicaState, type Scope, type Usage } from '@fleet/protocol';
import { encodeCursor } from '../cursor.js';
import { bearer, dayOf, errorCode, errorDetails, startTestCloud, testReport, type TestCloud, type TestTenant } from '../../test-support.js';
import type { IngestItem } from '../../store/index.js';

const T0 = Date.parse('2026-01-01T00:00:00Z');
const ROBOT = 'rbt_one';

let t: TestCloud;
let tenant: TestTenant;

beforeEach(async () => {
  t = await startTestCloud();
  tenant = await t.createTenant();
});
afterEach(async () => {
  await t.close();
});

type Auth = { authorization: string };

const report = testReport;

async function ingest(reports: EpisodeReport[], opts: { orgId?: string } = {}): Promise<EpisodeReport[]> {
  const items: IngestItem[] = reports.map((r) => ({ orgId: opts.orgId ?? tenant.org.id, robotId: ROBOT, report: r, reportedAt: t.clock.now() }));
  expect(await t.store.episodes.ingest(items)).toEqual(reports.map(() => 'inserted'));
  return reports;
}

/** A replica as the robot reports it (through the sync store, so on either engine), received at T0 + 60 s. */
async function addReplica(episodeId: string, destinationId: string, state: ReplicaState, objectKey: string | null = `obj/${episodeId}`): Promise<void> {
  const ep = (await t.store.episodes.get(tenant.org.id, episodeId))!;
  if (!(await t.store.sync.getDestination(ep.orgId, destinationId))) {
    await t.store.sync.createDestination({ id: destinationId, orgId: ep.orgId, type: 'external', url: 'https://grants.example.com', secretSealed: 'x', retention: 'keep', createdAt: T0 });
  }
  const report = { episode_id: episodeId, destination_id: destinationId, grant_id: `grt_${destinationId}`, state, error: null, object_key: objectKey, at: T0 };
  expect(await t.store.sync.applyReplicaReport(ep.robotId, report, T0 + 60_000)).toBe('applied');
}

function get(url: string, auth: Auth = tenant.auth): Promise<LightMyRequestResponse> {
  return t.app.inject({ method: 'GET', url, headers: auth });
}

function post(url: string, body?: unknown, auth: Auth = tenant.auth): Promise<LightMyRequestResponse> {
  return t.app.inject({ method: 'POST', url, headers: auth, ...(body === undefined ? {} : { payload: body as object }) });
}

function patch(url: string, body: unknown, auth: Auth = tenant.auth): Promise<LightMyRequestResponse> {
  return t.app.inject({ method: 'PATCH', url, headers: auth, payload: body as object });
}

async function createDataset(filter: Record<string, unknown>, over: Record<string, unknown> = {}, auth: Auth = tenant.auth): Promise<Dataset> {
  const res = await post('/v1/datasets', { name: 'ds', filter, ...over }, auth);
  expect(res.statusCode, res.payload).toBe(201);
  return res.json<Dataset>();
}

interface SnapshotResult {
  id: string;
  snapshot_at: string;
  episode_count: number;
}

async function snapshot(id: string): Promise<SnapshotResult> {
  const res = await post(`/v1/datasets/${id}/snapshot`);
  expect(res.statusCode, res.payload).toBe(200);
  return res.json<SnapshotResult>();
}

interface ManifestHeader {
  dataset_id: string;
  name: string;
  filter: Record<string, string>;
  snapshot_at: string;
  episode_count: number;
}

interface ManifestPage {
  header: ManifestHeader | undefined;
  members: EpisodeWithLocations[];
  cursor: string | undefined;
}

function parsePage(res: LightMyRequestResponse): ManifestPage {
  expect(res.statusCode, res.payload).toBe(200);
  expect(res.headers['content-type']).toMatch(/^application\/x-ndjson/);
  const lines = res.payload
    .split('\n')
    .filter((l) => l.length > 0)
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  const headers = lines.filter((l) => 'dataset_id' in l);
  expect(headers.length).toBeLessThanOrEqual(1);
  if (headers.length === 1) expect(lines[0]).toBe(headers[0]);
  return {
    header: headers[0] as ManifestHeader | undefined,
    members: lines.filter((l) => !('dataset_id' in l)) as unknown as EpisodeWithLocations[],
    cursor: res.headers['x-next-cursor'] as string | undefined,
  };
}

async function manifestPage(id: string, query: Record<string, string> = {}): Promise<ManifestPage> {
  const qs = new URLSearchParams(query).toString();
  return parsePage(await get(`/v1/datasets/${id}/manifest${qs ? `?${qs}` : ''}`));
}

/** Walks every page; `between` runs after each page. */
async function walkManifest(id: string, limit: number, between?: (page: number) => Promise<void>): Promise<{ pages: ManifestPage[]; ids: string[] }> {
  const pages: ManifestPage[] = [];
  let cursor: string | undefined;
  do {
    const page = await manifestPage(id, { limit: String(limit), ...(cursor === undefined ? {} : { cursor }) });
    pages.push(page);
    cursor = page.cursor;
    if (between) await between(pages.length);
  } while (cursor !== undefined && pages.length < 1000);
  return { pages, ids: pages.flatMap((p) => p.members.map((m) => m.id)) };
}

async function memberIds(id: string): Promise<string[]> {
  return (await walkManifest(id, 5000)).ids;
}

async function usage(auth: Auth = tenant.auth): Promise<Map<string, number>> {
  const res = await get('/v1/usage', auth);
  expect(res.statusCode, res.payload).toBe(200);
  const today = dayOf(t.clock);
  return new Map(res.json<Usage>().usage.filter((u) => u.day === today).map((u) => [u.meter, u.count]));
}

async function keyWith(scopes: Scope[]): Promise<Auth> {
  return bearer((await t.createKey(tenant.org, scopes)).key);
}

function expect400(res: LightMyRequestResponse, label: string): void {
  expect(res.statusCode, `${label}: ${res.payload}`).toBe(400);
  expect(errorCode(res), label).toBe('validation_failed');
}

function issuePaths(res: LightMyRequestResponse): string[] {
  const issues = (errorDetails(res)?.issues ?? []) as { path?: unknown; keys?: string[] }[];
  return issues.flatMap((i) => (i.keys ? i.keys.map((k) => `${String(i.path)}/${k}`) : [String(i.path)]));
}

describe('POST /v1/datasets', () => {
  it('creates a live dataset: every field, snapshot_at and episode_count null, readable by GET', async () => {
    const { key, id: keyId } = await t.createKey(tenant.org, ['data:write', 'data:read']);
    const res = await post('/v1/datasets', { name: 'pick and place', description: 'curated', filter: { task_id: 't1' } }, bearer(key));
    expect(res.statusCode, res.payload).toBe(201);
    const ds = res.json<Dataset>();
    expect(ds.id).toMatch(/^ds_/);
    expect(ds).toEqual({
      id: ds.id,
      name: 'pick and place',
      description: 'curated',
      filter: { task_id: 't1' },
      snapshot_at: null,
      episode_count: null,
      created_by: keyId,
      created_at: iso(T0),
    });
    const got = await get(`/v1/datasets/${ds.id}`);
    expect(got.statusCode).toBe(200);
    expect(got.json()).toEqual(ds);
  });

  it('description is optional (null) and filter may be empty', async () => {
    const ds = await createDataset({});
    expect(ds.description).toBeNull();
    expect(ds.filter).toEqual({});
  });

  it('accepts a name of 1 and of 128 characters and a description of 4096', async () => {
    expect((await createDataset({}, { name: 'a' })).name).toBe('a');
    expect((await createDataset({}, { name: 'n'.repeat(128) })).name).toBe('n'.repeat(128));
    expect((await createDataset({}, { description: 'd'.repeat(4096) })).description).toBe('d'.repeat(4096));
  });

  it.each([
    ['an empty name', { name: '', filter: {} }],
    ['a name of 129 characters', { name: 'n'.repeat(129), filter: {} }],
    ['no name', { filter: {} }],
    ['a name that is not a string', { name: 5, filter: {} }],
    ['a description of 4097 characters', { name: 'x', description: 'd'.repeat(4097), filter: {} }],
    ['no filter', { name: 'x' }],
    ['a filter that is an array', { name: 'x', filter: [] }],
    ['a filter that is a string', { name: 'x', filter: 'task_id=t1' }],
    ['a filter that is null', { name: 'x', filter: null }],
    ['an unknown body field', { name: 'x', filter: {}, colour: 'red' }],
    ['a filter value that is an object', { name: 'x', filter: { task_id: { eq: 't1' } } }],
    ['a filter value that is an array', { name: 'x', filter: { task_id: ['t1'] } }],
    ['a filter value that is null', { name: 'x', filter: { task_id: null } }],
    ['an empty filter value', { name: 'x', filter: { task_id: '' } }],
    ['a bad outcome', { name: 'x', filter: { outcome: 'meh' } }],
    ['a bad from', { name: 'x', filter: { from: 'yesterday' } }],
    ['a bad sync_state', { name: 'x', filter: { sync_state: 'maybe' } }],
    ['a metadata key with nothing after the dot', { name: 'x', filter: { 'metadata.': 'v' } }],
  ])('refuses %s with 400 and creates nothing', async (_label, body) => {
    const res = await post('/v1/datasets', body);
    expect400(res, _label);
    const list = await get('/v1/datasets');
    expect(list.json<{ datasets: Dataset[] }>().datasets).toEqual([]);
  });

  it('refuses an unknown filter key with 400 naming the key', async () => {
    const res = await post('/v1/datasets', { name: 'x', filter: { task_id: 't1', colour: 'red' } });
    expect400(res, 'unknown key');
    const paths = issuePaths(res);
    expect(paths.some((p) => p.includes('colour'))).toBe(true);
    expect(paths.some((p) => p.includes('task_id'))).toBe(false);
  });

  it('names the offending key for a non-scalar filter value', async () => {
    const res = await post('/v1/datasets', { name: 'x', filter: { task_id: 't1', 'metadata.site': { a: 1 } } });
    expect400(res, 'object value');
    expect(issuePaths(res).some((p) => p.includes('metadata.site'))).toBe(true);
  });

  it('stores numbers and booleans as strings, and matches episodes by that string', async () => {
    const ds = await createDataset({ 'metadata.n': 3, 'metadata.flag': true, 'metadata.ratio': 0.5, task_id: 't1' });
    const want = { 'metadata.n': '3', 'metadata.flag': 'true', 'metadata.ratio': '0.5', task_id: 't1' };
    expect(ds.filter).toEqual(want);
    expect((await get(`/v1/datasets/${ds.id}`)).json<Dataset>().filter).toEqual(want);
    const [hit] = await ingest([
      report({ task_id: 't1', metadata: { n: 3, flag: true, ratio: 0.5 } }),
      report({ task_id: 't1', metadata: { n: 4, flag: true, ratio: 0.5 } }),
    ]);
    expect((await snapshot(ds.id)).episode_count).toBe(1);
    expect(await memberIds(ds.id)).toEqual([hit!.id]);
  });
});

describe('scopes, entitlement and meters', () => {
  it('POST needs data:write; GET needs data:read (403 insufficient_scope)', async () => {
    const ds = await createDataset({});
    const reader = await keyWith(['data:read']);
    const writer = await keyWith(['data:write']);

    for (const [url, body] of [
      ['/v1/datasets', { name: 'x', filter: {} }],
      [`/v1/datasets/${ds.id}/snapshot`, undefined],
    ] as const) {
      const res = await post(url, body, reader);
      expect(res.statusCode, url).toBe(403);
      expect(errorCode(res)).toBe('insufficient_scope');
      expect(errorDetails(res)).toMatchObject({ required_scope: 'data:write' });
    }
    expect((await get(`/v1/datasets/${ds.id}`)).json<Dataset>().snapshot_at).toBeNull();

    for (const url of ['/v1/datasets', `/v1/datasets/${ds.id}`, `/v1/datasets/${ds.id}/manifest`, `/v1/datasets/${ds.id}/count`]) {
      const res = await get(url, writer);
      expect(res.statusCode, url).toBe(403);
      expect(errorCode(res)).toBe('insufficient_scope');
      expect(errorDetails(res)).toMatchObject({ required_scope: 'data:read' });
    }

    expect((await post('/v1/datasets', { name: 'w', filter: {} }, writer)).statusCode).toBe(201);
    expect((await post(`/v1/datasets/${ds.id}/snapshot`, undefined, writer)).statusCode).toBe(200);
    for (const url of ['/v1/datasets', `/v1/datasets/${ds.id}`, `/v1/datasets/${ds.id}/manifest`, `/v1/datasets/${ds.id}/count`]) {
      expect((await get(url, reader)).statusCode, url).toBe(200);
    }
  });

  it('every endpoint needs the data.metadata entitlement', async () => {
    const ds = await createDataset({});
    await t.store.orgs.setFeature(tenant.org.id, 'data.metadata', false);
    for (const res of [
      await post('/v1/datasets', { name: 'x', filter: {} }),
      await get('/v1/datasets'),
      await get(`/v1/datasets/${ds.id}`),
      await post(`/v1/datasets/${ds.id}/snapshot`),
      await get(`/v1/datasets/${ds.id}/manifest`),
      await get(`/v1/datasets/${ds.id}/count`),
    ]) {
      expect(res.statusCode, res.payload).toBe(403);
      expect(errorCode(res)).toBe('entitlement_required');
    }
    await t.store.orgs.setFeature(tenant.org.id, 'data.metadata', true);
    expect((await get(`/v1/datasets/${ds.id}`)).json<Dataset>().snapshot_at).toBeNull();
  });

  it('meters each successful call, and no failed one', async () => {
    const a = await createDataset({});
    const b = await createDataset({ task_id: 't' });
    expect400(await post('/v1/datasets', { name: '', filter: {} }), 'bad create');
    expect((await get('/v1/datasets')).statusCode).toBe(200);
    expect((await get(`/v1/datasets/${a.id}`)).statusCode).toBe(200);
    expect((await get(`/v1/datasets/${b.id}`)).statusCode).toBe(200);
    expect((await get('/v1/datasets/ds_unknown')).statusCode).toBe(404);
    expect((await get(`/v1/datasets/${a.id}/manifest`)).statusCode).toBe(409);
    await snapshot(a.id);
    expect((await post(`/v1/datasets/${a.id}/snapshot`)).statusCode).toBe(409);
    expect((await get(`/v1/datasets/${a.id}/manifest`)).statusCode).toBe(200);
    const counts = await usage();
    expect(counts.get('datasets.created')).toBe(2);
    expect(counts.get('datasets.list')).toBe(1);
    expect(counts.get('datasets.get')).toBe(2);
    expect(counts.get('datasets.snapshotted')).toBe(1);
    expect(counts.get('datasets.manifest')).toBe(1);
    const other = await t.createTenant();
    const otherCounts = await usage(other.auth);
    expect([...otherCounts.keys()].filter((k) => k.startsWith('datasets.'))).toEqual([]);
  });
});

describe('live datasets', () => {
  it('stay live as episodes arrive: counts null, manifest 409 conflict', async () => {
    const ds = await createDataset({ task_id: 't1' });
    await ingest([report({ task_id: 't1' }), report({ task_id: 't1' })]);
    const got = (await get(`/v1/datasets/${ds.id}`)).json<Dataset>();
    expect(got.snapshot_at).toBeNull();
    expect(got.episode_count).toBeNull();
    const res = await get(`/v1/datasets/${ds.id}/manifest`);
    expect(res.statusCode).toBe(409);
    expect(errorCode(res)).toBe('conflict');
    const paged = await get(`/v1/datasets/${ds.id}/manifest?limit=1&cursor=${encodeCursor({ p: 1 })}`);
    expect(paged.statusCode).toBe(409);
    expect(errorCode(paged)).toBe('conflict');
  });
});

describe('GET /v1/datasets/{id}/count', () => {
  it('follows a live dataset as episodes arrive, then keeps the pinned count; 404 for an unknown or foreign dataset', async () => {
    const ds = await createDataset({ task_id: 't1' });
    const count = async () => (await get(`/v1/datasets/${ds.id}/count`)).json<{ episode_count: number; live: boolean }>();
    expect(await count()).toMatchObject({ live: true, episode_count: 0 });
    await ingest([report({ task_id: 't1' }), report({ task_id: 't2' }), report({ task_id: 't1' })]);
    expect(await count()).toMatchObject({ live: true, episode_count: 2 });
    await snapshot(ds.id);
    await ingest([report({ task_id: 't1' })]);
    expect(await count()).toMatchObject({ live: false, episode_count: 2 });
    expect((await get('/v1/datasets/ds_unknown/count')).statusCode).toBe(404);
    const other = await t.createTenant();
    const res = await get(`/v1/datasets/${ds.id}/count`, other.auth);
    expect(res.statusCode).toBe(404);
    expect(errorCode(res)).toBe('not_found');
  });
});

describe('snapshot membership rules', () => {
  it('excludes eval episodes unless the filter names eval_id, and discarded ones unless it names outcome', async () => {
    const ids: Record<string, string> = {};
    const add = async (name: string, over: Partial<EpisodeReport>) => {
      const [r] = await ingest([report(over)]);
      ids[name] = r!.id;
    };
    await add('plain', { task_id: 't1', metadata: { site: 'lab' } });
    await add('eval1', { task_id: 't1', eval_id: 'ev1', metadata: { site: 'lab' } });
    await add('eval2', { task_id: 't1', eval_id: 'ev2' });
    await add('discarded', { task_id: 't1', outcome: 'discarded', metadata: { site: 'lab' } });
    await add('discardedEval1', { task_id: 't1', outcome: 'discarded', eval_id: 'ev1' });
    await add('failure', { task_id: 't1', outcome: 'failure' });
    await add('other', { task_id: 't2' });
    // Effective outcome decides: overridden to discarded counts as discarded, and back.
    await add('overriddenDiscarded', { task_id: 't2', outcome: 'success' });
    await add('overriddenKept', { task_id: 't2', outcome: 'discarded' });
    expect((await patch(`/v1/episodes/${ids.overriddenDiscarded}/outcome`, { outcome: 'discarded', reason: 'bad' })).statusCode).toBe(200);
    expect((await patch(`/v1/episodes/${ids.overriddenKept}/outcome`, { outcome: 'success', reason: 'fine' })).statusCode).toBe(200);
    // Another organization's episodes never join.
    const other = await t.createTenant();
    await ingest([report({ task_id: 't1' }), report({ task_id: 't1', eval_id: 'ev1' }), report({ outcome: 'discarded' })], { orgId: other.org.id });

    const cases: [Record<string, string>, string[]][] = [
      [{}, ['plain', 'failure', 'other', 'overriddenKept']],
      [{ task_id: 't1' }, ['plain', 'failure']],
      [{ eval_id: 'ev1' }, ['eval1']],
      [{ eval_id: 'ev2' }, ['eval2']],
      [{ eval_id: 'ev1', task_id: 't1' }, ['eval1']],
      [{ outcome: 'discarded' }, ['discarded', 'overriddenDiscarded']],
      [{ outcome: 'discarded', task_id: 't1' }, ['discarded']],
      [{ outcome: 'discarded', eval_id: 'ev1' }, ['discardedEval1']],
      [{ outcome: 'success' }, ['plain', 'other', 'overriddenKept']],
      [{ outcome: 'failure' }, ['failure']],
      [{ eval_id: 'none' }, []],
      // The metadata-driven query path obeys the same rules.
      [{ 'metadata.site': 'lab' }, ['plain']],
      [{ 'metadata.site': 'lab', eval_id: 'ev1' }, ['eval1']],
      [{ 'metadata.site': 'lab', outcome: 'discarded' }, ['discarded']],
    ];
    for (const [filter, want] of cases) {
      const label = JSON.stringify(filter);
      const ds = await createDataset(filter);
      // The live count says what a snapshot taken now pins.
      expect((await get(`/v1/datasets/${ds.id}/count`)).json(), label).toEqual({ dataset_id: ds.id, live: true, episode_count: want.length, capped: false });
      const snap = await snapshot(ds.id);
      expect((await get(`/v1/datasets/${ds.id}/count`)).json(), label).toEqual({ dataset_id: ds.id, live: false, episode_count: want.length, capped: false });
      expect(snap.episode_count, label).toBe(want.length);
      expect(await memberIds(ds.id), label).toEqual(want.map((n) => ids[n]));
    }
  });
});

describe('POST /v1/datasets/{id}/snapshot', () => {
  it('returns {id, snapshot_at, episode_count} and the dataset shows them', async () => {
    const ds = await createDataset({ task_id: 't1' }, { name: 'snap', description: 'd' });
    await ingest([report({ task_id: 't1' }), report({ task_id: 't2' }), report({ task_id: 't1' })]);
    t.clock.advance(90_000);
    const res = await post(`/v1/datasets/${ds.id}/snapshot`);
    expect(res.statusCode, res.payload).toBe(200);
    expect(res.json()).toEqual({ id: ds.id, snapshot_at: iso(T0 + 90_000), episode_count: 2 });
    const got = (await get(`/v1/datasets/${ds.id}`)).json<Dataset>();
    expect(got).toEqual({ ...ds, snapshot_at: iso(T0 + 90_000), episode_count: 2 });
  });

  it('is one-shot: a second snapshot is 409 conflict and changes nothing', async () => {
    const ds = await createDataset({});
    await ingest([report()]);
    const first = await snapshot(ds.id);
    await ingest([report(), report()]);
    t.clock.advance(1000);
    const again = await post(`/v1/datasets/${ds.id}/snapshot`);
    expect(again.statusCode).toBe(409);
    expect(errorCode(again)).toBe('conflict');
    const got = (await get(`/v1/datasets/${ds.id}`)).json<Dataset>();
    expect(got.snapshot_at).toBe(first.snapshot_at);
    expect(got.episode_count).toBe(1);
    expect((await memberIds(ds.id)).length).toBe(1);
  });

  it('is 404 for an unknown dataset and for another organization’s dataset', async () => {
    const unknown = await post('/v1/datasets/ds_doesnotexist/snapshot');
    expect(unknown.statusCode).toBe(404);
    expect(errorCode(unknown)).toBe('not_found');

    const ds = await createDataset({});
    await ingest([report()]);
    const other = await t.createTenant();
    for (const res of [
      await post(`/v1/datasets/${ds.id}/snapshot`, undefined, other.auth),
      await get(`/v1/datasets/${ds.id}`, other.auth),
      await get(`/v1/datasets/${ds.id}/manifest`, other.auth),
    ]) {
      expect(res.statusCode, res.payload).toBe(404);
      expect(errorCode(res)).toBe('not_found');
    }
    expect((await get(`/v1/datasets/${ds.id}`)).json<Dataset>().snapshot_at).toBeNull();
    // Snapshotted, it is still invisible to the other organization.
    await snapshot(ds.id);
    const res = await get(`/v1/datasets/${ds.id}/manifest`, other.auth);
    expect(res.statusCode).toBe(404);
  });

  it('works with zero members: episode_count 0 and the manifest is just the header', async () => {
    await ingest([report({ task_id: 't1' })]);
    const ds = await createDataset({ task_id: 'nobody' });
    const snap = await snapshot(ds.id);
    expect(snap.episode_count).toBe(0);
    const res = await get(`/v1/datasets/${ds.id}/manifest`);
    const page = parsePage(res);
    expect(page.header).toEqual({ dataset_id: ds.id, name: 'ds', filter: { task_id: 'nobody' }, snapshot_at: snap.snapshot_at, episode_count: 0 });
    expect(page.members).toEqual([]);
    expect(page.cursor).toBeUndefined();
    expect(res.payload.split('\n').filter((l) => l.length > 0)).toHaveLength(1);
  });

  it('is permanent: later ingest, annotations and outcome overrides never change membership or count', async () => {
    const [a, b, c, d] = await ingest([report(), report(), report(), report({ outcome: 'discarded' })]);
    for (const e of [a, b]) expect((await patch(`/v1/episodes/${e!.id}`, { annotations: { qa: 'pass' } })).statusCode).toBe(200);
    const byAnnotation = await createDataset({ 'annotation.qa': 'pass' });
    const everything = await createDataset({});
    expect((await snapshot(byAnnotation.id)).episode_count).toBe(2);
    expect((await snapshot(everything.id)).episode_count).toBe(3);

    // Changes that would alter what the live filters match now.
    const [late] = await ingest([report()]);
    expect((await patch(`/v1/episodes/${late!.id}`, { annotations: { qa: 'pass' } })).statusCode).toBe(200);
    expect((await patch(`/v1/episodes/${c!.id}`, { annotations: { qa: 'pass' } })).statusCode).toBe(200);
    expect((await patch(`/v1/episodes/${a!.id}`, { annotations: { qa: 'fail', note: 'redo' } })).statusCode).toBe(200);
    expect((await patch(`/v1/episodes/${b!.id}/outcome`, { outcome: 'discarded', reason: 'blurry' })).statusCode).toBe(200);
    expect((await patch(`/v1/episodes/${d!.id}/outcome`, { outcome: 'success', reason: 'fine after all' })).statusCode).toBe(200);
    const liveNow = (await get('/v1/episodes?annotation.qa=pass')).json<{ episodes: Episode[] }>().episodes.map((e) => e.id);
    // The episode list has no snapshot rules: b (now discarded) still matches there.
    expect(liveNow).toEqual([b!.id, c!.id, late!.id]);

    const ds1 = (await get(`/v1/datasets/${byAnnotation.id}`)).json<Dataset>();
    expect(ds1.episode_count).toBe(2);
    const m1 = await walkManifest(byAnnotation.id, 1000);
    expect(m1.pages[0]!.header!.episode_count).toBe(2);
    expect(m1.ids).toEqual([a!.id, b!.id]);
    // Member lines carry the current data.
    const [la, lb] = m1.pages[0]!.members;
    expect(la!.annotations).toEqual({ qa: 'fail', note: 'redo' });
    expect(lb!.outcome).toBe('discarded');
    expect(lb!.recorded_outcome).toBe('success');

    expect((await get(`/v1/datasets/${everything.id}`)).json<Dataset>().episode_count).toBe(3);
    expect(await memberIds(everything.id)).toEqual([a!.id, b!.id, c!.id]);
  });
});

describe('GET /v1/datasets/{id}/manifest', () => {
  it('starts with the header line, then member lines with files and locations', async () => {
    const files = [
      { path: 'bag.mcap', size_bytes: 100, sha256: 'e'.repeat(64) },
      { path: 'video/cam0.mp4', size_bytes: 50, sha256: 'f'.repeat(64) },
    ];
    const [a, b] = await ingest([report({ manifest: { files, total_bytes: 150 }, metadata: { site: 'lab' } }), report()]);
    await addReplica(a!.id, 'dst_1', 'verified');
    await addReplica(a!.id, 'dst_2', 'granted', null);
    const ds = await createDataset({ from: iso(T0) }, { name: 'manifest test' });
    const snap = await snapshot(ds.id);
    expect(snap.episode_count).toBe(2);

    const res = await get(`/v1/datasets/${ds.id}/manifest`);
    expect(res.headers['content-type']).toMatch(/^application\/x-ndjson/);
    expect(res.payload.endsWith('\n')).toBe(true);
    const first = JSON.parse(res.payload.split('\n')[0]!) as unknown;
    expect(first).toEqual({
      dataset_id: ds.id,
      name: 'manifest test',
      filter: { from: iso(T0) },
      snapshot_at: snap.snapshot_at,
      episode_count: 2,
    });
    const page = parsePage(res);
    expect(page.cursor).toBeUndefined();
    expect(page.members.map((m) => m.id)).toEqual([a!.id, b!.id]);
    const epA = (await get(`/v1/episodes/${a!.id}`)).json<Episode>();
    const epB = (await get(`/v1/episodes/${b!.id}`)).json<Episode>();
    expect(page.members[0]).toEqual({
      ...epA,
      files,
      locations: [
        { destination_id: 'dst_1', state: 'verified', object_key: `obj/${a!.id}`, grant_id: 'grt_dst_1' },
        { destination_id: 'dst_2', state: 'granted', object_key: null, grant_id: 'grt_dst_2' },
      ],
    });
    expect(page.members[1]).toEqual({ ...epB, files: [], locations: [] });
  });

  it('defaults to 1000 member lines per page and carries X-Next-Cursor until the end', async () => {
    const reports = await ingest(Array.from({ length: 1001 }, () => report()));
    const ds = await createDataset({});
    expect((await snapshot(ds.id)).episode_count).toBe(1001);
    const p1 = await manifestPage(ds.id);
    expect(p1.header?.episode_count).toBe(1001);
    expect(p1.members).toHaveLength(1000);
    expect(p1.cursor).toEqual(expect.any(String));
    const p2 = await manifestPage(ds.id, { cursor: p1.cursor! });
    expect(p2.header).toBeUndefined();
    expect(p2.members).toHaveLength(1);
    expect(p2.cursor).toBeUndefined();
    expect([...p1.members, ...p2.members].map((m) => m.id)).toEqual(reports.map((r) => r.id));
  });

  it('takes limit 1 to 5000 and refuses 0, 5001 and non-numbers', async () => {
    await ingest([report(), report(), report()]);
    const ds = await createDataset({});
    await snapshot(ds.id);
    expect((await manifestPage(ds.id, { limit: '5000' })).members).toHaveLength(3);
    const one = await manifestPage(ds.id, { limit: '1' });
    expect(one.members).toHaveLength(1);
    expect(one.cursor).toEqual(expect.any(String));
    for (const bad of ['0', '5001', 'x', '-1', '1.5']) {
      expect400(await get(`/v1/datasets/${ds.id}/manifest?limit=${bad}`), `limit=${bad}`);
    }
  });

  it('omits X-Next-Cursor on the last page, also when it is exactly full', async () => {
    await ingest(Array.from({ length: 4 }, () => report()));
    const ds = await createDataset({});
    await snapshot(ds.id);
    const { pages, ids } = await walkManifest(ds.id, 2);
    expect(pages).toHaveLength(2);
    expect(pages.map((p) => p.members.length)).toEqual([2, 2]);
    expect(pages[0]!.cursor).toEqual(expect.any(String));
    expect(pages[1]!.cursor).toBeUndefined();
    expect(pages[0]!.header).toBeDefined();
    expect(pages[1]!.header).toBeUndefined();
    expect(new Set(ids).size).toBe(4);

    const single = await walkManifest(ds.id, 4);
    expect(single.pages).toHaveLength(1);
    expect(single.pages[0]!.cursor).toBeUndefined();
  });

  it('pages concatenate to exactly episode_count members, no duplicate, while episodes keep arriving', async () => {
    const wanted: string[] = [];
    for (let i = 0; i < 23; i++) {
      const [r] = await ingest([report({ metadata: { site: i % 4 === 0 ? 'field' : 'lab' } })]);
      if (i % 4 !== 0) wanted.push(r!.id);
    }
    const ds = await createDataset({ 'metadata.site': 'lab' });
    const snap = await snapshot(ds.id);
    expect(snap.episode_count).toBe(wanted.length);

    const { pages, ids } = await walkManifest(ds.id, 4, async (page) => {
      // Matching episodes arrive (and change) between page fetches.
      const [late, late2] = await ingest([report({ metadata: { site: 'lab' } }), report({ metadata: { site: 'lab' } })]);
      await patch(`/v1/episodes/${late!.id}`, { annotations: { page } });
      await patch(`/v1/episodes/${late2!.id}/outcome`, { outcome: 'failure', reason: 'x' });
    });
    expect(ids).toEqual(wanted);
    expect(ids).toHaveLength(snap.episode_count);
    expect(new Set(ids).size).toBe(ids.length);
    expect(pages.filter((p) => p.header !== undefined)).toHaveLength(1);
    expect(pages.slice(0, -1).every((p) => p.members.length === 4)).toBe(true);
    expect(pages.at(-1)!.cursor).toBeUndefined();
    expect((await get(`/v1/datasets/${ds.id}`)).json<Dataset>().episode_count).toBe(wanted.length);
  });

  it('refuses an invalid cursor with 400', async () => {
    await ingest([report(), report()]);
    const ds = await createDataset({});
    await snapshot(ds.id);
    for (const cursor of ['%21%21', '', encodeCursor({ p: 0 }), encodeCursor({ p: -1 }), encodeCursor({ p: 3 }), encodeCursor({ p: 'x' }), encodeCursor('abc')]) {
      const res = await get(`/v1/datasets/${ds.id}/manifest?cursor=${cursor}`);
      expect400(res, `cursor=${cursor}`);
      expect(res.headers['content-type']).toMatch(/^application\/json/);
    }
    // A valid position in another dataset's cursor does not page this one.
    const other = await createDataset({});
    await snapshot(other.id);
    const first = await get(`/v1/datasets/${other.id}/manifest?limit=1`);
    const foreign = first.headers['x-next-cursor'];
    expect(typeof foreign).toBe('string');
    expect400(await get(`/v1/datasets/${ds.id}/manifest?cursor=${String(foreign)}`), 'a cursor of another dataset');
    expect((await get(`/v1/datasets/${other.id}/manifest?cursor=${String(foreign)}`)).statusCode).toBe(200);
  });

  it('is 404 for an unknown dataset', async () => {
    const res = await get('/v1/datasets/ds_doesnotexist/manifest');
    expect(res.statusCode).toBe(404);
    expect(errorCode(res)).toBe('not_found');
  });
});

describe('GET /v1/datasets', () => {
  it('pages with a cursor over more than one page, null at the end, also when the last page is exactly full', async () => {
    const created: string[] = [];
    for (let i = 0; i < 5; i++) created.push((await createDataset({}, { name: `ds${i}` })).id);
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const res = await get(`/v1/datasets?limit=2${cursor === null ? '' : `&cursor=${encodeURIComponent(cursor)}`}`);
      expect(res.statusCode, res.payload).toBe(200);
      const body = res.json<{ datasets: Dataset[]; cursor: string | null }>();
      expect(body.datasets.length).toBeLessThanOrEqual(2);
      seen.push(...body.datasets.map((d) => d.id));
      cursor = body.cursor;
      pages++;
    } while (cursor !== null && pages < 20);
    expect(pages).toBe(3);
    expect([...seen].sort()).toEqual([...created].sort());
    expect(new Set(seen).size).toBe(5);

    created.push((await createDataset({})).id);
    const p1 = (await get('/v1/datasets?limit=3')).json<{ datasets: Dataset[]; cursor: string | null }>();
    expect(p1.cursor).toEqual(expect.any(String));
    const p2 = (await get(`/v1/datasets?limit=3&cursor=${encodeURIComponent(p1.cursor!)}`)).json<{ datasets: Dataset[]; cursor: string | null }>();
    expect(p2.datasets).toHaveLength(3);
    expect(p2.cursor).toBeNull();
  });

  it('defaults to a page that holds a handful, and takes limit 1 to 100', async () => {
    await createDataset({});
    await createDataset({});
    const all = (await get('/v1/datasets')).json<{ datasets: Dataset[]; cursor: string | null }>();
    expect(all.datasets).toHaveLength(2);
    expect(all.cursor).toBeNull();
    expect((await get('/v1/datasets?limit=1')).json<{ datasets: Dataset[] }>().datasets).toHaveLength(1);
    expect((await get('/v1/datasets?limit=100')).statusCode).toBe(200);
    for (const bad of ['0', '101', 'x']) expect400(await get(`/v1/datasets?limit=${bad}`), `limit=${bad}`);
    for (const bad of ['', '%21%21', encodeCursor(5)]) expect400(await get(`/v1/datasets?cursor=${bad}`), `cursor=${bad}`);
  });

  it('lists only the caller organization’s datasets', async () => {
    const mine = await createDataset({}, { name: 'mine' });
    const other = await t.createTenant();
    const theirs = await createDataset({}, { name: 'theirs' }, other.auth);
    const myList = (await get('/v1/datasets')).json<{ datasets: Dataset[] }>().datasets;
    expect(myList.map((d) => d.id)).toEqual([mine.id]);
    const theirList = (await get('/v1/datasets', other.auth)).json<{ datasets: Dataset[] }>().datasets;
    expect(theirList.map((d) => d.id)).toEqual([theirs.id]);
    const res = await get(`/v1/datasets/${theirs.id}`);
    expect(res.statusCode).toBe(404);
    expect(errorCode(res)).toBe('not_found');
  });
});
