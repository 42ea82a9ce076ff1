import { createHash } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createServer as createHttpServer, type Server } from 'node:http';
import mqtt from 'mqtt';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { GrantRequestEnvelopeSchema, SyncMessageSchema, topics, type GrantRequestEnvelope, type SyncMessage } from '@fleet/protocol';
import { createTestPki, startHttpsReceiver, type ReceivedRequest, type TestPki, type TestReceiver } from '../cloud/src/egress/test-https.js';
import { startCloud, type CloudProcess } from './support/cloud.js';
import { getEpisode } from './support/episodes.js';
import { createEnrollmentToken, sendCommand, startFleet } from './support/robots.js';
import { okJson } from './support/http.js';
import { waitFor } from './support/wait.js';

/**
 * Sync under bad answers, with real processes: a grant provider that answers wrongly in every way
 * the contract forbids, a store that refuses uploads, and a robot asking for what is not its
 * own. Each is a deferral (or a replica error) with its reason visible, never a bad grant at the
 * robot and never a crash.
 */

let pki: TestPki;
beforeAll(() => {
  pki = createTestPki();
});
afterAll(() => pki?.cleanup());


const send = (res: ServerResponse, status: number, body: unknown) => {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(typeof body === 'string' ? body : JSON.stringify(body));
};
const envOf = (req: ReceivedRequest): GrantRequestEnvelope => GrantRequestEnvelopeSchema.parse(JSON.parse(req.body));
function grant(env: GrantRequestEnvelope, storeUrl: string, over: { grantId?: string; destinationId?: string; files?: unknown[] } = {}) {
  return {
    grant_id: over.grantId ?? `g_${Math.random().toString(36).slice(2)}`,
    expires_at: new Date(Date.now() + 3600_000).toISOString(),
    retry_after: null,
    retention: { local: 'keep' },
    destinations: [
      {
        destination_id: over.destinationId ?? env.request.destination_id,
        protocol: 'http-put',
        object_key: `k/${env.episode_id}/`,
        files: over.files ?? env.request.manifest.files.map((f) => ({ path: f.path, put_url: `${storeUrl}/${env.episode_id}/${f.path}` })),
      },
    ],
  };
}

interface Destination {
  id: string;
  deferrals_24h: number;
  last_deferral: { at: string; reason: string } | null;
}

async function webhookOnFailed(cloud: CloudProcess): Promise<{ receiver: TestReceiver; deliveries: { event: string; body: string }[] }> {
  const deliveries: { event: string; body: string }[] = [];
  const receiver = await startHttpsReceiver(pki.issue(['localhost'], ['127.0.0.1']), (req, res) => {
    deliveries.push({ event: String(req.headers['x-service-event']), body: req.body });
    res.writeHead(200);
    res.end();
  });
  await okJson(await cloud.fetch('/v1/webhooks', { method: 'POST', json: { url: `https://127.0.0.1:${receiver.port}/hook`, events: ['episode.failed'] } }));
  return { receiver, deliveries };
}

async function destinationOf(cloud: CloudProcess, id: string): Promise<Destination> {
  const list = await okJson<{ destinations: Destination[] }>(await cloud.fetch('/v1/destinations'));
  return list.destinations.find((d) => d.id === id)!;
}

describe('sync faults', () => {
  test('every bad grant answer is a deferral with its reason in destination health; a store that refuses uploads shows on the replica; the robot asks again', async () => {
    // A storage that refuses every upload with 403, as an expired or tampered presigned URL would.
    // A storage whose answers the test sets: 403 (an expired or tampered URL), 500, a complete
    // answered 200 with an <Error> body, or a well-behaved S3 (ETag = MD5 of the bytes).
    const puts: string[] = [];
    let storeMode: 'forbidden' | 'error500' | 'completeError' | 'ok' = 'forbidden';
    const store: Server = createHttpServer((req: IncomingMessage, res: ServerResponse) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        puts.push(`${req.method} ${req.url ?? ''}`);
        const xmlError = (status: number, code: string) => {
          res.writeHead(status, { 'content-type': 'application/xml' });
          res.end(`<?xml version="1.0"?><Error><Code>${code}</Code><Message>${code}</Message></Error>`);
        };
        if (storeMode === 'forbidden') return xmlError(403, 'AccessDenied');
        if (storeMode === 'error500') return xmlError(500, 'InternalError');
        if (req.method === 'POST') {
          if (storeMode === 'completeError') return xmlError(200, 'InternalError');
          res.writeHead(200, { 'content-type': 'application/xml' });
          res.end('<?xml version="1.0"?><CompleteMultipartUploadResult><Bucket>b</Bucket><Key>k</Key><ETag>"abc-1"</ETag></CompleteMultipartUploadResult>');
          return;
        }
        res.writeHead(200, { etag: `"${createHash('md5').update(Buffer.concat(chunks)).digest('hex')}"` });
        res.end();
      });
    });
    await new Promise<void>((r) => store.listen(0, '127.0.0.1', r));
    const storeUrl = `http://127.0.0.1:${(store.address() as { port: number }).port}`;

    let answer: (req: ReceivedRequest, res: ServerResponse) => void = (_q, res) => send(res, 500, { error: 'not yet' });
    const provider = await startHttpsReceiver(pki.issue(['localhost'], ['127.0.0.1']), (req, res) => answer(req, res));
    try {
      await using cloud = await startCloud({ args: ['--egress-allow-loopback', '--egress-ca-file', pki.caFile, '--grant-retry-after-s', '1'] });
      const dest = await okJson<{ id: string }>(await cloud.fetch('/v1/destinations', { method: 'POST', json: { type: 'external', url: `https://127.0.0.1:${provider.port}/grant` } }));
      const token = await createEnrollmentToken(cloud, { maxUses: 1 });
      await using fleet = await startFleet(cloud, { count: 1, token: token.token, args: ['--allow-http-uploads', '--sync-retry-schedule-ms', '300'] });
      const robotId = fleet.robots[0]!;
      const hook = await webhookOnFailed(cloud);

      const start = await sendCommand(cloud, robotId, 'episodes/start');
      const episodeId = (start.body as { result: { episode_id: string } }).result.episode_id;
      await new Promise((r) => setTimeout(r, 300));
      expect((await sendCommand(cloud, robotId, 'episodes/finish')).status).toBe(200);

      // Each bad answer in turn: the robot keeps asking (every second), each ask is deferred with the reason.
      const cases: [string, (req: ReceivedRequest, res: ServerResponse) => void][] = [
        ['http_error', (_q, res) => send(res, 500, { error: 'boom' })],
        ['invalid_json', (_q, res) => send(res, 200, '<html>not okJson</html>')],
        ['too_large', (_q, res) => send(res, 200, `{"pad":"${'x'.repeat(2 * 1024 * 1024)}"}`)],
        ['destination_mismatch', (q, res) => send(res, 200, grant(envOf(q), storeUrl, { destinationId: 'dst_someone_else' }))],
        ['schema_invalid', (q, res) => send(res, 200, grant(envOf(q), storeUrl, { files: [] }))],
        ['schema_invalid', (q, res) => send(res, 200, grant(envOf(q), storeUrl, { files: [...envOf(q).request.manifest.files.map((f) => ({ path: f.path, put_url: `${storeUrl}/x` })), { path: 'extra.bin', put_url: `${storeUrl}/x` }] }))],
        ['schema_invalid', (q, res) => send(res, 200, grant(envOf(q), storeUrl, { files: envOf(q).request.manifest.files.map((f, i) => ({ path: i === 0 ? `other-${f.path}` : f.path, put_url: `${storeUrl}/x` })) }))],
      ];
      for (const [reason, handler] of cases) {
        const before = (await destinationOf(cloud, dest.id)).deferrals_24h;
        answer = handler;
        await waitFor(
          async () => {
            const d = await destinationOf(cloud, dest.id);
            return d.deferrals_24h > before + 1 && d.last_deferral?.reason.startsWith(`${reason}: `) ? d : undefined;
          },
          { timeoutMs: 30_000, description: `a deferral for ${reason}` },
        );
        // Nothing reached the robot as a grant: no replica, nothing uploaded.
        expect((await getEpisode(cloud, episodeId))?.replicas).toEqual([]);
        expect(puts).toEqual([]);
      }

      // A valid grant whose URLs the store refuses: the replica shows the error, and the robot asks again.
      let asks = 0;
      answer = (q, res) => {
        asks += 1;
        send(res, 200, grant(envOf(q), storeUrl, { grantId: asks === 1 ? 'g_first' : `g_${asks}` }));
      };
      const failed = await waitFor(
        async () => {
          const ep = await getEpisode(cloud, episodeId);
          return ep?.replicas[0]?.error ? ep : undefined;
        },
        { timeoutMs: 60_000, description: 'the replica error after the store refused the upload' },
      );
      expect(failed.replicas[0]).toMatchObject({ destination_id: dest.id, grant_id: 'g_first' });
      expect(failed.replicas[0]!.error).toMatch(/403/);
      expect(puts.length).toBeGreaterThan(0);

      // The same grant_id again is a reuse: a deferral, not a grant.
      answer = (q, res) => send(res, 200, grant(envOf(q), storeUrl, { grantId: 'g_first' }));
      await waitFor(async () => ((await destinationOf(cloud, dest.id)).last_deferral?.reason.startsWith('grant_reused: ') ? true : undefined), {
        timeoutMs: 90_000,
        description: 'a grant_reused deferral',
      });

      // Multipart: a part answered 500, then a complete answered 200 with <Error>: each on the replica.
      let n = 0;
      answer = (q, res) => {
        n += 1;
        const env = envOf(q);
        const files = env.request.manifest.files.map((f) => ({
          path: f.path,
          upload_id: `up-${f.path}`,
          part_size: Math.max(1, f.size_bytes),
          part_urls: [`${storeUrl}/${env.episode_id}/${f.path}?partNumber=1`],
          complete_url: `${storeUrl}/${env.episode_id}/${f.path}?uploadId=up`,
        }));
        send(res, 200, { ...grant(env, storeUrl, { grantId: `g_mp_${n}`, files }), destinations: [{ destination_id: env.request.destination_id, protocol: 's3-multipart', object_key: `k/${env.episode_id}/`, files }] });
      };
      const errorMatching = (re: RegExp) =>
        waitFor(
          async () => {
            const ep = await getEpisode(cloud, episodeId);
            return ep?.replicas[0]?.error && re.test(ep.replicas[0].error) ? ep : undefined;
          },
          { timeoutMs: 60_000, description: `a replica error matching ${String(re)}` },
        );
      storeMode = 'error500';
      await errorMatching(/500/);
      storeMode = 'completeError';
      await errorMatching(/^complete_failed: /);

      // The store behaves again: the robot's next attempt syncs and verifies; the error clears.
      storeMode = 'ok';
      const done = await waitFor(
        async () => {
          const ep = await getEpisode(cloud, episodeId);
          return ep?.replicas[0]?.state === 'verified' ? ep : undefined;
        },
        { timeoutMs: 60_000, description: 'the replica verified once the store behaves' },
      );
      expect(done.replicas[0]).toMatchObject({ destination_id: dest.id, error: null });

      // Each failed attempt was an episode.failed webhook carrying {code, message}.
      const failedEvents = hook.deliveries.filter((d) => d.event === 'episode.failed').map((d) => JSON.parse(d.body) as { episode_id: string; destination_id: string; error: { code: string; message: string } });
      expect(failedEvents.length).toBeGreaterThanOrEqual(3);
      for (const f of failedEvents) expect(f).toMatchObject({ episode_id: episodeId, destination_id: dest.id, error: { code: expect.any(String) as string, message: expect.any(String) as string } });
      expect(failedEvents.map((f) => f.error.code)).toEqual(expect.arrayContaining(['complete_failed']));
      await hook.receiver.close();
    } finally {
      await provider.close();
      await new Promise<void>((r) => store.close(() => r()));
    }
  });

  test("a robot asking for a grant for another robot's episode, or a destination it was not assigned, is refused", async () => {
    const provider = await startHttpsReceiver(pki.issue(['localhost'], ['127.0.0.1']), (_q, res) => send(res, 200, { grant_id: null, destinations: [], retention: { local: 'keep' }, retry_after: 3600 }));
    try {
      await using cloud = await startCloud({ args: ['--egress-allow-loopback', '--egress-ca-file', pki.caFile] });
      const dest = await okJson<{ id: string }>(await cloud.fetch('/v1/destinations', { method: 'POST', json: { type: 'external', url: `https://127.0.0.1:${provider.port}/grant` } }));
      const token = await createEnrollmentToken(cloud, { maxUses: 2 });
      await using fleet = await startFleet(cloud, { count: 1, token: token.token });
      const owner = fleet.robots[0]!;
      const start = await sendCommand(cloud, owner, 'episodes/start');
      const episodeId = (start.body as { result: { episode_id: string } }).result.episode_id;
      expect((await sendCommand(cloud, owner, 'episodes/finish')).status).toBe(200);
      await waitFor(() => getEpisode(cloud, episodeId), { timeoutMs: 30_000, description: 'the episode indexed' });

      // Another robot of the same organization, with its own credentials, asks for the owner's episode.
      const other = await okJson<{ robot_id: string; mqtt: { client_id: string; username: string; password: string } }>(
        await cloud.fetch('/v1/robots/enroll', { method: 'POST', key: null, json: { token: token.token, name: 'probe' } }),
      );
      const client = await mqtt.connectAsync(cloud.mqtt, { clientId: other.mqtt.client_id, username: other.mqtt.username, password: other.mqtt.password, protocolVersion: 4 });
      try {
        const got: SyncMessage[] = [];
        client.on('message', (_t, payload) => got.push(SyncMessageSchema.parse(JSON.parse(payload.toString('utf8')))));
        await client.subscribeAsync(topics.sync(other.robot_id), { qos: 1 });
        const ask = (reqId: string, destinationId: string) =>
          client.publishAsync(topics.syncRequest(other.robot_id), JSON.stringify({ type: 'grant.request', req_id: reqId, episode_id: episodeId, destination_id: destinationId }), { qos: 1 });
        await ask('not-mine', dest.id);
        await ask('not-assigned', 'dst_unknown');
        const answers = await waitFor(() => {
          const mine = got.filter((m) => m.type === 'deferral' && (m.req_id === 'not-mine' || m.req_id === 'not-assigned'));
          return mine.length === 2 ? mine : undefined;
        }, { description: 'both refusals' });
        for (const m of answers) expect(m).toMatchObject({ type: 'deferral', reason: 'not_assigned' });
        expect(got.some((m) => m.type === 'grant')).toBe(false);
      } finally {
        await client.endAsync();
      }
    } finally {
      await provider.close();
    }
  });

  test('the destination check reports every failure value against a real cloud process', async () => {
    let answer: (req: ReceivedRequest, res: ServerResponse) => void = () => undefined;
    const provider = await startHttpsReceiver(pki.issue(['localhost'], ['127.0.0.1']), (req, res) => answer(req, res));
    const closed = await startHttpsReceiver(pki.issue(['localhost'], ['127.0.0.1']), () => undefined);
    const closedPort = closed.port;
    await closed.close();
    try {
      await using cloud = await startCloud({ args: ['--egress-allow-loopback', '--egress-ca-file', pki.caFile] });
      const create = async (url: string) => okJson<{ id: string }>(await cloud.fetch('/v1/destinations', { method: 'POST', json: { type: 'external', url } }));
      const check = async (id: string) => okJson<Record<string, unknown>>(await cloud.fetch(`/v1/destinations/${id}/check`, { method: 'POST' }));
      const good = await create(`https://127.0.0.1:${provider.port}/grant`);
      const cases: [string, (req: ReceivedRequest, res: ServerResponse) => void][] = [
        ['http_error', (_q, res) => send(res, 502, 'bad gateway')],
        ['invalid_json', (_q, res) => send(res, 200, 'nope')],
        ['schema_invalid', (_q, res) => send(res, 200, { grant_id: 'g' })],
        ['destination_mismatch', (q, res) => send(res, 200, grant(envOf(q), 'https://s.example', { destinationId: 'dst_x' }))],
        ['timeout', () => undefined],
      ];
      for (const [failure, handler] of cases) {
        answer = handler;
        expect(await check(good.id), failure).toMatchObject({ result: 'fail', mode: 'deferred', failure });
      }
      const unreachable = await create(`https://127.0.0.1:${closedPort}/grant`);
      expect(await check(unreachable.id)).toMatchObject({ result: 'fail', failure: 'unreachable', http_status: null });
      answer = (_q, res) => send(res, 200, { grant_id: null, destinations: [], retention: { local: 'keep' }, retry_after: 5 });
      expect(await check(good.id)).toMatchObject({ result: 'pass', mode: 'deferred' });
      answer = (q, res) => send(res, 200, grant(envOf(q), 'https://s.example'));
      expect(await check(good.id)).toMatchObject({ result: 'pass', mode: 'granted', http_status: 200 });
      // Nothing persisted: no forward counted.
      expect(await destinationOf(cloud, good.id)).toMatchObject({ deferrals_24h: 0, last_deferral: null });
    } finally {
      await provider.close();
    }
  });
});
