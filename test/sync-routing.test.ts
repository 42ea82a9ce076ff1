import { afterAll, beforeAll, expect, test } from 'vitest';
import type { Episode } from '@fleet/protocol';
import { createTestPki, type TestPki } from '../cloud/src/egress/test-https.js';
import { makeTempDir, startCloud, type CloudProcess, type TempDir } from './support/cloud.js';
import { getEpisode } from './support/episodes.js';
import { startGrantProvider, writeProviderTls, type GrantProviderProcess } from './support/grant-provider.js';
import { createEnrollmentToken, sendCommand, startFleet } from './support/robots.js';
import { startS3Server, type S3ServerProcess } from './support/s3-server.js';
import { freePort, okJson } from './support/http.js';
import { waitFor } from './support/wait.js';

/**
 * The routing table with real processes: one destination routes everything; a second one stops
 * all routing until a rule decides; a new rule routes the backlog; the first matching rule wins;
 * a revoked destination's rules stop matching and synced data stays.
 */

let pki: TestPki;
let tmp: TempDir;
let tls: { certFile: string; keyFile: string; ca: string };

beforeAll(async () => {
  pki = createTestPki();
  tmp = await makeTempDir('fleet-routing-');
  tls = writeProviderTls(pki, tmp.path);
});
afterAll(async () => {
  await tmp?.[Symbol.asyncDispose]();
  pki?.cleanup();
});



/** A destination and its provider (own secret, own key prefix in the shared bucket). */
async function destinationWithProvider(cloud: CloudProcess, s3: S3ServerProcess, prefix: string): Promise<{ id: string; provider: GrantProviderProcess }> {
  const port = await freePort();
  const d = await okJson<{ id: string; secret: string }>(await cloud.fetch('/v1/destinations', { method: 'POST', json: { type: 'external', url: `https://127.0.0.1:${port}/grant` } }));
  const provider = await startGrantProvider({ s3, secret: d.secret, tls, args: ['--port', String(port), '--key-prefix', prefix] });
  return { id: d.id, provider };
}

async function record(cloud: CloudProcess, robotId: string): Promise<string> {
  const start = await sendCommand(cloud, robotId, 'episodes/start');
  expect(start.status, JSON.stringify(start.body)).toBe(200);
  const id = (start.body as { result: { episode_id: string } }).result.episode_id;
  await new Promise((r) => setTimeout(r, 200));
  expect((await sendCommand(cloud, robotId, 'episodes/finish')).status).toBe(200);
  await waitFor(() => getEpisode(cloud, id), { timeoutMs: 30_000, description: `episode ${id} indexed` });
  await waitFor(
    async () => ((await okJson<{ recording_state: string }>(await cloud.fetch(`/v1/robots/${robotId}`))).recording_state === 'idle' ? true : undefined),
    { timeoutMs: 30_000, description: 'the robot idle' },
  );
  return id;
}

/** Waits until the episode's replicas are exactly `destinations`, all verified. */
async function verifiedAt(cloud: CloudProcess, id: string, destinations: string[]): Promise<Episode> {
  return waitFor(
    async () => {
      const ep = await getEpisode(cloud, id);
      const at = (ep?.replicas ?? []).filter((r) => r.state === 'verified').map((r) => r.destination_id).sort();
      return ep && ep.replicas.length === destinations.length && JSON.stringify(at) === JSON.stringify([...destinations].sort()) ? ep : undefined;
    },
    { timeoutMs: 60_000, description: `episode ${id} verified at ${destinations.join(', ')}` },
  );
}

test('first match wins, backlog on a new rule, no routing with two destinations and no rules, revocation', async () => {
  await using s3 = await startS3Server();
  await using cloud = await startCloud({ args: ['--egress-allow-loopback', '--egress-ca-file', pki.caFile] });
  const token = await createEnrollmentToken(cloud, { maxUses: 1 });
  await using fleet = await startFleet(cloud, { count: 1, token: token.token, args: ['--allow-http-uploads'] });
  const robotId = fleet.robots[0]!;

  // Rule 2: no rules and exactly one destination: every episode routes to it.
  const a = await destinationWithProvider(cloud, s3, 'a/');
  await using _pa = a.provider;
  const e1 = await record(cloud, robotId);
  await verifiedAt(cloud, e1, [a.id]);

  // Rule 4: two destinations and no rules: nothing routes (e2 stays local for now).
  const b = await destinationWithProvider(cloud, s3, 'b/');
  await using _pb = b.provider;
  const e2 = await record(cloud, robotId);
  expect((await getEpisode(cloud, e2))!.replicas).toEqual([]);

  // Rule 3: once a rule exists only rules decide; adding it routes the backlog (e2) to B. e1 keeps A.
  const toB = await okJson<{ id: string }>(await cloud.fetch('/v1/routing-rules', { method: 'POST', json: { destination_id: b.id, match: { robot_id: [robotId] } } }));
  await verifiedAt(cloud, e2, [b.id]);
  expect((await getEpisode(cloud, e1))!.replicas.map((r) => r.destination_id)).toEqual([a.id]);

  // Rule 1: the first matching rule wins. A catch-all rule to A, moved first, takes the next episode.
  const toA = await okJson<{ id: string }>(await cloud.fetch('/v1/routing-rules', { method: 'POST', json: { destination_id: a.id, match: {} } }));
  const order = await cloud.fetch('/v1/routing-rules/order', { method: 'PUT', json: { rule_ids: [toA.id, toB.id] } });
  expect(order.status).toBe(200);
  const e3 = await record(cloud, robotId);
  await verifiedAt(cloud, e3, [a.id]);

  // A rule that does not match is passed over: first a rule for another task, pointing at A.
  const otherTask = await okJson<{ id: string }>(await cloud.fetch('/v1/routing-rules', { method: 'POST', json: { destination_id: a.id, match: { task_id: 'no-such-task' } } }));
  await cloud.fetch('/v1/routing-rules/order', { method: 'PUT', json: { rule_ids: [otherTask.id, toB.id, toA.id] } });
  const e4 = await record(cloud, robotId);
  await verifiedAt(cloud, e4, [b.id]);

  // Revoking B: its rule stops matching (the catch-all to A decides), and what B verified stays.
  expect((await cloud.fetch(`/v1/destinations/${b.id}`, { method: 'DELETE' })).status).toBe(204);
  const e5 = await record(cloud, robotId);
  await verifiedAt(cloud, e5, [a.id]);
  expect((await getEpisode(cloud, e2))!.replicas).toMatchObject([{ destination_id: b.id, state: 'verified' }]);
  const rules = await okJson<{ routing_rules: { id: string; destination_id: string }[] }>(await cloud.fetch('/v1/routing-rules'));
  expect(rules.routing_rules.map((r) => r.id)).toEqual([otherTask.id, toB.id, toA.id]);

  // The objects sit under each destination's own prefix.
  const keys = (await s3.listObjects()).map((o) => o.key);
  expect(keys.some((k) => k.startsWith('a/') && k.includes(e1))).toBe(true);
  expect(keys.some((k) => k.startsWith('b/') && k.includes(e2))).toBe(true);
  expect(keys.some((k) => k.startsWith('b/') && k.includes(e1))).toBe(false);
});
