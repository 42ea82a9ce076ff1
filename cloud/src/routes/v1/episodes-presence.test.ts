/**
 * `has_annotation.<key>` / `has_metadata.<key>` over real HTTP: the episode list, the export and a
 * dataset (live count, snapshot, manifest) agree on "not yet reviewed" after episodes are
 * annotated and one's key is deleted with null; bad values are a 400 naming the key.
 */
import type { AddressInfo } from 'node:net';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Dataset, DatasetCount, Episode, EpisodeWithLocations } from '@fleet/protocol';
import { startTestCloud, testReport, type TestCloud, type TestTenant } from '../../test-support.js';

let t: TestCloud;
let base: string;
let tenant: TestTenant;

beforeEach(async () => {
  t = await startTestCloud();
  await t.app.listen({ host: '127.0.0.1', port: 0 });
  base = `http://127.0.0.1:${(t.app.server.address() as AddressInfo).port}`;
  tenant = await t.createTenant();
});
afterEach(async () => {
  await t.close();
});

function call(method: string, path: string, body?: unknown): Promise<Response> {
  return fetch(`${base}${path}`, {
    method,
    headers: { ...tenant.auth, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
}

async function ok<T>(res: Promise<Response>, status = 200): Promise<T> {
  const r = await res;
  const text = await r.text();
  expect(r.status, text).toBe(status);
  return JSON.parse(text) as T;
}

/** Every page of the list, following `cursor`. */
async function listAll(query: string, limit: number): Promise<string[]> {
  const out: string[] = [];
  let cursor: string | null = null;
  do {
    const page: { episodes: Episode[]; cursor: string | null } = await ok(call('GET', `/v1/episodes?${query}&limit=${limit}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`));
    out.push(...page.episodes.map((e) => e.id));
    cursor = page.cursor;
  } while (cursor !== null && out.length < 10_000);
  return out;
}

/** Every page of the export, following X-Next-Cursor. */
async function exportAll(query: string, limit: number): Promise<string[]> {
  const out: string[] = [];
  let cursor: string | null = null;
  do {
    const res = await call('GET', `/v1/episodes/export?${query}&limit=${limit}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
    const text = await res.text();
    expect(res.status, text).toBe(200);
    out.push(...text.split('\n').filter((l) => l.length > 0).map((l) => (JSON.parse(l) as EpisodeWithLocations).id));
    cursor = res.headers.get('x-next-cursor');
  } while (cursor !== null && out.length < 10_000);
  return out;
}

/** A dataset of `filter`: its live count, then its snapshot's count and manifest members. */
async function datasetOf(filter: Record<string, unknown>): Promise<{ stored: Record<string, string>; live: number; pinned: number; members: string[] }> {
  const ds = await ok<Dataset>(call('POST', '/v1/datasets', { name: 'not yet reviewed', filter }), 201);
  const live = await ok<DatasetCount>(call('GET', `/v1/datasets/${ds.id}/count`));
  expect(live.live).toBe(true);
  const snap = await ok<{ episode_count: number }>(call('POST', `/v1/datasets/${ds.id}/snapshot`));
  const members: string[] = [];
  let cursor: string | null = null;
  do {
    const res = await call('GET', `/v1/datasets/${ds.id}/manifest?limit=2${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
    const text = await res.text();
    expect(res.status, text).toBe(200);
    for (const line of text.split('\n').filter((l) => l.length > 0)) {
      const parsed = JSON.parse(line) as { dataset_id?: string; id?: string };
      if (parsed.dataset_id === undefined) members.push(parsed.id!);
    }
    cursor = res.headers.get('x-next-cursor');
  } while (cursor !== null && members.length < 10_000);
  return { stored: ds.filter, live: live.episode_count, pinned: snap.episode_count, members };
}

async function patch(id: string, annotations: Record<string, unknown>): Promise<void> {
  await ok(call('PATCH', `/v1/episodes/${id}`, { annotations }));
}

describe('presence filters: list, export and datasets agree', () => {
  it('has_annotation.qa_status=false is every episode not yet reviewed, a key deleted with null included', async () => {
    const reports = Array.from({ length: 7 }, (_, i) => testReport({ task_id: i % 2 ? 'pick' : 'place', metadata: i === 6 ? {} : { site: 'lab' } }));
    expect(await t.store.episodes.ingest(reports.map((report) => ({ orgId: tenant.org.id, robotId: 'rbt_1', report, reportedAt: t.clock.now() })))).toEqual(reports.map(() => 'inserted'));
    const [e0, e1, e2, e3, e4, e5, e6] = reports.map((r) => r.id) as [string, string, string, string, string, string, string];
    await patch(e0, { qa_status: 'accepted', qa_by: 'key_1' });
    await patch(e1, { qa_status: 'rejected', qa_tags: ['blurry'] });
    await patch(e2, { qa_status: 'accepted' });
    await patch(e4, { note: 'looked at, no decision' });
    await patch(e5, { qa_status: 'accepted' });
    // Un-reviewed again: the key deleted with null is absent.
    await patch(e2, { qa_status: null });

    const unreviewed = [e2, e3, e4, e6];
    for (const limit of [1, 2, 50]) {
      expect(await listAll('has_annotation.qa_status=false', limit), `list by ${limit}`).toEqual(unreviewed);
      expect(await exportAll('has_annotation.qa_status=false', limit), `export by ${limit}`).toEqual(unreviewed);
    }
    expect(await listAll('has_annotation.qa_status=true', 2)).toEqual([e0, e1, e5]);
    // With the other filters: a task, a metadata value, a metadata key.
    expect(await listAll('has_annotation.qa_status=false&task_id=pick', 1)).toEqual([e3]);
    expect(await exportAll('has_annotation.qa_status=false&metadata.site=lab', 1)).toEqual([e2, e3, e4]);
    expect(await listAll('has_annotation.qa_status=false&has_metadata.site=false', 1)).toEqual([e6]);

    // A dataset's filter: a boolean is stored as its string form; both spellings agree with the list.
    for (const value of [false, 'false']) {
      const ds = await datasetOf({ 'has_annotation.qa_status': value });
      expect(ds.stored).toEqual({ 'has_annotation.qa_status': 'false' });
      expect(ds).toMatchObject({ live: unreviewed.length, pinned: unreviewed.length, members: unreviewed });
    }
    const withSite = await datasetOf({ 'has_annotation.qa_status': false, 'has_metadata.site': true, task_id: 'place' });
    expect(withSite).toMatchObject({ live: 2, pinned: 2, members: [e2, e4] });

    // Reviewing one moves it out of the live views; a snapshot keeps what it pinned.
    const pinned = await datasetOf({ 'has_annotation.qa_status': 'false' });
    await patch(e3, { qa_status: 'rejected' });
    expect(await listAll('has_annotation.qa_status=false', 2)).toEqual([e2, e4, e6]);
    expect(await exportAll('has_annotation.qa_status=false', 2)).toEqual([e2, e4, e6]);
    expect(pinned.members).toEqual(unreviewed);
  });

  it('takes a key with reserved characters percent-encoded, and the has_metadata family', async () => {
    const [a, b] = [testReport({ metadata: { 'a&b=c': 1 } }), testReport({ metadata: { 'a+b': 1 } })];
    await t.store.episodes.ingest([a, b].map((report) => ({ orgId: tenant.org.id, robotId: 'rbt_1', report, reportedAt: t.clock.now() })));
    expect(await listAll(`${encodeURIComponent('has_metadata.a&b=c')}=true`, 5)).toEqual([a.id]);
    expect(await listAll(`${encodeURIComponent('has_metadata.a+b')}=true`, 5)).toEqual([b.id]);
    expect(await listAll(`${encodeURIComponent('has_metadata.a&b=c')}=false`, 5)).toEqual([b.id]);
  });

  it('refuses a value other than true or false, a repeated key and an empty key with 400 validation_failed naming it', async () => {
    const refused = async (res: Promise<Response>, path: string) => {
      const r = await res;
      const body = (await r.json()) as { error: { code: string; details: { issues: { path: string; message: string }[] } } };
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(body.error.code).toBe('validation_failed');
      expect(body.error.details.issues.map((i) => i.path)).toEqual([path]);
      return body.error.details.issues[0]!.message;
    };
    for (const value of ['yes', 'True', '1', '']) {
      const message = await refused(call('GET', `/v1/episodes?has_annotation.qa_status=${value}`), '/has_annotation.qa_status');
      expect(message).toMatch(/true .*false/);
      await refused(call('GET', `/v1/episodes/export?has_metadata.site=${value}`), '/has_metadata.site');
    }
    await refused(call('GET', '/v1/episodes?has_annotation.qa_status=true&has_annotation.qa_status=false'), '/has_annotation.qa_status');
    await refused(call('GET', '/v1/episodes?has_annotation.=true'), '/has_annotation.');
    await refused(call('POST', '/v1/datasets', { name: 'x', filter: { 'has_annotation.qa_status': 'maybe' } }), '/filter/has_annotation.qa_status');
    await refused(call('POST', '/v1/datasets', { name: 'x', filter: { 'has_annotation.qa_status': 0 } }), '/filter/has_annotation.qa_status');
    // Nothing was created by the refused requests.
    expect((await ok<{ datasets: Dataset[] }>(call('GET', '/v1/datasets'))).datasets).toEqual([]);
  });
});
