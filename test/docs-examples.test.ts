import { spawnSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { signPayload } from '@fleet/protocol';
import { cleanEnv, REPO_ROOT } from './support/cloud.js';
import { freePort } from './support/http.js';
import { spawnProcess, type SpawnedProcess } from './support/process.js';
import { waitFor } from './support/wait.js';

/**
 * docs/examples/webhook-receiver.js, the receiver the quickstart runs and docs/api.md points
 * to, against signatures made by the service's own signer: it must accept what the cloud sends
 * (also during a rotation) and refuse what it must not, or readers copy a broken check.
 */

const SECRET = 'whsec_receiver_test_secret';
let dir: string;
let receiver: SpawnedProcess;
let url: string;
let dispatcher: Agent;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'receiver-'));
  const cert = join(dir, 'cert.pem');
  const key = join(dir, 'key.pem');
  const made = spawnSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1', '-keyout', key, '-out', cert], { encoding: 'utf8' });
  if (made.status !== 0) throw new Error(`openssl failed: ${made.stderr}`);
  const port = await freePort();
  receiver = spawnProcess(process.execPath, [join(REPO_ROOT, 'docs', 'examples', 'webhook-receiver.js'), '--port', String(port), '--cert', cert, '--key', key], {
    name: 'webhook-receiver',
    cwd: dir,
    env: cleanEnv({ WEBHOOK_SECRET: SECRET }),
  });
  await receiver.waitForStderr((l) => l.includes('listening'), { description: 'the receiver to listen' });
  url = `https://127.0.0.1:${port}/hooks`;
  dispatcher = new Agent({ connect: { rejectUnauthorized: false } });
});

afterAll(async () => {
  await dispatcher?.close();
  await receiver?.kill('SIGTERM');
  if (dir) await rm(dir, { recursive: true, force: true });
});

const now = () => Math.floor(Date.now() / 1000);

async function deliver(body: string, signature: string | null, eventId: string): Promise<number> {
  const res = await request(url, {
    method: 'POST',
    dispatcher,
    body,
    headers: {
      'content-type': 'application/json',
      'x-service-event': 'episode.finalized',
      'x-service-event-id': eventId,
      ...(signature === null ? {} : { 'x-service-signature': signature }),
    },
  });
  await res.body.dump();
  return res.statusCode;
}

describe('docs/examples/webhook-receiver.js', () => {
  const body = JSON.stringify({ schema_version: 1, episode_id: 'ep_example0000', robot_id: 'rbt_x', recording_session_id: 'rs_x', episode_seq: 1, state: 'reported' });

  test('accepts a delivery signed as the service signs it, and prints it as verified', async () => {
    expect(await deliver(body, signPayload(body, [SECRET], now()), 'evt_ok')).toBe(204);
    const line = await receiver.waitForStdout((l) => l.includes('evt_ok'), { description: 'the delivery line' });
    expect(JSON.parse(line)).toMatchObject({ verified: true, event: 'episode.finalized', event_id: 'evt_ok', duplicate: false, payload: { episode_id: 'ep_example0000' } });
  });

  test('accepts a rotation header whose other v1 entry is from a secret it does not know', async () => {
    expect(await deliver(body, signPayload(body, ['whsec_the_other_one', SECRET], now()), 'evt_rotation')).toBe(204);
  });

  test('marks a redelivered event id as a duplicate', async () => {
    expect(await deliver(body, signPayload(body, [SECRET], now()), 'evt_ok')).toBe(204);
    const lines = await waitFor(() => {
      const ok = receiver.stdoutLines.filter((l) => l.includes('"evt_ok"'));
      return ok.length >= 2 ? ok : undefined;
    }, { description: 'the second evt_ok line' });
    expect(JSON.parse(lines[1]!)).toMatchObject({ verified: true, duplicate: true });
  });

  test.each([
    ['another secret', () => signPayload(body, ['whsec_wrong'], now())],
    ['a stale timestamp', () => signPayload(body, [SECRET], now() - 600)],
    ['no signature', () => null],
    ['a malformed header', () => 'v1=abc'],
  ])('refuses %s with 401', async (_what, sign) => {
    expect(await deliver(body, sign(), 'evt_bad')).toBe(401);
  });

  test('refuses a body changed after signing', async () => {
    const signature = signPayload(body, [SECRET], now());
    expect(await deliver(body.replace('reported', 'verified'), signature, 'evt_changed')).toBe(401);
  });
});
