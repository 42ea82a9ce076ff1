/**
 * The typed client (`@fleet/client`) against a real `fleet-cloud serve` fed by a real simulated
 * fleet: every operation of the OpenAPI document is called at least once (a recording fetch
 * notes which), the page iterators and the export and manifest streams walk several pages, a
 * POST whose answer is lost is retried under the same Idempotency-Key and replayed, errors come
 * back typed, and the signature helpers accept what the cloud really sends to a webhook
 * receiver and to a grant provider.
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { FleetApiError, FleetClient, OPERATIONS, verifyGrantRequestSignature, verifyWebhookSignature, type Episode, type FleetClientOptions } from '@fleet/client';
import { createTestPki, startHttpsReceiver, type ReceivedRequest, type TestPki, type TestReceiver } from '../cloud/src/egress/test-https.js';
import { startCloud, type CloudProcess } from './support/cloud.js';
import { startFleet, type FleetProcess } from './support/robots.js';
import { waitFor } from './support/wait.js';

let pki: TestPki;
let cloud: CloudProcess;
let fleet: FleetProcess;
let rx: TestReceiver;
/** Operations the client sent, as `METHOD /v1/path/{template}`. */
const called = new Set<string>();
const templates = Object.keys(OPERATIONS).map((op) => {
  const [method, path] = op.split(' ') as [string, string];
  return { op, method, re: new RegExp(`^${path.replace(/\{[^}]+\}/g, '[^/]+')}$`) };
});

/** A fetch that notes the operation of every request it sends. */
const recordingFetch: typeof fetch = (input, init) => {
  const url = new URL(input instanceof Request ? input.url : String(input));
  const method = (init?.method ?? 'GET').toUpperCase();
  // The most specific template wins (`/v1/episodes/export` before `/v1/episodes/{id}`).
  const hit = templates.filter((t) => t.method === method && t.re.test(url.pathname)).sort((a, b) => a.op.split('{').length - b.op.split('{').length)[0];
  if (hit) called.add(hit.op);
  return fetch(input, init);
};

function client(opts: Partial<FleetClientOptions> = {}): FleetClient {
  return new FleetClient({ baseUrl: cloud.http, apiKey: cloud.adminKey, fetch: recordingFetch, ...opts });
}

beforeAll(async () => {
  pki = createTestPki();
  rx = await startHttpsReceiver(pki.issue(['localhost'], ['127.0.0.1']), (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
  });
  cloud = await startCloud({ args: ['--egress-allow-loopback', '--egress-ca-file', pki.caFile] });
  fleet = await startFleet(cloud, { count: 2, subtaskMs: 100, args: ['--bytes-per-second', '4096'] });
  // Episodes recorded through the API's own robot commands: 6 finished, one failed, one discarded.
  const c = client();
  const record = async (robot: string, end: 'finish' | 'fail' | 'discard', task: string) => {
    // The robot takes a new recording only once the last one is finalized.
    await waitFor(async () => ((await c.robots.get(robot)).recording_state === 'idle' ? true : undefined), { timeoutMs: 30_000, description: `${robot} idle` });
    const started = await c.robots.startEpisode(robot, { task_id: task, metadata: { site: 'lab' } });
    const id = String((started.result as { episode_id?: string }).episode_id);
    await (end === 'finish' ? c.robots.finishEpisode(robot) : end === 'fail' ? c.robots.failEpisode(robot) : c.robots.discardEpisode(robot));
    return id;
  };
  const ids: string[] = [];
  for (let i = 0; i < 3; i++) for (const robot of fleet.robots) ids.push(await record(robot, 'finish', i % 2 === 0 ? 'pick' : 'place'));
  ids.push(await record(fleet.robots[0]!, 'fail', 'pick'));
  ids.push(await record(fleet.robots[1]!, 'discard', 'pick'));
  await waitFor(
    async () => {
      const found = await Promise.all(ids.map((id) => c.episodes.get(id).then(() => true, () => false)));
      return found.every(Boolean) ? true : undefined;
    },
    { timeoutMs: 60_000, intervalMs: 200, description: 'the recorded episodes in the index' },
  );
}, 120_000);

afterAll(async () => {
  await fleet?.[Symbol.asyncDispose]();
  await cloud?.[Symbol.asyncDispose]();
  await rx?.[Symbol.asyncDispose]();
  pki?.cleanup();
});

describe('@fleet/client against a real cloud', () => {
  test('keys, entitlements, usage, enrollment, robots and their commands', async () => {
    const c = client();
    const created = await c.apiKeys.create({ name: 'reader', scopes: ['data:read'] });
    expect(created.key).toMatch(/^ak_/);
    expect((await c.apiKeys.list()).api_keys.map((k) => k.id)).toContain(created.id);
    expect((await c.entitlements()).tier).toBe('enterprise');
    expect(Array.isArray((await c.usage()).usage)).toBe(true);
    await c.apiKeys.revoke(created.id);

    const token = await c.enrollmentTokens.create({ max_uses: 1, name_prefix: 'client' });
    const enrolled = await new FleetClient({ baseUrl: cloud.http, fetch: recordingFetch }).robots.enroll({ token: token.token, platform: 'test' });
    expect(enrolled.robot_id).toMatch(/^rbt_/);

    const robots: string[] = [];
    for await (const r of c.robots.iterate({ limit: 1 })) robots.push(r.id);
    expect(robots).toEqual(expect.arrayContaining([...fleet.robots, enrolled.robot_id]));
    expect(new Set(robots).size).toBe(robots.length);
    expect((await c.robots.get(fleet.robots[0]!)).connected).toBe(true);
    // Filters and orders: the enrolled robot never connected; pages by name both ways.
    expect((await c.robots.list({ connected: false })).robots.map((r) => r.id)).toEqual([enrolled.robot_id]);
    const byName = await c.robots.list({ sort: 'name', order: 'desc', limit: 1 });
    const next = await c.robots.list({ sort: 'name', order: 'desc', limit: 1, cursor: byName.cursor! });
    expect((await c.robots.list({ sort: 'name', order: 'desc', limit: 1, cursor: next.prev_cursor! })).robots).toEqual(byName.robots);
    expect((await c.robots.list({ q: enrolled.name.toUpperCase() })).robots.map((r) => r.id)).toEqual([enrolled.robot_id]);
    expect((await c.syncHealth({ robotIds: [enrolled.robot_id] })).robots.map((r) => r.robot_id)).toEqual([enrolled.robot_id]);

    // Fleet administration: the token used up and then revoked, the enrolled (never connected)
    // robot's rotation pending, then the robot de-enrolled: gone from the default list only.
    const tokens = [];
    for await (const t of c.enrollmentTokens.iterate({ limit: 1 })) tokens.push(t);
    expect(tokens.find((t) => t.id === token.id)).toMatchObject({ uses: 1 });
    await c.enrollmentTokens.revoke(token.id);
    expect((await c.enrollmentTokens.list()).enrollment_tokens.find((t) => t.id === token.id)?.revoked_at).not.toBeNull();
    expect(await c.robots.rotateCredentials(enrolled.robot_id)).toMatchObject({ robot_id: enrolled.robot_id, state: 'pending' });
    await c.robots.deenroll(enrolled.robot_id);
    expect((await c.robots.get(enrolled.robot_id)).deenrolled_at).not.toBeNull();
    expect((await c.robots.list()).robots.map((r) => r.id)).not.toContain(enrolled.robot_id);
    expect((await c.robots.list({ includeDeenrolled: true })).robots.map((r) => r.id)).toContain(enrolled.robot_id);
    await expect(c.robots.rotateCredentials(enrolled.robot_id)).rejects.toMatchObject({ status: 409, code: 'robot_deenrolled' });

    // Every non-episode command gets the robot's answer (a decline is a 200 too).
    const robot = fleet.robots[0]!;
    for (const call of [c.robots.goHome, c.robots.goToStart, c.robots.startAutonomous, c.robots.stopAutonomous, c.robots.stackStart, c.robots.stackStatus, c.robots.stackStop]) {
      const res = await call(robot);
      expect(res.status).toBe('ok');
    }
  });

  test('episodes: iterate pages, export stream, get, segments, annotate, outcome and its history', async () => {
    const c = client();
    const pageOfAll = (await c.episodes.list({}, { limit: 100 })).episodes;
    expect(pageOfAll.length).toBeGreaterThanOrEqual(7); // the discarded one is listed only with outcome=discarded

    const iterated: Episode[] = [];
    for await (const e of c.episodes.iterate({}, { limit: 2 })) iterated.push(e);
    expect(iterated.map((e) => e.id)).toEqual(pageOfAll.map((e) => e.id));

    const robot = fleet.robots[0]!;
    const filtered: string[] = [];
    for await (const e of c.episodes.iterate({ robot_id: robot, outcome: 'success' }, { limit: 1 })) filtered.push(e.id);
    expect(filtered.length).toBeGreaterThanOrEqual(3);
    expect(filtered).toEqual(pageOfAll.filter((e) => e.robot_id === robot && e.outcome === 'success').map((e) => e.id));

    const exported: string[] = [];
    for await (const e of c.episodes.export({}, { limit: 3 })) {
      expect(Array.isArray(e.files)).toBe(true);
      exported.push(e.id);
    }
    expect(exported).toEqual(pageOfAll.map((e) => e.id));
    const first = await c.episodes.exportPage({}, { limit: 3 });
    expect(first.nextCursor).toBeTruthy();
    await first.lines.return(undefined); // leaving early cancels the download

    const id = pageOfAll[0]!.id;
    expect((await c.episodes.get(id)).id).toBe(id);
    expect(Array.isArray((await c.episodes.segments(id)).segments)).toBe(true);
    const files = await c.episodes.files(id);
    expect(files.files.length).toBeGreaterThan(0);
    expect(files.total_bytes).toBe(files.files.reduce((n, f) => n + f.size_bytes, 0));
    expect((await c.episodes.annotate(id, { annotations: { grade: 3 } })).annotations).toMatchObject({ grade: 3 });
    expect((await c.episodes.setOutcome(id, { outcome: 'failure', reason: 'dropped the part' })).outcome).toBe('failure');
    expect((await c.episodes.outcomeHistory(id)).outcome_history).toMatchObject([{ to: 'failure', reason: 'dropped the part' }]);
    // No destination holds a copy of these episodes: read links are refused with the replicas (none).
    const refused = await c.episodes.readLinks(id).then(
      () => null,
      (e: unknown) => e,
    );
    expect(refused).toBeInstanceOf(FleetApiError);
    expect((refused as FleetApiError).code).toBe('replica_not_verified');
    expect((refused as FleetApiError).details).toMatchObject({ replicas: [] });
  });

  test('datasets: create, list, get, snapshot and the manifest streamed over pages', async () => {
    const c = client();
    const robot = fleet.robots[1]!;
    const ds = await c.datasets.create({ name: 'picks', filter: { robot_id: robot } });
    expect((await c.datasets.get(ds.id)).name).toBe('picks');
    const listed: string[] = [];
    for await (const d of c.datasets.iterate({ limit: 1 })) listed.push(d.id);
    expect(listed).toContain(ds.id);
    expect((await c.datasets.list()).datasets.map((d) => d.id)).toContain(ds.id);
    const live = await c.datasets.count(ds.id);
    expect(live).toMatchObject({ dataset_id: ds.id, live: true, capped: false });
    const snap = await c.datasets.snapshot(ds.id);
    expect(await c.datasets.count(ds.id)).toEqual({ dataset_id: ds.id, live: false, episode_count: snap.episode_count, capped: false });
    expect(live.episode_count).toBeLessThanOrEqual(snap.episode_count);
    const lines = [];
    for await (const line of c.datasets.manifest(ds.id, { limit: 1 })) lines.push(line);
    expect(lines[0]).toMatchObject({ kind: 'header', header: { dataset_id: ds.id } });
    expect(lines.slice(1).every((l) => l.kind === 'member' && l.episode.robot_id === robot)).toBe(true);
    expect(lines.length - 1).toBe(snap.episode_count);
    expect(snap.episode_count).toBeGreaterThanOrEqual(2);
  });

  test('webhooks: deliveries verify with verifyWebhookSignature, also with two v1= entries during a rotation', async () => {
    const c = client();
    const hook = await c.webhooks.create({ url: `https://127.0.0.1:${rx.port}/hook`, events: ['episode.finalized'] });
    expect((await c.webhooks.list()).webhooks.map((w) => w.id)).toContain(hook.id);
    expect((await c.webhooks.enable(hook.id)).id).toBe(hook.id);
    expect((await c.webhooks.deadLetters(hook.id)).dead_letters).toEqual([]);

    const delivery = async (eventId: string): Promise<ReceivedRequest> =>
      waitFor(() => rx.requests.find((r) => r.url === '/hook' && r.headers['x-service-event-id'] === eventId), { timeoutMs: 30_000, description: `delivery of ${eventId}` });

    const { event_id } = await c.webhooks.test(hook.id);
    const req = await delivery(event_id);
    const ok = verifyWebhookSignature(req.body, req.headers, hook.secret);
    expect(ok).toMatchObject({ ok: true, event: 'episode.finalized', eventId: event_id });
    expect(verifyWebhookSignature(`${req.body} `, req.headers, hook.secret)).toEqual({ ok: false, reason: 'mismatch' });
    expect(verifyWebhookSignature(req.body, req.headers, 'whsec_other')).toEqual({ ok: false, reason: 'mismatch' });
    expect(verifyWebhookSignature(req.body, req.headers, hook.secret, { now: Date.now() + 301_000 })).toEqual({ ok: false, reason: 'stale' });
    expect(verifyWebhookSignature(req.body, {}, hook.secret)).toEqual({ ok: false, reason: 'missing_signature' });

    const rotated = await c.webhooks.rotateSecret(hook.id);
    const second = await delivery((await c.webhooks.test(hook.id)).event_id);
    expect(String(second.headers['x-service-signature']).match(/v1=/g)).toHaveLength(2);
    expect(verifyWebhookSignature(second.body, second.headers, rotated.secret).ok).toBe(true);
    expect(verifyWebhookSignature(second.body, second.headers, hook.secret).ok).toBe(true);
    expect(verifyWebhookSignature(second.body, second.headers, [rotated.secret, hook.secret]).ok).toBe(true);

    // Both test events were delivered: the log has their attempts, newest first.
    const log = await c.webhooks.deliveries(hook.id);
    expect(log.deliveries.map((d) => d.event_id)).toEqual(expect.arrayContaining([event_id, second.headers['x-service-event-id']]));
    await expect(c.webhooks.redeliver(hook.id, '999999999')).rejects.toMatchObject({ status: 404, code: 'not_found' });
    await c.webhooks.delete(hook.id);
  });

  test('destinations and routing rules: a forwarded grant request verifies with verifyGrantRequestSignature', async () => {
    const c = client();
    const dst = await c.destinations.create({ type: 'external', url: `https://127.0.0.1:${rx.port}/grants` });
    expect((await c.destinations.list()).destinations.map((d) => d.id)).toContain(dst.id);
    const before = rx.requests.length;
    const check = await c.destinations.check(dst.id);
    expect(check.result).toBe('fail'); // the receiver answers {}: no grant
    const req = rx.requests.slice(before).find((r) => r.url === '/grants')!;
    expect(req).toBeDefined();
    expect(verifyGrantRequestSignature(req.body, req.headers, dst.secret)).toMatchObject({ ok: true, destinationId: dst.id });
    expect(verifyGrantRequestSignature(req.body, req.headers, 'dsec_other')).toEqual({ ok: false, reason: 'mismatch' });
    expect(verifyGrantRequestSignature(req.body, { ...req.headers, 'x-service-event': 'episode.finalized' }, dst.secret)).toEqual({ ok: false, reason: 'wrong_event' });

    const a = await c.routingRules.create({ destination_id: dst.id, match: { task_id: 'pick' } });
    const b = await c.routingRules.create({ destination_id: dst.id, match: {} });
    expect((await c.routingRules.list()).routing_rules.map((r) => r.id)).toEqual([a.id, b.id]);
    expect((await c.routingRules.setOrder([b.id, a.id])).routing_rules.map((r) => r.id)).toEqual([b.id, a.id]);
    await c.routingRules.delete(a.id);
    expect(Array.isArray((await c.syncHealth()).robots)).toBe(true);
    await c.destinations.revoke(dst.id);
  });

  test('a POST whose answer is lost is sent again under the same Idempotency-Key and replayed: nothing is created twice', async () => {
    const keys: string[] = [];
    let dropped = 0;
    const lossy: typeof fetch = async (input, init) => {
      keys.push(new Headers(init?.headers).get('idempotency-key') ?? '');
      const res = await recordingFetch(input, init);
      if (dropped++ === 0) {
        await res.body?.cancel();
        throw new TypeError('fetch failed: the connection was reset');
      }
      return res;
    };
    const c = client({ fetch: lossy, retry: { schedule: [50] } });
    const before = (await client().apiKeys.list()).api_keys.length;
    const created = await c.apiKeys.create({ name: 'retried', scopes: ['data:read'] });
    expect(keys).toHaveLength(2);
    expect(keys[0]).toMatch(/^[0-9a-f-]{36}$/);
    expect(keys[1]).toBe(keys[0]);
    const after = (await client().apiKeys.list()).api_keys;
    expect(after).toHaveLength(before + 1);
    expect(after.filter((k) => k.name === 'retried').map((k) => k.id)).toEqual([created.id]);
  });

  test('errors are typed by code, with status, message and request id', async () => {
    const c = client();
    const err = await c.episodes.get('ep_missing').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(FleetApiError);
    expect(err).toMatchObject({ status: 404, code: 'not_found' });
    expect((err as FleetApiError).requestId).toMatch(/\S/);
    await expect(new FleetClient({ baseUrl: cloud.http, apiKey: 'ak_wrong_but_well_formed_0000', fetch: recordingFetch }).robots.list()).rejects.toMatchObject({ status: 401, code: 'unauthenticated' });
    await expect(c.episodes.list({ outcome: 'nope' as never })).rejects.toMatchObject({ status: 400, code: 'validation_failed' });
    await c.apiKeys.create({ name: 'once', scopes: ['data:read'] }, { idempotencyKey: 'client-e2e-reuse' });
    await expect(c.apiKeys.create({ name: 'twice', scopes: ['data:read'] }, { idempotencyKey: 'client-e2e-reuse' })).rejects.toMatchObject({ status: 422, code: 'idempotency_key_reused' });
  });

  test('events: the stream replays the log after a Last-Event-ID, typed by event, in the order of the log', async () => {
    const ac = new AbortController();
    const seen: { id: string; episode: string }[] = [];
    for await (const e of client().events.stream({ types: ['episode.finalized'], lastEventId: 'evt_0', signal: ac.signal })) {
      expect(e.type).toBe('episode.finalized');
      if (e.type === 'episode.finalized') seen.push({ id: e.id, episode: e.data.episode_id });
      if (seen.length === 3) ac.abort();
    }
    for (const s of seen) expect(s.id).toMatch(/^evt_[a-z2-7]{26}$/);
    expect(new Set(seen.map((s) => s.id)).size).toBe(seen.length);
    // The index lists episodes in the order they were indexed, as the log has their events.
    const indexed = (await client().episodes.list({}, { limit: 100 })).episodes.map((e) => e.id);
    expect(indexed.filter((id) => seen.some((s) => s.episode === id))).toEqual(seen.map((s) => s.episode));
  });

  test('every operation of the document was called', () => {
    expect(Object.keys(OPERATIONS).filter((op) => !called.has(op))).toEqual([]);
  });
});
