import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '@fleet/protocol';
import { parseCloudConfig } from './config.js';
import { ApiError } from './errors.js';
import { measuredCommands, metricsFor, NO_METRICS, PromCloudMetrics, startMetricsListener, type MetricsListener } from './metrics.js';
import { openSqliteStore, type GaugeStore } from './store/index.js';
import { REAL_TIME } from './store/test-store.js';
import { bearer, startTestCloud, storeWithRobots } from './test-support.js';

const TOKEN = 'metrics-token-0123456789';
const fixedGauges: GaugeStore = {
  connectedRobots: async () => 3,
  pendingDeliveries: async () => 7,
  replicasByState: async () => ({ assigned: 1, granted: 2, syncing: 0, synced: 0, verified: 4 }),
};

/** The value of one sample line, e.g. `fleet_robots_connected 3`; undefined when absent. */
function sample(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

const listeners: MetricsListener[] = [];
afterEach(async () => {
  for (const l of listeners.splice(0)) await l.close();
});

describe('PromCloudMetrics', () => {
  it('counts what it is told and reads the gauges from the store at scrape time', async () => {
    const m = new PromCloudMetrics(fixedGauges);
    m.httpRequest('GET', '/v1/robots/:id', 200, 0.012);
    m.httpRequest('GET', undefined, 404, 0.001);
    m.ingestBatch(['inserted', 'inserted', 'duplicate']);
    m.outboxAck('episode.report', 'ok');
    m.outboxAck('some.future_kind', 'later');
    m.command('go_home', 'ok', 0.05);
    m.command('go_home', 'timeout', 10);
    m.webhookDelivery('delivered');
    m.grantForward('dst_1', 'granted');
    m.grantDeferral('dst_1', 'http_error');
    m.grantDeferral(null, 'not_assigned');
    const text = await m.scrape();
    expect(sample(text, 'fleet_http_request_duration_seconds_count{method="GET",route="/v1/robots/:id",status_code="200"}')).toBe(1);
    expect(sample(text, 'fleet_http_request_duration_seconds_count{method="GET",route="unmatched",status_code="404"}')).toBe(1);
    expect(sample(text, 'fleet_episode_reports_total{result="inserted"}')).toBe(2);
    expect(sample(text, 'fleet_episode_reports_total{result="duplicate"}')).toBe(1);
    expect(sample(text, 'fleet_episode_ingest_batch_size_count')).toBe(1);
    expect(sample(text, 'fleet_episode_ingest_batch_size_sum')).toBe(3);
    expect(sample(text, 'fleet_outbox_acks_total{kind="episode.report",result="ok"}')).toBe(1);
    expect(sample(text, 'fleet_outbox_acks_total{kind="other",result="later"}')).toBe(1);
    expect(sample(text, 'fleet_robot_commands_total{command="go_home",outcome="ok"}')).toBe(1);
    expect(sample(text, 'fleet_robot_commands_total{command="go_home",outcome="timeout"}')).toBe(1);
    expect(sample(text, 'fleet_robot_command_duration_seconds_count{command="go_home"}')).toBe(2);
    expect(sample(text, 'fleet_webhook_deliveries_total{outcome="delivered"}')).toBe(1);
    expect(sample(text, 'fleet_grant_forwards_total{destination_id="dst_1",result="granted"}')).toBe(1);
    expect(sample(text, 'fleet_grant_deferrals_total{destination_id="dst_1",reason="http_error"}')).toBe(1);
    expect(sample(text, 'fleet_grant_deferrals_total{destination_id="none",reason="not_assigned"}')).toBe(1);
    expect(sample(text, 'fleet_robots_connected')).toBe(3);
    expect(sample(text, 'fleet_webhook_queue_depth')).toBe(7);
    expect(sample(text, 'fleet_replicas{state="verified"}')).toBe(4);
    expect(sample(text, 'fleet_replicas{state="assigned"}')).toBe(1);
    // Node's process metrics are on the same registry.
    expect(text).toMatch(/^process_cpu_user_seconds_total /m);
    expect(text).toMatch(/^nodejs_heap_size_used_bytes /m);
  });

  it('keeps a registry per instance, so several clouds in one process do not clash', async () => {
    const a = new PromCloudMetrics(fixedGauges);
    const b = new PromCloudMetrics(fixedGauges);
    a.webhookDelivery('dead');
    expect(sample(await a.scrape(), 'fleet_webhook_deliveries_total{outcome="dead"}')).toBe(1);
    expect(sample(await b.scrape(), 'fleet_webhook_deliveries_total{outcome="dead"}')).toBeUndefined();
  });

  it('is off unless a listener or a token is configured', () => {
    expect(metricsFor(parseCloudConfig({}), fixedGauges)).toBe(NO_METRICS);
    expect(metricsFor(parseCloudConfig({ metricsListen: '127.0.0.1:0' }), fixedGauges).enabled).toBe(true);
    expect(metricsFor(parseCloudConfig({ metricsToken: TOKEN }), fixedGauges).enabled).toBe(true);
  });

  it('refuses a malformed listen address and a token given twice', () => {
    expect(() => parseCloudConfig({ metricsListen: '9464' })).toThrow(/host:port/);
    expect(() => parseCloudConfig({ metricsListen: '127.0.0.1:70000' })).toThrow(/host:port/);
    expect(parseCloudConfig({ metricsListen: '[::1]:9464' }).metricsListen).toBe('[::1]:9464');
    expect(() => parseCloudConfig({ metricsToken: 'short' })).toThrow(/16 characters/);
    expect(() => parseCloudConfig({ metricsToken: TOKEN, metricsTokenFile: '/x' })).toThrow(/not both/);
  });
});

describe('measuredCommands', () => {
  it('counts each outcome of a command sent over the link', async () => {
    const m = new PromCloudMetrics(fixedGauges);
    const answers = [
      () => Promise.resolve({ cmd_id: 'c', ok: true as const, result: {} }),
      () => Promise.resolve({ cmd_id: 'c', ok: false as const, error: { code: 'invalid_state' as const, message: 'no' } }),
      () => Promise.reject(new ApiError('command_timeout', 'late')),
      () => Promise.reject(new ApiError('robot_offline', 'away')),
      () => Promise.reject(new Error('boom')),
    ];
    let i = 0;
    const sender = measuredCommands({ send: () => answers[i++]!() }, m);
    for (let n = 0; n < answers.length; n++) await sender.send('rbt_1', 'stack.status', 'c').catch(() => undefined);
    const text = await m.scrape();
    for (const outcome of ['ok', 'refused', 'timeout', 'offline', 'error']) {
      expect(sample(text, `fleet_robot_commands_total{command="stack.status",outcome="${outcome}"}`)).toBe(1);
    }
  });

  it('hands the sender back untouched when metrics are off', () => {
    const sender = { send: () => Promise.reject(new Error('x')) };
    expect(measuredCommands(sender, NO_METRICS)).toBe(sender);
  });
});

describe('/metrics on the API port', () => {
  it('needs the token, labels requests by route pattern, and is outside the rate limit', async () => {
    await using t = await startTestCloud({ config: { metricsToken: TOKEN, ipRequestsPerMinute: 1 } });
    const tenant = await t.createTenant();
    expect((await t.app.inject({ url: '/v1/robots/rbt_nope', headers: tenant.auth })).statusCode).toBe(404);
    const refused = await t.app.inject({ url: '/metrics' });
    expect(refused.statusCode).toBe(401);
    expect(JSON.parse(refused.payload)).toMatchObject({ error: { code: 'unauthenticated' } });
    expect((await t.app.inject({ url: '/metrics', headers: bearer(`${TOKEN}x`) })).statusCode).toBe(401);
    // An API key is not the metrics token.
    expect((await t.app.inject({ url: '/metrics', headers: tenant.auth })).statusCode).toBe(401);
    for (let n = 0; n < 3; n++) expect((await t.app.inject({ url: '/metrics', headers: bearer(TOKEN) })).statusCode).toBe(200);
    const res = await t.app.inject({ url: '/metrics', headers: bearer(TOKEN) });
    expect(res.headers['content-type']).toMatch(/^text\/plain; version=0\.0\.4/);
    expect(sample(res.payload, 'fleet_http_request_duration_seconds_count{method="GET",route="/v1/robots/:id",status_code="404"}')).toBe(1);
    expect(res.payload).not.toContain('rbt_nope');
    expect(sample(res.payload, 'fleet_robots_connected')).toBe(0);
  });

  it('reads the token from a file', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'fleet-metrics-'));
    try {
      writeFileSync(join(dir, 'token'), `${TOKEN}\n`, { mode: 0o600 });
      await using t = await startTestCloud({ config: { metricsTokenFile: join(dir, 'token') } });
      expect((await t.app.inject({ url: '/metrics' })).statusCode).toBe(401);
      expect((await t.app.inject({ url: '/metrics', headers: bearer(TOKEN) })).statusCode).toBe(200);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('is a 404 when metrics are off, and not on the API port when they have their own listener', async () => {
    await using off = await startTestCloud();
    expect((await off.app.inject({ url: '/metrics' })).statusCode).toBe(404);
    await using own = await startTestCloud({ config: { metricsListen: '127.0.0.1:0', metricsToken: TOKEN } });
    expect((await own.app.inject({ url: '/metrics', headers: bearer(TOKEN) })).statusCode).toBe(404);
  });
});

describe('the separate metrics listener', () => {
  it('serves GET /metrics with the token, and nothing else', async () => {
    const l = await startMetricsListener({ host: '127.0.0.1', port: 0, metrics: new PromCloudMetrics(fixedGauges), token: TOKEN });
    listeners.push(l);
    expect(l.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
    expect((await fetch(l.url)).status).toBe(401);
    const ok = await fetch(l.url, { headers: bearer(TOKEN) });
    expect(ok.status).toBe(200);
    expect(sample(await ok.text(), 'fleet_webhook_queue_depth')).toBe(7);
    expect((await fetch(l.url.replace('/metrics', '/v1/robots'), { headers: bearer(TOKEN) })).status).toBe(404);
    expect((await fetch(l.url, { method: 'POST', headers: bearer(TOKEN) })).status).toBe(405);
  });

  it('needs no token when none is configured (bind it to loopback)', async () => {
    const l = await startMetricsListener({ host: '127.0.0.1', port: 0, metrics: new PromCloudMetrics(fixedGauges), token: null });
    listeners.push(l);
    expect((await fetch(l.url)).status).toBe(200);
  });
});

describe('SqliteGauges', () => {
  it('counts connected robots, pending deliveries and routed replicas by state', async () => {
    const clock = new ManualClock();
    const { store, robots } = await storeWithRobots(clock, 3);
    try {
      await store.robots.updateStatus(robots[0]!.id, { connected: true, seenAt: clock.now() });
      await store.robots.updateStatus(robots[1]!.id, { connected: true, seenAt: clock.now() });
      expect(await store.gauges.connectedRobots()).toBe(2);
      expect(await store.gauges.pendingDeliveries()).toBe(0);
      expect(await store.gauges.replicasByState()).toEqual({ assigned: 0, granted: 0, syncing: 0, synced: 0, verified: 0 });
    } finally {
      await store.close();
    }
    const empty = openSqliteStore(':memory:', REAL_TIME);
    expect(await empty.gauges.connectedRobots()).toBe(0);
    await empty.close();
  });
});
