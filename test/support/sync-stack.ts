import { createHash } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import { GrantRequestEnvelopeSchema, type GrantRequestEnvelope } from '@fleet/protocol';
import { Agent as HttpAgent, request } from 'undici';
import { expect } from 'vitest';
import { startHttpsReceiver, type ReceivedRequest, type TestPki, type TestReceiver } from '../../cloud/src/egress/test-https.js';
import { startCloud, type CloudProcess } from './cloud.js';
import { startGrantProvider, type GrantProviderProcess } from './grant-provider.js';
import { freePort, okJson } from './http.js';
import { startS3Proxy, type S3Proxy } from './s3-proxy.js';
import { startS3Server, type S3ServerProcess } from './s3-server.js';

/**
 * The cloud side of sync as real processes, for end-to-end tests of the robot's uploads: the
 * S3 server (with the recording proxy in front of it), `fleet-cloud serve`, a webhook receiver,
 * one external destination and the reference grant provider (`fleet-sim grant-provider`) on a
 * fixed port, so the test can stop it (the cloud then finds nothing listening: `unreachable`)
 * and start it again. With `tap`, the destination points at a small HTTPS relay in front of
 * the provider that records every grant request and can answer some itself (a provider that
 * defers chosen episodes).
 */
export interface SyncStack {
  s3: S3ServerProcess;
  proxy: S3Proxy;
  cloud: CloudProcess;
  destinationId: string;
  hooks: WebhookLog;
  /** The running provider process; undefined while stopped. */
  readonly provider: GrantProviderProcess | undefined;
  /** The grant requests the tap saw (empty without a tap). */
  readonly grantRequests: readonly GrantRequestEnvelope[];
  startProvider(): Promise<void>;
  /** SIGKILLs the provider: nothing listens on its port until `startProvider()`. */
  stopProvider(): Promise<void>;
  dispose(): Promise<void>;
}

export interface WebhookLog {
  receiver: TestReceiver;
  deliveries: { event: string; body: Record<string, unknown> }[];
  /** The deliveries of `event` about `episodeId`. */
  of(event: string, episodeId: string): Record<string, unknown>[];
}

export interface SyncStackOptions {
  pki: TestPki;
  /** The provider's certificate files (`writeProviderTls`). */
  tls: { certFile: string; keyFile: string; ca: string };
  /** The destination's registered retention (default `keep`). */
  retention?: 'keep' | 'until_all_verified_plus_72h';
  /** Webhook events to subscribe to. */
  events: readonly string[];
  cloudArgs?: readonly string[];
  providerArgs?: readonly string[];
  /** Start the provider now (default true). */
  providerUp?: boolean;
  /**
   * Put a relay in front of the provider; for each grant request it may answer itself (return
   * the status and JSON body) or return undefined to pass the request on to the provider.
   */
  tap?: (envelope: GrantRequestEnvelope) => { status: number; body: unknown } | undefined;
}

export async function startSyncStack(opts: SyncStackOptions): Promise<SyncStack> {
  const cleanups: (() => PromiseLike<unknown>)[] = [];
  const dispose = async () => {
    for (const c of cleanups.splice(0).reverse()) await Promise.resolve(c()).catch(() => undefined);
  };
  try {
    const s3 = await startS3Server();
    cleanups.push(() => s3.close());
    const proxy = await startS3Proxy(s3.endpoint);
    cleanups.push(() => proxy.close());
    const cloud = await startCloud({ args: ['--egress-allow-loopback', '--egress-ca-file', opts.pki.caFile, ...(opts.cloudArgs ?? [])] });
    cleanups.push(() => cloud[Symbol.asyncDispose]());
    const hooks = await startWebhookLog(cloud, opts.pki, opts.events);
    cleanups.push(() => hooks.receiver.close());

    const port = await freePort();
    let provider: GrantProviderProcess | undefined;
    const grantRequests: GrantRequestEnvelope[] = [];
    let url = `https://127.0.0.1:${port}/grant`;
    if (opts.tap) {
      const tap = opts.tap;
      const dispatcher = new HttpAgent({ connect: { ca: opts.tls.ca } });
      cleanups.push(() => dispatcher.close());
      const relay = await startHttpsReceiver(opts.pki.issue(['localhost'], ['127.0.0.1']), (req, res) => void relayGrant(req, res));
      cleanups.push(() => relay.close());
      const relayGrant = async (req: ReceivedRequest, res: ServerResponse) => {
        const send = (status: number, body: unknown) => {
          res.writeHead(status, { 'content-type': 'application/json' });
          res.end(typeof body === 'string' ? body : JSON.stringify(body));
        };
        const envelope = GrantRequestEnvelopeSchema.safeParse(JSON.parse(req.body));
        if (!envelope.success) return send(400, { error: 'not a grant request' });
        grantRequests.push(envelope.data);
        const own = tap(envelope.data);
        if (own) return send(own.status, own.body);
        try {
          const headers: Record<string, string> = {};
          for (const [k, v] of Object.entries(req.headers)) if (typeof v === 'string' && !['host', 'content-length', 'connection'].includes(k)) headers[k] = v;
          const answer = await request(`https://127.0.0.1:${port}/grant`, { method: 'POST', body: req.body, headers, dispatcher });
          send(answer.statusCode, await answer.body.text());
        } catch {
          // The provider is down: the cloud sees what a dead gateway gives.
          send(502, { error: 'provider unreachable' });
        }
      };
      url = `https://127.0.0.1:${relay.port}/grant`;
    }
    const destination = await okJson<{ id: string; secret: string }>(
      await cloud.fetch('/v1/destinations', { method: 'POST', json: { type: 'external', url, retention: opts.retention ?? 'keep' } }),
    );
    const startProvider = async () => {
      if (provider) return;
      provider = await startGrantProvider({
        s3: { ...s3, endpoint: proxy.endpoint },
        secret: destination.secret,
        tls: opts.tls,
        args: ['--port', String(port), ...(opts.providerArgs ?? [])],
      });
    };
    cleanups.push(() => provider?.[Symbol.asyncDispose]() ?? Promise.resolve());
    if (opts.providerUp ?? true) await startProvider();
    return {
      s3,
      proxy,
      cloud,
      destinationId: destination.id,
      hooks,
      get provider() {
        return provider;
      },
      grantRequests,
      startProvider,
      async stopProvider() {
        const p = provider;
        provider = undefined;
        await p?.kill('SIGKILL');
        await p?.[Symbol.asyncDispose]();
      },
      dispose,
    };
  } catch (err) {
    await dispose();
    throw err;
  }
}

/** An HTTPS webhook endpoint subscribed to `events`, keeping every delivery. */
export async function startWebhookLog(cloud: CloudProcess, pki: TestPki, events: readonly string[]): Promise<WebhookLog> {
  const deliveries: WebhookLog['deliveries'] = [];
  const receiver = await startHttpsReceiver(pki.issue(['localhost'], ['127.0.0.1']), (req, res) => {
    deliveries.push({ event: String(req.headers['x-service-event']), body: JSON.parse(req.body) as Record<string, unknown> });
    res.writeHead(200);
    res.end();
  });
  try {
    await okJson(await cloud.fetch('/v1/webhooks', { method: 'POST', json: { url: `https://127.0.0.1:${receiver.port}/hook`, events } }));
  } catch (err) {
    await receiver.close();
    throw err;
  }
  return { receiver, deliveries, of: (event, episodeId) => deliveries.filter((d) => d.event === event && d.body.episode_id === episodeId).map((d) => d.body) };
}

/** What the bucket must hold for one episode: its manifest's files under its object key. */
export interface ExpectedEpisode {
  objectKey: string;
  manifest: { files: readonly { path: string; size_bytes: number; sha256: string }[] };
}

/**
 * The bucket holds exactly the manifests' files (one object each, under each episode's object
 * key, nothing else) and every object's SHA-256 is its manifest's.
 */
export async function expectBucketHolds(s3: S3ServerProcess, episodes: readonly ExpectedEpisode[]): Promise<void> {
  const expected = episodes.flatMap((e) => e.manifest.files.map((f) => ({ key: `${e.objectKey}${f.path}`, ...f })));
  const objects = await s3.listObjects();
  expect(objects.map((o) => o.key).sort()).toEqual(expected.map((f) => f.key).sort());
  for (const f of expected) {
    const obj = await s3.getObject(f.key);
    expect(obj?.body.length, f.key).toBe(f.size_bytes);
    expect(createHash('sha256').update(obj!.body).digest('hex'), f.key).toBe(f.sha256);
  }
}
