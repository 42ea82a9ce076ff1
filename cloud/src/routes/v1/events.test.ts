import { connect, type AddressInfo } from 'node:net';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { SECOND, WEBHOOK_EVENTS, type Scope } from '@fleet/protocol';
import { robotStatusEvent } from '../../rules/events.js';
import { createEnrollmentToken, enrollRobot } from '../../robots/enrollment.js';
import { startTestCloud, testReport, type TestCloud, type TestTenant } from '../../test-support.js';
import type { CloudConfigInput } from '../../config.js';

/**
 * GET /v1/events/stream on a listening app with a real store, read with fetch as a client would:
 * who may read what, bad input, frames against the webhook payloads, resuming with
 * Last-Event-ID, organization isolation, heartbeats, the stream bound and closing the app.
 * Events are appended through the store; the test wakes the hub (as the server's event sources
 * do) or moves the manual clock past a poll.
 */

interface Frame {
  id: string | undefined;
  event: string;
  data: string;
}

/** Reads an SSE body as it arrives: frames, comment lines, `retry:`, and whether it ended. */
class StreamReader {
  readonly frames: Frame[] = [];
  readonly comments: string[] = [];
  /** Ids of blocks without data: where the stream started. */
  readonly positions: string[] = [];
  retry: number | undefined;
  ended = false;
  private readonly done: Promise<void>;

  constructor(readonly res: Response) {
    this.done = this.read().finally(() => {
      this.ended = true;
    });
  }

  get ids(): string[] {
    return this.frames.map((f) => f.id!);
  }

  private async read(): Promise<void> {
    const reader: ReadableStreamDefaultReader<Uint8Array> = this.res.body!.getReader();
    const decoder = new TextDecoder();
    let buffer = '';
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return;
        buffer += decoder.decode(value, { stream: true });
        let end: number;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const frame: Frame = { id: undefined, event: 'message', data: '' };
          let hasData = false;
          for (const line of block.split('\n')) {
            if (line.startsWith(':')) this.comments.push(line);
            else if (line.startsWith('retry: ')) this.retry = Number(line.slice(7));
            else if (line.startsWith('id: ')) frame.id = line.slice(4);
            else if (line.startsWith('event: ')) frame.event = line.slice(7);
            else if (line.startsWith('data: ')) {
              frame.data += (hasData ? '\n' : '') + line.slice(6);
              hasData = true;
            }
          }
          if (hasData) this.frames.push(frame);
          else if (frame.id !== undefined) this.positions.push(frame.id);
        }
      }
    } catch {
      // Aborted by the test.
    }
  }

  async finished(): Promise<void> {
    await this.done;
  }
}

let t: TestCloud;
let base: string;
let tenant: TestTenant;
const controllers: AbortController[] = [];

async function start(config: CloudConfigInput = {}): Promise<void> {
  t = await startTestCloud({ config: { eventStreamHeartbeatMs: 1000, eventStreamPollMs: 100, ...config } });
  await t.app.listen({ host: '127.0.0.1', port: 0 });
  base = `http://127.0.0.1:${(t.app.server.address() as AddressInfo).port}`;
  tenant = await t.createTenant();
}

afterEach(async () => {
  for (const c of controllers.splice(0)) c.abort();
  await t.close();
});

function get(query = '', opts: { key?: string; headers?: Record<string, string> } = {}): Promise<Response> {
  const controller = new AbortController();
  controllers.push(controller);
  return fetch(`${base}/v1/events/stream${query}`, { headers: { authorization: `Bearer ${opts.key ?? tenant.adminKey}`, ...opts.headers }, signal: controller.signal });
}

async function open(query = '', opts: { key?: string; headers?: Record<string, string> } = {}): Promise<StreamReader> {
  const res = await get(query, opts);
  expect(res.status, await (res.status === 200 ? Promise.resolve('') : res.text())).toBe(200);
  return new StreamReader(res);
}

async function errorOf(res: Response): Promise<{ code: string; details?: Record<string, unknown> }> {
  expect(res.headers.get('content-type')).toMatch(/^application\/json/);
  return ((await res.json()) as { error: { code: string; details?: Record<string, unknown> } }).error;
}

async function robotIn(orgId: string): Promise<string> {
  const org = (await t.store.orgs.get(orgId))!;
  const { token } = await createEnrollmentToken(t.store, t.clock, { org, createdBy: 'test' });
  return (await enrollRobot(t.store, t.clock, { token }, ['mqtt://x'])).robot_id;
}

/** Appends an episode.finalized to `orgId`'s log and wakes the hub; the episode id. */
async function finalized(orgId: string, robotId: string): Promise<string> {
  const report = testReport();
  t.clock.advance(SECOND);
  await t.store.episodes.ingest([{ orgId, robotId, report, reportedAt: t.clock.now() }]);
  t.cloud.streams.notify([orgId]);
  return report.id;
}

/** A robot.status change, appended and woken. */
async function statusChange(orgId: string, robotId: string, connected: boolean, recordingState: 'idle' | 'recording' = 'idle'): Promise<void> {
  t.clock.advance(SECOND);
  expect(await t.store.robots.updateStatus(robotId, { connected, recordingState, seenAt: t.clock.now() }, robotStatusEvent)).toBe(true);
  t.cloud.streams.notify([orgId]);
}

async function logIds(orgId: string): Promise<string[]> {
  return (await t.store.events.listAfter(orgId, 0, { limit: 1000 })).map((e) => t.eventId(e.id));
}

async function key(scopes: Scope[], orgId = tenant.org.id): Promise<string> {
  return (await t.createKey(orgId, scopes)).key;
}

describe('GET /v1/events/stream', () => {
  beforeEach(async () => {
    await start();
  });

  it('answers text/event-stream at once: the head, retry: 2000, then events as they come, no history', async () => {
    const robot = await robotIn(tenant.org.id);
    await finalized(tenant.org.id, robot);
    const res = await get();
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
    expect(res.headers.get('cache-control')).toBe('no-cache, no-transform');
    expect(res.headers.get('x-accel-buffering')).toBe('no');
    expect(res.headers.get('x-request-id')).toMatch(/^req_/);
    const s = new StreamReader(res);
    await expect.poll(() => s.retry).toBe(2000);
    // Then where it starts: the last event of the log so far, an id without data.
    const before = await logIds(tenant.org.id);
    await expect.poll(() => s.positions).toEqual([before.at(-1)]);
    const ep = await finalized(tenant.org.id, robot);
    await statusChange(tenant.org.id, robot, true);
    await expect.poll(() => s.frames.map((f) => f.event)).toEqual(['episode.finalized', 'robot.status']);
    expect(JSON.parse(s.frames[0]!.data)).toMatchObject({ episode_id: ep, robot_id: robot, state: 'reported' });
    expect(JSON.parse(s.frames[1]!.data)).toEqual({ schema_version: 1, robot_id: robot, online: true, recording_state: 'idle', last_seen_at: new Date(t.clock.now()).toISOString() });
    // The ids are the log's, in order; the event before the stream opened is not replayed.
    expect(s.ids).toEqual((await logIds(tenant.org.id)).slice(1));
  });

  it('frames carry the webhook payload byte for byte, under the id webhooks send as X-Service-Event-Id', async () => {
    const robot = await robotIn(tenant.org.id);
    await t.store.webhooks.create({ id: 'wh_1', orgId: tenant.org.id, url: 'https://example.com/h', events: [...WEBHOOK_EVENTS], secretSealed: 'x', createdAt: t.clock.now() }, 5);
    const s = await open('?types=episode.finalized');
    for (let i = 0; i < 3; i++) await finalized(tenant.org.id, robot);
    await expect.poll(() => s.frames.length).toBe(3);
    await t.store.webhooks.fanOut(t.clock.now());
    const deliveries = [];
    for (;;) {
      const [d] = await t.store.webhooks.claimDue(t.clock.now(), 1, 60_000);
      if (!d) break;
      deliveries.push(d);
      await t.store.webhooks.record(d.id, { kind: 'delivered', status: 200, at: t.clock.now() }, d.claim);
    }
    expect(s.frames.map((f) => [f.id, f.event, f.data])).toEqual(deliveries.map((d) => [t.secrets.opaqueIds().publicEventId(d.eventId), d.eventType, d.payload]));
  });

  it('lets each key read only the families its scopes and its organization allow (403 naming what is missing)', async () => {
    const robot = await robotIn(tenant.org.id);
    const data = await open('', { key: await key(['data:read']) });
    const robots = await open('', { key: await key(['robots:read']) });
    const fleet = await open('?types=robot.status', { key: await key(['fleet:read']) });
    await finalized(tenant.org.id, robot);
    await statusChange(tenant.org.id, robot, true);
    await expect.poll(() => [data.frames.map((f) => f.event), robots.frames.map((f) => f.event), fleet.frames.map((f) => f.event)]).toEqual([
      ['episode.finalized'],
      ['robot.status'],
      ['robot.status'],
    ]);

    const noRobots = await get('?types=episode.finalized,robot.status', { key: await key(['data:read']) });
    expect(noRobots.status).toBe(403);
    expect(await errorOf(noRobots)).toMatchObject({ code: 'insufficient_scope', details: { required_scope: ['robots:read', 'fleet:read'] } });
    const noData = await get('?types=episode.verified', { key: await key(['robots:read', 'robots:command']) });
    expect(noData.status).toBe(403);
    expect(await errorOf(noData)).toMatchObject({ code: 'insufficient_scope', details: { required_scope: 'data:read' } });
    // A key that can read no family at all is refused at the route.
    const none = await get('', { key: await key(['robots:command', 'data:write']) });
    expect(none.status).toBe(403);
    expect((await errorOf(none)).code).toBe('insufficient_scope');

    // An organization without data.metadata: robot.status only, episode events 403 entitlement_required.
    const other = await t.createTenant();
    await t.store.orgs.setFeature(other.org.id, 'data.metadata', false);
    const asked = await get('?types=episode.finalized', { key: other.adminKey });
    expect(asked.status).toBe(403);
    expect(await errorOf(asked)).toMatchObject({ code: 'entitlement_required', details: { feature: 'data.metadata' } });
    const dataOnly = await get('', { key: await key(['data:read'], other.org.id) });
    expect(dataOnly.status).toBe(403);
    expect(await errorOf(dataOnly)).toMatchObject({ code: 'entitlement_required', details: { feature: 'data.metadata' } });
    const otherRobot = await robotIn(other.org.id);
    const allowed = await open('', { key: other.adminKey });
    await finalized(other.org.id, otherRobot);
    await statusChange(other.org.id, otherRobot, true);
    await expect.poll(() => allowed.frames.map((f) => f.event)).toEqual(['robot.status']);
  });

  it('answers HEAD with the head alone, holding no stream', async () => {
    const res = await fetch(`${base}/v1/events/stream`, { method: 'HEAD', headers: { authorization: `Bearer ${tenant.adminKey}` } });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
    expect(t.cloud.streams.openStreams).toBe(0);
  });

  it('answers 400 validation_failed to bad input, never a 500', async () => {
    const bad: [string, Record<string, string>][] = [
      ['?types=bogus', {}],
      ['?types=', {}],
      ['?types=episode.finalized,,robot.status', {}],
      ['?types=episode.finalized&types=robot.status', {}],
      [`?types=${'a'.repeat(600)}`, {}],
      ['?robot_id=', {}],
      [`?robot_id=${'r'.repeat(200)}`, {}],
      ['?last_event_id=42', {}],
      ['?last_event_id=evt_', {}],
      ['?last_event_id=evt_01', {}],
      ['?last_event_id=evt_99999999999999999', {}],
      ['?since=evt_1', {}],
      ['', { 'last-event-id': 'nope' }],
      ['', { 'last-event-id': 'evt_-1' }],
      ['?last_event_id=evt_1', { 'last-event-id': 'evt_1x' }],
      // Shaped like a handle, but not one this service gave out.
      ['', { 'last-event-id': `evt_${'a'.repeat(26)}` }],
      ['', { 'last-event-id': `evt_${'a'.repeat(25)}` }],
    ];
    for (const [query, headers] of bad) {
      const res = await get(query, { headers });
      expect([res.status, (await errorOf(res)).code], `${query} ${JSON.stringify(headers)}`).toEqual([400, 'validation_failed']);
    }
  });

  it('names an id of the documented shape that it did not give out by its own issue code, where it was given', async () => {
    // The pattern cannot tell a made-up sealed handle from a real one; a client (or a fuzzer) can
    // tell this refusal from a malformed id by its code.
    const madeUp = `evt_${'a'.repeat(26)}`;
    const inHeader = await errorOf(await get('', { headers: { 'last-event-id': madeUp } }));
    expect(inHeader.details).toEqual({ issues: [{ location: 'headers', path: '/last-event-id', code: 'unknown_event_id', message: 'is not an event id this service gave out' }] });
    const inQuery = await errorOf(await get(`?last_event_id=${madeUp}`));
    expect(inQuery.details).toEqual({ issues: [{ location: 'querystring', path: '/last_event_id', code: 'unknown_event_id', message: 'is not an event id this service gave out' }] });
  });

  it('resumes after Last-Event-ID: every later event once, none lost, none repeated, then live ones', async () => {
    const robot = await robotIn(tenant.org.id);
    const first = await open();
    for (let i = 0; i < 3; i++) await finalized(tenant.org.id, robot);
    await expect.poll(() => first.frames.length).toBe(3);
    const lastSeen = first.ids[1]!;
    controllers.at(-1)!.abort();
    // Missed while away (and the third, which the client did get but did not acknowledge).
    await statusChange(tenant.org.id, robot, true);
    await finalized(tenant.org.id, robot);

    const resumed = await open('', { headers: { 'last-event-id': lastSeen } });
    await finalized(tenant.org.id, robot);
    const log = await logIds(tenant.org.id);
    await expect.poll(() => resumed.ids).toEqual(log.slice(log.indexOf(lastSeen) + 1));

    // The same from ?last_event_id= (curl); the header wins over it.
    const byQuery = await open(`?last_event_id=${log[3]}`);
    await expect.poll(() => byQuery.ids).toEqual(log.slice(4));
    const both = await open(`?last_event_id=${log[0]}`, { headers: { 'last-event-id': log[4]! } });
    await expect.poll(() => both.ids).toEqual(log.slice(5));
    // evt_0: the whole log; an id past this organization's log: from the present.
    const all = await open('?last_event_id=evt_0');
    await expect.poll(() => all.ids).toEqual(log);
    const ahead = await open('?last_event_id=evt_999999999');
    const next = await finalized(tenant.org.id, robot);
    await expect.poll(() => ahead.frames.map((f) => (JSON.parse(f.data) as { episode_id?: string }).episode_id)).toEqual([next]);
  });

  it("shows ids that are opaque and unique, telling nothing of other organizations' events; an earlier version's evt_<n> still resumes", async () => {
    const other = await t.createTenant();
    const [mine, theirs] = [await robotIn(tenant.org.id), await robotIn(other.org.id)];
    const s = await open();
    await finalized(tenant.org.id, mine);
    for (let i = 0; i < 3; i++) await finalized(other.org.id, theirs);
    await finalized(tenant.org.id, mine);
    await expect.poll(() => s.ids.length).toBe(2);
    for (const id of s.ids) expect(id).toMatch(/^evt_[a-z2-7]{26}$/);
    // The log's own numbers (3 of the other organization's between them) appear nowhere.
    const rows = await t.store.events.listAfter(tenant.org.id, 0, { limit: 10 });
    expect(rows.map((r) => r.id)).toEqual([rows[0]!.id, rows[0]!.id + 4]);
    expect(s.ids.join(' ')).not.toMatch(new RegExp(`\\b(${rows[0]!.id}|${rows[1]!.id})\\b`));
    // A client that kept evt_<n> from before the upgrade resumes after that event.
    const legacy = await open(`?last_event_id=evt_${rows[0]!.id}`);
    await expect.poll(() => legacy.ids).toEqual([s.ids[1]]);
  });

  it('filters by type and robot, on replay as live', async () => {
    const [r1, r2] = [await robotIn(tenant.org.id), await robotIn(tenant.org.id)];
    await statusChange(tenant.org.id, r1, true);
    await finalized(tenant.org.id, r2);
    const live = await open(`?types=robot.status&robot_id=${r2}`);
    await statusChange(tenant.org.id, r2, true);
    await finalized(tenant.org.id, r2);
    await statusChange(tenant.org.id, r1, false);
    await statusChange(tenant.org.id, r2, true, 'recording');
    const replay = await open(`?types=episode.finalized,robot.status&robot_id=${r2}&last_event_id=evt_0`);
    const expected = (await t.store.events.listAfter(tenant.org.id, 0, { limit: 100, robotId: r2 })).map((e) => t.eventId(e.id));
    await expect.poll(() => replay.ids).toEqual(expected);
    expect(expected).toHaveLength(4);
    await expect.poll(() => live.frames.map((f) => JSON.parse(f.data) as { robot_id: string; recording_state: string }).map((p) => [p.robot_id, p.recording_state])).toEqual([
      [r2, 'idle'],
      [r2, 'recording'],
    ]);
  });

  it("never carries another organization's events, live or replayed", async () => {
    const other = await t.createTenant();
    const mine = await robotIn(tenant.org.id);
    const theirs = await robotIn(other.org.id);
    const s = await open();
    await finalized(other.org.id, theirs);
    await statusChange(other.org.id, theirs, true);
    await finalized(tenant.org.id, mine);
    await expect.poll(() => s.frames.length).toBe(1);
    const replay = await open('?last_event_id=evt_0');
    const withTheirRobot = await open(`?last_event_id=evt_0&robot_id=${theirs}`);
    await statusChange(other.org.id, theirs, false);
    await finalized(tenant.org.id, mine);
    const log = await logIds(tenant.org.id);
    await expect.poll(() => [s.ids, replay.ids]).toEqual([log, log]);
    for (const r of [s, replay]) for (const f of r.frames) expect(JSON.parse(f.data)).toMatchObject({ robot_id: mine });
    expect(withTheirRobot.frames).toEqual([]);
  });

  it('sends a heartbeat comment every heartbeat interval', async () => {
    const s = await open();
    await expect.poll(() => s.retry).toBe(2000);
    expect(s.comments).toEqual([]);
    t.scheduler.advance(1000);
    await expect.poll(() => s.comments).toEqual([': heartbeat']);
    t.scheduler.advance(1000);
    await expect.poll(() => s.comments).toEqual([': heartbeat', ': heartbeat']);
  });

  it('ends a stream within a heartbeat once its key is revoked or expires, or its organization loses the feature it reads', async () => {
    const revoked = await t.createKey(tenant.org.id, ['data:read']);
    const expiring = await t.createKey(tenant.org.id, ['robots:read'], { expiresAt: t.clock.now() + 1500 });
    const other = await t.createTenant();
    const keep = await open('?types=robot.status');
    const a = await open('', { key: revoked.key });
    const b = await open('', { key: expiring.key });
    const c = await open('?types=episode.finalized', { key: other.adminKey });
    const d = await open('?types=robot.status', { key: other.adminKey });
    t.scheduler.advance(1000);
    await expect.poll(() => [a, b, c, d, keep].map((r) => r.comments.length)).toEqual([1, 1, 1, 1, 1]);
    expect(await t.store.apiKeys.revoke(tenant.org.id, revoked.id, t.clock.now())).toBe(true);
    await t.store.orgs.setFeature(other.org.id, 'data.metadata', false);
    t.scheduler.advance(1000);
    await expect.poll(() => [a, b, c, d, keep].map((r) => r.ended)).toEqual([true, true, true, false, false]);
    // Reconnecting is refused as any request would be.
    expect((await get('', { key: revoked.key })).status).toBe(401);
    expect((await get('?types=episode.finalized', { key: other.adminKey })).status).toBe(403);
  });

  it('a heartbeat while the previous check is still reading (a slow database) is checked after it, not skipped', async () => {
    const revoked = await t.createKey(tenant.org.id, ['data:read']);
    const s = await open('', { key: revoked.key });
    // The second check's read answers only when released, with what it read before: a slow database.
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const read = t.store.apiKeys.authRevision.bind(t.store.apiKeys);
    let reads = 0;
    const revisions = vi.spyOn(t.store.apiKeys, 'authRevision').mockImplementation(async () => {
      const revision = await read();
      if (++reads === 2) await gate;
      return revision;
    });
    const orgRead = t.store.orgs.get.bind(t.store.orgs);
    let rechecked = 0;
    const orgs = vi.spyOn(t.store.orgs, 'get').mockImplementation(async (id) => {
      const org = await orgRead(id);
      rechecked++;
      return org;
    });
    // The first check reads the key again (a stream's first) and notes the revision.
    t.scheduler.advance(1000);
    await expect.poll(() => rechecked).toBe(1);
    await new Promise((resolve) => setImmediate(resolve));
    // The second check reads the revision, then waits; the key is revoked meanwhile, and the
    // next heartbeat comes before that check ends.
    t.scheduler.advance(1000);
    await expect.poll(() => reads).toBe(2);
    expect(await t.store.apiKeys.revoke(tenant.org.id, revoked.id, t.clock.now())).toBe(true);
    t.scheduler.advance(1000);
    release();
    await expect.poll(() => s.ended).toBe(true);
    revisions.mockRestore();
    orgs.mockRestore();
  });

  it("reads another writer's events with the poll, without a wake", async () => {
    const robot = await robotIn(tenant.org.id);
    const s = await open();
    t.clock.advance(SECOND);
    // As another replica would: appended to the shared log, nothing woken in this process.
    await t.store.episodes.ingest([{ orgId: tenant.org.id, robotId: robot, report: testReport(), reportedAt: t.clock.now() }]);
    t.scheduler.advance(100);
    await expect.poll(() => s.frames.length).toBe(1);
  });

  it('ends every stream when the app closes, and the close does not wait for them', async () => {
    const a = await open();
    const b = await open('?types=robot.status');
    await t.cloud.close();
    await a.finished();
    await b.finished();
    expect([a.ended, b.ended]).toEqual([true, true]);
  });

  it('closes with a connection open that never sent a request, and drops it', async () => {
    const s = await open();
    // As a client pool's spare connection or a browser's preconnect: connected, nothing sent.
    const idle = connect((t.app.server.address() as AddressInfo).port, '127.0.0.1');
    const dropped = new Promise<void>((resolve) => idle.once('close', () => resolve()));
    idle.on('error', () => undefined);
    await new Promise<void>((resolve) => idle.once('connect', () => resolve()));
    await t.cloud.close();
    await s.finished();
    await dropped;
  });
});

describe('bounds', () => {
  it('refuses a stream past the per-organization bound with 429 rate_limited, and takes one again after a close', async () => {
    await start({ eventStreamsPerOrg: 2 });
    await open();
    await open();
    const over = await get();
    expect(over.status).toBe(429);
    expect(over.headers.get('retry-after')).toBe('5');
    expect(await errorOf(over)).toMatchObject({ code: 'rate_limited', details: { limit: 'event_streams_per_org', max: 2 } });
    // Another organization has its own bound.
    const other = await t.createTenant();
    await open('', { key: other.adminKey });
    controllers[0]!.abort();
    await expect.poll(() => t.cloud.streams.openStreams).toBe(2);
    await open();
  });

  it('catches up page by page while events keep coming, then joins the tail: the log in order, once', async () => {
    await start();
    const robot = await robotIn(tenant.org.id);
    // More than two pages of history (the hub reads 500 rows at a time).
    const batch = () => Array.from({ length: 600 }, () => ({ orgId: tenant.org.id, robotId: robot, report: testReport(), reportedAt: t.clock.now() }));
    await t.store.episodes.ingest(batch());
    await t.store.episodes.ingest(batch());
    const s = await open('?last_event_id=evt_0');
    // Appended and woken while the stream is catching up.
    for (let i = 0; i < 20; i++) await finalized(tenant.org.id, robot);
    const log = (await t.store.events.listAfter(tenant.org.id, 0, { limit: 1000 })).map((e) => e.id);
    for (let more = await t.store.events.listAfter(tenant.org.id, log.at(-1)!, { limit: 1000 }); more.length > 0; more = await t.store.events.listAfter(tenant.org.id, log.at(-1)!, { limit: 1000 })) log.push(...more.map((e) => e.id));
    expect(log).toHaveLength(1220);
    await expect.poll(() => s.frames.length).toBe(1220);
    expect(s.ids).toEqual(log.map((id) => t.eventId(id)));
  });
});
