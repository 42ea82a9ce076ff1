/**
 * kill -9 of a real `fleet-cloud serve` with webhook deliveries pending: after a restart on the
 * same data directory every event reaches a real HTTPS receiver, in order, possibly twice, none
 * lost. The receiver holds each answer for a while, so the kill lands mid-delivery.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { verifySignature } from '@fleet/protocol';
import { createTestPki, startHttpsReceiver, type TestPki } from '../cloud/src/egress/test-https.js';
import { makeTempDir, startCloud } from './support/cloud.js';

let pki: TestPki;
beforeAll(() => {
  pki = createTestPki();
});
afterAll(() => pki.cleanup());

async function until(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

/** Drops consecutive repeats: [a, a, b, b, c] -> [a, b, c]. */
function collapse(ids: readonly string[]): string[] {
  return ids.filter((id, i) => i === 0 || ids[i - 1] !== id);
}

describe('webhook deliveries across kill -9', () => {
  test('every queued event is delivered after a restart on the same data dir, in order, none lost', { timeout: 90_000 }, async () => {
    await using tmp = await makeTempDir('fleet-webhooks-');
    const dataDir = join(tmp.path, 'data');
    const args = ['--egress-allow-loopback', '--egress-ca-file', pki.caFile];

    // The receiver holds every answer until the test releases it (after the kill), so the first
    // delivery stays in flight, and the rest queued behind it, for as long as the test needs,
    // however slow the machine (up to the cloud's 10 s receiver timeout, far more than the one
    // request and the kill that happen meanwhile).
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    await using rx = await startHttpsReceiver(pki.issue(['localhost'], ['127.0.0.1']), (_req, res) => {
      void released.then(() => {
        if (!res.destroyed) res.writeHead(200).end();
      });
    });

    const first = await startCloud({ dataDir, args });
    let secret: string;
    let subId: string;
    const queued: string[] = [];
    try {
      const created = await first.fetch('/v1/webhooks', {
        method: 'POST',
        json: { url: `https://127.0.0.1:${rx.port}/hook`, events: ['episode.finalized'] },
      });
      expect(created.status, await created.clone().text()).toBe(201);
      ({ id: subId, secret } = (await created.json()) as { id: string; secret: string });

      for (let i = 0; i < 6; i++) {
        const res = await first.fetch(`/v1/webhooks/${subId}/test`, { method: 'POST' });
        expect(res.status).toBe(202);
        queued.push(((await res.json()) as { event_id: string }).event_id);
      }
      // The head is in flight (held by the receiver); the rest wait behind it.
      await until('the first delivery to arrive', () => rx.requests.length >= 1);
      const pending = (await (await first.fetch('/v1/webhooks')).json()) as { webhooks: { pending_deliveries: number }[] };
      expect(pending.webhooks[0]!.pending_deliveries).toBeGreaterThanOrEqual(5);
      expect(rx.requests).toHaveLength(1);
    } finally {
      const exit = await first.kill('SIGKILL');
      expect(exit.signal).toBe('SIGKILL');
    }
    const beforeRestart = rx.requests.length;
    expect(beforeRestart).toBeLessThan(queued.length);

    release();
    await using second = await startCloud({ dataDir, args });
    const ids = () => rx.requests.map((r) => String(r.headers['x-service-event-id']));
    await until('every event to be delivered', () => queued.every((id) => ids().includes(id)), 30_000);
    await until('the queue to drain', async () => {
      const list = (await (await second.fetch('/v1/webhooks')).json()) as { webhooks: { pending_deliveries: number }[] };
      return list.webhooks[0]!.pending_deliveries === 0;
    });

    const received = ids();
    // In order; at least once (the one in flight at the kill may come twice); nothing else.
    expect(collapse(received)).toEqual(queued);
    expect(received.length).toBeLessThanOrEqual(queued.length + beforeRestart);
    for (const req of rx.requests) {
      expect(req.headers['x-service-event']).toBe('episode.finalized');
      expect(JSON.parse(req.body)).toMatchObject({ test: true, schema_version: 1 });
      const ok = verifySignature({ body: req.body, header: String(req.headers['x-service-signature']), secrets: [secret], nowS: Date.now() / 1000 });
      expect(ok.ok).toBe(true);
    }
  });
});
