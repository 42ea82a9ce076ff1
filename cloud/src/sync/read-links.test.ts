import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import {
  ManualClock,
  READ_EVENT,
  READ_LINK_MAX_TTL_S,
  ReadLinksSchema,
  ReadRequestEnvelopeSchema,
  systemScheduler,
  verifySignature,
  type EpisodeReport,
  type ReadRequestEnvelope,
} from '@fleet/protocol';
import { parseCloudConfig, readOriginOf } from '../config.js';
import { EgressClient } from '../egress/client.js';
import { startHttpsReceiver, type ReceivedRequest } from '../egress/test-https.js';
import { sendJson, useProviderStandIn } from '../egress/test-provider.js';
import { ApiError } from '../errors.js';
import { consoleContentSecurityPolicy } from '../http/console.js';
import { SecretBox } from '../secret-box.js';
import type { EpisodeRow, ReplicaRow } from '../store/index.js';
import type { DestinationRow } from '../store/shared/sync-types.js';
import { testReport } from '../test-support.js';
import { PROVIDER_MAX_BYTES } from './provider-post.js';
import { checkReadAnswer, READ_LINK_CLOCK_SKEW_MS, ReadLinker, readReply, requestedFiles, type CheckedReadAnswer } from './read-links.js';

/**
 * Read links: every rule of the provider's answer (pure, on an injected time), the choice of the
 * replica and files, and the forward itself against a real HTTPS provider stand-in: signed as
 * grant requests are, logged without a URL, every provider fault one of the documented errors.
 */

const T0 = Date.parse('2026-03-01T00:00:00Z');
const SECRET = 'dsec_test_secret_for_read_links';
const ORG = 'org_reads';
const BUCKET = 'https://bucket.example';
const ORIGINS = new Set([BUCKET]);
const SIG = 'X-Amz-Signature=0123456789abcdef0123456789abcdef';
const link = (path: string, over: Record<string, unknown> = {}) => ({ path, url: `${BUCKET}/obj/${path}?${SIG}`, expires_at: new Date(T0 + 900_000).toISOString(), ...over });
const request = { destinationId: 'dst_a', paths: ['episode.mcap', 'meta/episode.json'] };

function errorOf(r: CheckedReadAnswer): ApiError {
  if (r.ok) throw new Error('expected an error, got links');
  return r.error;
}

describe('checkReadAnswer', () => {
  it('takes exactly the requested paths in any order, each with its URL and expiry', () => {
    const r = checkReadAnswer({ files: [link('meta/episode.json'), link('episode.mcap')] }, request, T0, ORIGINS);
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect([...r.links.keys()].sort()).toEqual(['episode.mcap', 'meta/episode.json']);
    expect(r.links.get('episode.mcap')).toEqual({ url: `${BUCKET}/obj/episode.mcap?${SIG}`, expiresAt: T0 + 900_000 });
  });

  it('relays a refusal as 403 read_links_refused, its message bounded', () => {
    const e = errorOf(checkReadAnswer({ refused: { message: 'reads are off for this bucket' } }, request, T0, ORIGINS));
    expect([e.status, e.code, e.details]).toEqual([403, 'read_links_refused', { destination_id: 'dst_a', provider_message: 'reads are off for this bucket' }]);
    expect(e.message).toContain('reads are off for this bucket');
    const long = errorOf(checkReadAnswer({ refused: { message: 'x'.repeat(1024) } }, request, T0, ORIGINS));
    expect(long.code).toBe('read_links_refused');
    expect(long.message.length).toBeLessThan(400);
    expect(String(long.details?.provider_message).length).toBeLessThanOrEqual(301);
    // Past the schema's 1 KiB a refusal is not one.
    expect(errorOf(checkReadAnswer({ refused: { message: 'x'.repeat(1025) } }, request, T0, ORIGINS)).details).toMatchObject({ failure: 'schema_invalid' });
  });

  it.each<[string, unknown]>([
    ['an empty object', {}],
    ['no files', { files: [] }],
    ['a file without a url', { files: [{ path: 'episode.mcap', expires_at: new Date(T0 + 1000).toISOString() }] }],
    ['an unknown key in a file', { files: [{ ...link('episode.mcap'), etag: 'x' }, link('meta/episode.json')] }],
    ['expires_at that is not a date-time', { files: [link('episode.mcap', { expires_at: 'tomorrow' }), link('meta/episode.json')] }],
    ['a url over 8 KiB', { files: [link('episode.mcap', { url: `${BUCKET}/${'a'.repeat(8192)}` }), link('meta/episode.json')] }],
    ['a refusal without a message', { refused: {} }],
    ['an array', [link('episode.mcap')]],
    ['a string', 'links'],
  ])('refuses %s: 502 provider_failed schema_invalid', (_name, json) => {
    const e = errorOf(checkReadAnswer(json, request, T0, ORIGINS));
    expect([e.status, e.code, e.details]).toEqual([502, 'provider_failed', { destination_id: 'dst_a', failure: 'schema_invalid', http_status: 200 }]);
  });

  it.each<[string, unknown[], RegExp]>([
    ['a path not asked for', [link('episode.mcap'), link('meta/episode.json'), link('other.bin')], /other\.bin was not asked for/],
    ['a path twice', [link('episode.mcap'), link('episode.mcap'), link('meta/episode.json')], /listed twice/],
    ['a path missing', [link('episode.mcap')], /omits 1 requested file/],
    ['a URL that is not http(s)', [link('episode.mcap', { url: 'ftp://bucket.example/x' }), link('meta/episode.json')], /not an absolute http\(s\) URL/],
    ['a script URL', [link('episode.mcap', { url: 'javascript:alert(1)' }), link('meta/episode.json')], /not an absolute http\(s\) URL/],
    ['a relative URL', [link('episode.mcap', { url: '/obj/episode.mcap' }), link('meta/episode.json')], /not an absolute http\(s\) URL/],
    ['a URL with credentials', [link('episode.mcap', { url: 'https://u:p@bucket.example/x' }), link('meta/episode.json')], /carries credentials/],
  ])('refuses %s: schema_invalid, naming no URL', (_name, files, message) => {
    const e = errorOf(checkReadAnswer({ files }, request, T0, ORIGINS));
    expect([e.code, e.details?.failure]).toEqual(['provider_failed', 'schema_invalid']);
    expect(e.message).toMatch(message);
    expect(e.message).not.toContain(SIG);
    expect(e.message).not.toContain('u:p');
  });

  it('takes an expiry in (now, now + the longest lifetime + a minute], refuses anything else as expired', () => {
    const at = (expiresAt: number) => checkReadAnswer({ files: [link('episode.mcap', { expires_at: new Date(expiresAt).toISOString() }), link('meta/episode.json')] }, request, T0, ORIGINS);
    const latest = T0 + READ_LINK_MAX_TTL_S * 1000 + READ_LINK_CLOCK_SKEW_MS;
    expect(at(T0 + 1).ok).toBe(true);
    expect(at(latest).ok).toBe(true);
    for (const bad of [T0, T0 - 1, latest + 1, T0 + 86_400_000]) {
      const e = errorOf(at(bad));
      expect([e.status, e.code, e.details?.failure], new Date(bad).toISOString()).toEqual([502, 'provider_failed', 'expired']);
    }
    // A time zone offset is a time like any other.
    const offset = checkReadAnswer({ files: [link('episode.mcap', { expires_at: '2026-03-01T01:10:00+01:00' }), link('meta/episode.json')] }, request, T0, ORIGINS);
    expect(offset.ok && offset.links.get('episode.mcap')!.expiresAt).toBe(T0 + 600_000);
  });

  it('refuses a URL outside the read origins as 502 read_origin_not_allowed, naming its origin only', () => {
    const elsewhere = 'https://other-bucket.example:8443';
    const e = errorOf(checkReadAnswer({ files: [link('episode.mcap'), link('meta/episode.json', { url: `${elsewhere}/obj/x?${SIG}` })] }, request, T0, ORIGINS));
    expect([e.status, e.code, e.details]).toEqual([502, 'read_origin_not_allowed', { destination_id: 'dst_a', origin: elsewhere }]);
    expect(e.message).toContain(elsewhere);
    expect(e.message).not.toContain(SIG);
    expect(e.message).not.toContain('/obj/');
    // The same host over http, or on another port, is another origin.
    for (const url of ['http://bucket.example/x', 'https://bucket.example:444/x', 'https://sub.bucket.example/x']) {
      expect(errorOf(checkReadAnswer({ files: [link('episode.mcap', { url }), link('meta/episode.json')] }, request, T0, ORIGINS)).code, url).toBe('read_origin_not_allowed');
    }
    // The default port is the origin itself.
    expect(checkReadAnswer({ files: [link('episode.mcap', { url: 'https://BUCKET.example:443/x' }), link('meta/episode.json')] }, request, T0, ORIGINS).ok).toBe(true);
  });

  it('with no read origins, says the installation allows none and how to set them', () => {
    const e = errorOf(checkReadAnswer({ files: [link('episode.mcap'), link('meta/episode.json')] }, request, T0, new Set()));
    expect(e.code).toBe('read_origin_not_allowed');
    expect(e.message).toMatch(/allows no read origins/);
    expect(e.message).toContain('--read-origin');
  });

  it('checks the origin last: an answer wrong anyway is provider_failed', () => {
    const e = errorOf(checkReadAnswer({ files: [link('episode.mcap', { url: 'https://elsewhere.example/x', expires_at: new Date(T0 - 1).toISOString() }), link('meta/episode.json')] }, request, T0, ORIGINS));
    expect([e.code, e.details?.failure]).toEqual(['provider_failed', 'expired']);
  });
});

describe('readReply', () => {
  const reply = (status: number, body: string | Buffer) => ({ kind: 'answered' as const, status, body: Buffer.isBuffer(body) ? body : Buffer.from(body) });
  const read = (r: Parameters<typeof readReply>[0]) => errorOf(readReply(r, request, T0, ORIGINS, 10_000));

  it('says "unsupported" for 404, 405 and 501, whatever the body', () => {
    for (const status of [404, 405, 501]) {
      const e = read(reply(status, '{"error":{"code":"not_implemented"}}'));
      expect([e.status, e.code, e.details]).toEqual([501, 'read_links_unsupported', { destination_id: 'dst_a', http_status: status }]);
    }
  });

  it('turns any other status into provider_failed http_error, never 500 internal', () => {
    for (const status of [500, 503, 400, 403, 302, 100]) {
      const e = read(reply(status, 'whatever'));
      expect([e.status, e.code, e.details], String(status)).toEqual([502, 'provider_failed', { destination_id: 'dst_a', failure: 'http_error', http_status: status }]);
    }
  });

  it('turns a body that is not JSON, or JSON past the bounds, into invalid_json', () => {
    expect(read(reply(200, '<html>')).details).toMatchObject({ failure: 'invalid_json', http_status: 200 });
    expect(read(reply(200, '')).details).toMatchObject({ failure: 'invalid_json' });
    expect(read(reply(204, '')).details).toMatchObject({ failure: 'invalid_json', http_status: 204 });
    // A 2xx whose JSON is not an answer names that status.
    expect(read(reply(201, '{"links":[]}')).details).toEqual({ destination_id: 'dst_a', failure: 'schema_invalid', http_status: 201 });
    expect(read(reply(200, `${'['.repeat(5000)}${']'.repeat(5000)}`)).details).toMatchObject({ failure: 'invalid_json' });
  });

  it('maps no answer to its error: timeout 504, unreachable and too large 502', () => {
    const timeout = read({ kind: 'timeout', message: 'no complete answer' });
    expect([timeout.status, timeout.code, timeout.details]).toEqual([504, 'provider_timeout', { destination_id: 'dst_a', timeout_ms: 10_000 }]);
    expect(read({ kind: 'unreachable', message: 'unreachable: the connection was refused' }).details).toEqual({ destination_id: 'dst_a', failure: 'unreachable', http_status: null });
    const big = read({ kind: 'too_large', status: 200, message: 'big' });
    expect([big.code, big.details]).toEqual(['provider_failed', { destination_id: 'dst_a', failure: 'too_large', http_status: 200 }]);
    expect(big.message).toContain(String(PROVIDER_MAX_BYTES));
  });
});

/** An episode row as the store gives it, with these files and replicas. */
function episodeRow(files: number | string[], replicas: Partial<ReplicaRow>[] = []): EpisodeRow {
  const paths = typeof files === 'number' ? Array.from({ length: files }, (_, i) => `f${i}.bin`) : files;
  const report: EpisodeReport = testReport({
    manifest: { files: paths.map((path, i) => ({ path, size_bytes: 100 + i, sha256: i.toString(16).padStart(64, '0') })), total_bytes: 0 },
  });
  const { manifest, segments, metadata, outcome, ...rest } = report;
  return {
    seq: 1,
    id: report.id,
    orgId: ORG,
    robotId: 'rbt_reads',
    report: rest,
    outcome,
    recordedOutcome: outcome,
    metadata,
    annotations: {},
    segments,
    manifest,
    interrupted: false,
    reportedAt: T0,
    replicas: replicas.map((r) => ({ destinationId: 'dst_a', state: 'verified', grantId: 'g', error: null, objectKey: 'org/ep/', updatedAt: T0, ...r })),
  };
}

describe('requestedFiles', () => {
  const ep = episodeRow(['a.mcap', 'b/c.json', 'd.bin']);
  it('is every manifest file in manifest order by default, else the named ones in the order named', () => {
    expect(requestedFiles(ep, undefined).map((f) => f.path)).toEqual(['a.mcap', 'b/c.json', 'd.bin']);
    expect(requestedFiles(ep, ['d.bin', 'a.mcap'])).toEqual([ep.manifest.files[2], ep.manifest.files[0]]);
  });

  it.each<[string, string[] | undefined, EpisodeRow, string, string]>([
    ['a path not in the manifest', ['a.mcap', 'nope.bin'], ep, 'unknown_file', '/files/1'],
    ['a path twice', ['a.mcap', 'a.mcap'], ep, 'duplicate_file', '/files/1'],
    ['no files named on an episode of 65', undefined, episodeRow(65), 'too_many_files', '/files'],
  ])('refuses %s with 400 validation_failed', (_name, files, row, code, path) => {
    let thrown: unknown;
    try {
      requestedFiles(row, files);
    } catch (err) {
      thrown = err;
    }
    expect(thrown).toBeInstanceOf(ApiError);
    const e = thrown as ApiError;
    expect([e.status, e.code, e.details?.issues]).toEqual([400, 'validation_failed', [expect.objectContaining({ location: 'body', path, code })]]);
  });

  it('takes 64 files of a larger episode when they are named', () => {
    expect(requestedFiles(episodeRow(100), Array.from({ length: 64 }, (_, i) => `f${i + 30}.bin`))).toHaveLength(64);
  });
});

describe('ReadLinker against an HTTPS provider', () => {
  const stand = useProviderStandIn();
  const egress: EgressClient[] = [];
  let clock: ManualClock;
  let secrets: SecretBox;
  let logs: Record<string, unknown>[];
  let rawLog: string;
  afterAll(async () => {
    await Promise.all(egress.map((e) => e.close()));
  });
  beforeEach(() => {
    clock = new ManualClock(T0);
    secrets = SecretBox.random();
    logs = [];
    rawLog = '';
  });
  const envOf = (req: ReceivedRequest): ReadRequestEnvelope => ReadRequestEnvelopeSchema.parse(JSON.parse(req.body));
  /** Links for every requested file, expiring as the provider is told, on the bucket. */
  const linksFor = (env: ReadRequestEnvelope, now = clock.now()) => ({
    files: env.request.files.map((f) => ({ path: f.path, url: `${BUCKET}/${env.request.object_key ?? ''}${f.path}?${SIG}`, expires_at: new Date(now + env.request.expires_in_s * 1000).toISOString() })),
  });

  function destination(id: string, over: Partial<DestinationRow> = {}): DestinationRow {
    return { id, orgId: ORG, type: 'external', url: `${stand.provider.origin()}/grant`, secretSealed: secrets.seal(SECRET), retention: 'keep', createdAt: T0, revokedAt: null, ...over };
  }

  function linker(episodes: EpisodeRow[], destinations: DestinationRow[], opts: { timeoutMs?: number; readOrigins?: string[] } = {}): ReadLinker {
    const e = new EgressClient({ scheduler: systemScheduler, allowLoopback: true, ca: stand.pki.caPem });
    egress.push(e);
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        rawLog += chunk.toString();
        logs.push(JSON.parse(chunk.toString()) as Record<string, unknown>);
        done();
      },
    });
    return new ReadLinker({
      store: {
        episodes: { get: async (orgId, id) => episodes.find((ep) => ep.orgId === orgId && ep.id === id) },
        sync: { getDestination: async (orgId, id) => destinations.find((d) => d.orgId === orgId && d.id === id) },
      },
      egress: e,
      secrets,
      clock,
      logger: pino({ level: 'info' }, sink),
      readOrigins: opts.readOrigins ?? [BUCKET],
      ...(opts.timeoutMs !== undefined ? { timeoutMs: opts.timeoutMs } : {}),
    });
  }

  async function issueError(l: ReadLinker, episodeId: string, body: Parameters<ReadLinker['issue']>[2] = {}): Promise<ApiError> {
    try {
      await l.issue(ORG, episodeId, body);
    } catch (err) {
      if (err instanceof ApiError) return err;
      throw err;
    }
    throw new Error('expected an ApiError');
  }

  it('sends a signed read request and answers the links in the order asked, with the manifest facts; the log has no URL', async () => {
    const ep = episodeRow(['episode.mcap', 'meta/episode.json', 'extra.bin'], [{ objectKey: 'org/ep_1/' }]);
    stand.answer = (req, res) => {
      const env = envOf(req);
      // The provider answers in its own order.
      sendJson(res, 200, { files: linksFor(env).files.reverse() });
    };
    const l = linker([ep], [destination('dst_a')]);
    const before = stand.provider.requests.length;
    const got = ReadLinksSchema.parse(await l.issue(ORG, ep.id, { files: ['meta/episode.json', 'episode.mcap'] }));
    expect(got).toEqual({
      episode_id: ep.id,
      destination_id: 'dst_a',
      files: [
        { path: 'meta/episode.json', url: `${BUCKET}/org/ep_1/meta/episode.json?${SIG}`, expires_at: new Date(T0 + 900_000).toISOString(), destination_id: 'dst_a', size_bytes: 101, sha256: ep.manifest.files[1]!.sha256 },
        { path: 'episode.mcap', url: `${BUCKET}/org/ep_1/episode.mcap?${SIG}`, expires_at: new Date(T0 + 900_000).toISOString(), destination_id: 'dst_a', size_bytes: 100, sha256: ep.manifest.files[0]!.sha256 },
      ],
    });
    expect(stand.provider.requests.length).toBe(before + 1);
    const req = stand.provider.requests.at(-1)!;
    expect(req.method).toBe('POST');
    expect(req.url).toBe('/grant');
    expect(req.headers['content-type']).toBe('application/json');
    expect(req.headers['x-service-event']).toBe(READ_EVENT);
    expect(req.headers['x-service-event-id']).toMatch(/^evt_/);
    expect(req.headers['x-service-destination-id']).toBe('dst_a');
    expect(verifySignature({ body: req.body, header: String(req.headers['x-service-signature']), secrets: [SECRET], nowS: Math.floor(T0 / 1000) }).ok).toBe(true);
    expect(envOf(req)).toEqual({
      episode_id: ep.id,
      org_id: ORG,
      request: {
        destination_id: 'dst_a',
        episode: { robot_id: 'rbt_reads', recording_session_id: ep.report.recording_session_id, episode_seq: ep.report.episode_seq },
        object_key: 'org/ep_1/',
        files: [
          { path: 'meta/episode.json', size_bytes: 101, sha256: ep.manifest.files[1]!.sha256 },
          { path: 'episode.mcap', size_bytes: 100, sha256: ep.manifest.files[0]!.sha256 },
        ],
        expires_in_s: 900,
      },
    });
    const line = logs.find((x) => x.msg === 'read links forwarded');
    expect(line).toMatchObject({ episode_id: ep.id, destination_id: 'dst_a', http_status: 200, result: 'issued', files: 2 });
    expect(typeof line?.latency_ms).toBe('number');
    expect(rawLog).not.toContain(SIG);
    expect(rawLog).not.toContain(BUCKET);
  });

  it('asks for every manifest file by default, and sends a null object key when the replica has none', async () => {
    const ep = episodeRow(['a.mcap', 'b.json'], [{ objectKey: null }]);
    let seen: ReadRequestEnvelope | undefined;
    stand.answer = (req, res) => {
      seen = envOf(req);
      sendJson(res, 200, linksFor(seen));
    };
    const got = await linker([ep], [destination('dst_a')]).issue(ORG, ep.id, {});
    expect(got.files.map((f) => f.path)).toEqual(['a.mcap', 'b.json']);
    expect(seen?.request.object_key).toBeNull();
    expect(seen?.request.files.map((f) => f.path)).toEqual(['a.mcap', 'b.json']);
  });

  it('checks expiry on the injected clock: the same answer is refused once time has passed it', async () => {
    const ep = episodeRow(['a.mcap'], [{}]);
    // Links that expire 900 s after T0, whatever the cloud's clock says.
    stand.answer = (req, res) => sendJson(res, 200, linksFor(envOf(req), T0));
    const l = linker([ep], [destination('dst_a')]);
    expect((await l.issue(ORG, ep.id)).files).toHaveLength(1);
    clock.set(T0 + 901_000);
    const e = await issueError(l, ep.id);
    expect([e.code, e.details?.failure]).toEqual(['provider_failed', 'expired']);
  });

  it('picks the named destination, else the first verified replica at a live destination', async () => {
    const ep = episodeRow(['a.mcap'], [
      { destinationId: 'dst_syncing', state: 'syncing' },
      { destinationId: 'dst_revoked', state: 'verified' },
      { destinationId: 'dst_b', state: 'verified' },
      { destinationId: 'dst_c', state: 'verified' },
    ]);
    stand.answer = (req, res) => sendJson(res, 200, linksFor(envOf(req)));
    const l = linker([ep], [destination('dst_syncing'), destination('dst_revoked', { revokedAt: T0 }), destination('dst_b'), destination('dst_c')]);
    expect((await l.issue(ORG, ep.id)).destination_id).toBe('dst_b');
    expect(envOf(stand.provider.requests.at(-1)!).request.destination_id).toBe('dst_b');
    expect(stand.provider.requests.at(-1)!.headers['x-service-destination-id']).toBe('dst_b');
    expect((await l.issue(ORG, ep.id, { destination_id: 'dst_c' })).destination_id).toBe('dst_c');
  });

  it('refuses without asking the provider: 404 episode or destination, 409 not verified (with the replicas), 409 a revoked destination', async () => {
    const none = episodeRow(['a.mcap']);
    const failing = episodeRow(['a.mcap'], [
      { destinationId: 'dst_a', state: 'synced', error: 'checksum_mismatch: the bucket holds other bytes' },
      { destinationId: 'dst_b', state: 'granted' },
    ]);
    const l = linker([none, failing], [destination('dst_a'), destination('dst_b'), destination('dst_gone', { revokedAt: T0 }), { ...destination('dst_other_org'), orgId: 'org_other' }]);
    const before = stand.provider.requests.length;

    const missing = await issueError(l, 'ep_missing');
    expect([missing.status, missing.code]).toEqual([404, 'not_found']);
    const noReplica = await issueError(l, none.id);
    expect([noReplica.status, noReplica.code, noReplica.details]).toEqual([409, 'replica_not_verified', { replicas: [] }]);
    expect(noReplica.message).toMatch(/still on the robot/);
    const unverified = await issueError(l, failing.id);
    expect([unverified.code, unverified.details]).toEqual([
      'replica_not_verified',
      {
        replicas: [
          { destination_id: 'dst_a', state: 'synced', error: 'checksum_mismatch: the bucket holds other bytes' },
          { destination_id: 'dst_b', state: 'granted', error: null },
        ],
      },
    ]);
    const namedUnverified = await issueError(l, failing.id, { destination_id: 'dst_b' });
    expect([namedUnverified.code, namedUnverified.message]).toEqual(['replica_not_verified', expect.stringContaining('granted') as string]);
    const notAReplica = await issueError(l, none.id, { destination_id: 'dst_a' });
    expect([notAReplica.code, notAReplica.message]).toEqual(['replica_not_verified', expect.stringContaining('no replica at destination dst_a') as string]);
    const otherOrg = await issueError(l, failing.id, { destination_id: 'dst_other_org' });
    expect([otherOrg.status, otherOrg.code]).toEqual([404, 'not_found']);
    const revoked = await issueError(l, failing.id, { destination_id: 'dst_gone' });
    expect([revoked.status, revoked.code]).toEqual([409, 'conflict']);
    const unknownFile = await issueError(l, failing.id, { files: ['zzz'] });
    expect([unknownFile.status, unknownFile.code]).toEqual([400, 'validation_failed']);
    expect(stand.provider.requests.length).toBe(before);
  });

  it('gives 504 provider_timeout for a provider slower than its timeout', async () => {
    const ep = episodeRow(['a.mcap'], [{}]);
    let release: (() => void) | undefined;
    stand.answer = (req, res) => {
      // Answers only after the test is done with it.
      release = () => sendJson(res, 200, linksFor(envOf(req)));
    };
    const e = await issueError(linker([ep], [destination('dst_a')], { timeoutMs: 200 }), ep.id);
    release?.();
    expect([e.status, e.code, e.details]).toEqual([504, 'provider_timeout', { destination_id: 'dst_a', timeout_ms: 200 }]);
    expect(logs.find((x) => x.msg === 'read links forwarded')).toMatchObject({ result: 'provider_timeout', http_status: null });
  });

  it('gives 502 provider_failed unreachable when nothing listens, and logs the detail for the operator only', async () => {
    const closed = await startHttpsReceiver(stand.pki.issue(['localhost'], ['127.0.0.1']), () => undefined);
    const url = `${closed.origin('127.0.0.1')}/grant`;
    await closed.close();
    const ep = episodeRow(['a.mcap'], [{}]);
    const e = await issueError(linker([ep], [destination('dst_a', { url })]), ep.id);
    expect([e.status, e.code, e.details]).toEqual([502, 'provider_failed', { destination_id: 'dst_a', failure: 'unreachable', http_status: null }]);
    expect(logs.find((x) => x.msg === 'read provider not reachable')).toMatchObject({ destination_id: 'dst_a', failure: 'unreachable' });
  });

  it('gives 502 provider_failed too_large for an answer over 1 MiB', async () => {
    const ep = episodeRow(['a.mcap'], [{}]);
    stand.answer = (_req, res) => sendJson(res, 200, { files: [], pad: 'x'.repeat(PROVIDER_MAX_BYTES) });
    const e = await issueError(linker([ep], [destination('dst_a')]), ep.id);
    expect([e.code, e.details?.failure]).toEqual(['provider_failed', 'too_large']);
  });

  it('relays the installation with no read origins as read_origin_not_allowed once the provider answers', async () => {
    const ep = episodeRow(['a.mcap'], [{}]);
    stand.answer = (req, res) => sendJson(res, 200, linksFor(envOf(req)));
    const e = await issueError(linker([ep], [destination('dst_a')], { readOrigins: [] }), ep.id);
    expect([e.status, e.code, e.details]).toEqual([502, 'read_origin_not_allowed', { destination_id: 'dst_a', origin: BUCKET }]);
    expect(rawLog).not.toContain(SIG);
  });
});

describe('read origins (--read-origin)', () => {
  it.each([
    ['https://bucket.s3.eu-west-1.amazonaws.com', 'https://bucket.s3.eu-west-1.amazonaws.com'],
    ['https://Bucket.Example:443', 'https://bucket.example'],
    ['https://minio.example:9000', 'https://minio.example:9000'],
    ['http://127.0.0.1:9000', 'http://127.0.0.1:9000'],
    ['http://127.1.2.3', 'http://127.1.2.3'],
    ['http://localhost:9000', 'http://localhost:9000'],
    ['http://[::1]:9000', 'http://[::1]:9000'],
  ])('takes %s as %s', (value, origin) => {
    expect(readOriginOf(value)).toBe(origin);
  });

  it.each([
    ['http://bucket.example', /http is allowed only for a loopback host/],
    ['http://10.0.0.1:9000', /loopback/],
    ['http://[::ffff:127.0.0.1]', /loopback/],
    ['https://*.s3.amazonaws.com', /wildcards/],
    ['*', /wildcards/],
    ['https://bucket.example/', /no path/],
    ['https://bucket.example/recordings', /no path/],
    ['https://bucket.example?x=1', /no path/],
    ['https://bucket.example#x', /no path/],
    ['bucket.example', /scheme:\/\/host/],
    ['ftp://bucket.example', /scheme must be https/],
    ['https://user:pw@bucket.example', /credentials/],
    ['https://', /scheme:\/\/host/],
    ['', /scheme:\/\/host/],
  ])('refuses %s', (value, why) => {
    expect(() => readOriginOf(value)).toThrow(why);
  });

  it('is a list in the config, normalized and without repeats; a bad one stops the config', () => {
    expect(parseCloudConfig({}).readOrigins).toEqual([]);
    expect(parseCloudConfig({ readOrigins: ['https://a.example', 'https://A.example:443', 'http://127.0.0.1:9000'] }).readOrigins).toEqual(['https://a.example', 'http://127.0.0.1:9000']);
    expect(() => parseCloudConfig({ readOrigins: ['https://a.example', 'http://b.example'] })).toThrow(/http is allowed only for a loopback host/);
  });

  it('makes the console CSP: connect-src and img-src gain the origins, wasm may compile, the rest stays', () => {
    expect(consoleContentSecurityPolicy([])).toBe(
      "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; worker-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    );
    const csp = consoleContentSecurityPolicy(['https://a.example', 'http://127.0.0.1:9000']);
    const directives = new Map(csp.split('; ').map((d) => [d.split(' ')[0]!, d] as const));
    expect(directives.get('connect-src')).toBe("connect-src 'self' https://a.example http://127.0.0.1:9000");
    expect(directives.get('img-src')).toBe("img-src 'self' data: blob: https://a.example http://127.0.0.1:9000");
    expect(directives.get('script-src')).toBe("script-src 'self' 'wasm-unsafe-eval'");
    expect(directives.get('style-src')).toBe("style-src 'self'");
    expect(directives.get('default-src')).toBe("default-src 'self'");
    expect(csp).not.toContain('unsafe-inline');
  });
});
