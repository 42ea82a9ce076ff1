import { readFile, rm } from 'node:fs/promises';
import type { ServerResponse } from 'node:http';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { GrantRequestEnvelopeSchema } from '@fleet/protocol';
import { createTestPki, startHttpsReceiver, type ReceivedRequest, type TestPki } from '../cloud/src/egress/test-https.js';
import { startCloud } from './support/cloud.js';
import { getEpisode } from './support/episodes.js';
import { okJson, startMd5PutStore } from './support/http.js';
import { createEnrollmentToken, finalizedEpisodes, sendCommand, startFleet } from './support/robots.js';
import { waitFor } from './support/wait.js';

/**
 * The robot's local copy, with real processes: files that disappear before a verified sync show
 * on the replica (`file_missing`) and, once per episode, in sync health's `local_missing`; the
 * disk pressure the robot sends with its grant requests shows in sync health too.
 */

let pki: TestPki;
beforeAll(() => {
  pki = createTestPki();
});
afterAll(() => pki?.cleanup());

const send = (res: ServerResponse, status: number, body: unknown) => {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
};

describe('local copy', () => {
  test('files deleted before the sync: file_missing on the replica, local_missing counted once, pressure in sync health', async () => {
    // A storage that accepts PUTs like S3 (ETag = MD5 of the bytes).
    const store = await startMd5PutStore();
    const storeUrl = store.url;
    // Defers until the test has removed the files, then grants single PUTs.
    let granting = false;
    let asks = 0;
    const provider = await startHttpsReceiver(pki.issue(['localhost'], ['127.0.0.1']), (req: ReceivedRequest, res) => {
      asks += 1;
      const env = GrantRequestEnvelopeSchema.parse(JSON.parse(req.body));
      if (!granting) return send(res, 200, { grant_id: null, destinations: [], retention: { local: 'keep' }, retry_after: 1 });
      send(res, 200, {
        grant_id: `g_${asks}_${Math.random().toString(36).slice(2)}`,
        expires_at: new Date(Date.now() + 3600_000).toISOString(),
        retry_after: null,
        // Not applied: the destination's registered retention is.
        retention: { local: 'until_all_verified_plus_72h' },
        destinations: [
          {
            destination_id: env.request.destination_id,
            protocol: 'http-put',
            object_key: `k/${env.episode_id}/`,
            files: env.request.manifest.files.map((f) => ({ path: f.path, put_url: `${storeUrl}/${env.episode_id}/${f.path}` })),
          },
        ],
      });
    });
    try {
      await using cloud = await startCloud({ args: ['--egress-allow-loopback', '--egress-ca-file', pki.caFile, '--grant-retry-after-s', '1'] });
      await okJson(await cloud.fetch('/v1/destinations', { method: 'POST', json: { type: 'external', url: `https://127.0.0.1:${provider.port}/grant` } }));
      const token = await createEnrollmentToken(cloud, { maxUses: 1 });
      await using fleet = await startFleet(cloud, { count: 1, token: token.token, args: ['--allow-http-uploads', '--sync-retry-schedule-ms', '300'] });
      const robotId = fleet.robots[0]!;

      const start = await sendCommand(cloud, robotId, 'episodes/start');
      const episodeId = (start.body as { result: { episode_id: string } }).result.episode_id;
      await new Promise((r) => setTimeout(r, 300));
      expect((await sendCommand(cloud, robotId, 'episodes/finish')).status).toBe(200);

      // The robot asked (and was deferred): its pressure is in sync health.
      const healthRow = async () => (await okJson<{ robots: Record<string, unknown>[] }>(await cloud.fetch('/v1/sync-health/robots'))).robots.find((r) => r.robot_id === robotId);
      const withPressure = await waitFor(async () => {
        const row = await healthRow();
        return row?.pressure ? row : undefined;
      }, { timeoutMs: 30_000, description: 'pressure in sync health' });
      expect(withPressure).toMatchObject({
        episodes_reported: 1,
        unverified: 1,
        local_missing: 0,
        pressure: { free_bytes: expect.any(Number) as number, backlog_bytes: expect.any(Number) as number, reported_at: expect.any(String) as string },
      });
      const pressure = withPressure.pressure as { free_bytes: number; backlog_bytes: number; hours_to_full: number | null };
      expect(pressure.free_bytes).toBeGreaterThan(0);
      expect(pressure.backlog_bytes).toBeGreaterThan(0);
      expect(pressure.hours_to_full).toEqual(expect.any(Number));

      // The episode's recorded files disappear from the robot's disk before any upload.
      const robotDir = join(fleet.dataDir, 'robot-0');
      expect((await finalizedEpisodes(robotDir)).map((e) => e.id)).toContain(episodeId);
      const dir = join(robotDir, 'episodes', episodeId);
      const manifest = JSON.parse(await readFile(join(dir, 'manifest.json'), 'utf8')) as { files: { path: string }[] };
      expect(manifest.files.length).toBeGreaterThan(0);
      for (const f of manifest.files) await rm(join(dir, ...f.path.split('/')));
      granting = true;

      const failed = await waitFor(async () => {
        const e = await getEpisode(cloud, episodeId);
        return e?.replicas[0]?.error?.startsWith('file_missing: ') ? e : undefined;
      }, { timeoutMs: 30_000, description: 'the file_missing replica error' });
      expect(failed.replicas[0]!.state).toBe('granted');
      await waitFor(async () => ((await healthRow())?.local_missing === 1 ? true : undefined), { timeoutMs: 30_000, description: 'local_missing in sync health' });
      expect(await healthRow()).toMatchObject({ episodes_reported: 1, unverified: 1, local_missing: 1 });
    } finally {
      await provider.close();
      await store.close();
    }
  });
});
