import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { GrantRequestEnvelopeSchema } from '@fleet/protocol';
import { createTestPki, startHttpsReceiver, type TestPki } from '../cloud/src/egress/test-https.js';
import { makeTempDir, startCloud } from './support/cloud.js';
import { getEpisode } from './support/episodes.js';
import { okJson, startMd5PutStore } from './support/http.js';
import { runAgentCli, sendCommand, startFleet } from './support/robots.js';
import { waitFor } from './support/wait.js';

/**
 * Metrics with real processes: `fleet-cloud serve` with its metrics listener and a token, a
 * simulated fleet recording episodes, commands, a webhook delivered to an HTTPS receiver, and a
 * grant provider that first defers and then grants uploads to a plain HTTP store. Both the
 * cloud's /metrics and each robot's `fleet-agent metrics` show that traffic.
 */

const TOKEN = 'e2e-metrics-token-0123456789abcdef';

/** The value of one sample line (`name{labels} value`); undefined when absent. */
function sample(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

/** The sum of every sample of `name` whose labels contain all of `labels` (`k="v"` fragments). */
function total(text: string, name: string, ...labels: string[]): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    const m = /^([a-z_]+)(\{[^}]*\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    if (labels.every((l) => (m[2] ?? '').includes(l))) sum += Number(m[3]);
  }
  return sum;
}

let pki: TestPki;
beforeAll(() => {
  pki = createTestPki();
});
afterAll(() => pki?.cleanup());

describe('metrics', () => {
  test('the cloud /metrics and fleet-agent metrics show the traffic of a simulated fleet', async () => {
    // A storage that accepts PUTs like S3 (ETag = MD5 of the bytes).
    const store = await startMd5PutStore();
    const storeUrl = store.url;

    // One HTTPS receiver: /hook takes webhooks, /grant defers the first grant request and grants the next ones.
    const hooks: string[] = [];
    let grantAsks = 0;
    const receiver = await startHttpsReceiver(pki.issue(['localhost'], ['127.0.0.1']), (req, res) => {
      if (req.url === '/hook') {
        hooks.push(String(req.headers['x-service-event']));
        res.writeHead(200).end();
        return;
      }
      grantAsks += 1;
      if (grantAsks === 1) {
        res.writeHead(503, { 'content-type': 'application/json' }).end('{"error":"busy"}');
        return;
      }
      const env = GrantRequestEnvelopeSchema.parse(JSON.parse(req.body));
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          grant_id: `g_${grantAsks}`,
          expires_at: new Date(Date.now() + 3600_000).toISOString(),
          retry_after: null,
          retention: { local: 'keep' },
          destinations: [
            {
              destination_id: env.request.destination_id,
              protocol: 'http-put',
              object_key: `k/${env.episode_id}/`,
              files: env.request.manifest.files.map((f) => ({ path: f.path, put_url: `${storeUrl}/${env.episode_id}/${f.path}` })),
            },
          ],
        }),
      );
    });

    await using tmp = await makeTempDir('fleet-metrics-');
    const tokenFile = join(tmp.path, 'metrics-token');
    await writeFile(tokenFile, `${TOKEN}\n`, { mode: 0o600 });
    try {
      // One process: /metrics counts what that process did (each replica has its own).
      await using cloud = await startCloud({
        topology: 'single',
        args: ['--egress-allow-loopback', '--egress-ca-file', pki.caFile, '--grant-retry-after-s', '1', '--metrics-listen', '127.0.0.1:0', '--metrics-token-file', tokenFile],
      });
      // serve prints the metrics listener's URL on its address line.
      const addressLine = cloud.stdoutLines.find((l) => l.startsWith('{"http":'))!;
      const metricsUrl = (JSON.parse(addressLine) as { metrics?: string }).metrics!;
      expect(metricsUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
      const scrape = async (): Promise<string> => {
        const res = await fetch(metricsUrl, { headers: { authorization: `Bearer ${TOKEN}` } });
        expect(res.status).toBe(200);
        expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
        return res.text();
      };

      // Refused without the token, with a wrong one, and with an API key; not served on the API port.
      expect((await fetch(metricsUrl)).status).toBe(401);
      expect((await fetch(metricsUrl, { headers: { authorization: `Bearer ${TOKEN}x` } })).status).toBe(401);
      expect((await fetch(metricsUrl, { headers: { authorization: `Bearer ${cloud.adminKey}` } })).status).toBe(401);
      expect((await cloud.fetch('/metrics', { headers: { authorization: `Bearer ${TOKEN}` }, key: null })).status).toBe(404);

      const dest = await okJson<{ id: string }>(await cloud.fetch('/v1/destinations', { method: 'POST', json: { type: 'external', url: `https://127.0.0.1:${receiver.port}/grant` } }));
      await okJson(await cloud.fetch('/v1/webhooks', { method: 'POST', json: { url: `https://127.0.0.1:${receiver.port}/hook`, events: ['episode.finalized'] } }));
      await using fleet = await startFleet(cloud, { count: 2, args: ['--allow-http-uploads', '--sync-retry-schedule-ms', '300'] });
      const robotId = fleet.robots[0]!;

      // An episode recorded through the API, and a non-episode command.
      const start = await sendCommand(cloud, robotId, 'episodes/start');
      expect(start.status).toBe(200);
      const episodeId = (start.body.result as { episode_id: string }).episode_id;
      expect((await sendCommand(cloud, robotId, 'episodes/finish')).status).toBe(200);
      expect((await sendCommand(cloud, fleet.robots[1]!, 'stack/status')).status).toBe(200);

      // The webhook is delivered and the episode's replica verified (after one deferral).
      await waitFor(() => (hooks.includes('episode.finalized') ? true : undefined), { timeoutMs: 30_000, description: 'the episode.finalized webhook' });
      await waitFor(
        async () => ((await getEpisode(cloud, episodeId))?.replicas[0]?.state === 'verified' ? true : undefined),
        { timeoutMs: 60_000, description: 'the replica verified' },
      );

      const text = await waitFor(
        async () => {
          const t = await scrape();
          // Counted after the answer is sent: wait until the last requests show.
          return total(t, 'fleet_webhook_deliveries_total', 'outcome="delivered"') > 0 && total(t, 'fleet_outbox_acks_total', 'kind="replica.state"') > 0 ? t : undefined;
        },
        { timeoutMs: 30_000, description: 'the delivery and replica reports in the metrics' },
      );
      // HTTP latency by route pattern and status, never by raw URL.
      expect(total(text, 'fleet_http_request_duration_seconds_count', 'route="/v1/robots/:id/episodes/start"', 'status_code="200"')).toBe(1);
      expect(total(text, 'fleet_http_request_duration_seconds_count', 'route="/v1/destinations"', 'method="POST"')).toBe(1);
      expect(text).not.toContain(robotId);
      expect(text).not.toContain(episodeId);
      expect(sample(text, 'fleet_robots_connected')).toBe(2);
      // Ingest and acknowledgments.
      expect(total(text, 'fleet_episode_reports_total', 'result="inserted"')).toBeGreaterThanOrEqual(1);
      expect(sample(text, 'fleet_episode_ingest_batch_size_count')).toBeGreaterThanOrEqual(1);
      expect(total(text, 'fleet_outbox_acks_total', 'kind="episode.report"', 'result="ok"')).toBeGreaterThanOrEqual(1);
      // Commands: outcome and latency.
      expect(sample(text, 'fleet_robot_commands_total{command="episodes.start",outcome="ok"}')).toBe(1);
      expect(sample(text, 'fleet_robot_commands_total{command="stack.status",outcome="ok"}')).toBe(1);
      expect(sample(text, 'fleet_robot_command_duration_seconds_count{command="episodes.finish"}')).toBe(1);
      // Webhooks: the queue is drained, the delivery counted.
      expect(sample(text, 'fleet_webhook_queue_depth')).toBe(0);
      expect(total(text, 'fleet_webhook_deliveries_total', 'outcome="delivered"')).toBeGreaterThanOrEqual(1);
      // Sync: one deferral (the provider's 503), then a grant; the replica verified.
      expect(sample(text, `fleet_grant_forwards_total{destination_id="${dest.id}",result="deferred"}`)).toBeGreaterThanOrEqual(1);
      expect(sample(text, `fleet_grant_forwards_total{destination_id="${dest.id}",result="granted"}`)).toBeGreaterThanOrEqual(1);
      expect(sample(text, `fleet_grant_deferrals_total{destination_id="${dest.id}",reason="http_error"}`)).toBeGreaterThanOrEqual(1);
      expect(sample(text, 'fleet_replicas{state="verified"}')).toBeGreaterThanOrEqual(1);
      // Node's process metrics beside ours.
      expect(text).toMatch(/^process_resident_memory_bytes \d/m);

      // The robot's own figures through its control socket.
      const agent = await runAgentCli(['metrics', '--data-dir', fleet.robotDir(0)]);
      expect(agent.code).toBe(0);
      expect(sample(agent.stdout, 'fleet_agent_connected')).toBe(1);
      expect(sample(agent.stdout, 'fleet_agent_outbox_messages{kind="episode.report",state="acked"}')).toBe(1);
      expect(total(agent.stdout, 'fleet_agent_outbox_messages', 'kind="replica.state"', 'state="acked"')).toBeGreaterThanOrEqual(1);
      expect(sample(agent.stdout, 'fleet_agent_upload_bytes_sent_total')).toBeGreaterThan(0);
      expect(sample(agent.stdout, 'fleet_agent_upload_attempts_total{result="deferred"}')).toBeGreaterThanOrEqual(1);
      expect(sample(agent.stdout, 'fleet_agent_upload_attempts_total{result="completed"}')).toBe(1);
      expect(sample(agent.stdout, 'fleet_agent_replicas{state="verified"}')).toBe(1);
      expect(sample(agent.stdout, 'fleet_agent_disk_free_bytes')).toBeGreaterThan(0);
      expect(sample(agent.stdout, 'fleet_agent_sync_backlog_bytes')).toBe(0);
    } finally {
      await receiver.close();
      await store.close();
    }
  });

  test('with only a token (FLEET_METRICS_TOKEN), /metrics is on the API port, outside the rate limit; without either it is off', async () => {
    await using cloud = await startCloud({ args: ['--ip-requests-per-minute', '1'], env: { FLEET_METRICS_TOKEN: TOKEN } });
    expect(cloud.stdoutLines.find((l) => l.startsWith('{"http":'))).not.toContain('metrics');
    expect((await cloud.fetch('/metrics', { key: null })).status).toBe(401);
    for (let n = 0; n < 3; n++) {
      const res = await cloud.fetch('/metrics', { key: TOKEN });
      expect(res.status).toBe(200);
      expect(sample(await res.text(), 'fleet_robots_connected')).toBe(0);
    }
    await using off = await startCloud();
    expect((await off.fetch('/metrics', { key: TOKEN })).status).toBe(404);
  });
});
