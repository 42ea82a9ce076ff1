/**
 * The delivery engine end to end, in process: the real routes (app.inject), the test store (SQLite, or PostgreSQL with FLEET_TEST_DATABASE=postgres),
 * a ManualClock walked through the retry schedule, and REAL HTTPS receivers on 127.0.0.1 reached
 * through the EgressClient (test CA, loopback allowed, an injected resolver for `hooks.test`).
 */
import type { ServerResponse } from 'node:http';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { DAY, HOUR, MINUTE, systemScheduler, verifySignature, type EpisodeReport } from '@fleet/protocol';
import { EgressClient } from '../egress/client.js';
import { createTestPki, startHttpsReceiver, type KeyPair, type ReceivedRequest, type ReceiverContext, type TestPki, type TestReceiver } from '../egress/test-https.js';
import { SecretBox } from '../secret-box.js';
import { errorCode, startTestCloud, testReport, type TestCloud, type TestTenant } from '../test-support.js';
import { RETRY_SCHEDULE_MS } from '../rules/webhook-retry.js';
import { DeliveryWorker, leaseFor, RECEIVER_TIMEOUT_MS } from './delivery.js';

type Behaviour = (req: ReceivedRequest, res: ServerResponse, ctx: ReceiverContext) => void;
const ok: Behaviour = (_req, res) => res.writeHead(200).end('ok');
const status =
  (code: number, headers: Record<string, string> = {}): Behaviour =>
  (_req, res) =>
    res.writeHead(code, headers).end();

interface Env {
  t: TestCloud;
  tenant: TestTenant;
  worker: DeliveryWorker;
  egress: EgressClient;
  rx: TestReceiver;
  /** hostname -> address answered by the injected resolver (default 127.0.0.1). */
  dns: Map<string, string>;
  behave: { fn: Behaviour };
  url: string;
  secrets: SecretBox;
  /** The `evt_<n>` ids of the events logged so far, oldest first (see ingest). */
  logged: string[];
}

let pki: TestPki;
let tls: KeyPair;
let env: Env;

beforeAll(() => {
  pki = createTestPki();
  tls = pki.issue(['hooks.test', 'other.test', 'localhost'], ['127.0.0.1']);
});
afterAll(() => pki.cleanup());

beforeEach(async () => {
  const secrets = SecretBox.random();
  const t = await startTestCloud({ config: { egressAllowLoopback: true }, deps: { secrets } });
  const dns = new Map<string, string>();
  const egress = new EgressClient({ scheduler: systemScheduler,
    allowLoopback: true,
    ca: pki.caPem,
    resolve: async (hostname) => [{ address: dns.get(hostname) ?? '127.0.0.1', family: 4 }],
  });
  const worker = new DeliveryWorker({ store: t.store, secrets, egress, clock: t.clock, scheduler: t.scheduler, logger: t.app.log });
  const behave = { fn: ok };
  const rx = await startHttpsReceiver(tls, (req, res, ctx) => behave.fn(req, res, ctx));
  env = { t, tenant: await t.createTenant(), worker, egress, rx, dns, behave, url: `https://hooks.test:${rx.port}/hook`, secrets, logged: [] };
});

afterEach(async () => {
  await env.worker.stop();
  await env.egress.close();
  await env.rx.close();
  await env.t.close();
});

function report(over: Partial<EpisodeReport> = {}): EpisodeReport {
  return testReport({ started_at: new Date(env.t.clock.now()).toISOString(), ...over });
}

/** Ingests one new episode per call (an `episode.finalized` event each); returns the reports. */
async function ingest(n = 1, orgId = env.tenant.org.id): Promise<EpisodeReport[]> {
  const reports = Array.from({ length: n }, () => report());
  const results = await env.t.store.episodes.ingest(reports.map((r) => ({ orgId, robotId: 'rbt_1', report: r, reportedAt: env.t.clock.now() })));
  expect(results).toEqual(reports.map(() => 'inserted'));
  // Each new episode logs one event, and nothing else logs any here: in a fresh database the
  // log's ids are 1, 2, 3, ... (both engines number from 1 and these appends never roll back).
  for (let i = 0; i < n; i++) env.logged.push(evt(env.logged.length + 1));
  return reports;
}

interface Created {
  id: string;
  secret: string;
  url: string;
  events: string[];
}

async function subscribe(events: string[] = ['episode.finalized'], opts: { auth?: { authorization: string }; url?: string } = {}): Promise<Created> {
  const res = await env.t.app.inject({
    method: 'POST',
    url: '/v1/webhooks',
    headers: opts.auth ?? env.tenant.auth,
    payload: { url: opts.url ?? env.url, events },
  });
  expect(res.statusCode, res.payload).toBe(201);
  return res.json<Created>();
}

interface Listed {
  id: string;
  status: string;
  disabled_reason: string | null;
  pending_deliveries: number;
  last_delivered_at: string | null;
  last_delivery_error: string | null;
}

async function listed(id: string, auth = env.tenant.auth): Promise<Listed> {
  const res = await env.t.app.inject({ method: 'GET', url: '/v1/webhooks', headers: auth });
  expect(res.statusCode).toBe(200);
  const row = res.json<{ webhooks: Listed[] }>().webhooks.find((w) => w.id === id);
  if (!row) throw new Error(`webhook ${id} not listed`);
  return row;
}

interface DeadLetter {
  id: string;
  event_id: string;
  event: string;
  payload: Record<string, unknown>;
  attempts: number;
  last_status: number | null;
  last_error: string | null;
  dead_lettered_at: string;
}

async function deadLetters(id: string): Promise<DeadLetter[]> {
  const res = await env.t.app.inject({ method: 'GET', url: `/v1/webhooks/${id}/dead-letters`, headers: env.tenant.auth });
  expect(res.statusCode).toBe(200);
  return res.json<{ dead_letters: DeadLetter[] }>().dead_letters;
}

async function post(url: string, auth = env.tenant.auth) {
  return env.t.app.inject({ method: 'POST', url, headers: auth });
}

const eventIds = (rx: TestReceiver = env.rx): string[] => rx.requests.map((r) => String(r.headers['x-service-event-id']));
const tick = () => env.worker.tick();
const advance = (ms: number) => env.t.clock.advance(ms);
const evt = (n: number) => env.secrets.opaqueIds().eventId(n);

/** The wire ids of the event log's rows, oldest first. */
function loggedEventIds(): string[] {
  return [...env.logged];
}

/** The subscription's attempt log through the API, newest first. */
async function attemptLog(id: string): Promise<Record<string, unknown>[]> {
  const res = await env.t.app.inject({ method: 'GET', url: `/v1/webhooks/${id}/deliveries`, headers: env.tenant.auth });
  expect(res.statusCode).toBe(200);
  return res.json<{ deliveries: Record<string, unknown>[] }>().deliveries;
}

describe('delivery of episode.finalized', () => {
  it('POSTs the payload with the spec headers and a signature verifiable with the returned secret', async () => {
    const sub = await subscribe();
    expect(sub.secret).toMatch(/^whsec_/);
    const [r] = await ingest();
    expect(await tick()).toBe(1);

    expect(env.rx.requests).toHaveLength(1);
    const req = env.rx.requests[0]!;
    expect(req.method).toBe('POST');
    expect(req.url).toBe('/hook');
    expect(req.servername).toBe('hooks.test');
    expect(req.headers['content-type']).toBe('application/json');
    expect(req.headers['x-service-event']).toBe('episode.finalized');
    expect(req.headers['x-service-event-id']).toBe(loggedEventIds()[0]);
    expect(req.headers.authorization).toBeUndefined();
    const header = String(req.headers['x-service-signature']);
    expect(header).toMatch(/^t=\d+,v1=[0-9a-f]{64}$/);
    const nowS = Math.floor(env.t.clock.now() / 1000);
    expect(verifySignature({ body: req.body, header, secrets: [sub.secret], nowS })).toEqual({ ok: true, timestamp: nowS });
    expect(verifySignature({ body: `${req.body} `, header, secrets: [sub.secret], nowS }).ok).toBe(false);
    expect(verifySignature({ body: req.body, header, secrets: ['whsec_other'], nowS }).ok).toBe(false);

    const payload = JSON.parse(req.body) as Record<string, unknown>;
    expect(payload).toMatchObject({
      schema_version: 1,
      episode_id: r!.id,
      robot_id: 'rbt_1',
      recording_session_id: 'rs_1',
      episode_seq: r!.episode_seq,
      state: 'reported',
    });
    expect(payload).not.toHaveProperty('destination_id');
    expect(payload.test).not.toBe(true);

    const row = await listed(sub.id);
    expect(row).toMatchObject({ status: 'active', pending_deliveries: 0, last_delivery_error: null });
    expect(row.last_delivered_at).toBe(new Date(env.t.clock.now()).toISOString());
    // Delivered once only.
    advance(DAY);
    expect(await tick()).toBe(0);
    expect(env.rx.requests).toHaveLength(1);
  });

  it('respects the event filter and starts after the events that existed at creation', async () => {
    await ingest(); // before any subscription: not delivered
    const finalized = await subscribe(['episode.finalized']);
    const synced = await subscribe(['episode.synced', 'episode.failed']);
    await ingest(2);
    await tick();
    expect(eventIds()).toEqual(loggedEventIds().slice(1));
    expect((await listed(finalized.id)).pending_deliveries).toBe(0);
    expect((await listed(synced.id)).pending_deliveries).toBe(0);
    // Nothing was ever queued for it: no attempt, nothing pending.
    expect(await attemptLog(synced.id)).toEqual([]);
    expect(await env.t.store.gauges.pendingDeliveries()).toBe(0);
  });

  it('delivers to every matching subscription of the organization, each in order', async () => {
    const a = await subscribe();
    const b = await subscribe();
    await ingest(3);
    await tick();
    const ids = loggedEventIds();
    const perSub = (secret: string) =>
      env.rx.requests.filter((q) => verifySignature({ body: q.body, header: String(q.headers['x-service-signature']), secrets: [secret], nowS: env.t.clock.now() / 1000 }).ok).map((q) => String(q.headers['x-service-event-id']));
    expect(perSub(a.secret)).toEqual(ids);
    expect(perSub(b.secret)).toEqual(ids);
  });
});

describe('a queue head claimed by a second pass between two attempts of one slot', () => {
  it('is delivered by the new slot, and the pass waits for it before it ends', async () => {
    const sub = await subscribe();
    await ingest(3);
    const store = env.t.store.webhooks;
    // After the first outcome is recorded (the claim released), the slot's claim of the next
    // head waits until another pass has claimed that head itself: the slot finds it taken and
    // ends, and a new slot holds the rest of the queue.
    const claimDue = store.claimDue.bind(store);
    const dueHead = store.dueHead.bind(store);
    let secondPass: Promise<number> | undefined;
    let claimedByOther: () => void = () => undefined;
    const otherClaimed = new Promise<void>((resolve) => (claimedByOther = resolve));
    let dueHeads = 0;
    store.dueHead = async (...args) => {
      if (dueHeads++ === 0) {
        store.claimDue = async (...a) => {
          const claimed = await claimDue(...a);
          if (claimed.length > 0) claimedByOther();
          return claimed;
        };
        secondPass = env.worker.tick();
        await otherClaimed;
      }
      return dueHead(...args);
    };
    try {
      await tick();
      // Every delivery is done when the pass ends: none is still on its way.
      expect(env.rx.requests.map((q) => String(q.headers['x-service-event-id']))).toEqual(loggedEventIds());
      await secondPass;
    } finally {
      store.dueHead = dueHead;
      store.claimDue = claimDue;
    }
    expect((await listed(sub.id)).pending_deliveries).toBe(0);
  });
});

describe('the delivery log', () => {
  it('logs each attempt of a retried delivery with its number, status, error, outcome and latency on the injected clock', async () => {
    const sub = await subscribe();
    await ingest(1);
    const [e1] = loggedEventIds();
    let n = 0;
    env.behave.fn = (req, res) => {
      // The receiver takes 250 ms of the cloud's clock to answer.
      advance(250);
      (++n === 1 ? status(503) : ok)(req, res, undefined as never);
    };
    await tick();
    advance(MINUTE);
    await tick();
    const res = await env.t.app.inject({ method: 'GET', url: `/v1/webhooks/${sub.id}/deliveries`, headers: env.tenant.auth });
    expect(res.statusCode).toBe(200);
    const log = res.json<{ deliveries: Record<string, unknown>[]; cursor: string | null }>();
    expect(log.deliveries.map((d) => [d.event_id, d.event, d.attempt, d.status_code, d.error, d.outcome, d.latency_ms])).toEqual([
      [e1, 'episode.finalized', 2, 200, null, 'delivered', 250],
      [e1, 'episode.finalized', 1, 503, 'HTTP 503', 'retry', 250],
    ]);
    expect(log.cursor).toBeNull();
    const stranger = await env.t.createTenant();
    expect(errorCode(await env.t.app.inject({ method: 'GET', url: `/v1/webhooks/${sub.id}/deliveries`, headers: stranger.auth }))).toBe('not_found');
  });
});

describe('ordering and the retry schedule', () => {
  it('holds later events while the head fails, then delivers them in order', async () => {
    const sub = await subscribe();
    await ingest(3);
    const [e1] = loggedEventIds();
    env.behave.fn = (req, res) => (req.headers['x-service-event-id'] === e1 ? status(500)(req, res, undefined as never) : ok(req, res, undefined as never));
    await tick();
    expect(eventIds()).toEqual([e1]);
    expect(await listed(sub.id)).toMatchObject({ pending_deliveries: 3, last_delivery_error: 'HTTP 500', status: 'active' });

    advance(MINUTE - 1);
    await tick();
    expect(eventIds()).toEqual([e1]); // nothing before the 1 m retry, and not the later events
    advance(1);
    await tick();
    expect(eventIds()).toEqual([e1, e1]); // still failing: the others still wait

    env.behave.fn = ok;
    advance(5 * MINUTE);
    await tick();
    expect(eventIds()).toEqual([e1, e1, ...loggedEventIds()]);
    expect((await listed(sub.id)).pending_deliveries).toBe(0);
  });

  it('walks the full schedule: 7 attempts at 0, 1m, 5m, 30m, 2h, 12h, 24h, then dead-letters and moves on', async () => {
    expect(RETRY_SCHEDULE_MS).toEqual([MINUTE, 5 * MINUTE, 30 * MINUTE, 2 * HOUR, 12 * HOUR, DAY]);
    const sub = await subscribe();
    const [first] = await ingest(2);
    const [e1, e2] = loggedEventIds();
    env.behave.fn = (req, res) => res.writeHead(req.headers['x-service-event-id'] === e1 ? 503 : 200).end();
    const start = env.t.clock.now();
    const attemptTimes: number[] = [];
    env.rx.requests.length = 0;

    await tick();
    attemptTimes.push(env.t.clock.now() - start);
    for (const wait of RETRY_SCHEDULE_MS) {
      const before = env.rx.requests.length;
      advance(wait - 1);
      await tick();
      expect(env.rx.requests.length, `nothing 1 ms before the ${wait} ms step`).toBe(before);
      advance(1);
      await tick();
      attemptTimes.push(env.t.clock.now() - start);
      expect(env.rx.requests.length).toBeGreaterThan(before);
    }
    const cumulative = [0, MINUTE, 6 * MINUTE, 36 * MINUTE, 2 * HOUR + 36 * MINUTE, 14 * HOUR + 36 * MINUTE, 38 * HOUR + 36 * MINUTE];
    expect(attemptTimes).toEqual(cumulative);
    // 7 attempts of e1, then e2 right after the 7th in the same pass.
    expect(eventIds()).toEqual([...Array<string>(7).fill(e1!), e2!]);

    const dead = await deadLetters(sub.id);
    expect(dead).toHaveLength(1);
    expect(dead[0]).toMatchObject({ event_id: e1, event: 'episode.finalized', attempts: 7, last_status: 503 });
    expect(dead[0]!.id).toMatch(/^dlv_[a-z2-7]{26}$/);
    expect(dead[0]!.payload).toMatchObject({ schema_version: 1, episode_id: first!.id, state: 'reported' });
    expect(dead[0]!.last_error).toContain('HTTP 503');
    expect(dead[0]!.dead_lettered_at).toBe(new Date(start + cumulative[6]!).toISOString());
    // An HTTP failure never disables the subscription.
    expect(await listed(sub.id)).toMatchObject({ status: 'active', disabled_reason: null, pending_deliveries: 0 });
    advance(7 * DAY);
    await tick();
    expect(env.rx.requests).toHaveLength(8);
  });

  it.each([408, 425, 429, 500, 502, 503, 504, 599])('retries HTTP %i', async (code) => {
    const sub = await subscribe();
    await ingest();
    env.behave.fn = status(code);
    await tick();
    expect(env.rx.requests).toHaveLength(1);
    expect(await listed(sub.id)).toMatchObject({ status: 'active', pending_deliveries: 1, last_delivery_error: `HTTP ${code}` });
    expect(await deadLetters(sub.id)).toEqual([]);
    env.behave.fn = ok;
    advance(MINUTE);
    await tick();
    expect(env.rx.requests).toHaveLength(2);
    expect((await listed(sub.id)).pending_deliveries).toBe(0);
  });

  it.each([400, 401, 404, 410, 422, 301, 302, 307, 308])('dead-letters HTTP %i at once and proceeds with the next event', async (code) => {
    // A redirect target that would record anything it got.
    const target = await startHttpsReceiver(tls, (_req, res) => res.writeHead(200).end());
    try {
      const sub = await subscribe();
      await ingest(2);
      const [e1, e2] = loggedEventIds();
      env.behave.fn = (req, res) =>
        req.headers['x-service-event-id'] === e1
          ? res.writeHead(code, { location: `https://other.test:${target.port}/elsewhere` }).end()
          : res.writeHead(200).end();
      await tick();
      expect(eventIds()).toEqual([e1, e2]);
      expect(target.requests).toHaveLength(0); // redirects are never followed
      const dead = await deadLetters(sub.id);
      expect(dead).toHaveLength(1);
      expect(dead[0]).toMatchObject({ event_id: e1, attempts: 1, last_status: code });
      expect(await listed(sub.id)).toMatchObject({ status: 'active', pending_deliveries: 0 });
      advance(2 * DAY);
      await tick();
      expect(env.rx.requests).toHaveLength(2);
    } finally {
      await target.close();
    }
  });

  it('treats a hanging receiver as a timeout (retryable)', async () => {
    // The receiver's time limit is an option (10 s by default): a small one here, and the outcome
    // is what is checked (a retryable `timeout` failure), not how long it took.
    const worker = new DeliveryWorker({ store: env.t.store, secrets: env.secrets, egress: env.egress, clock: env.t.clock, scheduler: env.t.scheduler, logger: env.t.app.log, receiverTimeoutMs: 200 });
    try {
      const sub = await subscribe();
      await ingest();
      env.behave.fn = () => undefined; // never answers
      expect(await worker.tick()).toBe(1);
      const row = await listed(sub.id);
      expect(row).toMatchObject({ status: 'active', pending_deliveries: 1 });
      expect(row.last_delivery_error).toMatch(/^timeout: /);
      expect(await deadLetters(sub.id)).toEqual([]);
      env.behave.fn = ok;
      advance(MINUTE);
      expect(await worker.tick()).toBe(1);
      // The retry was delivered (whether the first attempt reached the receiver before the limit
      // or not: the outcome is the same retryable timeout).
      expect((await listed(sub.id)).pending_deliveries).toBe(0);
      expect(eventIds().at(-1)).toBe(loggedEventIds()[0]);
    } finally {
      await worker.stop();
    }
  });

  it('gives a receiver RECEIVER_TIMEOUT_MS (10 s) to answer unless told otherwise', async () => {
    const asked: (number | undefined)[] = [];
    const egress = {
      post: async (_url: string, opts: { timeoutMs?: number }) => {
        asked.push(opts.timeoutMs);
        return { status: 200 };
      },
    } as unknown as EgressClient;
    const worker = new DeliveryWorker({ store: env.t.store, secrets: env.secrets, egress, clock: env.t.clock, scheduler: env.t.scheduler, logger: env.t.app.log });
    await subscribe();
    await ingest();
    expect(await worker.tick()).toBe(1);
    expect(RECEIVER_TIMEOUT_MS).toBe(10_000);
    expect(asked).toEqual([RECEIVER_TIMEOUT_MS]);
    await worker.stop();
  });

  it('treats a connection reset as retryable', async () => {
    const sub = await subscribe();
    await ingest();
    env.behave.fn = (_req, _res, ctx) => ctx.reset();
    await tick();
    expect(env.rx.requests).toHaveLength(1);
    const row = await listed(sub.id);
    expect(row).toMatchObject({ status: 'active', pending_deliveries: 1 });
    expect(row.last_delivery_error).toMatch(/unreachable|reset|socket/i);
    expect(await deadLetters(sub.id)).toEqual([]);
    env.behave.fn = ok;
    advance(MINUTE);
    await tick();
    expect((await listed(sub.id)).pending_deliveries).toBe(0);
  });

  it('caps a huge response body: a 2xx with 8 MiB is still delivered, a 5xx with one still retried', async () => {
    const sub = await subscribe();
    await ingest(2);
    const [e1, e2] = loggedEventIds();
    const huge = Buffer.alloc(8 * 1024 * 1024, 'x');
    let first = true;
    env.behave.fn = (req, res) => {
      if (req.headers['x-service-event-id'] === e1 && first) {
        first = false;
        res.writeHead(500).end(huge);
      } else res.writeHead(200, { 'content-length': String(huge.length) }).end(huge); // refused on the declared length
    };
    await tick();
    expect(eventIds()).toEqual([e1]);
    expect(await listed(sub.id)).toMatchObject({ pending_deliveries: 2, status: 'active' });
    advance(MINUTE);
    await tick();
    expect(eventIds()).toEqual([e1, e1, e2]);
    expect(await listed(sub.id)).toMatchObject({ pending_deliveries: 0, last_delivery_error: null });
    expect(await deadLetters(sub.id)).toEqual([]);
  });

  it('caps a huge chunked body (no content-length) too', async () => {
    const sub = await subscribe();
    await ingest();
    env.behave.fn = (_req, res) => {
      res.writeHead(200, { 'transfer-encoding': 'chunked' });
      const chunk = Buffer.alloc(256 * 1024, 'y');
      let sent = 0;
      const pump = () => {
        while (sent < 64 && res.write(chunk)) sent++;
        if (sent >= 64) res.end();
        else res.once('drain', pump);
      };
      res.on('error', () => undefined);
      pump();
    };
    await tick();
    expect(await listed(sub.id)).toMatchObject({ pending_deliveries: 0, status: 'active' });
  });

  it('gets the pending delivery to a receiver that comes back after hours', async () => {
    const sub = await subscribe();
    await ingest();
    const start = env.t.clock.now();
    env.behave.fn = (_req, _res, ctx) => ctx.reset(); // down
    await tick();
    let attempts = 1;
    for (const wait of RETRY_SCHEDULE_MS) {
      advance(wait);
      if (env.t.clock.now() - start >= 3 * HOUR) env.behave.fn = ok; // back after 3 h
      await tick();
      attempts++;
      if ((await listed(sub.id)).pending_deliveries === 0) break;
    }
    // Down at 0, 1m, 6m, 36m, 2h36m; back at 14h36m, the 6th attempt.
    expect(attempts).toBe(6);
    expect(env.rx.requests.length).toBeGreaterThanOrEqual(5);
    expect(await listed(sub.id)).toMatchObject({ status: 'active', pending_deliveries: 0, last_delivery_error: null });
    expect(await deadLetters(sub.id)).toEqual([]);
  });
});

describe('dead letters and redelivery', () => {
  it('redeliver puts the same event id at the END of the queue and it is delivered', async () => {
    const sub = await subscribe();
    await ingest(2);
    const [e1, e2] = loggedEventIds();
    env.behave.fn = (req, res) => res.writeHead(req.headers['x-service-event-id'] === e1 ? 400 : 500).end();
    await tick();
    expect(eventIds()).toEqual([e1, e2]); // e1 dead at once, e2 failing and pending
    const [dead] = await deadLetters(sub.id);
    expect(dead).toMatchObject({ event_id: e1, last_status: 400 });

    const res = await post(`/v1/webhooks/${sub.id}/dead-letters/${dead!.id}/redeliver`);
    expect(res.statusCode, res.payload).toBe(202);
    expect(res.json()).toMatchObject({ event_id: e1 });
    expect(await deadLetters(sub.id)).toEqual([]);
    expect((await listed(sub.id)).pending_deliveries).toBe(2);
    // A second redeliver of the same dead letter: gone.
    expect((await post(`/v1/webhooks/${sub.id}/dead-letters/${dead!.id}/redeliver`)).statusCode).toBe(404);

    env.behave.fn = ok;
    advance(MINUTE);
    await tick();
    expect(eventIds()).toEqual([e1, e2, e2, e1]);
    const last = env.rx.requests.at(-1)!;
    expect(JSON.parse(last.body)).toEqual(JSON.parse(env.rx.requests[0]!.body));
    expect((await listed(sub.id)).pending_deliveries).toBe(0);
  });

  it('redeliver of an unknown delivery is 404: a number, a made-up handle, an attempt id', async () => {
    const sub = await subscribe();
    await ingest();
    env.behave.fn = (_req, res) => res.writeHead(400).end();
    await tick();
    const [dead] = await deadLetters(sub.id);
    const attempts = (await env.t.app.inject({ method: 'GET', url: `/v1/webhooks/${sub.id}/deliveries`, headers: env.tenant.auth })).json<{ deliveries: { id: string }[] }>();
    const attemptId = attempts.deliveries[0]!.id;
    expect(attemptId).toMatch(/^att_[a-z2-7]{26}$/);
    for (const bad of ['1', '999999', 'dlv_aaaaaaaaaaaaaaaaaaaaaaaaaa', `dlv_${attemptId.slice(4)}`, attemptId, `${dead!.id}x`]) {
      const res = await post(`/v1/webhooks/${sub.id}/dead-letters/${bad}/redeliver`);
      expect(res.statusCode, bad).toBe(404);
    }
    expect((await post(`/v1/webhooks/${sub.id}/dead-letters/${dead!.id}/redeliver`)).statusCode).toBe(202);
  });
});

describe('secret rotation', () => {
  it('signs with the new secret at once, with two v1 entries until +24 h, then one', async () => {
    const sub = await subscribe();
    await ingest();
    await tick();
    const nowS = () => Math.floor(env.t.clock.now() / 1000);
    const sig = (i: number) => String(env.rx.requests[i]!.headers['x-service-signature']);
    const verify = (i: number, secrets: string[]) => verifySignature({ body: env.rx.requests[i]!.body, header: sig(i), secrets, nowS: nowS() }).ok;
    expect(verify(0, [sub.secret])).toBe(true);

    const res = await post(`/v1/webhooks/${sub.id}/rotate-secret`);
    expect(res.statusCode, res.payload).toBe(200);
    const { secret, previous_secret_expires_at } = res.json<{ secret: string; previous_secret_expires_at: string }>();
    expect(secret).toMatch(/^whsec_/);
    expect(secret).not.toBe(sub.secret);
    expect(previous_secret_expires_at).toBe(new Date(env.t.clock.now() + DAY).toISOString());

    await ingest();
    await tick();
    expect(sig(1).match(/v1=/g)).toHaveLength(2);
    expect(verify(1, [secret])).toBe(true);
    expect(verify(1, [sub.secret])).toBe(true);

    advance(DAY - 1000);
    await ingest();
    await tick();
    expect(sig(2).match(/v1=/g)).toHaveLength(2);
    expect(verify(2, [sub.secret])).toBe(true);

    advance(1000);
    await ingest();
    await tick();
    expect(sig(3).match(/v1=/g)).toHaveLength(1);
    expect(verify(3, [secret])).toBe(true);
    expect(verify(3, [sub.secret])).toBe(false);
  });
});

describe('auto-disable and enable', () => {
  it('disables a subscription whose host resolves to a private address, keeps its queue, and enable delivers it', async () => {
    const sub = await subscribe();
    env.dns.set('hooks.test', '10.0.0.1');
    await ingest();
    await tick();
    expect(env.rx.connections()).toBe(0);
    let row = await listed(sub.id);
    expect(row.status).toBe('disabled');
    expect(row.disabled_reason).toMatch(/forbidden_address/);
    expect(row.pending_deliveries).toBe(1);
    // No attempt counted, nothing dead.
    expect(await deadLetters(sub.id)).toEqual([]);
    expect(await attemptLog(sub.id)).toEqual([]);

    // Events keep queueing while disabled; nothing is attempted.
    await ingest();
    advance(DAY);
    await tick();
    expect(env.rx.requests).toHaveLength(0);
    expect((await listed(sub.id)).pending_deliveries).toBe(2);

    env.dns.delete('hooks.test');
    const res = await post(`/v1/webhooks/${sub.id}/enable`);
    expect(res.statusCode, res.payload).toBe(200);
    expect(res.json()).toMatchObject({ id: sub.id, status: 'active', disabled_reason: null });
    await tick();
    expect(eventIds()).toEqual(loggedEventIds());
    row = await listed(sub.id);
    expect(row).toMatchObject({ status: 'active', pending_deliveries: 0 });
  });

  it('disables a subscription whose host does not exist (non-transient)', async () => {
    const egress = new EgressClient({ scheduler: systemScheduler,
      allowLoopback: true,
      ca: pki.caPem,
      resolve: async () => {
        throw Object.assign(new Error('getaddrinfo ENOTFOUND hooks.test'), { code: 'ENOTFOUND' });
      },
    });
    const worker = new DeliveryWorker({ store: env.t.store, secrets: env.secrets, egress, clock: env.t.clock, scheduler: env.t.scheduler, logger: env.t.app.log });
    try {
      const sub = await subscribe();
      await ingest();
      await worker.tick();
      const row = await listed(sub.id);
      expect(row.status).toBe('disabled');
      expect(row.disabled_reason).toMatch(/unresolvable/);
      expect(row.pending_deliveries).toBe(1);
    } finally {
      await egress.close();
    }
  });

  it('tells the tenant in words why (forbidden address, no such name, lookup failed), never the resolved address or resolver text; the log keeps them', async () => {
    const logs: Record<string, unknown>[] = [];
    const logger = pino(
      { level: 'info' },
      new Writable({
        write(chunk: Buffer, _enc, done) {
          logs.push(JSON.parse(chunk.toString()) as Record<string, unknown>);
          done();
        },
      }),
    );
    const egress = new EgressClient({ scheduler: systemScheduler,
      allowLoopback: true,
      ca: pki.caPem,
      resolve: async (hostname) => {
        if (hostname === 'private.test') return [{ address: '10.0.0.1', family: 4 }];
        if (hostname === 'flaky.test') throw Object.assign(new Error('getaddrinfo EAI_AGAIN flaky.test'), { code: 'EAI_AGAIN' });
        throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' });
      },
    });
    const worker = new DeliveryWorker({ store: env.t.store, secrets: env.secrets, egress, clock: env.t.clock, scheduler: env.t.scheduler, logger });
    try {
      const forbidden = await subscribe(undefined, { url: 'https://private.test/hook' });
      const missing = await subscribe(undefined, { url: 'https://missing.test/hook' });
      const flaky = await subscribe(undefined, { url: 'https://flaky.test/hook' });
      await ingest();
      await expect
        .poll(async () => {
          await worker.tick();
          return (await listed(flaky.id)).last_delivery_error !== null && (await listed(missing.id)).status === 'disabled' && (await listed(forbidden.id)).status === 'disabled';
        })
        .toBe(true);
      const [f, m, l] = [await listed(forbidden.id), await listed(missing.id), await listed(flaky.id)];
      expect(f.disabled_reason).toBe('forbidden_address: private.test resolves to an address that is not public');
      expect(m.disabled_reason).toBe('unresolvable: missing.test does not exist: no such host name');
      expect(l).toMatchObject({ status: 'active', last_delivery_error: 'unresolvable: cannot resolve flaky.test: the DNS lookup failed (it may work later)' });
      for (const text of [f.disabled_reason, m.disabled_reason, l.last_delivery_error]) expect(text).not.toMatch(/10\.0\.0\.1|ENOTFOUND|EAI_AGAIN|getaddrinfo/);

      const detail = (msg: string) => logs.filter((x) => x.msg === msg).map((x) => x.error);
      expect(detail('webhook subscription auto-disabled').sort()).toEqual(['cannot resolve missing.test: getaddrinfo ENOTFOUND missing.test', 'private.test resolves to 10.0.0.1 (private)']);
      expect(detail('webhook delivery attempt failed')).toEqual(['cannot resolve flaky.test: getaddrinfo EAI_AGAIN flaky.test']);
    } finally {
      await worker.stop();
      await egress.close();
    }
  });

  it('enable of an active subscription is a no-op 200; of an unknown one 404', async () => {
    const sub = await subscribe();
    const res = await post(`/v1/webhooks/${sub.id}/enable`);
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ status: 'active' });
    expect((await post('/v1/webhooks/wh_nope/enable')).statusCode).toBe(404);
  });
});

describe('limits', () => {
  it('allows 5 active subscriptions (6th is 409 conflict); enable respects the limit', async () => {
    const subs: Created[] = [];
    for (let i = 0; i < 5; i++) subs.push(await subscribe());
    const sixth = await env.t.app.inject({ method: 'POST', url: '/v1/webhooks', headers: env.tenant.auth, payload: { url: env.url, events: ['episode.finalized'] } });
    expect(sixth.statusCode).toBe(409);
    expect(errorCode(sixth)).toBe('conflict');

    // Auto-disable one: a slot frees up and is taken by a new subscription.
    await env.t.store.webhooks.disable(subs[0]!.id, 'forbidden_address: test');
    const replacement = await subscribe();
    const refused = await post(`/v1/webhooks/${subs[0]!.id}/enable`);
    expect(refused.statusCode).toBe(409);
    expect(errorCode(refused)).toBe('conflict');
    expect((await listed(subs[0]!.id)).status).toBe('disabled');

    // Another organization has its own 5.
    const other = await env.t.createTenant();
    await subscribe(['episode.finalized'], { auth: other.auth });

    const del = await env.t.app.inject({ method: 'DELETE', url: `/v1/webhooks/${replacement.id}`, headers: env.tenant.auth });
    expect(del.statusCode).toBe(204);
    expect((await post(`/v1/webhooks/${subs[0]!.id}/enable`)).statusCode).toBe(200);
  });
});

describe('the test event', () => {
  it('sends episode.finalized with test: true through the queue even when the filter excludes it', async () => {
    const sub = await subscribe(['episode.synced']);
    const res = await post(`/v1/webhooks/${sub.id}/test`);
    expect(res.statusCode, res.payload).toBe(202);
    const { event_id } = res.json<{ event_id: string }>();
    await tick();
    expect(env.rx.requests).toHaveLength(1);
    const req = env.rx.requests[0]!;
    expect(req.headers['x-service-event']).toBe('episode.finalized');
    expect(req.headers['x-service-event-id']).toBe(event_id);
    expect(JSON.parse(req.body)).toMatchObject({ schema_version: 1, test: true, state: 'reported' });
    expect(verifySignature({ body: req.body, header: String(req.headers['x-service-signature']), secrets: [sub.secret], nowS: env.t.clock.now() / 1000 }).ok).toBe(true);
  });

  it('is queued behind a failing head, in order', async () => {
    const sub = await subscribe();
    await ingest();
    env.behave.fn = status(503);
    await tick();
    const { event_id } = (await post(`/v1/webhooks/${sub.id}/test`)).json<{ event_id: string }>();
    await tick();
    expect(env.rx.requests).toHaveLength(1);
    env.behave.fn = ok;
    advance(MINUTE);
    await tick();
    expect(eventIds()).toEqual([loggedEventIds()[0], loggedEventIds()[0], event_id]);
  });
});

describe('claims across processes', () => {
  it('two workers on one database attempt each head once, in order per subscription', async () => {
    const subs = [await subscribe(), await subscribe()];
    await ingest(5);
    const second = new DeliveryWorker({ store: env.t.store, secrets: env.secrets, egress: env.egress, clock: env.t.clock, scheduler: env.t.scheduler, logger: env.t.app.log, concurrency: 1 });
    try {
      // Ticks race for the heads until every event is delivered: a tick ends when this worker
      // holds nothing, which may be while the other still works a queue (it handed over a head),
      // so the number of ticks that suffices is not fixed. Bounded, so a lost head still fails.
      for (let round = 0; round < 50 && env.rx.requests.length < 10; round++) await Promise.all([tick(), second.tick()]);
    } finally {
      await second.stop();
    }
    const perSub = (secret: string) =>
      env.rx.requests.filter((q) => verifySignature({ body: q.body, header: String(q.headers['x-service-signature']), secrets: [secret], nowS: env.t.clock.now() / 1000 }).ok).map((q) => String(q.headers['x-service-event-id']));
    for (const sub of subs) expect(perSub(sub.secret)).toEqual(loggedEventIds());
    expect(env.rx.requests).toHaveLength(10);
  });

  it('a process killed mid-attempt holds its head until the lease runs out; then another takes over, and the late outcome decides nothing', async () => {
    const sub = await subscribe();
    await ingest(2);
    const [e1, e2] = loggedEventIds();
    const lease = leaseFor(RECEIVER_TIMEOUT_MS);
    // The dead process's claim, taken on the shared clock just before it died.
    await env.t.store.webhooks.fanOut(env.t.clock.now());
    const [held] = await env.t.store.webhooks.claimDue(env.t.clock.now(), 10, lease);
    expect(held && env.secrets.opaqueIds().publicEventId(held.eventId)).toBe(e1);
    expect(await tick()).toBe(0);
    advance(lease - 1);
    expect(await tick()).toBe(0);
    expect(env.rx.requests).toHaveLength(0);
    advance(1);
    expect(await tick()).toBe(2);
    expect(eventIds()).toEqual([e1, e2]);
    // Its outcome arrives after all (it was only partitioned): logged, but the queue stays done.
    await env.t.store.webhooks.record(held!.id, { kind: 'retry', status: 503, error: 'HTTP 503', at: env.t.clock.now(), nextAttemptAt: env.t.clock.now() + MINUTE }, held!.claim);
    expect((await listed(sub.id)).pending_deliveries).toBe(0);
    advance(DAY);
    expect(await tick()).toBe(0);
    expect((await attemptLog(sub.id)).map((a) => a.outcome)).toEqual(['retry', 'delivered', 'delivered']);
  });
});

describe('delete and isolation', () => {
  it('DELETE removes the subscription and its queue', async () => {
    const sub = await subscribe();
    await ingest(3);
    env.behave.fn = status(500);
    await tick();
    expect((await listed(sub.id)).pending_deliveries).toBe(3);
    const res = await env.t.app.inject({ method: 'DELETE', url: `/v1/webhooks/${sub.id}`, headers: env.tenant.auth });
    expect(res.statusCode).toBe(204);
    expect(await env.t.store.gauges.pendingDeliveries()).toBe(0);
    advance(DAY);
    await ingest();
    await tick();
    expect(env.rx.requests).toHaveLength(1);
    expect((await env.t.app.inject({ method: 'DELETE', url: `/v1/webhooks/${sub.id}`, headers: env.tenant.auth })).statusCode).toBe(404);
  });

  it("another organization's subscription is 404 on every route, and its events never cross", async () => {
    const sub = await subscribe();
    const other = await env.t.createTenant();
    for (const [method, url] of [
      ['DELETE', `/v1/webhooks/${sub.id}`],
      ['POST', `/v1/webhooks/${sub.id}/enable`],
      ['GET', `/v1/webhooks/${sub.id}/dead-letters`],
      ['POST', `/v1/webhooks/${sub.id}/dead-letters/1/redeliver`],
      ['POST', `/v1/webhooks/${sub.id}/rotate-secret`],
      ['POST', `/v1/webhooks/${sub.id}/test`],
    ] as const) {
      const res = await env.t.app.inject({ method, url, headers: other.auth });
      expect(res.statusCode, `${method} ${url}`).toBe(404);
    }
    const list = await env.t.app.inject({ method: 'GET', url: '/v1/webhooks', headers: other.auth });
    expect(list.json()).toEqual({ webhooks: [] });
    // The other organization's events are not delivered to this subscription.
    await ingest(2, other.org.id);
    await tick();
    expect(env.rx.requests).toHaveLength(0);
    expect((await listed(sub.id)).status).toBe('active');
  });
});
