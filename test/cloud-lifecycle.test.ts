import { Agent, request as httpRequest, type IncomingMessage } from 'node:http';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';
import { makeTempDir, runCloudCli, startCloud, type CloudProcess } from './support/cloud.js';
import { exitWithin } from './support/process.js';

/** Generous bound: a shutdown that hangs fails the test instead of timing it out. */
const EXIT_BOUND_MS = 20_000;

const logMsg = (fragment: string) => (line: string) => line.includes(fragment);

// The lifecycle of one `serve` process (its signals, its listener, its exit): with
// FLEET_TEST_REPLICAS too, each test runs one process (a replica's shutdown is its own).
const single = { topology: 'single' } as const;

/**
 * Opens POST /v1/api-keys and sends the headers and half the body, then waits until the server
 * has routed the request: a request that is, verifiably, in flight. `finish()` sends the rest.
 */
async function openInFlightCreate(cloud: CloudProcess, name: string) {
  const body = JSON.stringify({ name, scopes: ['data:read'] });
  const url = new URL('/v1/api-keys', cloud.http);
  // A keep-alive client without an idle timeout of its own, as many HTTP clients are: after the
  // response its connection stays open, and the shutdown must not wait for it.
  const agent = new Agent({ keepAlive: true });
  const req = httpRequest(url, {
    agent,
    method: 'POST',
    headers: { authorization: `Bearer ${cloud.adminKey}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
  });
  const response = new Promise<{ status: number; body: string }>((resolve, reject) => {
    req.on('response', (res: IncomingMessage) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
      res.on('error', reject);
    });
    req.on('error', reject);
  });
  const half = Math.floor(body.length / 2);
  req.write(body.slice(0, half));
  // fastify logs "incoming request" once it has the headers and a route; only then is it in flight.
  const before = cloud.stderrLines.filter(logMsg('"incoming request"')).length;
  await cloud.process.waitForStderr(
    (l) => l.includes('"incoming request"') && l.includes('/v1/api-keys') && cloud.stderrLines.filter(logMsg('"incoming request"')).length > before,
    { description: 'the server to log the in-flight request' },
  );
  return {
    response,
    finish: () => req.end(body.slice(half)),
    [Symbol.dispose]: () => agent.destroy(),
  };
}

describe('graceful shutdown', () => {
  test('SIGTERM: exits 0 promptly and stops listening', async () => {
    await using cloud = await startCloud(single);
    // A keep-alive connection left idle by an earlier request must not hold the shutdown.
    expect((await cloud.fetch('/v1/api-keys')).status).toBe(200);
    cloud.process.child.kill('SIGTERM');
    const exit = await exitWithin(cloud.process, EXIT_BOUND_MS);
    expect(exit).toEqual({ code: 0, signal: null });
    expect(cloud.stderrLines.some(logMsg('"signal":"SIGTERM"'))).toBe(true);
    await expect(fetch(`${cloud.http}/healthz`)).rejects.toThrow();
  });

  test('SIGINT: exits 0 promptly', async () => {
    await using cloud = await startCloud(single);
    expect((await cloud.fetch('/healthz', { key: null })).status).toBe(200);
    cloud.process.child.kill('SIGINT');
    const exit = await exitWithin(cloud.process, EXIT_BOUND_MS);
    expect(exit).toEqual({ code: 0, signal: null });
    expect(cloud.stderrLines.some(logMsg('"signal":"SIGINT"'))).toBe(true);
  });

  test('an in-flight request finishes after SIGTERM, is persisted, and the process then exits 0', async () => {
    await using dir = await makeTempDir();
    const dataDir = join(dir.path, 'data');
    let createdKey: string;
    {
      await using cloud = await startCloud({ ...single, dataDir });
      using inFlight = await openInFlightCreate(cloud, 'in-flight');
      cloud.process.child.kill('SIGTERM');
      await cloud.process.waitForStderr(logMsg('shutting down'), { description: 'the shutdown log line' });
      // The listener is closed: a new connection is refused while the old request is still open.
      await expect(fetch(`${cloud.http}/healthz`)).rejects.toThrow();
      expect(cloud.process.exit).toBeNull();

      inFlight.finish();
      const res = await inFlight.response;
      expect(res.status).toBe(201);
      const created = JSON.parse(res.body) as { key: string; name: string };
      expect(created.name).toBe('in-flight');
      expect(created.key).toMatch(/^ak_/);
      createdKey = created.key;

      const exit = await exitWithin(cloud.process, EXIT_BOUND_MS);
      expect(exit).toEqual({ code: 0, signal: null });
    }
    // What the in-flight request wrote survived the shutdown.
    await using again = await startCloud({ ...single, dataDir });
    const res = await again.fetch('/v1/entitlements', { key: createdKey });
    expect(res.status).toBe(200);
  });

  test('a second signal during a shutdown that waits on a request exits at once with code 1', async () => {
    await using cloud = await startCloud(single);
    using inFlight = await openInFlightCreate(cloud, 'never-finished');
    // The response will never come; swallow the socket error the exit causes.
    inFlight.response.catch(() => undefined);
    cloud.process.child.kill('SIGTERM');
    await cloud.process.waitForStderr(logMsg('shutting down'), { description: 'the shutdown log line' });
    expect(cloud.process.exit).toBeNull();
    cloud.process.child.kill('SIGTERM');
    const exit = await exitWithin(cloud.process, EXIT_BOUND_MS);
    expect(exit).toEqual({ code: 1, signal: null });
    expect(cloud.stderrLines.some(logMsg('second signal'))).toBe(true);
  });
});

describe('configuration', () => {
  test('FLEET_* environment variables work instead of flags', async () => {
    await using cloud = await startCloud({ ...single, configVia: 'env' });
    expect(cloud.process.child.spawnargs.slice(2)).toEqual(['serve']);
    const http = new URL(cloud.http);
    const mqtt = new URL(cloud.mqtt);
    expect(http.hostname).toBe('127.0.0.1');
    // Port 0 came from FLEET_*_PORT: neither default port was used.
    expect(http.port).not.toBe('8080');
    expect(mqtt.port).not.toBe('1883');
    expect(Number(http.port)).toBeGreaterThan(0);
    // The data dir came from FLEET_DATA_DIR (it holds the secret key on every engine).
    expect(existsSync(join(cloud.dataDir, 'secret.key'))).toBe(true);
    expect(existsSync(join(cloud.dataDir, 'admin-key'))).toBe(true);
    expect((await cloud.fetch('/v1/api-keys')).status).toBe(200);
  });

  test('a flag wins over its FLEET_* variable', async () => {
    await using dir = await makeTempDir();
    await using cloud = await startCloud({ ...single, env: { FLEET_DATA_DIR: join(dir.path, 'from-env') } });
    expect(existsSync(join(cloud.dataDir, 'admin-key'))).toBe(true);
    expect(existsSync(join(dir.path, 'from-env'))).toBe(false);
  });

  test.each([
    { what: '--http-port 99999', args: ['--http-port', '99999', '--mqtt-port', '0'], env: {}, message: /httpPort/ },
    { what: '--mqtt-port -1', args: ['--http-port', '0', '--mqtt-port=-1'], env: {}, message: /mqttPort/ },
    { what: '--http-port abc', args: ['--http-port', 'abc', '--mqtt-port', '0'], env: {}, message: /httpPort/ },
    { what: 'FLEET_HTTP_PORT=70000', args: ['--mqtt-port', '0'], env: { FLEET_HTTP_PORT: '70000' }, message: /httpPort/ },
    { what: '--log-level loud', args: ['--http-port', '0', '--mqtt-port', '0', '--log-level', 'loud'], env: {}, message: /logLevel/ },
    { what: '--mqtt-url http://x', args: ['--http-port', '0', '--mqtt-port', '0', '--mqtt-url', 'http://example.test'], env: {}, message: /mqttUrl/ },
  ])('an invalid value ($what) exits non-zero with a clear message', async ({ args, env, message }) => {
    await using dir = await makeTempDir();
    const res = await runCloudCli(['serve', '--data-dir', join(dir.path, 'data'), ...args], { env, timeoutMs: 20_000 });
    expect(res.code).not.toBe(0);
    expect(res.code).not.toBeNull();
    expect(res.stderr).toMatch(/invalid configuration/);
    expect(res.stderr).toMatch(message);
    expect(res.stdout).not.toMatch(/"http"/);
  });

  test('a port already in use: serve exits non-zero, and startCloud reports its stderr', async () => {
    await using first = await startCloud(single);
    const port = new URL(first.http).port;
    await expect(startCloud({ ...single, args: ['--http-port', port] })).rejects.toThrow(
      new RegExp(`exited \\(code 1[\\s\\S]*cannot listen for HTTP on 127\\.0\\.0\\.1:${port}: address already in use \\(EADDRINUSE\\)`),
    );
    // The failed second process did not disturb the first.
    expect((await first.fetch('/healthz', { key: null })).status).toBe(200);
  });
});
