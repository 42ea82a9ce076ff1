import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { verifySignature, type Episode, type EpisodeWithLocations } from '@fleet/protocol';
import { createTestPki, startHttpsReceiver, type TestPki, type TestReceiver } from '../cloud/src/egress/test-https.js';
import { makeTempDir, startCloud, type CloudProcess, type TempDir } from './support/cloud.js';
import { agentControl, exportEpisodes, getEpisode, listEpisodes, recordAtLeast } from './support/episodes.js';
import { startGrantProvider, writeProviderTls } from './support/grant-provider.js';
import { createEnrollmentToken, sendCommand, startAgentProcess, startFleet } from './support/robots.js';
import { startS3Server } from './support/s3-server.js';
import { freePort, okJson } from './support/http.js';
import { waitFor } from './support/wait.js';

/**
 * Cloud sync end to end with real processes: fleet-cloud, a fleet-sim robot running the real
 * agent, the reference grant provider over HTTPS, and a signature-checking S3-compatible server.
 * Recorded bytes go from the robot straight to the bucket; the cloud only relays grants and
 * indexes replica states.
 */

let pki: TestPki;
let tmp: TempDir;
let tlsFiles: { certFile: string; keyFile: string };

beforeAll(async () => {
  pki = createTestPki();
  tmp = await makeTempDir('fleet-sync-');
  tlsFiles = writeProviderTls(pki, tmp.path);
});
afterAll(async () => {
  await tmp?.[Symbol.asyncDispose]();
  pki?.cleanup();
});



const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

interface Delivery {
  event: string;
  body: string;
  signature: string;
}

async function webhookReceiver(cloud: CloudProcess): Promise<{ receiver: TestReceiver; secret: string; deliveries: Delivery[] }> {
  const deliveries: Delivery[] = [];
  const receiver = await startHttpsReceiver(pki.issue(['localhost'], ['127.0.0.1']), (req, res) => {
    deliveries.push({ event: String(req.headers['x-service-event']), body: req.body, signature: String(req.headers['x-service-signature']) });
    res.writeHead(200);
    res.end();
  });
  const created = await okJson<{ secret: string }>(
    await cloud.fetch('/v1/webhooks', {
      method: 'POST',
      json: { url: `https://127.0.0.1:${receiver.port}/hook`, events: ['episode.finalized', 'episode.synced', 'episode.verified', 'episode.failed'] },
    }),
  );
  return { receiver, secret: created.secret, deliveries };
}

/** Records one episode through the API: start, wait `ms`, then the end verb. */
async function record(cloud: CloudProcess, robotId: string, ms: number, end: 'finish' | 'discard' = 'finish'): Promise<string> {
  const start = await sendCommand(cloud, robotId, 'episodes/start');
  expect(start.status, JSON.stringify(start.body)).toBe(200);
  const episodeId = (start.body as { result: { episode_id: string } }).result.episode_id;
  await new Promise((r) => setTimeout(r, ms));
  const done = await sendCommand(cloud, robotId, `episodes/${end}`);
  expect(done.status, JSON.stringify(done.body)).toBe(200);
  // Back to idle before the next start (finalizing takes a moment).
  await waitFor(async () => ((await sendCommand(cloud, robotId, 'stack/status')).status === 200 ? true : undefined));
  await waitFor(
    async () => {
      const r = await cloud.fetch(`/v1/robots/${robotId}`);
      return ((await r.json()) as { recording_state: string }).recording_state === 'idle' ? true : undefined;
    },
    { timeoutMs: 30_000, description: 'the robot back to idle' },
  );
  return episodeId;
}

describe('cloud sync end to end', () => {
  test('both protocols reach verified, the bucket holds the robot files byte for byte, webhooks come in order and signed, filters and sync health agree', async () => {
    await using s3 = await startS3Server();
    await using cloud = await startCloud({ args: ['--egress-allow-loopback', '--egress-ca-file', pki.caFile] });
    const hooks = await webhookReceiver(cloud);
    try {
      // The destination first (its secret is shown once), then the provider on the port it names.
      const port = await freePort();
      const destination = await okJson<{ id: string; secret: string; retention: string }>(
        await cloud.fetch('/v1/destinations', { method: 'POST', json: { type: 'external', url: `https://127.0.0.1:${port}/grant` } }),
      );
      expect(destination.secret).toMatch(/^dsec_/);
      await using provider = await startGrantProvider({
        s3,
        secret: destination.secret,
        tls: { ...tlsFiles, ca: pki.caPem },
        args: ['--port', String(port), '--multipart-threshold-bytes', String(5 * 1024 * 1024), '--part-size-bytes', String(5 * 1024 * 1024)],
      });
      expect(provider.url).toBe(`https://127.0.0.1:${port}`);
      // Through the typed client, as a customer would.
      const check = await cloud.client().destinations.check(destination.id);
      expect(check).toMatchObject({ result: 'pass', mode: 'granted' });

      const token = await createEnrollmentToken(cloud, { maxUses: 1 });
      await using fleet = await startFleet(cloud, {
        count: 1,
        token: token.token,
        // JSON recordings hold the byte rate exactly, so 5 s make a file over the multipart threshold.
        args: ['--recording-format', 'json', '--bytes-per-second', String(2 * 1024 * 1024), '--allow-http-uploads'],
      });
      const robotId = fleet.robots[0]!;

      // A long episode (a bag over the multipart threshold), a short one (single PUTs), a discarded one (no files).
      const long = await record(cloud, robotId, 5_000);
      const short = await record(cloud, robotId, 300);
      const discarded = await record(cloud, robotId, 300, 'discard');

      const verified = async (id: string): Promise<Episode | undefined> => {
        const ep = await getEpisode(cloud, id);
        return ep?.replicas.length === 1 && ep.replicas[0]!.state === 'verified' ? ep : undefined;
      };
      for (const id of [long, short]) await waitFor(() => verified(id), { timeoutMs: 90_000, description: `episode ${id} verified` });

      // Every file of the robot is in the bucket under the replica's object key, byte for byte.
      const rows = await exportEpisodes(cloud, `robot_id=${robotId}`);
      const byId = new Map(rows.map((r) => [r.id, r] as const));
      let multipartSeen = false;
      for (const id of [long, short]) {
        const row: EpisodeWithLocations = byId.get(id)!;
        expect(row.locations).toEqual([{ destination_id: destination.id, state: 'verified', object_key: expect.any(String) as string, grant_id: expect.any(String) as string }]);
        const prefix = row.locations[0]!.object_key!;
        for (const f of row.files) {
          const obj = await s3.getObject(`${prefix}${f.path}`);
          expect(obj, `${prefix}${f.path}`).not.toBeNull();
          expect(obj!.body.length).toBe(f.size_bytes);
          expect(sha256(obj!.body)).toBe(f.sha256);
          if (f.size_bytes >= 5 * 1024 * 1024) multipartSeen = true;
        }
        expect(row.replicas[0]).toMatchObject({ destination_id: destination.id, state: 'verified', error: null });
      }
      expect(multipartSeen).toBe(true);

      // On the robot, `fleet-agent episodes show` tells the same: the replica verified, every byte sent.
      for (const id of [long, short]) {
        const { episode } = (await agentControl(fleet.robotDir(0), ['episodes', 'show', id, '--json'])) as { episode: { total_bytes: number; sync: unknown[] } };
        expect(episode.sync).toEqual([
          expect.objectContaining({ destination_id: destination.id, state: 'verified', active: false, bytes_sent: episode.total_bytes, bytes_total: episode.total_bytes, last_error: null }),
        ]);
      }
      const discardedRow = byId.get(discarded)!;
      expect(discardedRow.outcome).toBe('discarded');
      expect(discardedRow.replicas).toEqual([]);

      // Filters: verified and synced include both; unverified includes neither.
      const ids = async (q: string) => (await listEpisodes(cloud, q)).map((e) => e.id);
      expect(await ids(`sync_state=verified&robot_id=${robotId}`)).toEqual(expect.arrayContaining([long, short]));
      expect(await ids(`sync_state=synced&destination_id=${destination.id}`)).toEqual(expect.arrayContaining([long, short]));
      expect(await ids(`sync_state=unverified&robot_id=${robotId}`)).not.toEqual(expect.arrayContaining([long]));

      // Sync health counts the robot's three episodes, none of them waiting.
      const health = await okJson<{ robots: Record<string, unknown>[] }>(await cloud.fetch('/v1/sync-health/robots'));
      expect(health.robots.find((r) => r.robot_id === robotId)).toMatchObject({ episodes_reported: 3, unverified: 0, unverified_over_72h: 0, bytes_unverified: 0, local_missing: 0 });

      // Webhooks: per episode finalized, then synced, then verified, each signed with the subscription secret.
      await waitFor(() => (hooks.deliveries.filter((d) => d.event === 'episode.verified').length >= 2 ? true : undefined), { timeoutMs: 30_000, description: 'both verified webhooks' });
      for (const id of [long, short]) {
        const events = hooks.deliveries.filter((d) => (JSON.parse(d.body) as { episode_id: string }).episode_id === id);
        expect(events.map((d) => d.event)).toEqual(['episode.finalized', 'episode.synced', 'episode.verified']);
        const last = JSON.parse(events[2]!.body) as Record<string, unknown>;
        expect(last).toMatchObject({ schema_version: 1, episode_id: id, robot_id: robotId, destination_id: destination.id, state: 'verified' });
        expect(last.object_key).toEqual(expect.any(String));
        for (const d of events) {
          expect(verifySignature({ body: d.body, header: d.signature, secrets: [hooks.secret], nowS: Math.floor(Date.now() / 1000) }).ok).toBe(true);
        }
      }

      // The destination's health counts the real forwards.
      const dests = await okJson<{ destinations: { id: string; forwards_24h: number; last_forward_at: string | null }[] }>(await cloud.fetch('/v1/destinations'));
      const d = dests.destinations.find((x) => x.id === destination.id)!;
      expect(d.forwards_24h).toBeGreaterThanOrEqual(2);
      expect(d.last_forward_at).not.toBeNull();
    } finally {
      await hooks.receiver.close();
    }
  });

  test('fleet-agent status during an upload under --upload-limit: bytes sent grow per destination, the measured rate stays under the limit', async () => {
    const limit = 512 * 1024;
    await using s3 = await startS3Server();
    await using cloud = await startCloud({ args: ['--egress-allow-loopback', '--egress-ca-file', pki.caFile] });
    const port = await freePort();
    const destination = await okJson<{ id: string; secret: string }>(
      await cloud.fetch('/v1/destinations', { method: 'POST', json: { type: 'external', url: `https://127.0.0.1:${port}/grant` } }),
    );
    await using provider = await startGrantProvider({
      s3,
      secret: destination.secret,
      tls: { ...tlsFiles, ca: pki.caPem },
      args: ['--port', String(port), '--multipart-threshold-bytes', String(5 * 1024 * 1024), '--part-size-bytes', String(5 * 1024 * 1024)],
    });
    expect(provider.url).toBe(`https://127.0.0.1:${port}`);
    await using agent = await startAgentProcess(cloud, { args: ['--recording-format', 'json', '--allow-http-uploads', '--upload-limit', String(limit), '--bytes-per-second', String(2 * 1024 * 1024)] });
    // About 6 MiB (two 5 MiB parts' worth at most), waiting on the recording's size, not a clock:
    // at the limit its upload lasts over ten seconds, long enough to sample.
    const episodeId = await recordAtLeast(agent.dataDir, 6 * 1024 * 1024);

    type Upload = { episode_id: string; destination_id: string; state: string; active: boolean; bytes_sent: number; bytes_total: number; rate_bps: number };
    // The agent reads its count somewhere between asking and the answer: each sample keeps both
    // times, so a slow answer on a loaded machine widens the bounds instead of bending the rate.
    const samples: { asked: number; answered: number; upload: Upload }[] = [];
    await waitFor(
      async () => {
        const asked = performance.now();
        const status = await agent.status();
        const answered = performance.now();
        const u = (status.uploads as Upload[]).find((x) => x.episode_id === episodeId && x.destination_id === destination.id);
        if (u?.active && u.state === 'syncing' && u.bytes_sent < u.bytes_total) samples.push({ asked, answered, upload: u });
        return samples.length >= 4 && samples.at(-1)!.asked - samples[0]!.answered >= 3_000 ? true : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 250, description: 'a few status answers during the upload' },
    );
    for (let i = 1; i < samples.length; i++) expect(samples[i]!.upload.bytes_sent).toBeGreaterThanOrEqual(samples[i - 1]!.upload.bytes_sent);
    const first = samples[0]!;
    const last = samples.at(-1)!;
    expect(last.upload.bytes_sent).toBeGreaterThan(first.upload.bytes_sent);
    expect(last.upload.bytes_total).toBeGreaterThan(5 * 1024 * 1024);
    // Measured between two status answers at least 3 s apart: never over the limit (15 % for sampling), and moving.
    // Over the longest time the two counts can be apart for the upper bound, the shortest for the lower.
    const sent = last.upload.bytes_sent - first.upload.bytes_sent;
    expect((sent * 1000) / (last.answered - first.asked)).toBeLessThan(limit * 1.15);
    expect((sent * 1000) / (last.asked - first.answered)).toBeGreaterThan(limit * 0.5);
    expect(last.upload.rate_bps).toBeLessThan(limit * 1.15);

    // The plain view names the upload too, and once verified nothing is pending.
    const plain = await agent.control(['status']);
    expect(plain.stdout).toMatch(new RegExp(`^upload episode=${episodeId} destination=${destination.id} `, 'm'));
    await waitFor(async () => ((await agent.status()).uploads as Upload[]).length === 0 || undefined, { timeoutMs: 60_000, description: 'the upload finished' });
    await waitFor(async () => ((await getEpisode(cloud, episodeId))?.replicas[0]?.state === 'verified' ? true : undefined), { timeoutMs: 30_000, description: 'verified' });
  });
});
