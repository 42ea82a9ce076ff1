import type { LightMyRequestResponse } from 'fastify';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { iso, type Episode, type EpisodeReport, type EpisodeWithLocations, type ReplicaState, type Scope, type Usage } from '@fleet/protocol';
import { bearer, dayOf, errorCode, errorDetails, startTestCloud, testReport, type TestCloud, type TestTenant } from '../../test-support.js';
import type { IngestItem } from '../../store/index.js';

const T0 = Date.parse('2026-01-01T00:00:00Z');
const ROBOT = 'rbt_one';

/** Every field of the spec's Episode table. */
const EPISODE_FIELDS = [
  'id',
  'robot_id',
  'recording_session_id',
  'episode_seq',
  'session_name',
  'task_id',
  'task_name',
  'subtask_id',
  'operator_id',
  'operator_name',
  'outcome',
  'recorded_outcome',
  'control_mode',
  'policy_version_id',
  'eval_id',
  'started_at',
  'ended_at',
  'duration_s',
  'message_count',
  'bag_size_bytes',
  'bag_uri',
  'metadata',
  'annotations',
  'reported_at',
  'replicas',
].sort();

let t: TestCloud;
let tenant: TestTenant;

beforeEach(async () => {
  t = await startTestCloud();
  tenant = await t.createTenant();
});
afterEach(async () => {
  await t.close();
});

const report = testReport;

async function ingest(reports: EpisodeReport[], opts: { orgId?: string; robotId?: string } = {}): Promise<EpisodeReport[]> {
  const items: IngestItem[] = reports.map((r) => ({
    orgId: opts.orgId ?? tenant.org.id,
    robotId: opts.robotId ?? ROBOT,
    report: r,
    reportedAt: t.clock.now(),
  }));
  expect(await t.store.episodes.ingest(items)).toEqual(reports.map(() => 'inserted'));
  return reports;
}

function get(url: string, auth = tenant.auth): Promise<LightMyRequestResponse> {
  return t.app.inject({ method: 'GET', url, headers: auth });
}

function patch(url: string, body: unknown, auth = tenant.auth): Promise<LightMyRequestResponse> {
  return t.app.inject({ method: 'PATCH', url, headers: auth, payload: body as object });
}

async function list(query: string, auth = tenant.auth): Promise<{ episodes: Episode[]; cursor: string | null }> {
  const res = await get(`/v1/episodes${query}`, auth);
  expect(res.statusCode, res.payload).toBe(200);
  return res.json<{ episodes: Episode[]; cursor: string | null }>();
}

async function listIds(query: string): Promise<string[]> {
  return (await list(query)).episodes.map((e) => e.id);
}

function exportLines(res: LightMyRequestResponse): EpisodeWithLocations[] {
  return res.payload
    .split('\n')
    .filter((l) => l.length > 0)
    .map((l) => JSON.parse(l) as EpisodeWithLocations);
}

async function usage(): Promise<Map<string, number>> {
  const res = await get('/v1/usage');
  expect(res.statusCode, res.payload).toBe(200);
  const today = dayOf(t.clock);
  return new Map(res.json<Usage>().usage.filter((u) => u.day === today).map((u) => [u.meter, u.count]));
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

const q = (params: Record<string, string>): string => `?${new URLSearchParams(params).toString()}`;

describe('GET /v1/episodes', () => {
  it('returns every spec field, metadata and annotations separately, and replicas: []', async () => {
    const r = report({
      recording_session_id: 'rs_shape',
      episode_seq: 3,
      session_name: 'sess',
      task_id: 'task_1',
      task_name: 'Task one',
      subtask_id: 'sub_1',
      operator_id: 'op_1',
      operator_name: 'Ada',
      control_mode: 'teleop',
      policy_version_id: 'pol_1',
      eval_id: 'eval_1',
      outcome: 'failure',
      started_at: '2026-01-01T00:00:00.000Z',
      ended_at: '2026-01-01T00:01:00.500Z',
      duration_s: 60.5,
      message_count: 42,
      bag_size_bytes: 4096,
      bag_uri: 'file:///bags/1.mcap',
      metadata: { site: 'lab', n: 3 },
      segments: [{ segment_index: 0, subtask_id: 'sub_1', subtask_name: 'Reach', start_offset_s: 0, end_offset_s: 60.5 }],
      manifest: { files: [{ path: 'bag.mcap', size_bytes: 4096, sha256: 'd'.repeat(64) }], total_bytes: 4096 },
    });
    t.clock.advance(5000);
    await ingest([r]);
    await t.store.episodes.patchAnnotations(tenant.org.id, r.id, { qa: 'pass' });

    const body = await list('');
    expect(Object.keys(body).sort()).toEqual(['cursor', 'episodes']);
    expect(body.cursor).toBeNull();
    expect(body.episodes).toHaveLength(1);
    const e = body.episodes[0]!;
    expect(Object.keys(e).sort()).toEqual(EPISODE_FIELDS);
    expect(e).toEqual({
      id: r.id,
      robot_id: ROBOT,
      recording_session_id: 'rs_shape',
      episode_seq: 3,
      session_name: 'sess',
      task_id: 'task_1',
      task_name: 'Task one',
      subtask_id: 'sub_1',
      operator_id: 'op_1',
      operator_name: 'Ada',
      outcome: 'failure',
      recorded_outcome: 'failure',
      control_mode: 'teleop',
      policy_version_id: 'pol_1',
      eval_id: 'eval_1',
      started_at: '2026-01-01T00:00:00.000Z',
      ended_at: '2026-01-01T00:01:00.500Z',
      duration_s: 60.5,
      message_count: 42,
      bag_size_bytes: 4096,
      bag_uri: 'file:///bags/1.mcap',
      metadata: { site: 'lab', n: 3 },
      annotations: { qa: 'pass' },
      reported_at: iso(T0 + 5000),
      replicas: [],
    });
  });

  it('keeps nullable fields present as null', async () => {
    await ingest([report()]);
    const e = (await list('')).episodes[0]!;
    expect(Object.keys(e).sort()).toEqual(EPISODE_FIELDS);
    for (const k of ['session_name', 'task_id', 'ended_at', 'duration_s', 'message_count', 'bag_size_bytes', 'bag_uri'] as const) {
      expect(e[k]).toBeNull();
    }
    expect(e.metadata).toEqual({});
    expect(e.annotations).toEqual({});
  });

  it('shows replicas with the spec fields', async () => {
    const [a] = await ingest([report()]);
    await addReplica(a!.id, 'dst_1', 'verified');
    await addReplica(a!.id, 'dst_2', 'syncing', null);
    const e = (await list('')).episodes[0]!;
    expect(e.replicas).toEqual([
      { destination_id: 'dst_1', state: 'verified', grant_id: 'grt_dst_1', error: null, updated_at: iso(T0 + 60_000), object_key: `obj/${a!.id}` },
      { destination_id: 'dst_2', state: 'syncing', grant_id: 'grt_dst_2', error: null, updated_at: iso(T0 + 60_000) },
    ]);
  });

  it('pages with limit 1 to 100, 50 by default, and cursor', async () => {
    const reports = await ingest(Array.from({ length: 120 }, () => report()));
    const all = reports.map((r) => r.id);

    const first = await list('');
    expect(first.episodes.map((e) => e.id)).toEqual(all.slice(0, 50));
    expect(first.cursor).toEqual(expect.any(String));

    expect((await list('?limit=1')).episodes).toHaveLength(1);
    const hundred = await list('?limit=100');
    expect(hundred.episodes.map((e) => e.id)).toEqual(all.slice(0, 100));
    const rest = await list(`?limit=100&cursor=${encodeURIComponent(hundred.cursor!)}`);
    expect(rest.episodes.map((e) => e.id)).toEqual(all.slice(100));
    expect(rest.cursor).toBeNull();

    for (const bad of ['0', '101', '-1', '1.5', 'ten', '']) {
      const res = await get(`/v1/episodes?limit=${bad}`);
      expect(res.statusCode, `limit=${bad}`).toBe(400);
      expect(errorCode(res)).toBe('validation_failed');
    }
  });

  it('walks pages exactly once while new episodes arrive, the new ones at the end', async () => {
    const initial = await ingest(Array.from({ length: 10 }, () => report({ task_id: 'walk' })));
    const added: EpisodeReport[] = [];
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const page = await list(`?task_id=walk&limit=3${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
      seen.push(...page.episodes.map((e) => e.id));
      cursor = page.cursor;
      if (pages++ < 3) added.push(...(await ingest([report({ task_id: 'walk' }), report({ task_id: 'other' })])));
    } while (cursor !== null && pages < 100);
    const expected = [...initial, ...added.filter((r) => r.task_id === 'walk')].map((r) => r.id);
    expect(seen).toEqual(expected);
  });

  it("shows no position in the index: a cursor is an opaque handle, the same for the same position whatever other organizations write", async () => {
    await ingest(Array.from({ length: 4 }, () => report()));
    const p1 = await list('?limit=2');
    expect(p1.cursor).toMatch(/^[A-Za-z0-9_-]{22}$/);
    expect(() => JSON.parse(Buffer.from(p1.cursor!, 'base64url').toString('utf8')) as unknown).toThrow();
    const again = await list('?limit=2');
    expect(again.cursor).toBe(p1.cursor);
    const p2 = await list(`?limit=1&cursor=${encodeURIComponent(p1.cursor!)}`);
    expect(p2.cursor).not.toBe(p1.cursor);
    expect(p2.cursor!.slice(0, 6)).not.toBe(p1.cursor!.slice(0, 6));
  });

  it('ends with cursor null when the last page is exactly full', async () => {
    await ingest(Array.from({ length: 4 }, () => report()));
    const p1 = await list('?limit=2');
    const p2 = await list(`?limit=2&cursor=${encodeURIComponent(p1.cursor!)}`);
    expect(p2.episodes).toHaveLength(2);
    expect(p2.cursor).toBeNull();
  });

  it.each([
    'not-a-cursor!!',
    Buffer.from('{"s":"x"}').toString('base64url'),
    // The earlier form showed the index's seq, one counter for every organization: no longer read.
    Buffer.from('{"s":1}').toString('base64url'),
    'AAAAAAAAAAAAAAAAAAAAAA',
    Buffer.from('{"s":-1}').toString('base64url'),
    Buffer.from('{"s":1.5}').toString('base64url'),
    Buffer.from('[]').toString('base64url'),
    Buffer.from('null').toString('base64url'),
    'x'.repeat(513),
  ])('refuses the invalid cursor %j with 400 validation_failed', async (cursor) => {
    const res = await get(`/v1/episodes?cursor=${encodeURIComponent(cursor)}`);
    expect(res.statusCode).toBe(400);
    expect(errorCode(res)).toBe('validation_failed');
  });

  it('refuses an empty cursor', async () => {
    const res = await get('/v1/episodes?cursor=');
    expect(res.statusCode).toBe(400);
    expect(errorCode(res)).toBe('validation_failed');
  });

  it.each([
    ['unknown key', '?colour=red'],
    ['misspelt annotation layer', '?annotations.qa=pass'],
    ['bare metadata', '?metadata=x'],
    ['empty metadata key', '?metadata.=x'],
    ['repeated key', '?task_id=a&task_id=b'],
    ['repeated metadata key', '?metadata.k=a&metadata.k=b'],
    ['bad outcome', '?outcome=meh'],
    ['bad sync_state', '?sync_state=done'],
    ['bad from', '?from=yesterday'],
    ['from after to', `?from=${encodeURIComponent('2026-01-02T00:00:00Z')}&to=${encodeURIComponent('2026-01-01T00:00:00Z')}`],
    ['destination to without sync_state', '?to=dst_1'],
    ['destination_id without sync_state', '?destination_id=dst_1'],
    ['conflicting to and destination_id', '?sync_state=verified&to=dst_1&destination_id=dst_2'],
    ['value over 512 characters', `?task_id=${'x'.repeat(513)}`],
    ['metadata value over 512 characters', `?metadata.k=${'x'.repeat(513)}`],
  ])('refuses a bad filter (%s) with 400 validation_failed', async (_name, query) => {
    const res = await get(`/v1/episodes${query}`);
    expect(res.statusCode, res.payload).toBe(400);
    expect(errorCode(res)).toBe('validation_failed');
  });

  it('names the unknown filter key in the details', async () => {
    const res = await get('/v1/episodes?colour=red');
    expect(res.statusCode).toBe(400);
    expect(JSON.stringify(errorDetails(res))).toContain('colour');
  });

  describe('filters', () => {
    const EQ = ['robot_id', 'task_id', 'subtask_id', 'operator_id', 'control_mode', 'policy_version_id', 'eval_id'] as const;

    it.each(EQ)('filters by %s', async (col) => {
      const value = `${col}_wanted`;
      const wanted = col === 'robot_id' ? report() : report({ [col]: value });
      const others = [report(), report(col === 'robot_id' ? {} : { [col]: `${col}_other` })];
      await ingest(others);
      await ingest([wanted], col === 'robot_id' ? { robotId: value } : {});
      expect(await listIds(q({ [col]: value }))).toEqual([wanted.id]);
      expect(await listIds(q({ [col]: 'nobody' }))).toEqual([]);
    });

    it('filters by outcome (the effective one)', async () => {
      const [s, f, d] = await ingest([report({ outcome: 'success' }), report({ outcome: 'failure' }), report({ outcome: 'discarded' })]);
      expect(await listIds('?outcome=success')).toEqual([s!.id]);
      expect(await listIds('?outcome=failure')).toEqual([f!.id]);
      expect(await listIds('?outcome=discarded')).toEqual([d!.id]);
      const res = await patch(`/v1/episodes/${s!.id}/outcome`, { outcome: 'failure', reason: 'it dropped' });
      expect(res.statusCode, res.payload).toBe(200);
      expect(await listIds('?outcome=failure')).toEqual([s!.id, f!.id]);
      expect(await listIds('?outcome=success')).toEqual([]);
    });

    it('bounds started_at with from and to, inclusive, and with offsets', async () => {
      const at = (m: number) => iso(T0 + m * 60_000);
      const [e0, e1, e2] = await ingest([report({ started_at: at(0) }), report({ started_at: at(10) }), report({ started_at: at(20) })]);
      expect(await listIds(q({ from: at(10) }))).toEqual([e1!.id, e2!.id]);
      expect(await listIds(q({ to: at(10) }))).toEqual([e0!.id, e1!.id]);
      expect(await listIds(q({ from: at(10), to: at(10) }))).toEqual([e1!.id]);
      expect(await listIds(q({ from: '2026-01-01T02:10:00+02:00' }))).toEqual([e1!.id, e2!.id]);
    });

    it('filters by metadata.<key> on the string form of strings, numbers and booleans', async () => {
      const [a, b, c] = await ingest([
        report({ metadata: { site: 'lab', n: 3, flag: true } }),
        report({ metadata: { site: 'field', n: 4, flag: false } }),
        report({ metadata: { site: 'lab', n: '3' } }),
      ]);
      expect(await listIds('?metadata.site=lab')).toEqual([a!.id, c!.id]);
      expect(await listIds('?metadata.n=3')).toEqual([a!.id, c!.id]);
      expect(await listIds('?metadata.n=4')).toEqual([b!.id]);
      expect(await listIds('?metadata.flag=true')).toEqual([a!.id]);
      expect(await listIds('?metadata.flag=false')).toEqual([b!.id]);
      expect(await listIds('?metadata.site=lab&metadata.n=3&metadata.flag=true')).toEqual([a!.id]);
      expect(await listIds('?metadata.site=moon')).toEqual([]);
      expect(await listIds(`?${encodeURIComponent('metadata.site')}=${encodeURIComponent('lab')}`)).toEqual([a!.id, c!.id]);
    });

    it('never widens to every episode on a key named like an Object.prototype member', async () => {
      await ingest([report({ metadata: { site: 'lab' } })]);
      for (const query of ['?metadata.__proto__=x', '?annotation.__proto__=x', '?metadata.constructor=x', '?metadata.toString=x']) {
        expect(await listIds(query), query).toEqual([]);
        expect(exportLines(await get(`/v1/episodes/export${query}`)), query).toEqual([]);
      }
    });

    it('filters by annotation.<key>, following PATCHes', async () => {
      const [a, b] = await ingest([report(), report()]);
      expect(await listIds('?annotation.qa=pass')).toEqual([]);
      expect((await patch(`/v1/episodes/${a!.id}`, { annotations: { qa: 'pass', score: 9 } })).statusCode).toBe(200);
      expect((await patch(`/v1/episodes/${b!.id}`, { annotations: { qa: 'fail' } })).statusCode).toBe(200);
      expect(await listIds('?annotation.qa=pass')).toEqual([a!.id]);
      expect(await listIds('?annotation.score=9')).toEqual([a!.id]);
      expect(await listIds('?annotation.qa=pass&annotation.score=9')).toEqual([a!.id]);
      expect((await patch(`/v1/episodes/${a!.id}`, { annotations: { qa: null } })).statusCode).toBe(200);
      expect(await listIds('?annotation.qa=pass')).toEqual([]);
      expect(await listIds('?annotation.score=9')).toEqual([a!.id]);
    });

    it('combines attribute and equality filters', async () => {
      const [a] = await ingest([
        report({ task_id: 't1', metadata: { site: 'lab' } }),
        report({ task_id: 't2', metadata: { site: 'lab' } }),
        report({ task_id: 't1', metadata: { site: 'field' } }),
      ]);
      expect(await listIds('?task_id=t1&metadata.site=lab')).toEqual([a!.id]);
      await patch(`/v1/episodes/${a!.id}`, { annotations: { qa: 'pass' } });
      expect(await listIds('?task_id=t1&metadata.site=lab&annotation.qa=pass&outcome=success')).toEqual([a!.id]);
      expect(await listIds('?task_id=t2&annotation.qa=pass')).toEqual([]);
    });

    it('filters by sync_state, with the destination as to or destination_id', async () => {
      const [a, b, c] = await ingest([report(), report(), report()]);
      expect(await listIds('?sync_state=unverified')).toEqual([a!.id, b!.id, c!.id]);
      expect(await listIds('?sync_state=synced')).toEqual([]);
      expect(await listIds('?sync_state=verified')).toEqual([]);
      await addReplica(a!.id, 'dst_1', 'verified');
      await addReplica(b!.id, 'dst_2', 'synced');
      expect(await listIds('?sync_state=verified')).toEqual([a!.id]);
      expect(await listIds('?sync_state=synced')).toEqual([a!.id, b!.id]);
      expect(await listIds('?sync_state=unverified')).toEqual([b!.id, c!.id]);
      expect(await listIds('?sync_state=unverified&to=dst_1')).toEqual([b!.id, c!.id]);
      expect(await listIds('?sync_state=unverified&destination_id=dst_2')).toEqual([a!.id, b!.id, c!.id]);
      expect(await listIds('?sync_state=synced&to=dst_2')).toEqual([b!.id]);
      expect(await listIds('?sync_state=verified&to=dst_1&destination_id=dst_1')).toEqual([a!.id]);
      // A date-time `to` stays a time bound even with sync_state.
      expect(await listIds(q({ sync_state: 'verified', to: iso(T0) }))).toEqual([a!.id]);
      expect(await listIds(q({ sync_state: 'verified', to: iso(T0 - 1) }))).toEqual([]);
      expect(await listIds(q({ sync_state: 'verified', to: iso(T0), destination_id: 'dst_2' }))).toEqual([]);
    });
  });
});

describe('organization isolation', () => {
  it('never shows another organization its episodes: list, get, segments, history, patch, export', async () => {
    const [mine] = await ingest([report({ task_id: 't', metadata: { site: 'lab' } })]);
    const other = await t.createTenant();
    expect((await list('', other.auth)).episodes).toEqual([]);
    expect((await list('?metadata.site=lab', other.auth)).episodes).toEqual([]);
    for (const url of [`/v1/episodes/${mine!.id}`, `/v1/episodes/${mine!.id}/segments`, `/v1/episodes/${mine!.id}/outcome-history`, `/v1/episodes/${mine!.id}/files`]) {
      const res = await get(url, other.auth);
      expect(res.statusCode, url).toBe(404);
      expect(errorCode(res)).toBe('not_found');
    }
    const p1 = await patch(`/v1/episodes/${mine!.id}`, { annotations: { x: 1 } }, other.auth);
    expect(p1.statusCode).toBe(404);
    expect(errorCode(p1)).toBe('not_found');
    const p2 = await patch(`/v1/episodes/${mine!.id}/outcome`, { outcome: 'failure', reason: 'mine now' }, other.auth);
    expect(p2.statusCode).toBe(404);
    expect(errorCode(p2)).toBe('not_found');
    const exp = await get('/v1/episodes/export', other.auth);
    expect(exp.statusCode).toBe(200);
    expect(exportLines(exp)).toEqual([]);
    // Nothing changed for the owner.
    const e = (await list('')).episodes[0]!;
    expect(e.annotations).toEqual({});
    expect(e.outcome).toBe('success');
  });
});

describe('GET /v1/episodes/:id and /segments', () => {
  it('returns the episode itself, as in the list', async () => {
    const [r] = await ingest([report({ metadata: { k: 'v' } })]);
    const res = await get(`/v1/episodes/${r!.id}`);
    expect(res.statusCode).toBe(200);
    const e = res.json<Episode>();
    expect(Object.keys(e).sort()).toEqual(EPISODE_FIELDS);
    expect(e).toEqual((await list('')).episodes[0]);
  });

  it('is 404 not_found for an unknown id', async () => {
    for (const url of ['/v1/episodes/ep_000000000000', '/v1/episodes/ep_000000000000/segments', '/v1/episodes/ep_000000000000/outcome-history', '/v1/episodes/ep_000000000000/files']) {
      const res = await get(url);
      expect(res.statusCode, url).toBe(404);
      expect(errorCode(res)).toBe('not_found');
    }
  });

  it('lists the files of the manifest with sizes and digests, and their total, never a URL', async () => {
    const files = [
      { path: 'recording.mcap', size_bytes: 266240, sha256: 'a'.repeat(64) },
      { path: 'camera/front.mcap', size_bytes: 10, sha256: 'b'.repeat(64) },
    ];
    const [r] = await ingest([report({ manifest: { files, total_bytes: 266250 } })]);
    const res = await get(`/v1/episodes/${r!.id}/files`);
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ files, total_bytes: 266250 });
    const [empty] = await ingest([report()]);
    expect((await get(`/v1/episodes/${empty!.id}/files`)).json()).toEqual({ files: [], total_bytes: 0 });
  });

  it('returns the segments wrapped in {segments}', async () => {
    const segments = [
      { segment_index: 0, subtask_id: 'sub_reach', subtask_name: 'Reach', start_offset_s: 0, end_offset_s: 4.25 },
      { segment_index: 1, subtask_id: null, subtask_name: null, start_offset_s: 4.25, end_offset_s: 9 },
    ];
    const [r, empty] = await ingest([report({ segments }), report()]);
    const res = await get(`/v1/episodes/${r!.id}/segments`);
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ segments });
    expect((await get(`/v1/episodes/${empty!.id}/segments`)).json()).toEqual({ segments: [] });
  });
});

describe('PATCH /v1/episodes/:id', () => {
  it('merges shallowly, deletes on null, returns the updated episode and leaves recorded facts alone', async () => {
    const [r] = await ingest([report({ task_id: 'task_1', metadata: { qa: 'recorded' }, outcome: 'failure' })]);
    const before = (await get(`/v1/episodes/${r!.id}`)).json<Episode>();

    const r1 = await patch(`/v1/episodes/${r!.id}`, { annotations: { qa: 'pass', tags: ['a'], nested: { x: 1, y: 2 } } });
    expect(r1.statusCode, r1.payload).toBe(200);
    expect(r1.json<Episode>().annotations).toEqual({ qa: 'pass', tags: ['a'], nested: { x: 1, y: 2 } });

    const r2 = await patch(`/v1/episodes/${r!.id}`, { annotations: { tags: null, nested: { z: 3 }, never_set: null } });
    expect(r2.statusCode, r2.payload).toBe(200);
    const after = r2.json<Episode>();
    expect(after.annotations).toEqual({ qa: 'pass', nested: { z: 3 } });
    expect(after).toEqual({ ...before, annotations: { qa: 'pass', nested: { z: 3 } } });
    expect((await get(`/v1/episodes/${r!.id}`)).json<Episode>()).toEqual(after);
    expect(after.metadata).toEqual({ qa: 'recorded' });
  });

  it.each([
    ['another field besides annotations', { annotations: { a: 1 }, task_id: 'x' }],
    ['only a recorded fact', { outcome: 'failure' }],
    ['metadata', { metadata: { a: 1 } }],
    ['an empty body', {}],
    ['annotations that are not an object', { annotations: 'pass' }],
    ['annotations that are an array', { annotations: [1, 2] }],
    ['annotations null', { annotations: null }],
    ['an empty annotation key', { annotations: { '': 1 } }],
    ['an annotation key over 256 characters', { annotations: { ['k'.repeat(257)]: 1 } }],
  ])('refuses a body with %s (400 validation_failed) and changes nothing', async (_name, body) => {
    const [r] = await ingest([report({ task_id: 'task_1' })]);
    const before = (await get(`/v1/episodes/${r!.id}`)).json<Episode>();
    const res = await patch(`/v1/episodes/${r!.id}`, body);
    expect(res.statusCode, res.payload).toBe(400);
    expect(errorCode(res)).toBe('validation_failed');
    expect((await get(`/v1/episodes/${r!.id}`)).json<Episode>()).toEqual(before);
  });

  it('refuses a __proto__ annotation key instead of silently dropping it', async () => {
    const [r] = await ingest([report()]);
    const res = await t.app.inject({
      method: 'PATCH',
      url: `/v1/episodes/${r!.id}`,
      headers: { ...tenant.auth, 'content-type': 'application/json' },
      payload: '{"annotations":{"__proto__":{"qa":"pass"},"ok":1}}',
    });
    expect(res.statusCode, res.payload).toBe(400);
    expect(errorCode(res)).toBe('validation_failed');
    expect((await get(`/v1/episodes/${r!.id}`)).json<Episode>().annotations).toEqual({});
  });

  it('refuses more than 256 keys in one request', async () => {
    const [r] = await ingest([report()]);
    const annotations = Object.fromEntries(Array.from({ length: 257 }, (_, i) => [`k${i}`, i]));
    const res = await patch(`/v1/episodes/${r!.id}`, { annotations });
    expect(res.statusCode).toBe(400);
    expect(errorCode(res)).toBe('validation_failed');
  });

  it('refuses annotations whose merged size exceeds 64 KiB, and keeps the previous layer', async () => {
    const [r] = await ingest([report()]);
    const big = 'x'.repeat(40 * 1024);
    const ok = await patch(`/v1/episodes/${r!.id}`, { annotations: { a: big } });
    expect(ok.statusCode, ok.payload).toBe(200);
    const tooBig = await patch(`/v1/episodes/${r!.id}`, { annotations: { b: big } });
    expect(tooBig.statusCode).toBe(400);
    expect(errorCode(tooBig)).toBe('validation_failed');
    expect((await get(`/v1/episodes/${r!.id}`)).json<Episode>().annotations).toEqual({ a: big });
    // Replacing the big value in place stays under the limit.
    const replace = await patch(`/v1/episodes/${r!.id}`, { annotations: { a: null, b: big } });
    expect(replace.statusCode, replace.payload).toBe(200);
    expect(replace.json<Episode>().annotations).toEqual({ b: big });
    // One value alone over the limit.
    const single = await patch(`/v1/episodes/${r!.id}`, { annotations: { c: 'y'.repeat(65 * 1024) } });
    expect(single.statusCode).toBe(400);
    expect(errorCode(single)).toBe('validation_failed');
  });

  it('is 404 for an unknown episode', async () => {
    const res = await patch('/v1/episodes/ep_000000000000', { annotations: { a: 1 } });
    expect(res.statusCode).toBe(404);
    expect(errorCode(res)).toBe('not_found');
  });
});

describe('PATCH /v1/episodes/:id/outcome and outcome-history', () => {
  it('changes outcome but not recorded_outcome, and appends the history in order with the key as actor', async () => {
    const writer = await t.createKey(tenant.org, ['data:write', 'data:read']);
    const [r] = await ingest([report({ outcome: 'success' })]);
    const t1 = t.clock.now();
    const res1 = await patch(`/v1/episodes/${r!.id}/outcome`, { outcome: 'failure', reason: 'gripper slipped' }, bearer(writer.key));
    expect(res1.statusCode, res1.payload).toBe(200);
    expect(res1.json<Episode>()).toMatchObject({ id: r!.id, outcome: 'failure', recorded_outcome: 'success' });

    t.clock.advance(60_000);
    const res2 = await patch(`/v1/episodes/${r!.id}/outcome`, { outcome: 'discarded', reason: 'camera was off' });
    expect(res2.statusCode, res2.payload).toBe(200);
    expect(res2.json<Episode>()).toMatchObject({ outcome: 'discarded', recorded_outcome: 'success' });
    expect((await get(`/v1/episodes/${r!.id}`)).json<Episode>()).toMatchObject({ outcome: 'discarded', recorded_outcome: 'success' });

    const adminKeyId = (await t.store.apiKeys.list(tenant.org.id)).find((k) => k.id !== writer.id)!.id;
    const hist = await get(`/v1/episodes/${r!.id}/outcome-history`);
    expect(hist.statusCode).toBe(200);
    expect(hist.json()).toEqual({
      outcome_history: [
        { actor: writer.id, at: iso(t1), from: 'success', to: 'failure', reason: 'gripper slipped' },
        { actor: adminKeyId, at: iso(t1 + 60_000), from: 'failure', to: 'discarded', reason: 'camera was off' },
      ],
    });
  });

  it('starts with an empty history', async () => {
    const [r] = await ingest([report()]);
    expect((await get(`/v1/episodes/${r!.id}/outcome-history`)).json()).toEqual({ outcome_history: [] });
  });

  it.each([
    ['reason missing', { outcome: 'failure' }],
    ['reason empty', { outcome: 'failure', reason: '' }],
    ['reason of 1025 characters', { outcome: 'failure', reason: 'r'.repeat(1025) }],
    ['reason not a string', { outcome: 'failure', reason: 5 }],
    ['outcome missing', { reason: 'because' }],
    ['outcome unknown', { outcome: 'great', reason: 'because' }],
    ['an extra field', { outcome: 'failure', reason: 'because', recorded_outcome: 'failure' }],
  ])('refuses %s with 400 validation_failed and records nothing', async (_name, body) => {
    const [r] = await ingest([report()]);
    const res = await patch(`/v1/episodes/${r!.id}/outcome`, body);
    expect(res.statusCode, res.payload).toBe(400);
    expect(errorCode(res)).toBe('validation_failed');
    expect((await get(`/v1/episodes/${r!.id}`)).json<Episode>()).toMatchObject({ outcome: 'success', recorded_outcome: 'success' });
    expect((await get(`/v1/episodes/${r!.id}/outcome-history`)).json()).toEqual({ outcome_history: [] });
  });

  it('accepts a reason of 1024 characters', async () => {
    const [r] = await ingest([report()]);
    const res = await patch(`/v1/episodes/${r!.id}/outcome`, { outcome: 'failure', reason: 'r'.repeat(1024) });
    expect(res.statusCode, res.payload).toBe(200);
  });

  it('is 404 for an unknown episode', async () => {
    const res = await patch('/v1/episodes/ep_000000000000/outcome', { outcome: 'failure', reason: 'x' });
    expect(res.statusCode).toBe(404);
    expect(errorCode(res)).toBe('not_found');
  });
});

describe('GET /v1/episodes/export', () => {
  it('streams NDJSON rows: the episode plus files and locations', async () => {
    const files = [
      { path: 'bag.mcap', size_bytes: 100, sha256: 'e'.repeat(64) },
      { path: 'video/cam0.mp4', size_bytes: 50, sha256: 'f'.repeat(64) },
    ];
    const [a, b] = await ingest([report({ manifest: { files, total_bytes: 150 }, metadata: { site: 'lab' } }), report()]);
    await addReplica(a!.id, 'dst_1', 'verified');
    await addReplica(a!.id, 'dst_2', 'granted', null);
    const res = await get('/v1/episodes/export');
    expect(res.statusCode, res.payload).toBe(200);
    expect(res.headers['content-type']).toMatch(/^application\/x-ndjson/);
    expect(res.headers['x-next-cursor']).toBeUndefined();
    expect(res.payload.endsWith('\n')).toBe(true);
    const lines = exportLines(res);
    expect(lines.map((l) => l.id)).toEqual([a!.id, b!.id]);
    const listed = (await list('')).episodes;
    expect(lines[0]).toEqual({
      ...listed[0],
      files,
      locations: [
        { destination_id: 'dst_1', state: 'verified', object_key: `obj/${a!.id}`, grant_id: 'grt_dst_1' },
        { destination_id: 'dst_2', state: 'granted', object_key: null, grant_id: 'grt_dst_2' },
      ],
    });
    expect(lines[1]).toEqual({ ...listed[1], files: [], locations: [] });
  });

  it('is empty (and complete) when nothing matches', async () => {
    await ingest([report()]);
    const res = await get('/v1/episodes/export?task_id=none');
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toMatch(/^application\/x-ndjson/);
    expect(res.payload).toBe('');
    expect(res.headers['x-next-cursor']).toBeUndefined();
  });

  it('defaults to 1000 rows, carries X-Next-Cursor while more remain, and pages to the end', async () => {
    const reports = await ingest(Array.from({ length: 1203 }, () => report()));
    const listSpy = vi.spyOn(t.store.episodes, 'listLines');
    const p1 = await get('/v1/episodes/export');
    expect(p1.statusCode).toBe(200);
    const l1 = exportLines(p1);
    expect(l1).toHaveLength(1000);
    const cursor = p1.headers['x-next-cursor'];
    expect(cursor).toEqual(expect.any(String));
    const p2 = await get(`/v1/episodes/export?cursor=${encodeURIComponent(cursor as string)}`);
    const l2 = exportLines(p2);
    expect(l2).toHaveLength(203);
    expect(p2.headers['x-next-cursor']).toBeUndefined();
    expect([...l1, ...l2].map((l) => l.id)).toEqual(reports.map((r) => r.id));
    // Streamed in chunks: the store is never asked for a whole page of rows at once.
    expect(listSpy.mock.calls.length).toBeGreaterThanOrEqual(3);
    for (const [, , , limit] of listSpy.mock.calls) expect(limit).toBeLessThanOrEqual(500);
  });

  it('takes limit up to 5000 and refuses 0 and 5001', async () => {
    await ingest(Array.from({ length: 3 }, () => report()));
    expect(exportLines(await get('/v1/episodes/export?limit=5000'))).toHaveLength(3);
    for (const bad of ['0', '5001', 'x']) {
      const res = await get(`/v1/episodes/export?limit=${bad}`);
      expect(res.statusCode, `limit=${bad}`).toBe(400);
      expect(errorCode(res)).toBe('validation_failed');
    }
  });

  it('walks filtered pages to every matching row exactly once, also while rows arrive', async () => {
    const wanted: EpisodeReport[] = [];
    for (let i = 0; i < 25; i++) {
      const r = report({ metadata: { site: i % 3 === 0 ? 'field' : 'lab' } });
      await ingest([r]);
      if (i % 3 !== 0) wanted.push(r);
    }
    const seen: string[] = [];
    let cursor: string | undefined;
    let pages = 0;
    let fullPagesWithoutCursor = 0;
    do {
      const res = await get(`/v1/episodes/export?metadata.site=lab&limit=4${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
      expect(res.statusCode, res.payload).toBe(200);
      const lines = exportLines(res);
      seen.push(...lines.map((l) => l.id));
      cursor = res.headers['x-next-cursor'] as string | undefined;
      if (cursor === undefined && lines.length === 4) fullPagesWithoutCursor++;
      if (pages++ === 1) {
        const late = report({ metadata: { site: 'lab' } });
        await ingest([late, report({ metadata: { site: 'field' } })]);
        wanted.push(late);
      }
    } while (cursor !== undefined && pages < 100);
    expect(seen).toEqual(wanted.map((r) => r.id));
    // wanted has 18 rows: pages of 4 end with a partial page, so the last page has no cursor.
    expect(fullPagesWithoutCursor).toBe(0);
  });

  it('ends without X-Next-Cursor when the last page is exactly full', async () => {
    await ingest(Array.from({ length: 4 }, () => report()));
    const p1 = await get('/v1/episodes/export?limit=2');
    expect(p1.headers['x-next-cursor']).toEqual(expect.any(String));
    const p2 = await get(`/v1/episodes/export?limit=2&cursor=${encodeURIComponent(p1.headers['x-next-cursor'] as string)}`);
    expect(exportLines(p2)).toHaveLength(2);
    expect(p2.headers['x-next-cursor']).toBeUndefined();
  });

  it('refuses an invalid cursor and an unknown filter key with 400', async () => {
    for (const url of ['/v1/episodes/export?cursor=%21%21', '/v1/episodes/export?colour=red', '/v1/episodes/export?outcome=meh']) {
      const res = await get(url);
      expect(res.statusCode, url).toBe(400);
      expect(errorCode(res)).toBe('validation_failed');
      expect(res.headers['content-type']).toMatch(/^application\/json/);
    }
  });

  it('applies the filters like the list', async () => {
    const [a] = await ingest([report({ task_id: 't1', metadata: { n: 1 } }), report({ task_id: 't2', metadata: { n: 1 } })]);
    await patch(`/v1/episodes/${a!.id}`, { annotations: { qa: 'pass' } });
    for (const query of ['?task_id=t1', '?metadata.n=1&task_id=t1', '?annotation.qa=pass', '?sync_state=unverified&task_id=t1']) {
      const res = await get(`/v1/episodes/export${query}`);
      expect(exportLines(res).map((l) => l.id), query).toEqual(await listIds(query));
      expect(exportLines(res).map((l) => l.id), query).toEqual([a!.id]);
    }
  });
});

describe('scopes, entitlement and meter', () => {
  async function keyWith(scopes: Scope[]): Promise<{ authorization: string }> {
    return bearer((await t.createKey(tenant.org, scopes)).key);
  }

  it('data:read reads; writes need data:write (403 insufficient_scope)', async () => {
    const [r] = await ingest([report()]);
    const reader = await keyWith(['data:read']);
    for (const url of ['/v1/episodes', `/v1/episodes/${r!.id}`, `/v1/episodes/${r!.id}/segments`, `/v1/episodes/${r!.id}/outcome-history`, `/v1/episodes/${r!.id}/files`, '/v1/episodes/export']) {
      expect((await get(url, reader)).statusCode, url).toBe(200);
    }
    const p1 = await patch(`/v1/episodes/${r!.id}`, { annotations: { a: 1 } }, reader);
    expect(p1.statusCode).toBe(403);
    expect(errorCode(p1)).toBe('insufficient_scope');
    expect(errorDetails(p1)).toMatchObject({ required_scope: 'data:write' });
    const p2 = await patch(`/v1/episodes/${r!.id}/outcome`, { outcome: 'failure', reason: 'x' }, reader);
    expect(p2.statusCode).toBe(403);
    expect(errorCode(p2)).toBe('insufficient_scope');
    expect((await get(`/v1/episodes/${r!.id}`)).json<Episode>()).toMatchObject({ outcome: 'success', annotations: {} });

    const writer = await keyWith(['data:write']);
    expect((await patch(`/v1/episodes/${r!.id}`, { annotations: { a: 1 } }, writer)).statusCode).toBe(200);
    expect((await patch(`/v1/episodes/${r!.id}/outcome`, { outcome: 'failure', reason: 'x' }, writer)).statusCode).toBe(200);
  });

  it('other scopes get 403 insufficient_scope on reads; no key is 401', async () => {
    const robotsOnly = await keyWith(['robots:read', 'robots:command', 'fleet:read']);
    const res = await get('/v1/episodes', robotsOnly);
    expect(res.statusCode).toBe(403);
    expect(errorCode(res)).toBe('insufficient_scope');
    expect(errorDetails(res)).toMatchObject({ required_scope: 'data:read' });
    const anon = await t.app.inject({ method: 'GET', url: '/v1/episodes' });
    expect(anon.statusCode).toBe(401);
    expect(errorCode(anon)).toBe('unauthenticated');
  });

  it('needs the data.metadata entitlement', async () => {
    await t.store.orgs.setFeature(tenant.org.id, 'data.metadata', false);
    for (const res of [await get('/v1/episodes'), await get('/v1/episodes/export'), await patch('/v1/episodes/ep_000000000000', { annotations: {} })]) {
      expect(res.statusCode).toBe(403);
      expect(errorCode(res)).toBe('entitlement_required');
    }
  });

  it('meters each successful list as episodes.list, and nothing else as it', async () => {
    const [r] = await ingest([report()]);
    expect((await usage()).get('episodes.list')).toBeUndefined();
    await list('');
    await list('?limit=1');
    await list('?task_id=x');
    expect((await get('/v1/episodes?colour=red')).statusCode).toBe(400);
    expect((await get(`/v1/episodes/${r!.id}`)).statusCode).toBe(200);
    expect((await get('/v1/episodes/export')).statusCode).toBe(200);
    const counts = await usage();
    expect(counts.get('episodes.list')).toBe(3);
    const other = await t.createTenant();
    const res = await get('/v1/usage', other.auth);
    expect(res.json<Usage>().usage.filter((u) => u.meter === 'episodes.list')).toEqual([]);
  });
});
