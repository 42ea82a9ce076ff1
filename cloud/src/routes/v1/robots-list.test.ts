import type { LightMyRequestResponse } from 'fastify';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Robot, SyncHealthRowBody } from '@fleet/protocol';
import { createEnrollmentToken, enrollRobot } from '../../robots/enrollment.js';
import { bearer, errorCode, errorDetails, startTestCloud, testReport, type TestCloud, type TestTenant } from '../../test-support.js';

interface Page {
  robots: Robot[];
  cursor: string | null;
  prev_cursor: string | null;
}

let t: TestCloud;
let tenant: TestTenant;
/** Enrolled in this order; names out of id order so the orders differ. */
const NAMES = ['delta', 'Alpha', 'charlie-2', 'bravo', 'charlie-1', 'echo'];
let ids: string[];

beforeEach(async () => {
  t = await startTestCloud();
  tenant = await t.createTenant();
  const { token } = await createEnrollmentToken(t.store, t.clock, { org: tenant.org, createdBy: 'test', maxUses: NAMES.length });
  ids = [];
  for (const name of NAMES) ids.push((await enrollRobot(t.store, t.clock, { token, name }, ['mqtt://localhost:1883'])).robot_id);
  // Online: delta (recording), charlie-2, charlie-1; the others offline, echo never seen.
  const now = t.clock.now();
  await t.store.robots.updateStatus(ids[0]!, { connected: true, recordingState: 'recording', seenAt: now - 1000 });
  await t.store.robots.updateStatus(ids[1]!, { connected: false, recordingState: 'idle', seenAt: now - 5000 });
  await t.store.robots.updateStatus(ids[2]!, { connected: true, recordingState: 'idle', seenAt: now - 2000 });
  await t.store.robots.updateStatus(ids[3]!, { connected: false, recordingState: 'idle', seenAt: now - 4000 });
  await t.store.robots.updateStatus(ids[4]!, { connected: true, recordingState: 'idle', seenAt: now - 3000 });
});
afterEach(async () => {
  await t.close();
});

async function get(url: string, headers: Record<string, string> = tenant.auth): Promise<LightMyRequestResponse> {
  return t.app.inject({ method: 'GET', url, headers });
}
async function page(query: string, headers?: Record<string, string>): Promise<Page> {
  const res = await get(`/v1/robots${query ? `?${query}` : ''}`, headers);
  expect(res.statusCode, res.payload).toBe(200);
  return res.json<Page>();
}
const names = (p: Page) => p.robots.map((r) => r.name);

describe('GET /v1/robots: filters, orders, pages both ways', () => {
  it('without the new parameters: by id, the id cursor as before, and prev_cursor on later pages', async () => {
    const byId = [...ids].sort();
    const first = await page('limit=4');
    expect(first.robots.map((r) => r.id)).toEqual(byId.slice(0, 4));
    expect(first.prev_cursor).toBeNull();
    // The forward cursor by id is still the id itself (cursors handed out before sorting existed keep working).
    expect(JSON.parse(Buffer.from(first.cursor!, 'base64url').toString())).toBe(byId[3]);
    const second = await page(`limit=4&cursor=${first.cursor}`);
    expect(second.robots.map((r) => r.id)).toEqual(byId.slice(4));
    expect(second.cursor).toBeNull();
    const back = await page(`limit=4&cursor=${second.prev_cursor}`);
    expect(back.robots.map((r) => r.id)).toEqual(byId.slice(0, 4));
    expect(back.prev_cursor).toBeNull();
    expect(back.cursor).not.toBeNull();
  });

  it('sorts by name and last_seen_at either way, each cursor paging its own order only', async () => {
    const asc = [...NAMES].sort();
    let p = await page('sort=name&limit=2');
    const seen = [...names(p)];
    while (p.cursor) {
      p = await page(`sort=name&limit=2&cursor=${p.cursor}`);
      seen.push(...names(p));
    }
    expect(seen).toEqual(asc);
    // Backwards from the last page to the first.
    const back = [...names(p)];
    while (p.prev_cursor) {
      p = await page(`sort=name&limit=2&cursor=${p.prev_cursor}`);
      back.unshift(...names(p));
    }
    expect(back).toEqual(asc);

    expect(names(await page('sort=name&order=desc'))).toEqual([...asc].reverse());
    // Most recently seen first; never seen last.
    expect(names(await page('sort=last_seen_at&order=desc'))).toEqual(['delta', 'charlie-2', 'charlie-1', 'bravo', 'Alpha', 'echo']);
    const one = await page('sort=last_seen_at&order=desc&limit=1');
    expect(errorCode(await get(`/v1/robots?sort=name&order=desc&limit=1&cursor=${one.cursor}`))).toBe('validation_failed');
    expect(errorCode(await get(`/v1/robots?limit=1&cursor=${one.cursor}`))).toBe('validation_failed');
    const byIdCursor = (await page('limit=1')).cursor;
    expect(errorCode(await get(`/v1/robots?sort=name&cursor=${byIdCursor}`))).toBe('validation_failed');
  });

  it('filters by name, connection and recording state, combined, and validates them', async () => {
    expect(names(await page('q=CHARLIE&sort=name'))).toEqual(['charlie-1', 'charlie-2']);
    expect(names(await page('q=a&connected=false&sort=name'))).toEqual(['Alpha', 'bravo']);
    expect(names(await page('connected=true&recording_state=recording'))).toEqual(['delta']);
    expect(names(await page('q=%25'))).toEqual([]);
    const filtered = await page('connected=true&sort=name&limit=2');
    expect(names(filtered)).toEqual(['charlie-1', 'charlie-2']);
    expect(names(await page(`connected=true&sort=name&limit=2&cursor=${filtered.cursor}`))).toEqual(['delta']);
    for (const q of ['q=', 'connected=yes', 'recording_state=busy', 'sort=created_at', 'order=up', 'hours_to_full_below=1.5', 'hours_to_full_below=0', 'name=x']) {
      expect(errorCode(await get(`/v1/robots?${q}`)), q).toBe('validation_failed');
    }
  });

  it('hours_to_full_below: robots whose disk fills sooner, and only for a key that may read sync health', async () => {
    await t.store.sync.notePressure(ids[3]!, { free_bytes: 10, backlog_bytes: 100, hours_to_full: 5 }, t.clock.now());
    await t.store.sync.notePressure(ids[5]!, { free_bytes: 10, backlog_bytes: 100, hours_to_full: 30 }, t.clock.now());
    await t.store.sync.notePressure(ids[0]!, { free_bytes: 10, backlog_bytes: 0, hours_to_full: null }, t.clock.now());
    expect(names(await page('hours_to_full_below=24'))).toEqual(['bravo']);
    expect(names(await page('hours_to_full_below=48&sort=name'))).toEqual(['bravo', 'echo']);
    const fleet = await t.createKey(tenant.org, ['fleet:read']);
    const denied = await get('/v1/robots?hours_to_full_below=24', bearer(fleet.key));
    expect([denied.statusCode, errorCode(denied), errorDetails(denied)?.required_scope]).toEqual([403, 'insufficient_scope', 'data:read']);
    expect((await get('/v1/robots', bearer(fleet.key))).statusCode).toBe(200);
    const both = await t.createKey(tenant.org, ['fleet:read', 'data:read']);
    expect(names(await page('hours_to_full_below=24', bearer(both.key)))).toEqual(['bravo']);
    await t.store.orgs.setFeature(tenant.org.id, 'data.metadata', false);
    expect(errorCode(await get('/v1/robots?hours_to_full_below=24'))).toBe('entitlement_required');
  });
});

describe('GET /v1/sync-health/robots?robot_id=', () => {
  it('answers the robots asked for (of this organization), at most 100 ids', async () => {
    await t.store.episodes.ingest([{ orgId: tenant.org.id, robotId: ids[1]!, report: testReport(), reportedAt: t.clock.now() }]);
    const all = (await get('/v1/sync-health/robots')).json<{ robots: SyncHealthRowBody[] }>().robots;
    expect(all.map((r) => r.robot_id)).toEqual([...ids].sort());
    const stranger = await t.createTenant();
    const { token } = await createEnrollmentToken(t.store, t.clock, { org: stranger.org, createdBy: 'test' });
    const theirs = (await enrollRobot(t.store, t.clock, { token }, ['mqtt://x'])).robot_id;
    const res = await get(`/v1/sync-health/robots?robot_id=${ids[1]},${ids[4]},${theirs},rbt_unknown,${ids[1]}`);
    expect(res.statusCode, res.payload).toBe(200);
    const rows = res.json<{ robots: SyncHealthRowBody[] }>().robots;
    expect(rows).toEqual(all.filter((r) => r.robot_id === ids[1] || r.robot_id === ids[4]));
    expect(rows.find((r) => r.robot_id === ids[1])).toMatchObject({ episodes_reported: 1, unverified: 1 });
    const many = Array.from({ length: 101 }, (_, i) => `rbt_${i}`).join(',');
    for (const q of [`robot_id=${many}`, 'robot_id=', `robot_id=${ids[0]},,${ids[1]}`, 'robot=x']) {
      expect(errorCode(await get(`/v1/sync-health/robots?${q}`)), q).toBe('validation_failed');
    }
    const hundred = Array.from({ length: 100 }, (_, i) => (i === 0 ? ids[0] : `rbt_${i}`)).join(',');
    expect((await get(`/v1/sync-health/robots?robot_id=${hundred}`)).json<{ robots: SyncHealthRowBody[] }>().robots.map((r) => r.robot_id)).toEqual([ids[0]]);
  });
});
