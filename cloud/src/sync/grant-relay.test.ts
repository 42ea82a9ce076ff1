import { mkdtempSync, rmSync } from 'node:fs';
import type { ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  GrantRequestEnvelopeSchema,
  ManualClock,
  systemScheduler,
  verifySignature,
  type GrantRequestEnvelope,
  type Pressure,
  type SyncRequest,
} from '@fleet/protocol';
import { EgressClient } from '../egress/client.js';
import type { ReceivedRequest } from '../egress/test-https.js';
import { sendJson, useProviderStandIn } from '../egress/test-provider.js';
import { SecretBox } from '../secret-box.js';
import type { EpisodeRow, Store } from '../store/index.js';
import { openTestStore, openTwin, postgresAvailable, type TestEngine, type TestStore } from '../store/test-store.js';
import type { DestinationRow, ForwardClaim, ForwardOutcome, RouteRow, SyncStore } from '../store/shared/sync-types.js';
import { testReport } from '../test-support.js';
import { GrantRelay, type GrantRelayOptions } from './grant-relay.js';

/**
 * The relay against a real HTTPS grant provider stand-in: every way a provider can answer badly
 * is a deferral with its reason, never a crash and never passed to the robot.
 */

const T0 = Date.parse('2026-03-01T00:00:00Z');
const SECRET = 'dsec_test_secret_for_the_relay';
const ROBOT = 'rbt_relay';
const ORG = 'org_relay';

const stand = useProviderStandIn();
const egress: EgressClient[] = [];
afterAll(async () => {
  await Promise.all(egress.map((e) => e.close()));
});

const report = testReport({
  manifest: {
    files: [
      { path: 'episode.mcap', size_bytes: 12 * 1024 * 1024, sha256: 'a'.repeat(64) },
      { path: 'meta/episode.json', size_bytes: 100, sha256: 'b'.repeat(64) },
    ],
    total_bytes: 12 * 1024 * 1024 + 100,
  },
});

/** A correct grant for the request: multipart for the big file, a PUT for the small one. */
function goodGrant(env: GrantRequestEnvelope, over: Record<string, unknown> = {}): Record<string, unknown> {
  const url = (p: string) => `https://store.example/${p}?X-Amz-Signature=abc`;
  return {
    grant_id: `g_${Math.random().toString(36).slice(2)}`,
    expires_at: new Date(T0 + 3600_000).toISOString(),
    retry_after: null,
    retention: { local: 'keep' },
    destinations: [
      {
        destination_id: env.request.destination_id,
        protocol: 's3-multipart',
        object_key: `org/${env.episode_id}/`,
        files: [
          { path: 'episode.mcap', upload_id: 'up-1', part_size: 5 * 1024 * 1024, part_urls: [1, 2, 3].map((n) => url(`part${n}`)), complete_url: url('complete') },
          { path: 'meta/episode.json', put_url: url('meta') },
        ],
      },
    ],
    ...over,
  };
}

class FakeSync {
  destination: DestinationRow;
  route: RouteRow | undefined;
  forwards: ForwardOutcome[] = [];
  granted: { grantId: string; objectKey: string | null }[] = [];
  grantIds = new Set<string>();
  pressure: Pressure | null = null;
  /** Forward claims by `${episodeSeq}/${destinationId}`, with the store's semantics (lease, token). */
  claims = new Map<string, { orgId: string; token: string; until: number }>();
  private tokens = 0;
  constructor(secrets: SecretBox) {
    this.destination = {
      id: 'dst_one',
      orgId: ORG,
      type: 'external',
      url: `${stand.provider.origin()}/grant`,
      secretSealed: secrets.seal(SECRET),
      retention: 'until_all_verified_plus_72h',
      createdAt: T0,
      revokedAt: null,
    };
    this.route = { orgId: ORG, robotId: ROBOT, episodeId: report.id, episodeSeq: 1, destinationId: 'dst_one', decidedAt: T0 };
  }
  asStore(): SyncStore {
    return {
      assignment: async (robotId: string, episodeId: string, destinationId: string) =>
        this.route && robotId === this.route.robotId && episodeId === this.route.episodeId && destinationId === this.route.destinationId ? this.route : undefined,
      getDestination: async (orgId: string, id: string) => (orgId === ORG && id === this.destination.id ? this.destination : undefined),
      recordForward: async (_o: string, _d: string, _at: number, outcome: ForwardOutcome) => void this.forwards.push(outcome),
      claimGrantId: async (_d: string, grantId: string) => (this.grantIds.has(grantId) ? false : (this.grantIds.add(grantId), true)),
      markGranted: async (_o: string, _s: number, _d: string, grantId: string, objectKey: string | null) => void this.granted.push({ grantId, objectKey }),
      notePressure: async (_r: string, p: Pressure) => void (this.pressure = p),
      claimForward: async (orgId: string, seq: number, destinationId: string, now: number, leaseMs: number): Promise<ForwardClaim> => {
        const held = this.claims.get(`${seq}/${destinationId}`);
        if (held && held.until > now) return { kind: 'held', until: held.until };
        const token = `claim_${++this.tokens}`;
        this.claims.set(`${seq}/${destinationId}`, { orgId, token, until: now + leaseMs });
        return { kind: 'claimed', token, until: now + leaseMs };
      },
      releaseForward: async (orgId: string, seq: number, destinationId: string, token: string) => {
        const held = this.claims.get(`${seq}/${destinationId}`);
        return held?.orgId === orgId && held.token === token && this.claims.delete(`${seq}/${destinationId}`);
      },
    } as unknown as SyncStore;
  }
}

let clock: ManualClock;
let secrets: SecretBox;
let fake: FakeSync;
let relay: GrantRelay;

/** A relay (one replica's) on `store`, with its own egress client. */
function relayOn(store: GrantRelayOptions['store'], timeoutMs = 1500): GrantRelay {
  const client = new EgressClient({ scheduler: systemScheduler, allowLoopback: true, ca: stand.pki.caPem, resolve: async () => [{ address: '127.0.0.1', family: 4 }] });
  egress.push(client);
  return new GrantRelay({ store, egress: client, secrets, clock, logger: pino({ level: 'silent' }), timeoutMs });
}

const fakeEpisodes = {
  get: async (orgId: string, id: string) =>
    orgId === ORG && id === report.id ? ({ seq: 1, id: report.id, orgId: ORG, robotId: ROBOT, report, manifest: report.manifest } as unknown as EpisodeRow) : undefined,
};

beforeEach(() => {
  clock = new ManualClock(T0);
  secrets = SecretBox.random();
  fake = new FakeSync(secrets);
  relay = relayOn({ sync: fake.asStore(), episodes: fakeEpisodes });
  stand.answer = (req, res) => sendJson(res, 200, goodGrant(GrantRequestEnvelopeSchema.parse(JSON.parse(req.body))));
});

/**
 * A provider that holds every request until `release()`: `arrived` resolves on the first one.
 * Answers a grant when released.
 */
function holdingProvider(): { arrived: Promise<void>; release: () => void } {
  let arrivedNow!: () => void;
  let releaseNow!: () => void;
  const arrived = new Promise<void>((resolve) => (arrivedNow = resolve));
  const released = new Promise<void>((resolve) => (releaseNow = resolve));
  stand.answer = (req, res) => {
    arrivedNow();
    void released.then(() => sendJson(res, 200, goodGrant(GrantRequestEnvelopeSchema.parse(JSON.parse(req.body)))));
  };
  return { arrived, release: releaseNow };
}

const request = (over: Partial<Extract<SyncRequest, { type: 'grant.request' }>> = {}): Extract<SyncRequest, { type: 'grant.request' }> => ({
  type: 'grant.request',
  req_id: 'r1',
  episode_id: report.id,
  destination_id: 'dst_one',
  ...over,
});

describe('GrantRelay.handle', () => {
  it('forwards a signed envelope and hands the robot the checked grant with the registered retention', async () => {
    const pressure = { free_bytes: 10, backlog_bytes: 5, hours_to_full: null };
    const msg = await relay.handle(ROBOT, request({ pressure }));
    expect(msg).toMatchObject({ type: 'grant', req_id: 'r1', protocol: 's3-multipart', retention: 'until_all_verified_plus_72h', object_key: `org/${report.id}/` });
    if (msg.type !== 'grant') return;
    expect(msg.files.map((f) => f.path)).toEqual(['episode.mcap', 'meta/episode.json']);
    const got = stand.provider.requests.at(-1)!;
    expect(got.headers['x-service-event']).toBe('grant.request');
    expect(got.headers['x-service-destination-id']).toBe('dst_one');
    expect(got.headers['x-service-event-id']).toMatch(/^evt_/);
    expect(verifySignature({ body: got.body, header: got.headers['x-service-signature'] as string, secrets: [SECRET], nowS: T0 / 1000 })).toMatchObject({ ok: true });
    const env = GrantRequestEnvelopeSchema.parse(JSON.parse(got.body));
    expect(env).toMatchObject({ episode_id: report.id, org_id: ORG, request: { destination_id: 'dst_one', pressure, episode: { robot_id: ROBOT } } });
    expect(env.request.manifest).toEqual(report.manifest);
    expect(fake.forwards).toEqual([{ kind: 'granted', grantId: msg.grant_id }]);
    expect(fake.granted).toEqual([{ grantId: msg.grant_id, objectKey: `org/${report.id}/` }]);
    expect(fake.pressure).toEqual(pressure);
  });

  it('passes a provider deferral on with its retry_after', async () => {
    stand.answer = (_req, res) => sendJson(res, 200, { grant_id: null, destinations: [], retention: { local: 'keep' }, retry_after: 120 });
    expect(await relay.handle(ROBOT, request())).toMatchObject({ type: 'deferral', reason: 'deferred', retry_after_s: 120 });
    expect(fake.forwards).toEqual([{ kind: 'deferred', reason: expect.stringMatching(/^deferred/) as unknown }]);
    expect(fake.granted).toEqual([]);
  });

  it('refuses an episode that is not assigned to the robot, and a revoked destination, without forwarding', async () => {
    const before = stand.provider.requests.length;
    expect(await relay.handle('rbt_other', request())).toMatchObject({ type: 'deferral', reason: 'not_assigned' });
    expect(await relay.handle(ROBOT, request({ destination_id: 'dst_two' }))).toMatchObject({ type: 'deferral', reason: 'not_assigned' });
    fake.destination.revokedAt = T0;
    expect(await relay.handle(ROBOT, request())).toMatchObject({ type: 'deferral', reason: 'revoked' });
    expect(stand.provider.requests.length).toBe(before);
  });

  it('treats a reused grant_id as a deferral', async () => {
    stand.answer = (req, res) => sendJson(res, 200, goodGrant(GrantRequestEnvelopeSchema.parse(JSON.parse(req.body)), { grant_id: 'same' }));
    expect(await relay.handle(ROBOT, request())).toMatchObject({ type: 'grant', grant_id: 'same' });
    expect(await relay.handle(ROBOT, request({ req_id: 'r2' }))).toMatchObject({ type: 'deferral', reason: 'grant_reused' });
    expect(fake.granted).toHaveLength(1);
  });

  it('forwards once for two requests at once on (episode, destination): the other is deferred while the first is with the provider', async () => {
    const before = stand.provider.requests.length;
    const provider1 = holdingProvider();
    // Two replicas on the same store, with the spec's provider timeout (so that a slow machine
    // does not time the held forward out).
    const one = relayOn({ sync: fake.asStore(), episodes: fakeEpisodes }, 10_000);
    const other = relayOn({ sync: fake.asStore(), episodes: fakeEpisodes }, 10_000);
    const first = one.handle(ROBOT, request({ req_id: 'r1' }));
    const second = other.handle(ROBOT, request({ req_id: 'r2' }));
    // One of the two is deferred without the provider hearing of it; the provider holds the other.
    const deferred = await Promise.race([first, second]);
    await provider1.arrived;
    expect(deferred).toMatchObject({ type: 'deferral', reason: 'deferred', message: 'a grant for this episode and destination is being requested already' });
    expect(stand.provider.requests.length).toBe(before + 1);
    provider1.release();
    const answers = await Promise.all([first, second]);
    expect(answers.filter((a) => a.type === 'grant')).toHaveLength(1);
    expect(answers.filter((a) => a.type === 'deferral')).toEqual([deferred]);
    // The claim's lease is the provider timeout + 5 s on the injected clock.
    expect(deferred).toMatchObject({ retry_after_s: 15 });
    expect(fake.granted).toHaveLength(1);
    expect(fake.forwards).toHaveLength(1);
    // Released when the forward finished: the next request forwards again.
    expect(fake.claims.size).toBe(0);
    stand.answer = (req, res) => sendJson(res, 200, goodGrant(envOf(req)));
    expect(await other.handle(ROBOT, request({ req_id: 'r3' }))).toMatchObject({ type: 'grant', req_id: 'r3' });
    expect(stand.provider.requests.length).toBe(before + 2);
  });

  it('releases the claim after a deferral or a timeout too, and waits out the lease of a replica that died', async () => {
    stand.answer = () => undefined;
    expect(await relay.handle(ROBOT, request())).toMatchObject({ type: 'deferral', reason: 'timeout' });
    expect(fake.claims.size).toBe(0);
    stand.answer = (_req, res) => sendJson(res, 500, { error: 'boom' });
    expect(await relay.handle(ROBOT, request())).toMatchObject({ type: 'deferral', reason: 'http_error' });
    expect(fake.claims.size).toBe(0);
    // A replica claimed (episode, destination) and died: its lease (timeout + 5 s) keeps others out.
    const dead = await fake.asStore().claimForward(ORG, 1, 'dst_one', clock.now(), 1500 + 5000);
    expect(dead.kind).toBe('claimed');
    const before = stand.provider.requests.length;
    clock.advance(2_100);
    expect(await relay.handle(ROBOT, request())).toMatchObject({ type: 'deferral', reason: 'deferred', retry_after_s: 5 });
    clock.advance(4_399);
    expect(await relay.handle(ROBOT, request())).toMatchObject({ type: 'deferral', reason: 'deferred', retry_after_s: 1 });
    expect(stand.provider.requests.length).toBe(before);
    stand.answer = (req, res) => sendJson(res, 200, goodGrant(envOf(req)));
    clock.advance(1);
    expect(await relay.handle(ROBOT, request())).toMatchObject({ type: 'grant' });
    expect(stand.provider.requests.length).toBe(before + 1);
  });

  const envOf = (req: ReceivedRequest) => GrantRequestEnvelopeSchema.parse(JSON.parse(req.body));
  const files = (req: ReceivedRequest) => (goodGrant(envOf(req)).destinations as { files: Record<string, unknown>[] }[])[0]!.files;
  const withFiles = (req: ReceivedRequest, f: unknown[]) => {
    const g = goodGrant(envOf(req));
    (g.destinations as { files: unknown[] }[])[0]!.files = f;
    return g;
  };

  it.each<[string, (req: ReceivedRequest, res: ServerResponse) => void, string, string | null]>([
    ['a provider that hangs', () => undefined, 'timeout', 'timeout'],
    ['a 500', (_q, res) => sendJson(res, 500, { error: 'boom' }), 'http_error', 'http_error'],
    ['a body that is not JSON', (_q, res) => sendJson(res, 200, '<html>oops</html>'), 'invalid_json', 'invalid_json'],
    ['a body of 2 MiB', (_q, res) => sendJson(res, 200, `{"pad":"${'x'.repeat(2 * 1024 * 1024)}"}`), 'too_large', 'invalid_json'],
    ['JSON nested past the bounds', (_q, res) => sendJson(res, 200, `{"grant_id":${'['.repeat(5000)}${']'.repeat(5000)}}`), 'invalid_json', 'invalid_json'],
    ['another destination', (q, res) => sendJson(res, 200, { ...goodGrant(envOf(q)), destinations: [{ ...(goodGrant(envOf(q)).destinations as object[])[0], destination_id: 'dst_evil' }] }), 'destination_mismatch', 'destination_mismatch'],
    ['two destinations', (q, res) => sendJson(res, 200, { ...goodGrant(envOf(q)), destinations: [...(goodGrant(envOf(q)).destinations as object[]), ...(goodGrant(envOf(q)).destinations as object[])] }), 'schema_invalid', 'schema_invalid'],
    ['a missing file', (q, res) => sendJson(res, 200, withFiles(q, files(q).slice(0, 1))), 'schema_invalid', 'schema_invalid'],
    ['an extra path', (q, res) => sendJson(res, 200, withFiles(q, [...files(q), { path: 'extra.bin', put_url: 'https://s/x' }])), 'schema_invalid', 'schema_invalid'],
    ['a different path', (q, res) => sendJson(res, 200, withFiles(q, [files(q)[0], { path: 'meta/other.json', put_url: 'https://s/x' }])), 'schema_invalid', 'schema_invalid'],
    ['the same path twice', (q, res) => sendJson(res, 200, withFiles(q, [...files(q), { path: 'meta/episode.json', put_url: 'https://s/again' }])), 'schema_invalid', 'schema_invalid'],
    ['part URLs that do not cover the file', (q, res) => sendJson(res, 200, withFiles(q, [{ ...files(q)[0], part_urls: ['https://s/1', 'https://s/2'] }, files(q)[1]])), 'schema_invalid', 'schema_invalid'],
    ['a multipart set without complete_url', (q, res) => sendJson(res, 200, withFiles(q, [{ ...files(q)[0], complete_url: undefined }, files(q)[1]])), 'schema_invalid', 'schema_invalid'],
    ['an expiry in the past', (q, res) => sendJson(res, 200, goodGrant(envOf(q), { expires_at: new Date(T0 - 1000).toISOString() })), 'expired', 'schema_invalid'],
    ['no retention', (q, res) => sendJson(res, 200, goodGrant(envOf(q), { retention: undefined })), 'schema_invalid', 'schema_invalid'],
    ['a put_url that is not a URL', (q, res) => sendJson(res, 200, withFiles(q, [files(q)[0], { path: 'meta/episode.json', put_url: 'javascript:alert(1)' }])), 'schema_invalid', 'schema_invalid'],
  ])('turns %s into a deferral with its reason, never a grant', async (_what, handler, reason, failure) => {
    stand.answer = handler;
    const msg = await relay.handle(ROBOT, request());
    expect(msg).toMatchObject({ type: 'deferral', reason, retry_after_s: 60 });
    expect(fake.granted).toEqual([]);
    expect(fake.forwards).toEqual([{ kind: 'deferred', reason: expect.stringMatching(new RegExp(`^${reason}: `)) as unknown }]);
    const forward = await relay.forward(fake.destination, envOf(stand.provider.requests.at(-1)!));
    expect(forward.failure).toBe(failure);
  });
});

const engines: TestEngine[] = postgresAvailable() ? ['sqlite', 'postgres'] : ['sqlite'];

/** Two replicas, each with its own store connection on one database, and one stand.provider. */
describe.each(engines)('GrantRelay on two replicas of one store [%s]', (engine) => {
  let dir: string;
  let store: TestStore;
  let twin: Store;

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'fleet-grant-relay-'));
    store = await openTestStore(engine, { dataDir: dir });
    twin = await openTwin(store);
    await store.orgs.create({ id: ORG, name: ORG, tier: 'enterprise', createdAt: T0 });
    expect(await store.episodes.ingest([{ orgId: ORG, robotId: ROBOT, report, reportedAt: T0 }])).toEqual(['inserted']);
    await store.sync.createDestination({ id: 'dst_one', orgId: ORG, type: 'external', url: `${stand.provider.origin()}/grant`, secretSealed: secrets.seal(SECRET), retention: 'keep', createdAt: T0 });
    const seq = (await store.episodes.get(ORG, report.id))!.seq;
    await store.sync.addRoutes([{ orgId: ORG, robotId: ROBOT, episodeId: report.id, episodeSeq: seq, destinationId: 'dst_one', decidedAt: T0 }]);
  });
  afterEach(async () => {
    await twin.close();
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('a repeated request on the other replica while the first is with the provider is deferred; the provider is asked once', async () => {
    const before = stand.provider.requests.length;
    const held = holdingProvider();
    const a = relayOn(store, 10_000);
    const b = relayOn(twin, 10_000);
    const first = a.handle(ROBOT, request({ req_id: 'r1' }));
    await held.arrived;
    // The robot timed out and asked again; its request reached the other replica.
    expect(await b.handle(ROBOT, request({ req_id: 'r2' }))).toMatchObject({
      type: 'deferral',
      req_id: 'r2',
      reason: 'deferred',
      message: 'a grant for this episode and destination is being requested already',
      retry_after_s: 15,
    });
    held.release();
    expect(await first).toMatchObject({ type: 'grant', req_id: 'r1' });
    expect(stand.provider.requests.length).toBe(before + 1);
    // The claim was released with the answer: the next request (on either replica) forwards.
    stand.answer = (req, res) => sendJson(res, 200, goodGrant(GrantRequestEnvelopeSchema.parse(JSON.parse(req.body))));
    expect(await b.handle(ROBOT, request({ req_id: 'r3' }))).toMatchObject({ type: 'grant', req_id: 'r3' });
    expect(stand.provider.requests.length).toBe(before + 2);
  });
});
