/**
 * No credential ever reaches a log: a whole run of a real `fleet-cloud serve` at trace level
 * (bootstrap, api keys, webhooks, an enrollment token, a robot enrolled and connected, a key in
 * a query string, bad Authorization headers) and of the robot's agent, then the collected
 * stderr is searched for every secret handed out and for anything shaped like one.
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';
import { makeTempDir, startCloud } from './support/cloud.js';
import { createEnrollmentToken, enrollCli, readStoredCredentials, sendCommand, spawnAgent, waitForRobot } from './support/robots.js';

/** Any secret we issue: a known prefix and at least 32 base64url characters (ids are 26 base32). */
const SECRET_SHAPE = /\b(ak|whsec|dsec|rsec|ret)_[A-Za-z0-9_-]{32,}/;

describe('secrets never in logs', () => {
  test('a broad end-to-end run at trace level leaves no secret in the cloud or agent logs', async () => {
    await using cloud = await startCloud({ logLevel: 'trace', args: ['--egress-allow-loopback'] });
    await using tmp = await makeTempDir('fa-logs-');
    const issued: string[] = [cloud.adminKey];
    // The first-start key is on stdout, where it belongs.
    expect(cloud.stdoutLines).toContain(cloud.adminKey);

    const created = await cloud.fetch('/v1/api-keys', { method: 'POST', json: { name: 'reader', scopes: ['data:read'] } });
    expect(created.status).toBe(201);
    const reader = ((await created.json()) as { key: string }).key;
    issued.push(reader);

    const hook = await cloud.fetch('/v1/webhooks', { method: 'POST', json: { url: 'https://127.0.0.1:9/hook', events: ['episode.finalized'] } });
    expect(hook.status, await hook.clone().text()).toBe(201);
    const { id: hookId, secret: whsec } = (await hook.json()) as { id: string; secret: string };
    issued.push(whsec);
    const rotated = await cloud.fetch(`/v1/webhooks/${hookId}/rotate-secret`, { method: 'POST' });
    expect(rotated.status).toBe(200);
    issued.push(((await rotated.json()) as { secret: string }).secret);

    const token = await createEnrollmentToken(cloud, { maxUses: 1 });
    issued.push(token.token);
    const robotDir = join(tmp.path, 'robot');
    const enrolled = await enrollCli(cloud, { token: token.token, dataDir: robotDir });
    expect(enrolled.code, enrolled.stderr).toBe(0);
    const creds = await readStoredCredentials(robotDir);
    issued.push(creds.mqtt.password);
    // A used token tried again: refused, and the refusal does not log it.
    expect((await cloud.fetch('/v1/robots/enroll', { method: 'POST', key: null, json: { token: token.token, name: 'again' } })).status).toBe(401);

    await using agent = await spawnAgent(robotDir, { logLevel: 'trace' });
    await agent.waitForStdout((l) => l.includes('"state":"connected"'));
    await waitForRobot(cloud, creds.robot_id, (r) => r.connected);
    await sendCommand(cloud, creds.robot_id, 'stack/status');

    // Keys where they do not belong: in the query string, in the path, in a bad header.
    const keyInQuery = await cloud.fetch(`/v1/robots?api_key=${reader}&limit=5`, { key: null });
    expect(keyInQuery.status).toBe(401);
    await cloud.fetch(`/v1/robots?token=${encodeURIComponent(token.token)}`, { key: reader });
    await cloud.fetch(`/v1/nowhere/${reader}`, { key: null });
    const forged = `ak_${randomBytes(32).toString('base64url')}`;
    issued.push(forged);
    expect((await cloud.fetch('/v1/robots', { key: forged })).status).toBe(401);
    expect((await cloud.fetch('/v1/robots', { key: null, headers: { authorization: `Basic ${reader}` } })).status).toBe(401);
    expect((await cloud.fetch('/v1/robots', { key: null, headers: { authorization: `Bearer ${reader} trailing` } })).status).toBe(401);

    await agent.kill('SIGTERM');
    await cloud.kill('SIGTERM');

    const logs = [
      { name: 'cloud stderr', lines: cloud.stderrLines },
      { name: 'agent stderr', lines: agent.stderrLines },
      { name: 'agent stdout', lines: agent.stdoutLines },
      { name: 'fleet-agent enroll output', lines: `${enrolled.stdout}\n${enrolled.stderr}`.split('\n') },
    ];
    // The run was logged (at trace, the query-string request among it), so the search means something.
    expect(cloud.stderrLines.length).toBeGreaterThan(20);
    expect(cloud.stderrLines.some((l) => l.includes('api_key=[redacted]&limit=5'))).toBe(true);
    expect(agent.stderrLines.length).toBeGreaterThan(0);

    const leaks: string[] = [];
    for (const { name, lines } of logs) {
      for (const line of lines) {
        for (const s of issued) if (line.includes(s)) leaks.push(`${name}: issued secret ${s.slice(0, 8)}… in ${line.slice(0, 300)}`);
        const m = SECRET_SHAPE.exec(line);
        if (m) leaks.push(`${name}: secret-shaped ${m[0].slice(0, 10)}… in ${line.slice(0, 300)}`);
      }
    }
    expect(leaks).toEqual([]);
  });
});
